"""Time policies: early arrival, late arrival, out of order, invalid time — every row counted.

Azure Stream Analytics-style event-ordering policies for Spark Structured Streaming::

    from wmobs import TimePolicy

    policy = TimePolicy(event_time="EventTime", arrival_time="ArrivalTime")
    out = policy.apply(df, checkpoint_location="/chk/q")   # the query's checkpointLocation
    out.groupBy(F.window("system_timestamp", "1 minute")).count().writeStream...

Each row gets one verdict per policy, in this order (DESIGN.md §2):

1. **invalid time** — event time null or unparseable: dropped (counted, never given a made-up
   time).
2. **early arrival** — event time more than ``early_arrival`` ahead of arrival time: dropped,
   or adjusted to the arrival time. A dropped early row never moves the watermark.
3. **late arrival** — event time more than ``late_arrival`` behind arrival time: adjusted to
   ``arrival_time - late_arrival``, or dropped.
4. **out of order** — the (possibly adjusted) time is below the watermark: adjusted up to the
   watermark, or dropped. Globally the watermark is the one in force for the micro-batch
   (largest system timestamp of earlier batches minus ``out_of_order``), exactly as Spark's own
   operators see it; with ``substream_by`` every key has its own, exact per event.

The result keeps every input column unchanged and adds ``system_timestamp`` (the time after the
policies, with Spark's watermark on it): ``system_timestamp != event time`` marks adjusted rows.
Counts per (policy, action) are observed with ``DataFrame.observe`` under the name
``wmobs.policy.<name>`` and exported by :func:`wmobs.attach` as ``wmobs_policy_events_total``.

How the global policy knows the batch watermark: Spark writes it into the checkpoint
(``offsets/<batchId>``) before the batch runs; a one-row Python data source reads it once per
micro-batch and is broadcast into the plan, so no Python runs per row. That is why ``apply``
needs the query's checkpoint location (or a named query under the session's
``spark.sql.streaming.checkpointLocation``); a wrong one fails the query loudly. The same read
gives the batch timestamp (for rows without an arrival time): ``current_timestamp()`` would put
it into the generated code as a literal, which Spark then compiles anew in every micro-batch.

``idle_timeout`` closes the windows of a quiet stream (or key): a heartbeat source moves its
clock on with processing time and a filter right after ``withWatermark`` removes the synthetic
rows that carry it (:mod:`wmobs._idle`); each idle period is one firing, observed as
``idle_timeout_firings``.

Substreams partition the rows by key bucket and judge each partition in one ``mapInArrow``
task, vectorised; the per-key state lives in the query's checkpoint next to Spark's own
(``<checkpoint>/wmobs/substreams/<policy name>/``), versioned by micro-batch, so it survives
restarts and retries exactly once. Any state store provider works.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from wmobs._durations import to_micros
from wmobs._idle import HEARTBEAT, REAL, default_check_interval_ms
from wmobs.deadletter import DeadLetter, DeadLetterFunction, make_stage
from wmobs.observations import (
    DEAD_LETTER_COLUMN,
    IDLE_TIMEOUT_COLUMN,
    OBSERVATION_PREFIX,
    policy_column,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType

__all__ = ["SYSTEM_TIMESTAMP", "TimePolicy"]

SYSTEM_TIMESTAMP = "system_timestamp"

# Verdict bits, one per (policy, action) that can happen.
INVALID_DROPPED = 1
EARLY_ADJUSTED = 2
EARLY_DROPPED = 4
LATE_ADJUSTED = 8
LATE_DROPPED = 16
OOO_ADJUSTED = 32
OOO_DROPPED = 64
VERDICT_BITS: dict[tuple[str, str], int] = {
    ("invalid_time", "dropped"): INVALID_DROPPED,
    ("early_arrival", "adjusted"): EARLY_ADJUSTED,
    ("early_arrival", "dropped"): EARLY_DROPPED,
    ("late_arrival", "adjusted"): LATE_ADJUSTED,
    ("late_arrival", "dropped"): LATE_DROPPED,
    ("out_of_order", "adjusted"): OOO_ADJUSTED,
    ("out_of_order", "dropped"): OOO_DROPPED,
}

_DROP_POLICIES = [(p, bit) for (p, action), bit in VERDICT_BITS.items() if action == "dropped"]
DROPPED_BITS = sum(bit for _, bit in _DROP_POLICIES)

_TS = "wmobs__ts_us"
_ARRIVAL = "wmobs__arrival_us"
_VERDICT = "wmobs__verdict"
_KEY = "wmobs__key"
_WATERMARK = "wmobs_watermark_ms"
_BATCH_TIME = "wmobs_batch_time_ms"
_IDLE = "wmobs__idle"
_INTERNAL = (_TS, _ARRIVAL, _VERDICT, _KEY, _WATERMARK, _BATCH_TIME, _IDLE)
_ACTIONS = ("adjust", "drop")
_PAST_TENSE = {"adjust": "adjusted", "drop": "dropped"}
_names = itertools.count()


def _action(value: str, argument: str) -> str:
    if value not in _ACTIONS:
        raise ValueError(f"{argument}: must be 'adjust' or 'drop', got {value!r}")
    return value


@dataclass(frozen=True)
class TimePolicy:
    """Event-ordering policies for one streaming DataFrame (see the module documentation).

    Durations accept Spark interval strings (``"5 minutes"``) and ``datetime.timedelta``.
    """

    event_time: str = "EventTime"
    arrival_time: str | None = "ArrivalTime"
    early_arrival: str | timedelta | None = "5 minutes"
    early_arrival_action: str = "drop"
    late_arrival: str | timedelta = "5 seconds"
    late_arrival_action: str = "adjust"
    out_of_order: str | timedelta = "0 seconds"
    out_of_order_action: str = "adjust"
    substream_by: Sequence[str] | None = None
    name: str | None = None
    substream_ttl: str | timedelta | None = None
    """With ``substream_by``: forget a key not seen for this long (processing time).

    ``None`` keeps two longs per key for as long as the query runs. Keys are forgotten when
    their bucket next receives rows; a forgotten key that returns starts afresh.
    """
    idle_timeout: str | timedelta | None = None
    """Close the windows of a quiet stream: once the stream (with ``substream_by``: a key) has
    had no input for this long (processing time), its clock runs on with processing time, so
    Spark's watermark advances and a downstream window aggregation emits without new rows.
    ``None`` (the default) is off. See :mod:`wmobs._idle` for the exact rule."""
    idle_check_interval: str | timedelta | None = None
    """How often the idle timeout looks (default: a quarter of ``idle_timeout``, within
    100 ms..5 s). Windows close at most this much later than the rule says."""
    _micros: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.event_time, str) or not self.event_time:
            raise TypeError("event_time: expected a column name")
        if self.arrival_time is not None and not isinstance(self.arrival_time, str):
            raise TypeError("arrival_time: expected a column name or None")
        micros = {
            "late_arrival": to_micros(self.late_arrival, "late_arrival"),
            "out_of_order": to_micros(self.out_of_order, "out_of_order"),
        }
        if self.substream_ttl is not None:
            micros["substream_ttl"] = to_micros(self.substream_ttl, "substream_ttl")
        if self.early_arrival is not None:
            micros["early_arrival"] = to_micros(self.early_arrival, "early_arrival")
        for argument in ("idle_timeout", "idle_check_interval"):
            value = getattr(self, argument)
            if value is not None:
                micros[argument] = to_micros(value, argument)
                if micros[argument] < 1000:
                    raise ValueError(f"{argument}: must be at least 1 millisecond, got {value!r}")
        if self.idle_check_interval is not None and self.idle_timeout is None:
            raise ValueError("idle_check_interval: only meaningful with idle_timeout")
        _action(self.early_arrival_action, "early_arrival_action")
        _action(self.late_arrival_action, "late_arrival_action")
        _action(self.out_of_order_action, "out_of_order_action")
        if self.substream_by is not None:
            if isinstance(self.substream_by, str) or not all(
                isinstance(c, str) for c in self.substream_by
            ):
                raise TypeError("substream_by: expected a list of column names, e.g. ['deviceId']")
            if not self.substream_by:
                raise ValueError("substream_by: empty; use None for one global watermark")
        if self.name is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+", self.name):
            raise ValueError(f"name: use letters, digits, '_', '.' or '-', got {self.name!r}")
        object.__setattr__(self, "_micros", micros)

    # ---- public ---------------------------------------------------------------------------

    @property
    def observation_name(self) -> str:
        """The ``DataFrame.observe`` name this policy's counts are reported under."""
        return f"{OBSERVATION_PREFIX}.policy.{self.name or self._default_name}"

    def apply(
        self,
        df: DataFrame,
        *,
        checkpoint_location: str | None = None,
        dead_letter: DeadLetter | str | os.PathLike[str] | DeadLetterFunction | None = None,
    ) -> DataFrame:
        """The policies applied to streaming ``df``: every input column unchanged, plus
        ``system_timestamp`` with the watermark (``out_of_order`` delay) on it.

        ``checkpoint_location``: the ``checkpointLocation`` of the query this DataFrame will
        run in: every micro-batch reads its watermark and timestamp from it, and substreams
        keep their per-key state in it (not needed for a named query under the session's
        ``spark.sql.streaming.checkpointLocation`` root).

        ``dead_letter``: where dropped rows go (a directory, a function, or a
        :class:`wmobs.DeadLetter`); see :mod:`wmobs.deadletter`. Without it dropped rows are
        counted, not kept.
        """
        from pyspark.sql import functions as F

        sink = None if dead_letter is None else DeadLetter.of(dead_letter)
        self._check_columns(df)
        dotted = [c for c in df.columns if "." in c]
        if dotted and (self.substream_by is not None or sink is not None):
            raise ValueError(
                f"apply: column {dotted[0]!r} has a '.' in its name; substream_by and "
                "dead_letter pass rows through PySpark's mapInArrow, which cannot resolve such "
                "a column: rename it first (df.withColumnRenamed)"
            )
        columns = df.columns
        idle = "idle_timeout" in self._micros
        if idle and self.substream_by is None and checkpoint_location is None:
            raise ValueError(
                "idle_timeout: without substream_by the idle timeout reads the query's "
                "offsets log: pass TimePolicy.apply(df, checkpoint_location=...)"
            )
        if self.substream_by is None:
            staged = self._global_out_of_order(self._judge_arrival(df, checkpoint_location))
            if idle:
                staged = staged.withColumn(_IDLE, F.lit(REAL).cast("long"))
                staged = staged.unionByName(self._heartbeat(staged, checkpoint_location))
        else:
            staged = self._substream_out_of_order(df, checkpoint_location)
        observed = staged.observe(self.observation_name, *self._counts(sink is not None, idle))
        if sink is None:
            kept = observed.filter((F.col(_VERDICT).bitwiseAND(F.lit(DROPPED_BITS))) == 0)
        else:
            stage = make_stage(sink, columns, _VERDICT, DROPPED_BITS, _DROP_POLICIES)
            kept = observed.mapInArrow(stage, observed.schema)
        out = kept.select(
            *[F.col(f"`{c}`") for c in columns],
            F.timestamp_micros(F.col(_TS)).alias(SYSTEM_TIMESTAMP),
            *([F.col(_IDLE)] if idle else []),
        ).withWatermark(SYSTEM_TIMESTAMP, f"{self._micros['out_of_order']} microseconds")
        if not idle:
            return out
        # Synthetic rows have moved the watermark (above); none goes further. The filter names
        # system_timestamp so the optimizer cannot push it below withWatermark.
        real = (F.col(_IDLE) == F.lit(REAL)) | F.col(SYSTEM_TIMESTAMP).isNull()
        return out.filter(real).drop(_IDLE)

    # ---- validation -----------------------------------------------------------------------

    @property
    def _default_name(self) -> str:
        name = getattr(self, "_generated_name", None)
        if name is None:
            base = re.sub(r"[^A-Za-z0-9_]+", "_", self.event_time)
            name = f"{base}_{next(_names)}"
            object.__setattr__(self, "_generated_name", name)
        return str(name)

    def _check_columns(self, df: DataFrame) -> None:
        from pyspark.sql.types import StringType, TimestampNTZType, TimestampType

        fields = {f.name: f.dataType for f in df.schema.fields}
        if not df.isStreaming:
            raise TypeError("apply: expected a streaming DataFrame (spark.readStream...)")
        checks: list[tuple[str, str, tuple[type, ...]]] = [
            ("event_time", self.event_time, (TimestampType, TimestampNTZType, StringType))
        ]
        if self.arrival_time is not None:
            checks.append(("arrival_time", self.arrival_time, (TimestampType, TimestampNTZType)))
        for argument, column, types in checks:
            if column not in fields:
                raise ValueError(
                    f"{argument}: column {column!r} is not in the DataFrame "
                    f"(columns: {', '.join(fields)})"
                )
            if not isinstance(fields[column], types):
                wanted = " or ".join(t.__name__.replace("Type", "").lower() for t in types)
                raise TypeError(
                    f"{argument}: column {column!r} is {fields[column].simpleString()}, "
                    f"expected {wanted}"
                )
        for column in self.substream_by or ():
            if column not in fields:
                raise ValueError(f"substream_by: column {column!r} is not in the DataFrame")
        if SYSTEM_TIMESTAMP in fields:
            raise ValueError(f"apply: the DataFrame already has a {SYSTEM_TIMESTAMP!r} column")
        clashes = sorted(set(fields) & set(_INTERNAL))
        if clashes:
            raise ValueError(
                f"apply: column {clashes[0]!r} has a name wmobs uses inside the policy; rename it"
            )

    # ---- the stages ----------------------------------------------------------------------

    def _event_micros(self, df: DataFrame) -> Column:
        from pyspark.sql import functions as F
        from pyspark.sql.types import StringType

        column = F.col(f"`{self.event_time}`")
        if isinstance(df.schema[self.event_time].dataType, StringType):
            column = F.try_to_timestamp(column)  # unparseable -> null -> invalid_time
        return F.unix_micros(column.cast("timestamp"))

    def _arrival_micros(self, df: DataFrame) -> Column:
        """The arrival time column; null where the micro-batch's time stands in for it."""
        from pyspark.sql import functions as F

        if self.arrival_time is None:
            return F.lit(None).cast("long")
        return F.unix_micros(F.col(f"`{self.arrival_time}`").cast("timestamp"))

    def _judge_arrival(self, df: DataFrame, checkpoint: str | None) -> DataFrame:
        """``df`` with its event and arrival times (µs) and the batch's times joined in, judged
        by the arrival policies."""
        from pyspark.sql import functions as F

        staged = df.select(
            *[F.col(f"`{c}`") for c in df.columns],
            self._event_micros(df).alias(_TS),
            self._arrival_micros(df).alias(_ARRIVAL),
        )
        staged = self._join_batch_times(staged, checkpoint)
        return self._arrival_policies(staged, F.col(_BATCH_TIME) * F.lit(1000))

    def _arrival_policies(self, df: DataFrame, batch_time: Column) -> DataFrame:
        """Invalid time, early and late arrival: stateless Column expressions (JVM only).
        ``batch_time``: the micro-batch's timestamp (µs), for rows without an arrival time."""
        from pyspark.sql import functions as F

        df = _replace(df, {_ARRIVAL: F.coalesce(F.col(_ARRIVAL), batch_time)})
        ts, arrival = F.col(_TS), F.col(_ARRIVAL)
        verdict = F.when(ts.isNull(), F.lit(INVALID_DROPPED)).otherwise(F.lit(0))
        system = ts
        if "early_arrival" in self._micros:
            early = ts.isNotNull() & (ts > arrival + F.lit(self._micros["early_arrival"]))
            drop = self.early_arrival_action == "drop"
            verdict = F.when(early, F.lit(EARLY_DROPPED if drop else EARLY_ADJUSTED)).otherwise(
                verdict
            )
            if not drop:
                system = F.when(early, arrival).otherwise(system)
        late_floor = arrival - F.lit(self._micros["late_arrival"])
        late = (verdict.bitwiseAND(F.lit(DROPPED_BITS)) == 0) & (system < late_floor)
        if self.late_arrival_action == "drop":
            verdict = F.when(late, verdict.bitwiseOR(F.lit(LATE_DROPPED))).otherwise(verdict)
        else:
            verdict = F.when(late, verdict.bitwiseOR(F.lit(LATE_ADJUSTED))).otherwise(verdict)
            system = F.when(late, late_floor).otherwise(system)
        return _replace(df, {_TS: system, _VERDICT: verdict})

    def _join_batch_times(self, df: DataFrame, checkpoint: str | None) -> DataFrame:
        """The micro-batch's watermark and timestamp on every row, read once per batch from
        the checkpoint (:mod:`wmobs._watermark_source`)."""
        from pyspark.sql import functions as F

        from wmobs._watermark_source import SOURCE_NAME, WatermarkSource

        spark = df.sparkSession
        spark.dataSource.register(WatermarkSource)
        source = spark.read.format(SOURCE_NAME).option("checkpoint", checkpoint or "").load()
        # Broadcast, the one-row source is read once per micro-batch. (A scalar subquery
        # measured slower: Spark re-plans the Python data source for it in every batch.)
        return df.crossJoin(F.broadcast(source.select(_WATERMARK, _BATCH_TIME)))

    def _global_out_of_order(self, df: DataFrame) -> DataFrame:
        """Against the micro-batch's watermark (joined by :meth:`_join_batch_times`)."""
        from pyspark.sql import functions as F

        mark = F.col(_WATERMARK) * F.lit(1000)
        candidate = F.col(_VERDICT).bitwiseAND(F.lit(DROPPED_BITS)) == 0
        behind = candidate & mark.isNotNull() & (F.col(_TS) < mark)
        drop = self.out_of_order_action == "drop"
        bit = F.lit(OOO_DROPPED if drop else OOO_ADJUSTED)
        replaced = {
            _VERDICT: F.when(behind, F.col(_VERDICT).bitwiseOR(bit)).otherwise(F.col(_VERDICT))
        }
        if not drop:
            replaced[_TS] = F.when(behind, mark).otherwise(F.col(_TS))
        return _replace(df, replaced).drop(_WATERMARK, _BATCH_TIME)

    def _substream_out_of_order(self, df: DataFrame, checkpoint: str | None) -> DataFrame:
        """The arrival policies, then out of order per key, in arrival order: rows partitioned
        by key bucket, judged by one ``mapInArrow`` task per partition that keeps its keys'
        state in the checkpoint (:mod:`wmobs._substreams`)."""
        from pyspark.sql import functions as F

        from wmobs._substreams import BUCKETS, Columns, SubstreamConfig, make_stage, state_directory

        drop = self.out_of_order_action == "drop"
        ttl_us = self._micros.get("substream_ttl")
        idle_us = self._micros.get("idle_timeout")
        config = SubstreamConfig(
            tolerance_us=self._micros["out_of_order"],
            drop=drop,
            ttl_ms=None if ttl_us is None else max(1, ttl_us // 1000),
            idle_timeout_ms=None if idle_us is None else idle_us // 1000,
            candidate_bits=DROPPED_BITS,
            ooo_bit=OOO_DROPPED if drop else OOO_ADJUSTED,
        )
        if self.name is None:
            import structlog

            structlog.get_logger("wmobs").warning(
                "wmobs.substream_policy_unnamed",
                state=state_directory(self._default_name),
                hint="pass TimePolicy(name=...) so that the per-key state is found again "
                "after a restart even if the code creates its policies in another order",
            )
        keys = [F.col(f"`{c}`") for c in self.substream_by or ()]
        keyed = df.withColumn(_KEY, F.xxhash64(*keys))
        if idle_us is not None:
            keyed = keyed.withColumn(_IDLE, F.lit(REAL).cast("long"))
            keyed = keyed.unionByName(self._heartbeat(keyed, None))
        # Partitioned by key bucket before the times and verdicts are computed, so that only
        # the input columns and the key go through the shuffle.
        partitioned = keyed.repartition(F.pmod(F.col(_KEY), F.lit(BUCKETS)))
        staged = self._judge_arrival(partitioned, checkpoint).drop(_WATERMARK, _BATCH_TIME)
        output = [c for c in staged.columns if c not in (_KEY, _ARRIVAL)]
        stage = make_stage(
            config,
            Columns(
                _KEY,
                _TS,
                _ARRIVAL,
                _VERDICT,
                _IDLE if idle_us is not None else None,
                tuple(output),
            ),
            checkpoint=checkpoint or "",
            directory=state_directory(self.name or self._default_name),
        )
        return staged.mapInArrow(stage, staged.select(*[F.col(f"`{c}`") for c in output]).schema)

    def _heartbeat(self, like: DataFrame, checkpoint: str | None) -> DataFrame:
        """The idle-timeout heartbeat stream, with the columns of ``like``: globally the
        synthetic row of each tick, with substreams one wake-up row per key bucket."""
        from pyspark.sql import functions as F

        from wmobs._idle_source import SOURCE_NAME, IdleHeartbeatSource
        from wmobs._substreams import BUCKETS

        spark = like.sparkSession
        spark.dataSource.register(IdleHeartbeatSource)
        timeout_ms = self._micros["idle_timeout"] // 1000
        interval_us = self._micros.get("idle_check_interval")
        substreams = self.substream_by is not None
        beats = (
            spark.readStream.format(SOURCE_NAME)
            .option("mode", "substreams" if substreams else "global")
            .option("checkpoint", checkpoint or "")
            .option("timeout_ms", str(timeout_ms))
            .option(
                "interval_ms",
                str(
                    default_check_interval_ms(timeout_ms)
                    if interval_us is None
                    else interval_us // 1000
                ),
            )
            .option("delay_ms", str(self._micros["out_of_order"] // 1000))
            .option("buckets", str(BUCKETS))
            .load()
        )
        special = {
            _TS: F.lit(0) if substreams else F.col("wmobs_idle_ts_us"),
            _IDLE: F.lit(HEARTBEAT) if substreams else F.col("wmobs_idle_firings"),
            _KEY: F.col("wmobs_idle_bucket"),
        }
        return beats.select(
            *[
                special.get(f.name, _placeholder(f.dataType)).cast(f.dataType).alias(f.name)
                for f in like.schema.fields
            ]
        )

    def _can_happen(self, policy: str, action: str) -> bool:
        """Only these verdicts are observed; the listener exports the others as 0."""
        configured = {
            "invalid_time": "drop",
            "early_arrival": self.early_arrival_action if self.early_arrival is not None else None,
            "late_arrival": self.late_arrival_action,
            "out_of_order": self.out_of_order_action,
        }[policy]
        return configured is not None and _PAST_TENSE[configured] == action

    def _counts(self, dead_letters: bool, idle: bool) -> list[Column]:
        from pyspark.sql import functions as F

        verdict = F.col(_VERDICT)
        counts = [
            F.count_if(verdict.bitwiseAND(F.lit(bit)) != 0).alias(policy_column(policy, action))
            for (policy, action), bit in VERDICT_BITS.items()
            if self._can_happen(policy, action)
        ]
        if dead_letters:  # the stage after this one hands every dropped row over, or fails
            dropped = verdict.bitwiseAND(F.lit(DROPPED_BITS)) != 0
            counts.append(F.count_if(dropped).alias(DEAD_LETTER_COLUMN))
        if idle:  # synthetic rows carry their firings; real rows -1
            firings = F.when(F.col(_IDLE) > 0, F.col(_IDLE)).otherwise(F.lit(0))
            counts.append(F.sum(firings).alias(IDLE_TIMEOUT_COLUMN))
        return counts


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


def _replace(df: DataFrame, columns: dict[str, Column]) -> DataFrame:
    """Replace ``columns`` at once: every new value is computed from the old ones."""
    from pyspark.sql import functions as F

    kept = [F.col(f"`{c}`") for c in df.columns if c not in columns]
    return df.select(*kept, *[value.alias(name) for name, value in columns.items()])
