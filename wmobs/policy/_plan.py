"""How a :class:`~wmobs.TimePolicy` becomes part of a query plan: stateless Column expressions
for the arrival policies, the batch's times joined in from the checkpoint, out of order against
the batch watermark (global) or per key (substreams), the idle-timeout heartbeat, the counts.

Validation happens before any of this, in :mod:`wmobs.policy._time_policy`: :func:`build` takes
a valid policy, its resolved :class:`~wmobs.policy._durations.Tolerances` and the
:class:`~wmobs.policy._storage.Storage` for everything read or written beside Spark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from wmobs.observations import (
    DEAD_LETTER_COLUMN,
    IDLE_TIMEOUT_COLUMN,
    INPUT_EVENT_TIME_COLUMN,
    INPUT_WATERMARK_COLUMN,
    STRUCT_COLUMN,
    bounds_us,
    histogram_index,
    histogram_sum_column,
    joint_histogram_column,
    joint_histogram_counts,
    joint_histogram_index,
    policy_column,
)
from wmobs.policy._durations import Tolerances
from wmobs.policy._idle import HEARTBEAT, REAL, default_check_interval_ms
from wmobs.policy._storage import Storage
from wmobs.policy._verdicts import (
    ARRIVAL,
    BATCH_TIME,
    BUCKETS,
    DELAY,
    DELAY_BUCKET,
    DROP_POLICIES,
    DROPPED_BITS,
    EARLY_ADJUSTED,
    EARLY_DROPPED,
    EVENT,
    IDLE,
    INVALID_DROPPED,
    KEY,
    LATE_ADJUSTED,
    LATE_DROPPED,
    LATENESS,
    LATENESS_BUCKET,
    OOO_ADJUSTED,
    OOO_DROPPED,
    TS,
    VERDICT,
    VERDICT_BITS,
    WATERMARK,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType, StructType

    from wmobs.policy._substream_judge import SubstreamConfig
    from wmobs.policy._time_policy import TimePolicy
    from wmobs.policy.deadletter import DeadLetter

__all__ = ["SYSTEM_TIMESTAMP", "build"]

SYSTEM_TIMESTAMP = "system_timestamp"
_PAST_TENSE = {"adjust": "adjusted", "drop": "dropped"}


def build(
    policy: TimePolicy,
    tolerances: Tolerances,
    df: DataFrame,
    checkpoint: str | None,
    sink: DeadLetter | None,
    *,
    storage: Storage,
) -> DataFrame:
    """``df`` judged by ``policy``: its columns, ``system_timestamp`` and the watermark;
    everything read or written beside Spark goes through ``storage``.

    Columns with a ``.`` in their name are renamed inside the plan, and back in its output and
    in the dead letters: PySpark's ``mapInArrow`` (substreams, and dead letters of columns
    without an exact text form) cannot resolve such a column in its output."""
    renamed = _dotted_names(df.columns)
    plan = _Plan(policy, tolerances, checkpoint, storage, renamed)
    return plan.build(df.withColumnsRenamed(renamed) if renamed else df, sink, df.columns)


@dataclass(frozen=True)
class _Plan:
    """What every stage of one policy's plan needs to know."""

    policy: TimePolicy
    tolerances: Tolerances
    checkpoint: str | None
    storage: Storage
    renamed: dict[str, str]
    """Input columns with a ``.`` in their name -> their name inside the plan."""

    def _name(self, column: str) -> str:
        """The name inside the plan of input column ``column``."""
        return self.renamed.get(column, column)

    def build(self, df: DataFrame, sink: DeadLetter | None, columns: list[str]) -> DataFrame:
        """See :func:`build`: ``df`` with ``renamed`` applied; ``columns``, the input's own
        names."""
        from pyspark.sql import functions as F

        idle = self.tolerances.idle_timeout_us is not None
        if self.policy.substream_by is None:
            staged = self._global_out_of_order(self._judge_arrival(df))
            if idle:
                staged = staged.withColumn(IDLE, F.lit(REAL).cast("long"))
                staged = staged.unionByName(self._heartbeat(staged, self.checkpoint))
        else:
            staged = self._substream_out_of_order(df)
        staged, observations = self._observations(staged, sink is not None, idle)
        observed = staged.observe(self.policy.observation_name, *observations)
        if sink is None:
            kept = observed.filter((F.col(VERDICT).bitwiseAND(F.lit(DROPPED_BITS))) == 0)
        else:
            kept = self._dead_letters(observed, sink, df.schema, idle)
        out = kept.select(
            *[F.col(f"`{self._name(c)}`").alias(c) for c in columns],
            F.timestamp_micros(F.col(TS)).alias(SYSTEM_TIMESTAMP),
            *([F.col(IDLE)] if idle else []),
        ).withWatermark(SYSTEM_TIMESTAMP, f"{self.tolerances.out_of_order_us} microseconds")
        if not idle:
            return out
        # Synthetic rows have moved the watermark (above); none goes further. The filter names
        # system_timestamp so the optimizer cannot push it below withWatermark.
        real = (F.col(IDLE) == F.lit(REAL)) | F.col(SYSTEM_TIMESTAMP).isNull()
        return out.filter(real).drop(IDLE)

    def _dead_letters(
        self, observed: DataFrame, sink: DeadLetter, schema: StructType, idle: bool
    ) -> DataFrame:
        """The kept rows of ``observed``; the dropped ones, with the input columns of ``schema``,
        handed to ``sink`` in the same tasks, by the cheapest plan that applies
        (:mod:`wmobs.policy.deadletter`): written by wmobs' JAR
        (:func:`~wmobs.policy.deadletter.dead_letter_writer`); handed to Python, kept rows
        staying in the JVM (:func:`~wmobs.policy.deadletter.dead_letter_filter`); every row
        through Python (:func:`~wmobs.policy.deadletter.dead_letter_stage`)."""
        from pyspark.sql import functions as F

        from wmobs.policy.deadletter import (
            dead_letter_filter,
            dead_letter_stage,
            dead_letter_writer,
        )

        original = {inside: name for name, inside in self.renamed.items()}
        timezone = _session_conf(observed, "spark.sql.session.timeZone") or "UTC"
        large = _session_conf(observed, "spark.sql.execution.arrow.useLargeVarTypes") or ""
        large_types = large.lower() == "true"
        bits = (VERDICT, DROPPED_BITS, DROP_POLICIES)
        keep = dead_letter_writer(
            sink,
            schema,
            *bits,
            spark=observed.sparkSession,
            timezone=timezone,
            large_types=large_types,
            rename=original,
        )
        if keep is None:
            keep = dead_letter_filter(
                sink, schema, *bits, timezone=timezone, large_types=large_types, rename=original
            )
        if keep is not None:
            return observed.filter(keep)
        columns = schema.names
        passed = [*columns, TS, VERDICT, *([IDLE] if idle else [])]  # only what is needed
        observed = observed.select(*[F.col(f"`{c}`") for c in passed])
        stage = dead_letter_stage(
            sink, columns, VERDICT, DROPPED_BITS, DROP_POLICIES, rename=original
        )
        return observed.mapInArrow(stage, observed.schema)

    # ---- the arrival policies --------------------------------------------------------------------

    def _event_micros(self, df: DataFrame) -> Column:
        from pyspark.sql import functions as F
        from pyspark.sql.types import StringType

        name = self._name(self.policy.event_time)
        column = F.col(f"`{name}`")
        if isinstance(df.schema[name].dataType, StringType):
            column = F.try_to_timestamp(column)  # unparseable -> null -> invalid_time
        return F.unix_micros(column.cast("timestamp"))

    def _arrival_micros(self) -> Column:
        """The arrival time column; null where the micro-batch's time stands in for it."""
        from pyspark.sql import functions as F

        if self.policy.arrival_time is None:
            return F.lit(None).cast("long")
        arrival = self._name(self.policy.arrival_time)
        return F.unix_micros(F.col(f"`{arrival}`").cast("timestamp"))

    def _judge_arrival(self, df: DataFrame) -> DataFrame:
        """``df`` with its event and arrival times (µs) and the batch's times joined in, judged
        by the arrival policies."""
        from pyspark.sql import functions as F

        staged = df.select(
            *[F.col(f"`{c}`") for c in df.columns],
            self._event_micros(df).alias(TS),
            self._arrival_micros().alias(ARRIVAL),
        )
        staged = self._join_batch_times(staged)
        return self._arrival_policies(staged, F.col(BATCH_TIME) * F.lit(1000))

    def _arrival_policies(self, df: DataFrame, batch_time: Column) -> DataFrame:
        """Invalid time, early and late arrival: stateless Column expressions (JVM only).
        ``batch_time``: the micro-batch's timestamp (µs), for rows without an arrival time."""
        from pyspark.sql import functions as F

        df = _replace(df, {ARRIVAL: F.coalesce(F.col(ARRIVAL), batch_time)})
        ts, arrival = F.col(TS), F.col(ARRIVAL)
        verdict = F.when(ts.isNull(), F.lit(INVALID_DROPPED)).otherwise(F.lit(0))
        system = ts
        if self.tolerances.early_arrival_us is not None:
            early = ts.isNotNull() & (ts > arrival + F.lit(self.tolerances.early_arrival_us))
            drop = self.policy.early_arrival_action == "drop"
            verdict = F.when(early, F.lit(EARLY_DROPPED if drop else EARLY_ADJUSTED)).otherwise(
                verdict
            )
            if not drop:
                system = F.when(early, arrival).otherwise(system)
        late_floor = arrival - F.lit(self.tolerances.late_arrival_us)
        late = (verdict.bitwiseAND(F.lit(DROPPED_BITS)) == 0) & (system < late_floor)
        if self.policy.late_arrival_action == "drop":
            verdict = F.when(late, verdict.bitwiseOR(F.lit(LATE_DROPPED))).otherwise(verdict)
        else:
            verdict = F.when(late, verdict.bitwiseOR(F.lit(LATE_ADJUSTED))).otherwise(verdict)
            system = F.when(late, late_floor).otherwise(system)
        return _replace(df, {TS: system, VERDICT: verdict, DELAY: arrival - ts})

    def _join_batch_times(self, df: DataFrame) -> DataFrame:
        """The micro-batch's watermark and timestamp on every row, read from the checkpoint:
        by wmobs' JVM functions in every task where the session has loaded its JAR
        (:mod:`wmobs.policy._jvm`), else once per batch by a Python data source, broadcast
        (:mod:`wmobs.policy._watermark_source`)."""
        from pyspark.sql import functions as F

        from wmobs.policy._jvm import batch_time_functions
        from wmobs.policy._watermark_source import SOURCE_NAME, WatermarkSource

        spark = df.sparkSession
        functions = batch_time_functions(spark, self.checkpoint or "")
        if functions is not None:
            watermark, timestamp = functions
            return df.withColumns(
                {WATERMARK: F.call_function(watermark), BATCH_TIME: F.call_function(timestamp)}
            )
        spark.dataSource.register(WatermarkSource)
        source = (
            spark.read.format(SOURCE_NAME)
            .option("checkpoint", self.checkpoint or "")
            .option("storage", self.storage.encode())
            .load()
        )
        # Broadcast, the one-row source is read once per micro-batch. (A scalar subquery
        # measured slower: Spark re-plans the Python data source for it in every batch.)
        return df.crossJoin(F.broadcast(source.select(WATERMARK, BATCH_TIME)))

    # ---- out of order ----------------------------------------------------------------------------

    def _global_out_of_order(self, df: DataFrame) -> DataFrame:
        """Against the micro-batch's watermark (joined by :func:`_join_batch_times`)."""
        from pyspark.sql import functions as F

        mark = F.col(WATERMARK) * F.lit(1000)
        candidate = F.col(VERDICT).bitwiseAND(F.lit(DROPPED_BITS)) == 0
        behind = candidate & mark.isNotNull() & (F.col(TS) < mark)
        drop = self.policy.out_of_order_action == "drop"
        bit = F.lit(OOO_DROPPED if drop else OOO_ADJUSTED)
        largest = mark + F.lit(self.tolerances.out_of_order_us)  # before this batch
        behind_by = F.when(mark.isNotNull(), F.greatest(largest - F.col(TS), F.lit(0)))
        replaced = {
            VERDICT: F.when(behind, F.col(VERDICT).bitwiseOR(bit)).otherwise(F.col(VERDICT)),
            LATENESS: F.when(candidate, F.coalesce(behind_by, F.lit(0))),
        }
        if not drop:
            replaced[TS] = F.when(behind, mark).otherwise(F.col(TS))
        return _replace(df, replaced).drop(WATERMARK, BATCH_TIME)

    def _substream_out_of_order(self, df: DataFrame) -> DataFrame:
        """The arrival policies, then out of order per key, in arrival order: rows partitioned
        by key bucket, judged by one ``mapInArrow`` task per partition that keeps its keys'
        state in the checkpoint (:mod:`wmobs.policy._substream_stage`)."""
        from pyspark.sql import functions as F

        from wmobs.policy._substream_judge import SubstreamConfig
        from wmobs.policy._substream_stage import Columns, substream_stage
        from wmobs.policy._substream_state import BUCKETS, state_directory

        drop = self.policy.out_of_order_action == "drop"
        ttl_us, idle_us = self.tolerances.substream_ttl_us, self.tolerances.idle_timeout_us
        config = SubstreamConfig(
            tolerance_us=self.tolerances.out_of_order_us,
            drop=drop,
            ttl_ms=None if ttl_us is None else max(1, ttl_us // 1000),
            idle_timeout_ms=None if idle_us is None else idle_us // 1000,
            candidate_bits=DROPPED_BITS,
            ooo_bit=OOO_DROPPED if drop else OOO_ADJUSTED,
        )
        if self.policy.name is None:
            import structlog

            structlog.get_logger("wmobs").warning(
                "wmobs.substream_policy_unnamed",
                state=state_directory(self.policy.state_name),
                hint="pass TimePolicy(name=...) so that the per-key state is found again "
                "after a restart even if the code creates its policies in another order",
            )
        keys = [F.col(f"`{self._name(c)}`") for c in self.policy.substream_by or ()]
        keyed = df.withColumn(KEY, F.xxhash64(*keys))
        if idle_us is not None:
            keyed = keyed.withColumn(IDLE, F.lit(REAL).cast("long"))
            keyed = keyed.unionByName(self._heartbeat(keyed, None))
        # Partitioned by key bucket before the times and verdicts are computed, so that only
        # the input columns and the key go through the shuffle.
        partitioned = keyed.repartition(F.pmod(F.col(KEY), F.lit(BUCKETS)))
        staged = self._judge_arrival(partitioned)
        staged = staged.drop(WATERMARK, BATCH_TIME).withColumn(LATENESS, F.lit(None).cast("long"))
        output = [c for c in staged.columns if c not in (KEY, ARRIVAL)]
        judged = self._jvm_substreams(staged, config, idle_us is not None)
        if judged is not None:
            return judged.select(*[F.col(f"`{c}`") for c in output])
        output_schema = staged.select(*[F.col(f"`{c}`") for c in output]).schema
        stage = substream_stage(
            config,
            Columns(
                KEY,
                TS,
                ARRIVAL,
                VERDICT,
                IDLE if idle_us is not None else None,
                tuple(output),
                lateness=LATENESS,
            ),
            checkpoint=self.checkpoint or "",
            directory=state_directory(self.policy.state_name),
            storage=self.storage,
        )
        return staged.mapInArrow(stage, output_schema)

    def _jvm_substreams(
        self, staged: DataFrame, config: SubstreamConfig, idle: bool
    ) -> DataFrame | None:
        """The per-key judge of wmobs' JAR over ``staged`` (``SubstreamJudge``: no row crosses
        into Python), with the state files of the Python stage: ``staged``'s columns, judged;
        None where the session has no JAR, or ``storage`` is not the default (the state is then
        reached with fsspec's credentials, which Hadoop does not have)."""
        from wmobs.policy._jvm import substream_stage as jvm_stage
        from wmobs.policy._substream_state import BUCKETS, state_directory

        if self.storage != Storage():
            return None
        at = {name: i for i, name in enumerate(staged.columns)}
        spec = {
            "checkpoint": self.checkpoint or "",
            "directory": state_directory(self.policy.state_name),
            "buckets": BUCKETS,
            "tolerance_us": config.tolerance_us,
            "drop": config.drop,
            "ttl_ms": config.ttl_ms,
            "idle_timeout_ms": config.idle_timeout_ms,
            "candidate_bits": config.candidate_bits,
            "ooo_bit": config.ooo_bit,
            "key": at[KEY],
            "ts": at[TS],
            "arrival": at[ARRIVAL],
            "verdict": at[VERDICT],
            "idle": at[IDLE] if idle else None,
            "lateness": at[LATENESS],
        }
        judged: DataFrame | None = jvm_stage(staged, spec)
        return judged

    # ---- the idle timeout ------------------------------------------------------------------------

    def _heartbeat(self, like: DataFrame, checkpoint: str | None) -> DataFrame:
        """The idle-timeout heartbeat stream, with the columns of ``like``: globally the
        synthetic row of each tick, with substreams one wake-up row per key bucket."""
        from pyspark.sql import functions as F

        from wmobs.policy._idle_source import SOURCE_NAME, IdleHeartbeatSource
        from wmobs.policy._substream_state import BUCKETS

        assert self.tolerances.idle_timeout_us is not None
        spark = like.sparkSession
        spark.dataSource.register(IdleHeartbeatSource)
        timeout_ms = self.tolerances.idle_timeout_us // 1000
        interval_us = self.tolerances.idle_check_interval_us
        interval_ms = (
            default_check_interval_ms(timeout_ms) if interval_us is None else interval_us // 1000
        )
        substreams = self.policy.substream_by is not None
        beats = (
            spark.readStream.format(SOURCE_NAME)
            .option("mode", "substreams" if substreams else "global")
            .option("checkpoint", checkpoint or "")
            .option("storage", self.storage.encode())
            .option("timeout_ms", str(timeout_ms))
            .option("interval_ms", str(interval_ms))
            .option("delay_ms", str(self.tolerances.out_of_order_us // 1000))
            .option("buckets", str(BUCKETS))
            .load()
        )
        special = {
            TS: F.lit(0) if substreams else F.col("wmobs_idle_ts_us"),
            IDLE: F.lit(HEARTBEAT) if substreams else F.col("wmobs_idle_firings"),
            KEY: F.col("wmobs_idle_bucket"),
        }
        return beats.select(
            *[
                special.get(f.name, _placeholder(f.dataType)).cast(f.dataType).alias(f.name)
                for f in like.schema.fields
            ]
        )

    # ---- the counts ------------------------------------------------------------------------------

    def _can_happen(self, name: str, action: str) -> bool:
        """Only these verdicts are observed; the listener exports the others as 0."""
        configured = {
            "invalid_time": "drop",
            "early_arrival": self.policy.early_arrival_action
            if self.policy.early_arrival is not None
            else None,
            "late_arrival": self.policy.late_arrival_action,
            "out_of_order": self.policy.out_of_order_action,
        }[name]
        return configured is not None and _PAST_TENSE[configured] == action

    def _observations(
        self, staged: DataFrame, dead_letters: bool, idle: bool
    ) -> tuple[DataFrame, list[Column]]:
        """What ``observe`` counts, and ``staged`` with what it needs: one aggregate of wmobs'
        JAR where the session has loaded it (:mod:`wmobs.policy._jvm`), else one Spark
        aggregate per column."""
        jvm = self._jvm_observation(staged, dead_letters, idle)
        if jvm is not None:
            return jvm[0], [jvm[1]]
        counts = self._counts(staged, dead_letters, idle)
        if not self.policy.distributions:
            return staged, counts
        staged, distributions = self._distributions(staged, idle)
        return staged, [*counts, *distributions]

    def _counted(self) -> list[tuple[str, int]]:
        """``(column, verdict bit)`` of every verdict this policy can give."""
        return [
            (policy_column(name, action), bit)
            for (name, action), bit in VERDICT_BITS.items()
            if self._can_happen(name, action)
        ]

    def _event_time(self, staged: DataFrame) -> Column:
        """Each row's event time (µs): parsed again only where there is no arrival column."""
        from pyspark.sql import functions as F

        event = self._event_micros(staged)
        if ARRIVAL in staged.columns:
            event = F.coalesce(F.col(ARRIVAL) - F.col(DELAY), event)
        return event

    def _counts(self, staged: DataFrame, dead_letters: bool, idle: bool) -> list[Column]:
        """The verdict counts, and this input's watermark and largest event time (µs)."""
        from pyspark.sql import functions as F

        verdict = F.col(VERDICT)
        counts = [
            F.count_if(verdict.bitwiseAND(F.lit(bit)) != 0).alias(column)
            for column, bit in self._counted()
        ]
        if dead_letters:  # the stage after this one hands every dropped row over, or fails
            dropped = verdict.bitwiseAND(F.lit(DROPPED_BITS)) != 0
            counts.append(F.count_if(dropped).alias(DEAD_LETTER_COLUMN))
        if idle:  # synthetic rows carry their firings; real rows -1
            firings = F.when(F.col(IDLE) > 0, F.col(IDLE)).otherwise(F.lit(0))
            counts.append(F.sum(firings).alias(IDLE_TIMEOUT_COLUMN))
        # Synthetic rows move the input's clock (its watermark), but are no events.
        kept = verdict.bitwiseAND(F.lit(DROPPED_BITS)) == 0
        real = _real_rows(idle)
        tolerance = F.lit(self.tolerances.out_of_order_us)
        counts.append((F.max(F.when(kept, F.col(TS))) - tolerance).alias(INPUT_WATERMARK_COLUMN))
        event = self._event_time(staged)
        counts.append(F.max(F.when(kept & real, event)).alias(INPUT_EVENT_TIME_COLUMN))
        return counts

    def _jvm_observation(
        self, staged: DataFrame, dead_letters: bool, idle: bool
    ) -> tuple[DataFrame, Column] | None:
        """The columns of :meth:`_counts` and :meth:`_distributions` as members of one JSON
        object (:data:`~wmobs.observations.STRUCT_COLUMN`), counted by one aggregate of wmobs'
        JAR, and ``staged`` with what it reads; None where the session has not loaded it.

        Its arguments are plain columns (the event time one more, computed in the stage's
        generated code): the aggregate reads those in place, and would evaluate anything
        else row by row."""
        from pyspark.sql import functions as F

        from wmobs.policy._jvm import observation_function

        histograms = ("arrival_delay", "lateness")
        distributions = self.policy.distributions
        spec = {
            "counts": self._counted(),
            "dropped_bits": DROPPED_BITS,
            "dead_letters": DEAD_LETTER_COLUMN if dead_letters else None,
            "firings": IDLE_TIMEOUT_COLUMN if idle else None,
            "watermark": INPUT_WATERMARK_COLUMN,
            "event_time": INPUT_EVENT_TIME_COLUMN,
            "tolerance_us": self.tolerances.out_of_order_us,
            "histogram": {
                "buckets": joint_histogram_column(histograms),
                "sums": [histogram_sum_column(h) for h in histograms],
                "bounds": [bounds_us(h) for h in histograms],
            }
            if distributions
            else None,
        }
        function = observation_function(staged.sparkSession, spec)
        if function is None:
            return None
        staged = staged.withColumn(EVENT, self._event_time(staged))
        arguments = [
            F.col(VERDICT),
            F.col(TS),
            F.col(EVENT),
            F.col(IDLE) if idle else F.lit(REAL).cast("long"),
            *([F.col(DELAY), F.col(LATENESS)] if distributions else []),
        ]
        return staged, F.call_function(function, *arguments).alias(STRUCT_COLUMN)

    def _distributions(self, staged: DataFrame, idle: bool) -> tuple[DataFrame, list[Column]]:
        """``staged`` with the joint bucket of each row's arrival delay and lateness (computed
        in generated code, before ``observe``), and the aggregates that count them."""
        from pyspark.sql import functions as F

        real = _real_rows(idle)
        delay, lateness = F.col(DELAY), F.col(LATENESS)
        histograms = ("arrival_delay", "lateness")
        staged = staged.withColumns(
            {
                DELAY_BUCKET: histogram_index("arrival_delay", delay, real),
                LATENESS_BUCKET: histogram_index("lateness", lateness, real),
            }
        ).withColumn(
            BUCKETS,
            joint_histogram_index(histograms, [F.col(DELAY_BUCKET), F.col(LATENESS_BUCKET)]),
        )
        return staged, joint_histogram_counts(histograms, [delay, lateness], real, index=BUCKETS)


# ---- helpers -------------------------------------------------------------------------------


def _placeholder(data_type: DataType) -> Column:
    """A non-null value of ``data_type`` for the columns of a synthetic row (never seen by the
    user: a null would turn a whole integer column into floats on its way through pandas)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if isinstance(data_type, T.StructType):
        return F.struct(*[_placeholder(f.dataType).alias(f.name) for f in data_type.fields])
    if isinstance(data_type, T.ArrayType):
        return F.array().cast(data_type)
    if isinstance(data_type, T.MapType):
        return F.create_map().cast(data_type)
    if isinstance(data_type, (T.DateType, T.TimestampType, T.TimestampNTZType)):
        return F.lit("1970-01-01").cast(data_type)
    if isinstance(data_type, (T.NumericType, T.BooleanType, T.StringType, T.BinaryType)):
        return F.lit(0).cast(data_type)
    return F.lit(None).cast(data_type)


def _dotted_names(columns: list[str]) -> dict[str, str]:
    """A name without a ``.`` for each of ``columns`` that has one, unused among ``columns``."""
    taken = set(columns)
    renamed = {}
    for index, column in enumerate(columns):
        if "." in column:
            inside = f"wmobs__column_{index}"
            while inside in taken:
                inside += "_"
            taken.add(inside)
            renamed[column] = inside
    return renamed


def _real_rows(idle: bool) -> Column:
    """True for the rows of the input, false for the idle timeout's synthetic rows."""
    from pyspark.sql import functions as F

    return F.col(IDLE) == F.lit(REAL) if idle else F.lit(True)


def _session_conf(df: DataFrame, key: str) -> str | None:
    """The session's value of a SQL conf, its default if unset (a default passed to
    ``conf.get`` would replace Spark's); None if this Spark has no such conf."""
    try:
        value = df.sparkSession.conf.get(key)
    except Exception:  # unknown to this version of Spark
        return None
    return value


def _replace(df: DataFrame, columns: dict[str, Column]) -> DataFrame:
    """Replace ``columns`` at once: every new value is computed from the old ones."""
    from pyspark.sql import functions as F

    kept = [F.col(f"`{c}`") for c in df.columns if c not in columns]
    return df.select(*kept, *[value.alias(name) for name, value in columns.items()])
