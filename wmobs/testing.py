"""Helpers for testing code that uses wmobs, without a JVM.

- :func:`progress_json` builds a ``StreamingQueryProgress`` as Spark serialises it (a ``dict``);
  ``pyspark.sql.streaming.listener.QueryProgressEvent.fromJson({"progress": ...})`` accepts it.
- :class:`MetricsRecorder` wires a :class:`~wmobs.listener.Tracker` to an
  ``InMemoryMetricReader`` and reads samples back under their **Prometheus** names, the names
  users scrape and alert on.
- :func:`local_spark` starts a small ``local[2]`` session for tests and examples (bound to
  127.0.0.1, Python workers on the running interpreter).

Example::

    from wmobs.testing import MetricsRecorder, progress_json

    rec = MetricsRecorder(clock=lambda: 1_000.0)
    rec.tracker.on_progress(progress_json(watermark=990.0))
    assert rec.value("wmobs_watermark_delay_seconds", query="q") == 10.0
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timezone
from typing import Any

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry

from wmobs._session import local_spark
from wmobs.listener import Instruments, Tracker, parse_metrics
from wmobs.observations import IDLE_TICK

__all__ = [
    "MetricsRecorder",
    "iso",
    "local_spark",
    "parse_metrics",
    "progress_json",
    "state_operator",
]

_EPOCH = "1970-01-01T00:00:00.000Z"


def iso(seconds: float) -> str:
    """Unix seconds as Spark writes timestamps in progress JSON."""
    moment = datetime.fromtimestamp(seconds, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def progress_json(
    *,
    name: str | None = "q",
    id: str | None = None,
    run_id: str | None = None,
    batch_id: int = 0,
    timestamp: float | None = None,
    duration_ms: int = 250,
    rows: int = 10,
    watermark: float | None = None,
    event_time_max: float | None = None,
    event_time_min: float | None = None,
    state_operators: list[Mapping[str, Any]] | None = None,
    observed: Mapping[str, Mapping[str, Any]] | None = None,
    heartbeat_rows: int = 0,
    kafka_backlog: int | None = None,
    output_rows: int = 0,
) -> dict[str, Any]:
    """A progress event body as Spark's ``StreamingQueryProgress.json`` has it.

    ``rows`` are input rows; ``heartbeat_rows`` adds the source of an idle-timeout policy with
    that many rows (Spark counts them in ``numInputRows``; wmobs does not). ``kafka_backlog``
    makes the source Kafka's (``KafkaV2[Subscribe[events]]``), with that
    ``maxOffsetsBehindLatest``. ``output_rows``: the sink's ``numOutputRows`` (-1: a sink that
    does not count).

    ``watermark=None`` leaves ``eventTime`` out entirely (a query without a watermark);
    ``watermark=0`` gives Spark's "no watermark yet" epoch. ``id`` defaults to a UUID derived
    from ``name``, so events for one name belong to one query.
    """
    query_id = id or str(uuid.uuid5(uuid.NAMESPACE_URL, f"wmobs-test:{name}"))
    started = time.time() if timestamp is None else timestamp
    event_time: dict[str, str] = {}
    if watermark is not None:
        event_time["watermark"] = iso(watermark) if watermark else _EPOCH
    if rows and event_time_max is not None:
        event_time["max"] = iso(event_time_max)
        event_time["min"] = iso(event_time_min if event_time_min is not None else event_time_max)
        event_time["avg"] = event_time["min"]
    progress: dict[str, Any] = {
        "id": query_id,
        "runId": run_id or str(uuid.uuid4()),
        "name": name,
        "timestamp": iso(started),
        "batchId": batch_id,
        "batchDuration": duration_ms,
        "numInputRows": rows + heartbeat_rows,
        "inputRowsPerSecond": 0.0,
        "processedRowsPerSecond": 0.0,
        "durationMs": {"triggerExecution": duration_ms, "addBatch": duration_ms},
        "stateOperators": [dict(op) for op in state_operators or []],
        "sources": [
            {
                "description": "FileStreamSource[file:/tmp/in]"
                if kafka_backlog is None
                else "KafkaV2[Subscribe[events]]",
                "startOffset": None,
                "endOffset": None,
                "latestOffset": None,
                "numInputRows": rows,
                "inputRowsPerSecond": 0.0,
                "processedRowsPerSecond": 0.0,
                "metrics": {}
                if kafka_backlog is None
                else {
                    "avgOffsetsBehindLatest": str(float(kafka_backlog) / 2),
                    "maxOffsetsBehindLatest": str(kafka_backlog),
                    "minOffsetsBehindLatest": "0",
                },
            }
        ],
        "sink": {"description": "MemorySink", "numOutputRows": output_rows, "metrics": {}},
    }
    if heartbeat_rows:
        tick = int(started * 1000)
        progress["sources"].append(
            {
                "description": "PythonMicroBatchStreamWithAdmissionControl@1f2e3d4c",
                "startOffset": {IDLE_TICK: tick - 250},
                "endOffset": {IDLE_TICK: tick, "idle_since": tick - 1000},
                "latestOffset": None,
                "numInputRows": heartbeat_rows,
                "inputRowsPerSecond": 0.0,
                "processedRowsPerSecond": 0.0,
                "metrics": {},
            }
        )
    if event_time:
        progress["eventTime"] = event_time
    if observed:
        progress["observedMetrics"] = {k: dict(v) for k, v in observed.items()}
    return progress


def state_operator(
    name: str = "stateStoreSave",
    *,
    rows_total: int = 0,
    dropped_by_watermark: int = 0,
    memory_bytes: int = 1024,
    custom_metrics: dict[str, int] | None = None,
) -> dict[str, Any]:
    """One entry of ``progress.stateOperators`` (``custom_metrics``: the provider's own, such
    as ``loadedMapCacheHitCount`` of Spark's default store)."""
    return {
        "operatorName": name,
        "numRowsTotal": rows_total,
        "numRowsUpdated": 0,
        "allUpdatesTimeMs": 0,
        "numRowsRemoved": 0,
        "allRemovalsTimeMs": 0,
        "commitTimeMs": 0,
        "memoryUsedBytes": memory_bytes,
        "numRowsDroppedByWatermark": dropped_by_watermark,
        "numShufflePartitions": 2,
        "numStateStoreInstances": 2,
        "customMetrics": dict(custom_metrics or {}),
    }


class MetricsRecorder:
    """A tracker wired to what ``wmobs.attach`` exports, for tests: ``registry`` holds what the
    Prometheus endpoint serves; ``reader`` (in memory) and ``sdk_registry`` (OpenTelemetry's
    Prometheus exporter) what an OpenTelemetry meter provider gets.

    :meth:`value` reads a sample by its Prometheus name (``wmobs_input_rows_total``, with the
    suffixes the exporter adds), so a test catches a unit or suffix mistake. :meth:`progress`
    runs an event through what ``attach``'s listener runs in Spark's callback (with a span per
    micro-batch where ``tracer_provider`` is given, as ``attach(traces=True)`` makes them);
    :meth:`serve` serves :attr:`registry` over HTTP as ``attach``'s endpoint does.
    """

    def __init__(self, clock: Callable[[], float] = time.time, tracer_provider: Any = None) -> None:
        from wmobs.listener._exposition import Exposition

        self.tracker = Tracker(clock=clock)
        self.reader = InMemoryMetricReader()
        self.registry = CollectorRegistry()
        self._exposition = Exposition(self.tracker)
        self.registry.register(self._exposition)
        self.sdk_registry = CollectorRegistry()
        self._prometheus = PrometheusMetricReader(
            registry=self.sdk_registry, scope_info_enabled=False
        )
        self.provider = MeterProvider(metric_readers=[self.reader, self._prometheus])
        self.instruments = Instruments(self.tracker, self.provider)
        self._tracer_provider = tracer_provider
        self._listener: Any = None

    def progress(self, event: str | Mapping[str, Any]) -> None:
        """One progress event (Spark's JSON, or :func:`progress_json`'s ``dict``) through the
        listener's callback: the tracker, the batch-duration histogram, the debug log and the
        spans; an exception there is logged and counted in :attr:`errors`, as in a query.
        Needs PySpark (the listener is its ``StreamingQueryListener``), not a JVM."""
        if self._listener is None:
            from wmobs.listener._spark_listener import WmobsListener
            from wmobs.listener._traces import BatchTracer

            provider = self._tracer_provider
            tracer = BatchTracer(provider) if provider is not None else None
            self._listener = WmobsListener(self.tracker, [self.instruments], tracer=tracer)
        self._listener._progress(event)

    @property
    def errors(self) -> int:
        """Exceptions :meth:`progress` logged and swallowed so far."""
        return 0 if self._listener is None else int(self._listener.errors)

    @contextlib.contextmanager
    def serve(self) -> Iterator[str]:
        """:attr:`registry`'s samples served as ``attach``'s endpoint serves them, on a free
        port of 127.0.0.1; yields the ``/metrics`` URL, stops the server on exit."""
        from wmobs.listener._exposition import MetricsServer

        server = MetricsServer("127.0.0.1", 0, self._exposition)
        try:
            yield f"http://127.0.0.1:{server.server_port}/metrics"
        finally:
            server.shutdown()
            server.server_close()

    def value(self, name: str, **labels: str) -> float | None:
        """The sample ``name{labels}`` as Prometheus would scrape it, or ``None``."""
        value: float | None = self.registry.get_sample_value(name, labels)
        return value

    def sdk_value(self, name: str, **labels: str) -> float | None:
        """The sample as OpenTelemetry's Prometheus exporter has it (an SDK meter provider)."""
        value: float | None = self.sdk_registry.get_sample_value(name, labels)
        return value

    def names(self) -> set[str]:
        """Every sample name currently exposed (``_bucket``/``_total`` suffixes included)."""
        return {s.name for family in self.registry.collect() for s in family.samples}

    def shutdown(self) -> None:
        self.provider.shutdown()
