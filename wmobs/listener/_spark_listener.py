"""The StreamingQueryListener (imports PySpark: loaded only by :func:`wmobs.attach`).

Threading and blocking contract: Spark calls these methods on its listener-bus thread (classic:
a Py4J callback thread; Spark Connect: the client's event thread, while it holds the bus lock).
Every callback does O(operators) work in pure Python, no network I/O, no blocking, and never
raises: an internal error is logged and swallowed, so a bug in wmobs can never
stop or slow down a query beyond one dropped event.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.streaming.listener import (
    JStreamingQueryListener,
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

from wmobs._kept import recall
from wmobs._log import get_logger
from wmobs.listener._snapshots import BatchSummary, QuerySnapshot, format_timestamp
from wmobs.listener._tracker import Tracker
from wmobs.listener.metrics import Instruments

if TYPE_CHECKING:
    from wmobs.listener._traces import BatchTracer

__all__ = ["WmobsListener"]

REAL_TIME_MODE_HINT = (
    "Spark refused this query in real-time mode; if it applies a wmobs TimePolicy, real-time "
    "mode runs policies on the JVM engine only (engine='jvm', with wmobs' Spark extension: "
    "wmobs.configure_spark), without idle_timeout or substream_ttl, and substream_by only on "
    "Spark's RocksDB state store"
)

OPERATOR_CHANGED_HINT = (
    "if the query applies a wmobs TimePolicy with substream_by: its keys stay with the engine "
    "and the state store the checkpoint began with (engine='jvm' keeps them in a stateful "
    "operator of Spark's, engine='python' in files of its own; on Spark 4 the provider decides "
    "the JVM engine's operator: transformWithState on RocksDB, flatMapGroupsWithState "
    "otherwise); start the query with the engine= and "
    "spark.sql.streaming.stateStore.providerClass its checkpoint began with"
)

FAILURE_HINTS = (
    ("STREAMING_REAL_TIME_MODE", REAL_TIME_MODE_HINT),
    ("STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA", OPERATOR_CHANGED_HINT),
    ("STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY", OPERATOR_CHANGED_HINT),
)
"""What the log of a failed query adds, by the beginning of Spark's error class."""

HEAP_STATE_HINT = (
    "a per-key operator (wmobs' substreams are one) holds this many keys in Spark's default "
    "state store, on the executors' heap (wmobs' substreams: about 250 bytes a key), copied "
    "for each new version; Spark's RocksDB store keeps them off the heap and reads only those "
    "a micro-batch touches: spark.sql.streaming.stateStore.providerClass="
    "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider (set before a "
    "query's first start: Spark keeps a checkpoint's provider; see wmobs' substreams guide)"
)


def progress_dict(progress: Any) -> Mapping[str, Any]:
    """A ``StreamingQueryProgress`` (or its JSON, or a dict) as the parsed JSON dict.

    Events from Spark Connect and ``fromJson`` keep their parsed JSON: no copy is made.
    """
    if isinstance(progress, str):
        parsed: Mapping[str, Any] = json.loads(progress)
        return parsed
    raw = getattr(progress, "_jdict", None)
    if raw is not None:
        return raw  # type: ignore[no-any-return]
    if getattr(progress, "_jprogress", None) is not None:
        parsed = json.loads(progress.json)
        return parsed
    return progress  # type: ignore[no-any-return]


class _FastJListener(JStreamingQueryListener):
    """Classic-mode bridge that reads progress as one JSON string.

    PySpark's own bridge builds a ``StreamingQueryProgress`` with one Py4J round trip per
    field (dozens per event); two round trips (``progress().json()``) are enough here.
    """

    def onQueryProgress(self, jevent: Any) -> None:
        listener = self.pylistener
        assert isinstance(listener, WmobsListener)
        try:
            raw = jevent.progress().json()
        except Exception:
            listener._failed("progress")
            return
        listener._progress(raw)

    # PySpark's bridge builds each other event from its Java object, outside the listener's
    # own guard: a failure there (a JVM shutting down) is logged and swallowed too.
    def onQueryStarted(self, jevent: Any) -> None:
        self._guarded("onQueryStarted", super().onQueryStarted, jevent)

    def onQueryIdle(self, jevent: Any) -> None:
        self._guarded("onQueryIdle", super().onQueryIdle, jevent)

    def onQueryTerminated(self, jevent: Any) -> None:
        self._guarded("onQueryTerminated", super().onQueryTerminated, jevent)

    def _guarded(self, callback: str, bridge: Callable[[Any], None], jevent: Any) -> None:
        try:
            bridge(jevent)
        except Exception:
            listener = self.pylistener
            if isinstance(listener, WmobsListener):
                listener._failed(callback)


class WmobsListener(StreamingQueryListener):
    """Feeds query events into a :class:`~wmobs.listener.Tracker` and the histogram."""

    def __init__(
        self,
        tracker: Tracker,
        instruments: list[Instruments],
        logger: Any = None,
        on_progress: Callable[[QuerySnapshot, BatchSummary], None] | None = None,
        tracer: BatchTracer | None = None,
    ) -> None:
        self._tracker = tracker
        self._tracer = tracer
        self._instruments = instruments
        self._log = logger if logger is not None else get_logger()
        self._on_progress = on_progress
        self._warned_columns: set[str] = set()
        self._warned_drops: set[str] = set()
        self._warned_heap: set[str] = set()
        self._recalls: list[threading.Thread] = []
        self.errors = 0
        """Internal errors logged and swallowed so far (for tests and health checks)."""

    def join_recalls(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the kept counts being recalled (:meth:`_recall`)
        to be in the counters; True if they are."""
        deadline = time.monotonic() + timeout
        for thread in list(self._recalls):
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._recalls)

    @property
    def _jlistener(self) -> Any:
        # Replace PySpark's per-field Py4J conversion of progress events with one JSON read;
        # fall back to the stock bridge if PySpark's internals ever differ.
        if not hasattr(self, "_jlistenerobj"):
            try:
                from pyspark import SparkContext

                jvm: Any = SparkContext._jvm
                self._jlistenerobj = jvm.PythonStreamingQueryListenerWrapper(_FastJListener(self))
            except Exception:
                return super()._jlistener
        return self._jlistenerobj

    # ---- error containment ---------------------------------------------------------------

    def _failed(self, callback: str) -> None:
        self.errors += 1
        with contextlib.suppress(Exception):  # a broken logger must not break the query either
            self._log.error("wmobs.listener_error", callback=callback, exc_info=True)

    # ---- StreamingQueryListener ----------------------------------------------------------

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        try:
            snap = self._tracker.on_started(str(event.id), str(event.runId), event.name)
            self._log.info("wmobs.query_started", query=snap.label, run_id=str(event.runId))
        except Exception:
            self._failed("onQueryStarted")

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        try:
            raw = progress_dict(event.progress)
        except Exception:
            self._failed("onQueryProgress")
            return
        self._progress(raw)

    def _progress(self, raw: str | Mapping[str, Any]) -> None:
        try:
            progress = json.loads(raw) if isinstance(raw, str) else raw
            summary = self._tracker.on_progress(progress)
            if summary.unreported:  # rare (a restart's first micro-batch): storage, off this thread
                thread = threading.Thread(
                    target=self._recall,
                    args=(str(progress["id"]), progress.get("name"), summary),
                    name="wmobs-recall",
                    daemon=True,
                )
                self._recalls = [t for t in self._recalls if t.is_alive()] + [thread]
                thread.start()
            if summary.duration_s is not None:
                for instruments in self._instruments:
                    instruments.record_batch_duration(summary.label, summary.duration_s)
            self._log_progress(summary)
            if self._tracer is not None:
                self._tracer.on_progress(progress, summary)
            if self._on_progress is not None:
                snap = self._tracker.snapshot(str(progress["id"]))
                if snap is not None:
                    self._on_progress(snap, summary)
        except Exception:
            self._failed("onQueryProgress")

    def _log_progress(self, summary: BatchSummary) -> None:
        now = self._tracker.clock()
        self._log.debug(
            "wmobs.progress",
            query=summary.label,
            batch=summary.batch_id,
            rows=summary.input_rows,
            watermark=format_timestamp(summary.watermark),
            delay_s=None if summary.watermark is None else round(now - summary.watermark, 3),
        )
        if summary.replayed:
            self._log.info(
                "wmobs.batch_replayed",
                query=summary.label,
                batch=summary.batch_id,
                note="a restart re-ran this micro-batch; its counts were counted when it first ran",
            )
        if summary.rows_dropped_by_watermark:
            # Once per query at warning (the counter and WmobsEventsDropped carry the rest).
            first = summary.label not in self._warned_drops
            self._warned_drops.add(summary.label)
            (self._log.warning if first else self._log.debug)(
                "wmobs.rows_dropped_by_watermark",
                query=summary.label,
                batch=summary.batch_id,
                rows=summary.rows_dropped_by_watermark,
            )
        if summary.heap_state is not None and summary.label not in self._warned_heap:
            self._warned_heap.add(summary.label)
            keys, memory = summary.heap_state
            self._log.warning(
                "wmobs.state_on_heap",
                query=summary.label,
                keys=keys,
                memory_mib=round(memory / 2**20),
                hint=HEAP_STATE_HINT,
            )
        for column in summary.unknown_columns:
            if column not in self._warned_columns:
                self._warned_columns.add(column)
                self._log.warning("wmobs.unknown_observed_column", column=column)

    def _recall(self, query_id: str, name: str | None, summary: BatchSummary) -> None:
        """The counts that the Python-engine policies of a micro-batch a sink skipped kept
        (:mod:`wmobs._kept`), into their counters; a warning for a policy that kept none."""
        for policy in summary.unreported:
            try:
                self._recall_one(query_id, name, summary, policy)
            except Exception:
                self._failed("recall")

    def _recall_one(
        self, query_id: str, name: str | None, summary: BatchSummary, policy: str
    ) -> None:
        try:
            counts = recall(policy, query_id, name, summary.batch_id)
        except Exception:
            self._failed("recall")
            counts = None
        if counts is not None:
            self._tracker.on_recalled(query_id, policy, counts)
            self._log.info(
                "wmobs.counts_recalled",
                query=summary.label,
                batch=summary.batch_id,
                policy=policy,
            )
            return
        self._log.warning(
            "wmobs.counts_not_reported",
            query=summary.label,
            batch=summary.batch_id,
            policy=policy,
            note="the first micro-batch of this run read no row though its sources moved: "
            "a sink that had it already skipped it after a crash between its commit and "
            "Spark's; its rows are in the sink or the dead letters, and their counts are not "
            "in the counters: the Python engine kept none that this process can find "
            "(the policy was applied in another Python process)",
        )

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        try:
            label = self._tracker.on_idle(str(event.id))
            self._log.debug("wmobs.query_idle", query=label, timestamp=event.timestamp)
        except Exception:
            self._failed("onQueryIdle")

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        try:
            snap = self._tracker.on_terminated(str(event.id), event.exception, str(event.runId))
            # Told once per run: a driver that runs many queries keeps no label for good.
            self._warned_drops.discard(snap.label)
            self._warned_heap.discard(snap.label)
            if self._tracer is not None:
                self._tracer.on_terminated(str(event.runId))
            if event.exception:
                error_class = str(event.errorClassOnException or "")
                hint = {}
                for prefix, text in FAILURE_HINTS:
                    if error_class.startswith(prefix):
                        hint["hint"] = text
                self._log.error(
                    "wmobs.query_failed",
                    query=snap.label,
                    run_id=str(event.runId),
                    error_class=event.errorClassOnException,
                    exception=event.exception.splitlines()[0],
                    **hint,
                )
            else:
                self._log.info("wmobs.query_stopped", query=snap.label, run_id=str(event.runId))
        except Exception:
            self._failed("onQueryTerminated")
