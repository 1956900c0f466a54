"""Time policies: early arrival, late arrival, out of order, invalid time — every row counted.

Azure Stream Analytics-style event-ordering policies for Spark Structured Streaming::

    from wmobs import TimePolicy

    policy = TimePolicy(event_time="EventTime", arrival_time="ArrivalTime")
    out = policy.apply(df, checkpoint_location="/chk/q")   # the query's checkpointLocation
    out.groupBy(F.window("system_timestamp", "1 minute")).count().writeStream...

Each row gets one verdict per policy, in this order (the README's "Time policies"):

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
(``offsets/<batchId>``) before the batch runs; the JVM engine reads it in every task, the
Python engine with a one-row Python data source broadcast into the plan. That is why ``apply``
needs the query's checkpoint location (or a named query under the session's
``spark.sql.streaming.checkpointLocation``); a wrong one fails the query loudly. The same read
gives the batch timestamp (for rows without an arrival time): ``current_timestamp()`` would put
it into the generated code as a literal, which Spark then compiles anew in every micro-batch.

``engine``: ``"auto"`` (default), ``"jvm"`` or ``"python"``; see :mod:`wmobs.policy._engine`.
The choice is made once per ``apply``, logged at info and exported as
``wmobs_policy_info{query, policy, engine, dead_letters}``.

``idle_timeout`` closes the windows of a quiet stream (or key): a heartbeat source moves its
clock on with processing time and a filter right after ``withWatermark`` removes the synthetic
rows that carry it (:mod:`wmobs.policy._python._idle`); each idle period is one firing, observed as
``idle_timeout_firings``.

Substreams partition the rows by key bucket and judge each partition in one task (wmobs' JVM
generator, or a ``mapInArrow`` function on the Python engine); the per-key state lives in the
query's checkpoint next to Spark's own (``<checkpoint>/wmobs/substreams/<policy name>/``),
versioned by micro-batch, so it survives restarts and retries exactly once. Any state store
provider works.

This module validates; :mod:`wmobs.policy._plan` builds the plan.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from wmobs._spark import is_relative, qualified_path
from wmobs.observations import OBSERVATION_PREFIX
from wmobs.policy._context import Context
from wmobs.policy._deadletter import DeadLetter, DeadLetterFunction, check_input_columns
from wmobs.policy._deadletter_plan import DeadLetterPlan, choose_plan
from wmobs.policy._durations import Tolerances
from wmobs.policy._engine import check_requested, choose, planned_in_pipeline
from wmobs.policy._input_columns import as_spelled, has_map, nested_hint, spelled
from wmobs.policy._plan import SYSTEM_TIMESTAMP, build, dotted_names
from wmobs.policy._stages import Engine
from wmobs.policy._storage import Storage
from wmobs.policy._verdicts import INTERNAL

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

__all__ = ["SYSTEM_TIMESTAMP", "TimePolicy"]

_ACTIONS = ("adjust", "drop")
_names = itertools.count()
# A policy's name is a folder of the checkpoint and part of its dead-letter files' names
# (part-<partition>-<name>-<query id>.<format>), which must fit a file system's 255 bytes.
MAX_NAME = 128


def _session_checkpoint_root(df: DataFrame) -> str | None:
    """The session's ``spark.sql.streaming.checkpointLocation`` (for named queries)."""
    try:
        value = df.sparkSession.conf.get("spark.sql.streaming.checkpointLocation", None)
    except Exception:  # a Connect session that cannot answer: the first batch will tell
        return None
    return str(value) if value else None


def _action(value: str, argument: str) -> str:
    if value not in _ACTIONS:
        raise ValueError(f"{argument}: must be 'adjust' or 'drop', got {value!r}")
    return value


class _DefaultColumn(str):
    """A column name left at its default: the column where the DataFrame has one of that
    name, else (for ``arrival_time``) the micro-batch's time."""

    __slots__ = ()


ARRIVAL_TIME = _DefaultColumn("ArrivalTime")
"""``arrival_time``'s default: a column ``ArrivalTime`` where the DataFrame has one (Azure Stream
Analytics' name), else the micro-batch's time, as ``arrival_time=None`` gives."""


@dataclass(frozen=True)
class TimePolicy:
    """Event-ordering policies for one streaming DataFrame (see the module documentation).

    Durations accept Spark interval strings (``"5 minutes"``) and ``datetime.timedelta``.
    """

    event_time: str = "EventTime"
    arrival_time: str | None = ARRIVAL_TIME
    """The column of each row's arrival time (a ``TIMESTAMP``: Kafka's ``timestamp``, an
    upload time), or ``None``: the micro-batch's time. Left at its default, ``ArrivalTime``
    where the DataFrame has such a column, else the micro-batch's time (said in the
    ``wmobs.engine`` line); a column named explicitly must exist."""
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

    ``None`` keeps a key's clock (three longs) for as long as the query runs. The JVM engine
    forgets a key by a processing-time timeout of Spark's stateful operator, the Python engine
    when the key's bucket next receives rows; a forgotten key that returns starts afresh.
    """
    idle_timeout: str | timedelta | None = None
    """Close the windows of a quiet stream: once the stream (with ``substream_by``: a key) has
    had no input for this long (processing time), its clock runs on with processing time, so
    Spark's watermark advances and a downstream window aggregation emits without new rows.
    ``None`` (the default) is off. See :mod:`wmobs.policy._python._idle` for the exact rule."""
    idle_check_interval: str | timedelta | None = None
    """How often the idle timeout looks (default: a quarter of ``idle_timeout``, within
    100 ms..5 s). Windows close at most this much later than the rule says."""
    distributions: bool = True
    """Count the arrival-delay and lateness distributions (``wmobs_event_arrival_delay_seconds``,
    ``wmobs_event_lateness_seconds``) that ``wmobs advise`` reads. ``False`` leaves them out of
    the plan: the counts, the per-input watermark and every verdict stay the same, and the
    query runs faster (docs' benchmarks page)."""
    engine: str = "auto"
    """Which engine runs the policy: ``"auto"`` (wmobs' Spark extension wherever the session has
    it or can be given it, else Python, said at info), ``"jvm"`` (the extension, or an error)
    or ``"python"``. See :mod:`wmobs.policy._engine`."""
    substream_skew: str | timedelta | None = None
    """With ``substream_by``: how far a key's clock may run behind the fastest key's and its
    rows still reach a downstream window. Each key is judged against its own watermark, but a
    window aggregation after the policy closes windows by Spark's one watermark, the largest
    system timestamp of all keys minus ``out_of_order``, and drops a lagging key's rows for
    windows already closed (counted by Spark in groups, ``wmobs_rows_dropped_by_watermark_total``).
    This delays that watermark by ``substream_skew`` more, so windows wait for keys up to that
    far behind. ``None`` (the default): no allowance."""
    tolerances: Tolerances = field(init=False, repr=False, compare=False)
    """The durations above, resolved to microseconds."""

    def __post_init__(self) -> None:
        if not isinstance(self.event_time, str) or not self.event_time:
            raise TypeError("event_time: expected a column name")
        if self.arrival_time is not None and not isinstance(self.arrival_time, str):
            raise TypeError("arrival_time: expected a column name or None")
        tolerances = Tolerances.resolve(
            late_arrival=self.late_arrival,
            out_of_order=self.out_of_order,
            early_arrival=self.early_arrival,
            substream_ttl=self.substream_ttl,
            idle_timeout=self.idle_timeout,
            idle_check_interval=self.idle_check_interval,
            substream_skew=self.substream_skew,
        )
        if self.substream_skew is not None and self.substream_by is None:
            raise ValueError(
                "substream_skew: only meaningful with substream_by (the global policy's "
                "watermark is the one Spark closes windows by)"
            )
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
        if not isinstance(self.distributions, bool):
            raise TypeError(f"distributions: expected True or False, got {self.distributions!r}")
        # Not dots alone: the name is a folder of the checkpoint ('..' would be its parent).
        if self.name is not None and not re.fullmatch(r"(?!\.+$)[A-Za-z0-9_.-]+", self.name):
            raise ValueError(
                f"name: use letters, digits, '_', '.' or '-' (not dots alone), got {self.name!r}"
            )
        if self.name is not None and len(self.name) > MAX_NAME:
            raise ValueError(
                f"name: at most {MAX_NAME} characters (it is part of file names: a dead-letter"
                f" file is part-<partition>-<name>-<query id>.<format>), got {len(self.name)}"
            )
        check_requested(self.engine)
        object.__setattr__(self, "tolerances", tolerances)

    # ---- public ---------------------------------------------------------------------------

    @property
    def observation_name(self) -> str:
        """The ``DataFrame.observe`` name this policy's counts are reported under."""
        return f"{OBSERVATION_PREFIX}.policy.{self.state_name}"

    @property
    def state_name(self) -> str:
        """``name``, or one generated in the order policies are created (``<event_time>_<n>``):
        the ``policy`` label of its metrics, its observation and its substream state
        directory."""
        if self.name is not None:
            return self.name
        generated = getattr(self, "_generated_name", None)
        if generated is None:
            base = re.sub(r"[^A-Za-z0-9_]+", "_", self.event_time)[: MAX_NAME - 24]
            generated = f"{base}_{next(_names)}"
            object.__setattr__(self, "_generated_name", generated)
        return str(generated)

    def apply(
        self,
        df: DataFrame,
        *,
        checkpoint_location: str | None = None,
        dead_letter: DeadLetter | str | os.PathLike[str] | DeadLetterFunction | None = None,
        storage: Storage | Mapping[str, Any] | None = None,
    ) -> DataFrame:
        """The policies applied to streaming ``df``: every input column unchanged, plus
        ``system_timestamp`` with the watermark (``out_of_order`` delay) on it.

        ``checkpoint_location``: the ``checkpointLocation`` of the query this DataFrame will
        run in: every micro-batch reads its watermark and timestamp from it. Optional on the
        JVM engine, whose extension finds the running query's; on the Python engine not needed
        for a named query under the session's ``spark.sql.streaming.checkpointLocation`` root
        (but for a global ``idle_timeout``).

        ``dead_letter``: where dropped rows go (a directory, a function, or a
        :class:`wmobs.DeadLetter`); see :mod:`wmobs.deadletter`. Without it dropped rows are
        counted, not kept.

        ``storage``: how the Python engine reaches the checkpoint, and wmobs' Python code a
        dead-letter directory, where the URI cannot say (endpoint, credentials): a
        :class:`wmobs.Storage`, or a dict of its ``options``; default the environment's
        credentials. ``apply`` checks on the driver that what Python reads and writes can be
        reached (:class:`wmobs.StorageError` otherwise). The JVM engine reads and writes beside
        Spark through Hadoop with the session's configuration, as Spark writes the checkpoint
        itself: a checkpoint Hadoop cannot reach fails the query, naming the cause; a dead
        letters' directory it cannot reach is a :class:`wmobs.StorageError` here too.
        """
        if checkpoint_location is not None and not str(checkpoint_location).strip():
            raise ValueError(
                "checkpoint_location: empty; pass the query's checkpointLocation, or None for a "
                "named query under the session's spark.sql.streaming.checkpointLocation"
            )
        resolved = Storage.of(storage)
        sink = None if dead_letter is None else DeadLetter.of(dead_letter).with_storage(resolved)
        from wmobs.policy._pipeline import flow_policy_name, pipeline_flow, sql_options

        flow = pipeline_flow(df.sparkSession)
        if flow is not None:  # nothing may analyse df here: the extension plans the policy
            return planned_in_pipeline(
                self.engine,
                flow,
                df,
                lambda: sql_options(
                    self,
                    name=flow_policy_name(flow, longest=MAX_NAME)
                    if self.name is None
                    else self.name,
                    sink=sink,
                    checkpoint_location=checkpoint_location,
                    arrival_default=isinstance(self.arrival_time, _DefaultColumn),
                ),
                sink=sink,
            )
        schema = df.schema  # once: over Spark Connect each read is a round trip to the server
        # Names as the input spells them where Spark resolves names without case (its default).
        names = schema.names
        event_time = as_spelled(df, self.event_time, names)
        keys = None
        if self.substream_by is not None:
            keys = tuple(as_spelled(df, c, names) for c in self.substream_by)
        arrival_time = self.arrival_time
        if isinstance(arrival_time, _DefaultColumn) and arrival_time not in names:
            # The default, and no such column: the micro-batch's time; a column spelled
            # otherwise (a catalog that keeps names in lower case) is it.
            arrival_time = spelled(df, arrival_time, names)
        elif arrival_time is not None:
            arrival_time = as_spelled(df, arrival_time, names)
        self._check_columns(
            df, schema, (event_time, arrival_time, keys), dead_letters=sink is not None
        )
        idle = self.tolerances.idle_timeout_us is not None
        engine = choose(df.sparkSession, self.engine)
        engine.check_apply(
            idle_global=idle and self.substream_by is None,
            checkpoint_location=checkpoint_location,
        )
        plan = choose_plan(sink, jvm=engine.writes_parquet, schema=schema)
        self._log_choices(engine, plan, arrival_time)
        # Relative paths as Spark resolves the query's checkpoint: on the driver, not in tasks.
        checkpoint_location = qualified_path(df.sparkSession, checkpoint_location or "") or None
        if sink is not None and sink.directory is not None:
            sink = replace(sink, directory=qualified_path(df.sparkSession, sink.directory))
        root = checkpoint_location or _session_checkpoint_root(df)
        if root and not is_relative(root):  # (a relative root: resolved where it is read)
            root = qualified_path(df.sparkSession, root)
        relative_to = engine.reach_checkpoint(
            df.sparkSession, resolved, checkpoint=checkpoint_location, root=root
        )
        if sink is not None and plan.name != "jvm":  # the JVM checks its own, as it plans
            sink.check()
        ctx = Context(
            name=self.state_name,
            named=self.name is not None,
            event_time=event_time,
            arrival_time=arrival_time,
            early_arrival_action=None if self.early_arrival is None else self.early_arrival_action,
            late_arrival_action=self.late_arrival_action,
            out_of_order_action=self.out_of_order_action,
            substream_by=keys,
            distributions=self.distributions,
            tolerances=self.tolerances,
            checkpoint=checkpoint_location,
            storage=resolved,
            engine=engine,
            dead_letters=plan,
            renamed=dotted_names(schema.names),
            relative_to=relative_to,
            checkpoint_root=None if checkpoint_location else root,
        )
        return build(ctx, df, sink)

    def _log_choices(self, engine: Engine, plan: DeadLetterPlan, arrival_time: str | None) -> None:
        """The engine for this ``apply`` and its dead-letter plan, logged once at info, each
        with its reason, and where arrival times come from."""
        from wmobs._log import get_logger

        get_logger().info(
            "wmobs.engine",
            policy=self.state_name,
            engine=engine.name,
            reason=engine.reason,
            dead_letters=plan.name,
            dead_letters_reason=plan.reason,
            arrival_time=arrival_time or "the micro-batch's time",
        )

    # ---- validation -----------------------------------------------------------------------

    def _check_columns(
        self,
        df: DataFrame,
        schema: StructType,
        columns: tuple[str, str | None, tuple[str, ...] | None],
        *,
        dead_letters: bool,
    ) -> None:
        """``columns``: the event time, arrival time and keys, as the input spells them."""
        from pyspark.sql.types import (
            FractionalType,
            IntegralType,
            StringType,
            TimestampNTZType,
            TimestampType,
        )

        event_time, arrival_time, keys = columns
        fields = {f.name: f.dataType for f in schema.fields}
        if not df.isStreaming:
            raise TypeError("apply: expected a streaming DataFrame (spark.readStream...)")
        checks: list[tuple[str, str, tuple[type, ...]]] = [
            ("event_time", event_time, (TimestampType, TimestampNTZType, StringType))
        ]
        if arrival_time is not None:
            checks.append(("arrival_time", arrival_time, (TimestampType, TimestampNTZType)))
        for argument, column, types in checks:
            if column not in fields:
                raise ValueError(
                    f"{argument}: column {column!r} is not in the DataFrame "
                    f"(columns: {', '.join(fields)}){nested_hint(column, fields)}"
                )
            if not isinstance(fields[column], types):
                wanted = " or ".join(t.__name__.replace("Type", "").lower() for t in types)
                hint = ""
                if isinstance(fields[column], (IntegralType, FractionalType)):
                    hint = (
                        "; epoch numbers convert with F.timestamp_millis, F.timestamp_micros "
                        "or F.timestamp_seconds"
                    )
                raise TypeError(
                    f"{argument}: column {column!r} is {fields[column].simpleString()}, "
                    f"expected {wanted}{hint}"
                )
        for column in keys or ():
            if column not in fields:
                raise ValueError(
                    f"substream_by: column {column!r} is not in the DataFrame "
                    f"(columns: {', '.join(fields)}){nested_hint(column, fields)}"
                )
            if has_map(fields[column]):
                raise TypeError(
                    f"substream_by: column {column!r} is {fields[column].simpleString()}; a key "
                    "cannot hold a map (equal maps may hash apart): key by its fields, or by "
                    "array_sort(map_entries(...))"
                )
        if SYSTEM_TIMESTAMP in fields:
            raise ValueError(f"apply: the DataFrame already has a {SYSTEM_TIMESTAMP!r} column")
        clashes = sorted(set(fields) & set(INTERNAL))
        if clashes:
            raise ValueError(
                f"apply: column {clashes[0]!r} has a name wmobs uses inside the policy; rename it"
            )
        if dead_letters:
            check_input_columns(fields)
