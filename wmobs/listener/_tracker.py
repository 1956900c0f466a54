"""Per-query snapshots built from streaming-query events (pure Python, no Spark, no JVM).

The listener feeds plain progress JSON (``dict``) into a :class:`Tracker`; the metric callbacks
read it when collected. Every method is O(1) in the data volume (O(operators) per progress) and
thread-safe: Spark calls the listener on its own thread, Prometheus scrapes on another. What it
keeps is :mod:`wmobs.listener._snapshots`; how an event is folded in,
:mod:`wmobs.listener._folding`.
"""

from __future__ import annotations

import copy
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from wmobs.listener._folding import (
    fold_observed,
    fold_operator,
    heap_keyed_state,
    heartbeat_rows,
    merged,
    operator_labels,
    output_rows,
    source_backlogs,
    unreported,
)
from wmobs.listener._observed import parse_observed_metrics
from wmobs.listener._snapshots import (
    BATCH_DURATION_BUCKETS,
    BatchSummary,
    QuerySnapshot,
    parse_timestamp,
)
from wmobs.observations import OBSERVATION_PREFIX

__all__ = ["Tracker"]

T = TypeVar("T")


class Tracker:
    """Thread-safe per-query state, updated by listener events, read by metric callbacks.

    Kept per query id; read per label (:func:`~wmobs.listener._folding.merged`), as a query
    started under the name of an earlier one (a new checkpoint) continues its series. Events of
    the earlier one that arrive late (Spark frees a name before it posts the termination) still
    count.

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
        # By query id; a label's ended runs folded into one (:meth:`_retire`), or a run of a
        # query that restarted under another name (:meth:`_renamed`), by a key that is no id.
        self._queries: dict[str, QuerySnapshot] = {}
        # The last micro-batch of each query id whose snapshot went into one of those (and its
        # label): a restart of that checkpoint still knows a micro-batch run again.
        self._batch_of: dict[str, tuple[str, int | None]] = {}
        self._starts = 0
        self._closed = False
        # When the first label may be forgotten (None: none), so that the listener's callbacks
        # do not look through every query held to find none.
        self._forget_at: float | None = None

    # ---- updates (listener thread) ---------------------------------------------------

    def _query(self, query_id: str, name: str | None) -> QuerySnapshot:
        """The snapshot for ``query_id``; call with the lock held."""
        snap = self._queries.get(query_id)
        if snap is None:
            snap = QuerySnapshot(label=name or query_id, query_id=query_id, name=name)
            self._retire(snap.label)
            snap.batch_id = self._batch_of.pop(query_id, (None, None))[1]
            self._queries[query_id] = snap
            self._started(snap)
        return snap

    def _retire(self, label: str) -> None:
        """The terminated queries of ``label`` folded into one, as a new query comes under it
        (call with the lock held): a named query started again and again on new checkpoints
        (a memory or console sink's temporary one) would otherwise add a snapshot per run
        while the label lives, each read at every collection. The folded one is no query's:
        a checkpoint restarted has a snapshot of its own again (with its last micro-batch)."""
        ended = [(k, s) for k, s in self._queries.items() if s.label == label and not s.active]
        if len(ended) < 2:
            return
        folded = merged([s for _, s in ended])
        for key, snap in ended:
            del self._queries[key]
            if key == snap.query_id:
                self._batch_of[key] = (label, snap.batch_id)
        self._queries[f"\x00{label}"] = folded

    def _renamed(self, snap: QuerySnapshot, name: str | None) -> QuerySnapshot:
        """A query restarted from its checkpoint under another name (call with the lock
        held): its earlier runs stay under their label, whose counters never run backwards,
        and the new run starts a snapshot under its name (continuing that name's series). A
        query heard of only by its end has had no name yet: it takes this one."""
        if snap.name is None and snap.label == snap.query_id:
            snap.name, snap.label = name, name or snap.query_id
            return snap
        del self._queries[snap.query_id]
        snap.active = False
        if snap.terminated_at is None:
            snap.terminated_at = self.clock()
            self._forget_after(snap.terminated_at)
        self._queries[f"\x00{snap.label}\x00{snap.query_id}"] = snap
        self._batch_of[snap.query_id] = (snap.label, snap.batch_id)
        return self._query(snap.query_id, name)

    def _started(self, snap: QuerySnapshot) -> None:
        self._starts += 1
        snap.started = self._starts

    def on_started(self, query_id: str, run_id: str | None, name: str | None) -> QuerySnapshot:
        with self._lock:
            self._forget_terminated()
            snap = self._query(query_id, name)
            if snap.name != name:  # started again from its checkpoint under another name
                snap = self._renamed(snap, name)
            if run_id is not None and snap.run_id == run_id:
                # A run heard of already (its progress, or its end): a start event that came
                # late, as Spark Connect's client posts it from the thread that started the
                # query, while the others come on the listener's. Nothing to undo.
                return snap
            snap.active = True
            snap.terminated_at = None
            snap.run_id = run_id
            snap.run_batches = 0
            self._started(snap)
            return snap

    def on_seen(
        self, query_id: str, run_id: str | None, name: str | None, *, ran: bool = False
    ) -> None:
        """A query found running at attach: registered unless an event got there first;
        ``ran``: its run has finished a micro-batch already, so the next one heard is not the
        first of its run (which alone may be a micro-batch run again after a crash)."""
        with self._lock:
            if query_id not in self._queries:
                snap = self._query(query_id, name)
                snap.run_id = run_id
                snap.run_batches = 1 if ran else 0

    def on_progress(self, progress: Mapping[str, Any]) -> BatchSummary:
        """Fold one ``StreamingQueryProgress`` (as parsed JSON) into the query's snapshot."""
        query_id = str(progress["id"])
        batch_id = int(progress.get("batchId", -1))
        rows = int(progress.get("numInputRows") or 0) - heartbeat_rows(progress)
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
        labels = operator_labels(operators)
        observed = parse_observed_metrics(progress.get("observedMetrics"))
        backlogs = source_backlogs(progress)
        dropped_total = 0

        with self._lock:
            name = progress.get("name")
            snap = self._query(query_id, name)
            if snap.name != name:  # a restart under another name, heard before its start
                snap = self._renamed(snap, name)
            run_id = progress.get("runId")
            new_run = run_id is not None and str(run_id) != snap.run_id
            first_of_run = snap.run_batches == 0 or new_run
            if new_run:  # (its start event may come later: Spark Connect)
                self._started(snap)
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
                dropped_total += fold_operator(snap, label, op, counted=not replayed)
            snap.backlogs.update(backlogs)
            if not observed.empty and not replayed:
                fold_observed(snap, observed)
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
            output_rows=output_rows(progress),
            # A micro-batch counted before has nothing left unreported.
            unreported=(
                unreported(progress, observed, rows) if first_of_run and not replayed else ()
            ),
            policies=observed.policies,
            heap_state=heap_keyed_state(operators),
        )

    def on_recalled(self, query_id: str, policy: str, counts: Mapping[str, Any]) -> None:
        """The counts ``policy`` kept of a micro-batch that a sink skipped on a restart, recalled
        after its progress (:data:`BatchSummary.unreported`): added to its counters."""
        observed = parse_observed_metrics({f"{OBSERVATION_PREFIX}.policy.{policy}": counts})
        with self._lock:
            snap = self._queries.get(query_id)
            if snap is not None:
                fold_observed(snap, observed)

    def on_idle(self, query_id: str) -> str | None:
        """An idle event: nothing to fold (the time gauges grow by themselves); the label."""
        with self._lock:
            snap = self._queries.get(query_id)
            return None if snap is None else snap.label

    def on_terminated(
        self, query_id: str, exception: str | None, run_id: str | None = None
    ) -> QuerySnapshot:
        outcome = "failed" if exception else "stopped"
        with self._lock:
            snap = self._query(query_id, None)
            # The end of an earlier run, heard after the next one began (Spark Connect's
            # events come on two threads): counted, and the running one left running.
            earlier = run_id is not None and snap.active and snap.run_id not in (None, run_id)
            if not earlier:
                if run_id is not None:
                    snap.run_id = run_id
                snap.active = False
                snap.terminated_at = self.clock()
                self._forget_after(snap.terminated_at)
            snap.terminations[outcome] += 1
            snap.last_exception = exception
            return copy.deepcopy(snap)

    def close(self) -> None:
        """Stop exporting: metric callbacks of a closed tracker observe nothing."""
        with self._lock:
            self._closed = True

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    # ---- reads (collection thread) ---------------------------------------------------

    def _forget_terminated(self) -> None:
        """Drop the labels whose every query terminated more than ``retention`` ago (call with
        the lock held): a driver that runs many short queries (a notebook's, unnamed, each
        labelled by its id) would export their series for its whole life. A label goes whole,
        never one query of it: its counters never run backwards."""
        if self.retention is None or self._forget_at is None or self.clock() <= self._forget_at:
            return
        horizon = self.clock() - self.retention
        self._forget_at = None
        keys: dict[str, list[str]] = {}
        for key, snap in self._queries.items():
            keys.setdefault(snap.label, []).append(key)
        for label, under in keys.items():
            snaps = [self._queries[k] for k in under]
            ended = [s.terminated_at for s in snaps if not s.active and s.terminated_at is not None]
            if len(ended) < len(snaps):
                continue  # a query of it runs: looked at again when that one terminates
            if max(ended) < horizon:
                for key in under:
                    del self._queries[key]
                for query_id in [q for q, (was, _) in self._batch_of.items() if was == label]:
                    del self._batch_of[query_id]
            else:
                self._forget_after(max(ended))

    def _forget_after(self, terminated_at: float) -> None:
        """A label whose last query terminated at ``terminated_at`` may be forgotten after
        ``retention`` (call with the lock held)."""
        if self.retention is not None:
            due = terminated_at + self.retention
            self._forget_at = due if self._forget_at is None else min(self._forget_at, due)

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
        return [g[0] if len(g) == 1 else merged(g) for g in self._labels().values()]

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
