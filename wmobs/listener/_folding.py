"""How the tracker folds a progress event into a query's snapshot, and merges the queries that
ran under one name: pure functions of plain data (no Spark, no JVM, no lock: the
:class:`~wmobs.listener._tracker.Tracker` holds its own while it calls them)."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from wmobs.listener._observed import HistogramCounts, ObservedCounts, PolicyCounts
from wmobs.listener._snapshots import OperatorSnapshot, PolicySnapshot, QuerySnapshot
from wmobs.observations import IDLE_TICK

__all__ = [
    "BACKLOG_METRICS",
    "fold_observed",
    "fold_operator",
    "heap_keyed_state",
    "heartbeat_rows",
    "merged",
    "operator_labels",
    "output_rows",
    "source_backlogs",
    "unreported",
]


def output_rows(progress: Mapping[str, Any]) -> int | None:
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


def unreported(progress: Mapping[str, Any], observed: ObservedCounts, rows: int) -> tuple[str, ...]:
    """The Python-engine policies of a run's first micro-batch that read no row though its
    sources moved (:attr:`~wmobs.listener._snapshots.BatchSummary.unreported`)."""
    if rows or not _offsets_moved(progress):
        return ()
    return tuple(
        label
        for label, counts in observed.policies.items()
        if counts.engine == "python"
        and counts.event_time_us is None
        and not any(counts.events.values())
    )


def heartbeat_rows(progress: Mapping[str, Any]) -> int:
    """Rows of wmobs' idle-timeout heartbeat source (recognised by its offset), not input."""
    total = 0
    for source in progress.get("sources") or ():
        end = source.get("endOffset")
        if end is not None and IDLE_TICK in (end if isinstance(end, str) else json.dumps(end)):
            total += int(source.get("numInputRows") or 0)
    return total


BACKLOG_METRICS = ("maxOffsetsBehindLatest",)
"""The ``sources[].metrics`` that say how many records a source has not read yet."""


def source_backlogs(progress: Mapping[str, Any]) -> dict[str, int]:
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


def operator_labels(operators: list[Mapping[str, Any]]) -> list[str]:
    names = [str(op.get("operatorName") or "operator") for op in operators]
    if len(set(names)) == len(names):
        return names
    return [f"{name}#{i}" for i, name in enumerate(names)]


HEAP_STATE_HINT_ROWS = 1_000_000
"""Keys held by one keyed operator in Spark's default state store past which the listener
advises RocksDB (docs: about 250 bytes of executors' heap a key)."""

_KEYED_OPERATORS = ("flatMapGroupsWithState", "applyInPandasWithState", "transformWithState")
"""How the ``operatorName`` of Spark's per-key operators begins (wmobs' substreams are a
``flatMapGroupsWithState`` on the JVM engine; Spark 4 names ``transformWithStateExec`` and its
Python variants)."""


def heap_keyed_state(operators: list[Mapping[str, Any]]) -> tuple[int, int] | None:
    """``(keys, bytes)`` of the largest per-key operator whose keys live on the executors' heap
    (Spark's HDFS-backed store, which reports ``loadedMapCacheHitCount``), where it holds at
    least :data:`HEAP_STATE_HINT_ROWS` of them; else ``None``."""
    largest: tuple[int, int] | None = None
    for op in operators:
        if not str(op.get("operatorName") or "").startswith(_KEYED_OPERATORS):
            continue
        if "loadedMapCacheHitCount" not in (op.get("customMetrics") or {}):
            continue  # RocksDB (off the heap), or a provider that does not say
        rows = int(op.get("numRowsTotal") or 0)
        if rows >= HEAP_STATE_HINT_ROWS and (largest is None or rows > largest[0]):
            largest = (rows, int(op.get("memoryUsedBytes") or 0))
    return largest


def fold_operator(
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


def fold_observed(snap: QuerySnapshot, observed: ObservedCounts) -> None:
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


def merged(group: list[QuerySnapshot]) -> QuerySnapshot:
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
