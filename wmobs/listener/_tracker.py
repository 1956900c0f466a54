"""Per-query snapshots built from streaming-query events (pure Python, no Spark, no JVM).

The listener feeds plain progress JSON (``dict``) into a :class:`Tracker`; the metric callbacks
read it when collected. Every method is O(1) in the data volume (O(operators) per progress) and
thread-safe: Spark calls the listener on its own thread, Prometheus scrapes on another.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TypeVar, overload

from wmobs.listener._observed import (
    HistogramCounts,
    ObservedCounts,
    PolicyCounts,
    parse_observed_metrics,
)
from wmobs.observations import ACTIONS, IDLE_TICK, RULES

__all__ = [
    "BATCH_DURATION_BUCKETS",
    "OUTCOMES",
    "BatchSummary",
    "OperatorSnapshot",
    "PolicySnapshot",
    "QuerySnapshot",
    "Tracker",
    "format_timestamp",
    "parse_timestamp",
]

OUTCOMES: tuple[str, ...] = ("stopped", "failed")
BATCH_DURATION_BUCKETS: tuple[float, ...] = (
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)  # fmt: skip
"""Upper bounds (seconds) of ``wmobs_batch_duration_seconds``: micro-batches, not requests."""
T = TypeVar("T")


def parse_timestamp(value: str | None) -> float | None:
    """Spark's ISO-8601 progress timestamp (``2026-01-01T00:00:00.000Z``) as unix seconds.

    ``None``, an empty string and the epoch (Spark's "no watermark yet") give ``None``.
    """
    if not value:
        return None
    if value.endswith("Z"):
        value = value[:-1] + "+00:00"
    seconds = datetime.fromisoformat(value).timestamp()
    return seconds if seconds != 0.0 else None


@overload
def format_timestamp(seconds: float) -> str: ...
@overload
def format_timestamp(seconds: None) -> None: ...
def format_timestamp(seconds: float | None) -> str | None:
    """Unix seconds as ISO-8601 UTC with milliseconds (for logs and the demo); ``None`` stays."""
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, tz=timezone.utc).isoformat(timespec="milliseconds")


@dataclass
class OperatorSnapshot:
    """A stateful operator of a query, labelled by its name (``name#i`` when repeated)."""

    rows_dropped_by_watermark: int = 0
    state_rows: int | None = None
    state_memory_bytes: int | None = None


def _zero_events() -> dict[tuple[str, str], int]:
    # Known label sets start at 0, so rate() and alerts see them.
    return {(r, a): 0 for r in RULES for a in ACTIONS}


@dataclass
class PolicySnapshot:
    """One time policy of a query (one input; the ``policy`` label), from its observations."""

    events: dict[tuple[str, str], int] = field(default_factory=_zero_events)
    """Rows per verdict so far: (rule, action) -> count, every known pair from 0."""
    dead_letter_rows: int | None = None
    idle_timeout_firings: int | None = None
    engine: str | None = None
    """The engine it runs on (``jvm`` or ``python``), once an observation says."""
    dead_letter_plan: str | None = None
    """How it keeps the rows it drops, once an observation says."""
    watermark: float | None = None
    """Largest watermark of this input seen, unix seconds."""
    max_event_time: float | None = None
    """Largest event time of this input seen, unix seconds."""
    substream_spread: float | None = None
    """Substreams: in the latest micro-batch that judged rows, how far the slowest key seen
    ran behind the fastest, seconds (what ``substream_skew`` must cover)."""
    histograms: dict[str, HistogramCounts] = field(default_factory=dict)
    """Per histogram name of :data:`wmobs.observations.HISTOGRAMS`: counts so far."""


@dataclass
class QuerySnapshot:
    """What wmobs knows about one query (all runs of it: the id survives restarts)."""

    label: str
    query_id: str
    name: str | None = None
    run_id: str | None = None
    active: bool = True
    batch_id: int | None = None
    watermark: float | None = None
    """Largest watermark seen, unix seconds; ``None`` until the query has one."""
    max_event_time: float | None = None
    """Largest event time seen (``progress.eventTime.max``), unix seconds."""
    last_data_batch_end: float | None = None
    """Wall-clock end of the last micro-batch that read input rows, unix seconds."""
    input_rows: int = 0
    batches: int = 0
    run_batches: int = 0
    """Micro-batches of the current run seen so far."""
    operators: dict[str, OperatorSnapshot] = field(default_factory=dict)
    policies: dict[str, PolicySnapshot] = field(default_factory=dict)
    """Per time policy (``policy`` label), once its first observation arrives."""
    backlogs: dict[str, int] = field(default_factory=dict)
    """Per source (its description): records behind the latest, as of the last micro-batch
    whose progress said (Kafka's ``maxOffsetsBehindLatest``)."""
    terminations: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    last_exception: str | None = None
    batch_durations: list[int] = field(
        default_factory=lambda: [0] * (len(BATCH_DURATION_BUCKETS) + 1)
    )
    """Micro-batches per bucket of :data:`BATCH_DURATION_BUCKETS` (not cumulative; the last
    one above the largest bound)."""
    batch_duration_sum: float = 0.0
    started: int = 0
    """When the query last started, in the tracker's order of events (the latest of several
    queries under one name is the one whose gauges are exported)."""
    terminated_at: float | None = None
    """When the query terminated (the tracker's clock), while it is not running."""

    def policy(self, name: str | None = None) -> PolicySnapshot | None:
        """The policy ``name``; without it, the query's only policy (None if it has none, or
        several)."""
        if name is not None:
            return self.policies.get(name)
        return next(iter(self.policies.values())) if len(self.policies) == 1 else None


@dataclass(frozen=True)
class BatchSummary:
    """What one progress event changed: the listener logs it and records the histogram."""

    label: str
    batch_id: int
    input_rows: int
    duration_s: float | None
    watermark: float | None
    rows_dropped_by_watermark: int
    unknown_columns: tuple[str, ...] = ()
    replayed: bool = False
    """The micro-batch ran before (a restart re-running it): its counts were not added
    again."""
    output_rows: int | None = None
    """Rows the sink wrote (the progress event's ``sink.numOutputRows``); ``None`` where the
    sink does not say."""
    unreported: tuple[str, ...] = ()
    """Policies (labels) on the Python engine whose counts of this micro-batch are not in the
    event: the first micro-batch of a query run, whose sources moved but whose plan read no
    row, is one that the sink skipped when Spark ran it again after a crash between the
    sink's commit and Spark's (the JVM engine reports the first attempt's counts then)."""
    policies: Mapping[str, PolicyCounts] = field(default_factory=dict)
    """What each policy (label) observed in this micro-batch (its verdicts, dead letters,
    idle-timeout firings), as the progress event carried it."""


def _output_rows(progress: Mapping[str, Any]) -> int | None:
    """The sink's ``numOutputRows``; ``None`` for a sink that does not count (Spark's -1)."""
    written = (progress.get("sink") or {}).get("numOutputRows")
    return None if written is None or int(written) < 0 else int(written)


def _offsets_moved(progress: Mapping[str, Any]) -> bool:
    """Whether a source other than wmobs' heartbeat has a new offset in this micro-batch."""
    for source in progress.get("sources") or ():
        end = source.get("endOffset")
        text = end if isinstance(end, str) else json.dumps(end)
        if end is not None and IDLE_TICK not in text and source.get("startOffset") != end:
            return True
    return False


def _unreported(
    progress: Mapping[str, Any], observed: ObservedCounts, rows: int
) -> tuple[str, ...]:
    """The Python-engine policies of a run's first micro-batch that read no row though its
    sources moved (:attr:`BatchSummary.unreported`)."""
    if rows or not _offsets_moved(progress):
        return ()
    return tuple(
        label
        for label, counts in observed.policies.items()
        if counts.engine == "python"
        and counts.event_time_us is None
        and not any(counts.events.values())
    )


def _heartbeat_rows(progress: Mapping[str, Any]) -> int:
    """Rows of wmobs' idle-timeout heartbeat source (recognised by its offset), not input."""
    total = 0
    for source in progress.get("sources") or ():
        end = source.get("endOffset")
        if end is not None and IDLE_TICK in (end if isinstance(end, str) else json.dumps(end)):
            total += int(source.get("numInputRows") or 0)
    return total


BACKLOG_METRICS = ("maxOffsetsBehindLatest",)
"""The ``sources[].metrics`` that say how many records a source has not read yet."""


def _backlogs(progress: Mapping[str, Any]) -> dict[str, int]:
    """Per source that reports it (description -> records behind the latest)."""
    found = {}
    for source in progress.get("sources") or ():
        metrics = source.get("metrics") or {}
        for key in BACKLOG_METRICS:
            value = metrics.get(key)
            if value is not None:
                try:
                    found[str(source.get("description") or "source")] = int(float(value))
                except (TypeError, ValueError):
                    continue
                break
    return found


def _operator_labels(operators: list[Mapping[str, Any]]) -> list[str]:
    names = [str(op.get("operatorName") or "operator") for op in operators]
    if len(set(names)) == len(names):
        return names
    return [f"{name}#{i}" for i, name in enumerate(names)]


def _fold_operator(
    snap: QuerySnapshot, label: str, op: Mapping[str, Any], *, counted: bool = True
) -> int:
    """Fold one ``stateOperators`` entry into ``snap``; the rows it dropped by watermark
    (added to the counter unless ``counted`` is false: a replayed micro-batch)."""
    state = snap.operators.get(label)
    if state is None:
        state = snap.operators[label] = OperatorSnapshot()
    dropped = int(op.get("numRowsDroppedByWatermark") or 0)
    if counted:
        state.rows_dropped_by_watermark += dropped
    if op.get("numRowsTotal") is not None:
        state.state_rows = int(op["numRowsTotal"])
    if op.get("memoryUsedBytes") is not None:
        state.state_memory_bytes = int(op["memoryUsedBytes"])
    return dropped


def _fold_observed(snap: QuerySnapshot, observed: ObservedCounts) -> None:
    """Add one batch's wmobs observations to the query's cumulative counters."""
    for label, counts in observed.policies.items():
        policy = snap.policies.get(label)
        if policy is None:
            policy = snap.policies[label] = PolicySnapshot()
        _fold_policy(policy, counts)


def _fold_policy(policy: PolicySnapshot, counts: PolicyCounts) -> None:
    _add_counters(policy, counts)
    if counts.engine is not None:
        policy.engine = counts.engine
    if counts.dead_letter_plan is not None:
        policy.dead_letter_plan = counts.dead_letter_plan
    policy.watermark = _later(policy.watermark, counts.watermark_us)
    policy.max_event_time = _later(policy.max_event_time, counts.event_time_us)
    if counts.spread_us is not None:
        policy.substream_spread = counts.spread_us / 1e6


def _later(current: float | None, micros: int | None) -> float | None:
    """The later of ``current`` (seconds) and ``micros``; ``None`` and 0 µs are "none yet"."""
    if not micros:
        return current
    seconds = micros / 1e6
    return seconds if current is None or seconds > current else current


def _merged(group: list[QuerySnapshot]) -> QuerySnapshot:
    """One view of the queries that ran under one name (Spark lets one run at a time; each new
    checkpoint is a new query id): the latest one's gauges, everyone's counters and
    histograms summed, so that each series stays one and never runs backwards."""
    latest = max(group, key=lambda s: s.started)
    view = copy.deepcopy(latest)
    for other in group:
        if other is latest:
            continue
        view.input_rows += other.input_rows
        view.batches += other.batches
        for label, op in other.operators.items():
            mine = view.operators.setdefault(label, OperatorSnapshot())
            mine.rows_dropped_by_watermark += op.rows_dropped_by_watermark
        for name, policy in other.policies.items():
            _add_counters(view.policies.setdefault(name, PolicySnapshot()), policy)
        for outcome, count in other.terminations.items():
            view.terminations[outcome] = view.terminations.get(outcome, 0) + count
        view.batch_durations = [
            a + b for a, b in zip(view.batch_durations, other.batch_durations, strict=True)
        ]
        view.batch_duration_sum += other.batch_duration_sum
    return view


def _add_counters(into: PolicySnapshot, other: PolicySnapshot | PolicyCounts) -> None:
    """``other``'s counters and histograms (a batch's, or another query's so far) added to
    ``into``'s; not its gauges."""
    for key, count in other.events.items():
        into.events[key] = into.events.get(key, 0) + count
    if other.dead_letter_rows is not None:
        into.dead_letter_rows = (into.dead_letter_rows or 0) + other.dead_letter_rows
    if other.idle_timeout_firings is not None:
        into.idle_timeout_firings = (into.idle_timeout_firings or 0) + other.idle_timeout_firings
    for name, histogram in other.histograms.items():
        into.histograms.setdefault(name, HistogramCounts([0] * len(histogram.buckets))).add(
            histogram
        )


class Tracker:
    """Thread-safe per-query state, updated by listener events, read by metric callbacks.

    Kept per query id; read per label (:func:`_merged`), as a query started under the name of
    an earlier one (a new checkpoint) continues its series. Events of the earlier one that
    arrive late (Spark frees a name before it posts the termination) still count.

    ``clock`` returns unix seconds; tests inject a fake one.
    """

    def __init__(
        self, clock: Callable[[], float] = time.time, retention: float | None = None
    ) -> None:
        self.clock = clock
        self.retention = retention
        """Seconds a terminated query's series stay after it terminated (every query under
        its label terminated that long ago); ``None``: for the tracker's life."""
        self._lock = threading.Lock()
        self._queries: dict[str, QuerySnapshot] = {}  # by query id
        self._starts = 0
        self._closed = False

    # ---- updates (listener thread) ---------------------------------------------------

    def _query(self, query_id: str, name: str | None) -> QuerySnapshot:
        """The snapshot for ``query_id``; call with the lock held."""
        snap = self._queries.get(query_id)
        if snap is None:
            snap = QuerySnapshot(label=name or query_id, query_id=query_id, name=name)
            self._queries[query_id] = snap
            self._started(snap)
        return snap

    def _started(self, snap: QuerySnapshot) -> None:
        self._starts += 1
        snap.started = self._starts

    def on_started(self, query_id: str, run_id: str | None, name: str | None) -> QuerySnapshot:
        with self._lock:
            self._forget_terminated()
            snap = self._query(query_id, name)
            snap.active = True
            snap.terminated_at = None
            snap.run_id = run_id
            snap.run_batches = 0
            self._started(snap)
            return snap

    def on_seen(self, query_id: str, run_id: str | None, name: str | None) -> None:
        """A query found running at attach: registered unless an event got there first."""
        with self._lock:
            if query_id not in self._queries:
                self._query(query_id, name).run_id = run_id

    def on_progress(self, progress: Mapping[str, Any]) -> BatchSummary:
        """Fold one ``StreamingQueryProgress`` (as parsed JSON) into the query's snapshot."""
        query_id = str(progress["id"])
        batch_id = int(progress.get("batchId", -1))
        rows = int(progress.get("numInputRows") or 0) - _heartbeat_rows(progress)
        durations = progress.get("durationMs") or {}
        duration_ms = durations.get("triggerExecution", progress.get("batchDuration"))
        duration_s = None if duration_ms is None else float(duration_ms) / 1000.0
        event_time = progress.get("eventTime") or {}
        watermark = parse_timestamp(event_time.get("watermark"))
        # A batch of idle-timeout heartbeats only has synthetic event times: not input.
        max_event_time = parse_timestamp(event_time.get("max")) if rows > 0 else None
        batch_end = None
        if rows > 0:
            started = parse_timestamp(progress.get("timestamp"))
            if started is not None:
                batch_end = started + (duration_s or 0.0)
        operators = progress.get("stateOperators") or []
        labels = _operator_labels(operators)
        observed = parse_observed_metrics(progress.get("observedMetrics"))
        backlogs = _backlogs(progress)
        dropped_total = 0

        with self._lock:
            snap = self._query(query_id, progress.get("name"))
            run_id = progress.get("runId")
            first_of_run = snap.run_batches == 0 or (
                run_id is not None and str(run_id) != snap.run_id
            )
            snap.run_batches = 1 if first_of_run else snap.run_batches + 1
            if run_id is not None:
                snap.run_id = str(run_id)
            snap.active = True
            snap.terminated_at = None
            # A batch id seen before: a restart re-running a micro-batch whose commit was not
            # written. Its rows and counts were counted when it ran first; the same offsets
            # give the same rows and verdicts, so they are not counted twice.
            replayed = snap.batch_id is not None and 0 <= batch_id <= snap.batch_id
            if not replayed:
                snap.batch_id = batch_id
                snap.input_rows += rows
            snap.batches += 1
            if watermark is not None and (snap.watermark is None or watermark > snap.watermark):
                snap.watermark = watermark
            if max_event_time is not None and (
                snap.max_event_time is None or max_event_time > snap.max_event_time
            ):
                snap.max_event_time = max_event_time
            if batch_end is not None:
                snap.last_data_batch_end = batch_end
            for label, op in zip(labels, operators, strict=True):
                dropped_total += _fold_operator(snap, label, op, counted=not replayed)
            snap.backlogs.update(backlogs)
            if not observed.empty and not replayed:
                _fold_observed(snap, observed)
            if duration_s is not None:
                snap.batch_durations[bisect_left(BATCH_DURATION_BUCKETS, duration_s)] += 1
                snap.batch_duration_sum += duration_s
            label = snap.label

        return BatchSummary(
            label=label,
            batch_id=batch_id,
            input_rows=rows,
            duration_s=duration_s,
            watermark=watermark,
            rows_dropped_by_watermark=dropped_total,
            unknown_columns=tuple(observed.unknown_columns),
            replayed=replayed,
            output_rows=_output_rows(progress),
            unreported=_unreported(progress, observed, rows) if first_of_run else (),
            policies=observed.policies,
        )

    def on_idle(self, query_id: str) -> str | None:
        """An idle event: nothing to fold (the time gauges grow by themselves); the label."""
        with self._lock:
            snap = self._queries.get(query_id)
            return None if snap is None else snap.label

    def on_terminated(self, query_id: str, exception: str | None) -> QuerySnapshot:
        outcome = "failed" if exception else "stopped"
        with self._lock:
            snap = self._query(query_id, None)
            snap.active = False
            snap.terminated_at = self.clock()
            snap.terminations[outcome] += 1
            snap.last_exception = exception
            return copy.deepcopy(snap)

    def close(self) -> None:
        """Stop exporting: metric callbacks of a closed tracker observe nothing."""
        with self._lock:
            self._closed = True

    # ---- reads (collection thread) ---------------------------------------------------

    def _forget_terminated(self) -> None:
        """Drop the labels whose every query terminated more than ``retention`` ago (call with
        the lock held): a driver that runs many short queries (a notebook's, unnamed, each
        labelled by its id) would export their series for its whole life. A label goes whole,
        never one query of it: its counters never run backwards."""
        if self.retention is None:
            return
        horizon = self.clock() - self.retention
        for snaps in self._labels().values():
            if all(
                not s.active and s.terminated_at is not None and s.terminated_at < horizon
                for s in snaps
            ):
                for snap in snaps:
                    del self._queries[snap.query_id]

    def _labels(self) -> dict[str, list[QuerySnapshot]]:
        """The queries under each label (call with the lock held)."""
        groups: dict[str, list[QuerySnapshot]] = {}
        for snap in self._queries.values():
            groups.setdefault(snap.label, []).append(snap)
        return groups

    def _views(self) -> list[QuerySnapshot]:
        """One snapshot per label (call with the lock held, after :meth:`_forget_terminated`):
        the tracker's own where a label has one query (do not keep or change it), else a
        merged copy."""
        return [g[0] if len(g) == 1 else _merged(g) for g in self._labels().values()]

    def snapshot(self, query: str) -> QuerySnapshot | None:
        """A copy of the snapshot of ``query``: its label (every query that ran under that
        name), or one query's id."""
        with self._lock:
            self._forget_terminated()
            snap = self._queries.get(query)
            if snap is None:
                snap = next((s for s in self._views() if s.label == query), None)
            return None if snap is None else copy.deepcopy(snap)

    def snapshots(self) -> list[QuerySnapshot]:
        """A copy of each label's snapshot."""
        with self._lock:
            self._forget_terminated()
            return [copy.deepcopy(s) for s in self._views()]

    def observe(self, fn: Callable[[QuerySnapshot, float], Iterable[T]]) -> list[T]:
        """Apply ``fn(snapshot, now)`` to every query under the lock; nothing once closed.

        For metric callbacks: ``fn`` must be quick and must not keep the snapshot.
        """
        with self._lock:
            if self._closed:
                return []
            self._forget_terminated()
            now = self.clock()
            out: list[T] = []
            for snap in self._views():
                out.extend(fn(snap, now))
            return out
