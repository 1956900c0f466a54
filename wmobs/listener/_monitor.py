"""``wmobs.attach``: one call that wires a listener, the instruments and the exporters."""

from __future__ import annotations

import errno
import os
import threading
import time
import weakref
from collections.abc import Callable
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from wmobs._log import get_logger
from wmobs._spark import jvm_exited
from wmobs.listener._snapshots import BatchSummary, QuerySnapshot
from wmobs.listener._tracker import Tracker
from wmobs.listener.metrics import Instruments

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
    from prometheus_client import CollectorRegistry

    from wmobs.listener._exposition import MetricsServer

__all__ = ["Monitor", "attach"]

_log = get_logger()


def _otlp_metrics(
    tracker: Tracker, endpoint: str | bool, protocol: str, logger: Any, pushes: list[Any]
) -> SdkMeterProvider:
    """A private provider that pushes every instrument, the event distributions included
    (:mod:`wmobs.listener._otlp`), to ``endpoint`` at the SDK's interval."""
    from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    from wmobs.listener._otlp import MetricsExporter, QuietExports, metric_exporter

    inner = metric_exporter(endpoint, protocol)  # before the log filter: it may raise
    quiet = QuietExports("metrics", endpoint, protocol, logger)
    pushes.append(quiet)
    quiet.stops_with(inner.shutdown)
    exporter = MetricsExporter(inner, tracker, quiet)
    return SdkMeterProvider(
        metric_readers=[PeriodicExportingMetricReader(exporter)], resource=_resource()
    )


def _endpoint(
    tracker: Tracker, addr: str, port: int | None, logger: Any
) -> tuple[MetricsServer | None, CollectorRegistry | None]:
    """The Prometheus endpoint on ``addr:port`` (port 0: a free one), and its registry; none
    where ``port`` is None."""
    if port is None:
        return None, None
    from prometheus_client import CollectorRegistry

    from wmobs.listener._exposition import Exposition, MetricsServer

    exposition = Exposition(tracker)
    registry = CollectorRegistry()
    registry.register(exposition)
    try:
        server = MetricsServer(addr, int(port or 0), exposition, logger=logger)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        raise OSError(exc.errno, _port_in_use(addr, int(port))) from exc
    return server, registry


def _resource() -> Any:
    """The SDK's resource (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``), named
    ``wmobs`` where neither names the service (attributes given to ``Resource.create`` would
    win over both)."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "wmobs"}))
    return resource


TRACES_EXPORTERS = ("otlp", "console", "none")
"""The values of ``OTEL_TRACES_EXPORTER`` that wmobs follows."""


def _traces_wanted(traces: bool | None, logger: Any) -> str | None:
    """Which span exporter ``attach`` makes: ``otlp``, ``console`` or ``None`` (no traces)."""
    if traces is not None:
        return "otlp" if traces else None
    chosen = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if chosen in ("", "none"):
        return None
    if chosen not in TRACES_EXPORTERS:
        (logger if logger is not None else _log).warning(
            "wmobs.traces_exporter_unsupported",
            OTEL_TRACES_EXPORTER=chosen,
            hint=f"wmobs makes its spans' exporter for {', '.join(TRACES_EXPORTERS)}; for "
            "another, pass attach(tracer_provider=...) with the application's provider",
        )
        return None
    return chosen


def _tracing(
    traces: bool | None,
    provider: TracerProvider | None,
    endpoint: str | bool | None,
    protocol: str | None,
    logger: Any,
    *,
    pushes: list[Any],
) -> tuple[TracerProvider | None, Any]:
    """The provider wmobs makes its spans on (``None``: no traces), and the private one among
    them that ``close`` shuts down."""
    if provider is not None:
        if traces is False:
            raise ValueError("attach: tracer_provider= makes traces; not with traces=False")
        return provider, None
    kind = _traces_wanted(traces, logger)
    if kind is None:
        return None, None
    private = _private_tracing(kind, endpoint, protocol, logger, pushes)
    return private, private


def _private_tracing(
    kind: str, endpoint: str | bool | None, protocol: str | None, logger: Any, pushes: list[Any]
) -> Any:
    """A private TracerProvider whose batch processor exports wmobs' spans on its thread."""
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    from wmobs.listener._otlp import (
        QuietExports,
        QuietSpanExporter,
        resolve_protocol,
        span_exporter,
    )

    where: str | bool
    if kind == "console":
        inner, where, protocol = ConsoleSpanExporter(), "stdout", "console"
    else:
        protocol = resolve_protocol(protocol, "traces")
        where = endpoint if endpoint else True
        inner = span_exporter(where, protocol)
    quiet = QuietExports("traces", where, protocol, logger)
    pushes.append(quiet)
    if kind != "console":
        quiet.stops_with(inner.shutdown)  # the console exporter's shutdown stops nothing
    exporter = QuietSpanExporter(inner, quiet)
    provider = SdkTracerProvider(resource=_resource())
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


class Monitor:
    """What :func:`attach` returns: the running listener and its exporters.

    ``close()`` removes the listener, stops the endpoint and flushes OTLP; it is idempotent
    and also runs on leaving a ``with`` block.
    """

    def __init__(
        self,
        spark: Any,
        *,
        tracker: Tracker,
        listener: Any,
        private_provider: SdkMeterProvider | None,
        private_tracing: Any = None,
        pushes: list[Any] | None = None,
        server: MetricsServer | None,
        registry: CollectorRegistry | None,
        prometheus_addr: str | None,
        logger: Any = None,
    ) -> None:
        self._spark = spark
        self._log = logger if logger is not None else _log
        self.tracker = tracker
        self.listener = listener
        self._private_provider = private_provider
        self._private_tracing = private_tracing
        self._pushes = pushes or []
        self._server = server
        self.registry = registry
        """The ``prometheus_client`` registry behind the endpoint (``None`` without one)."""
        self.prometheus_addr = prometheus_addr
        self._closed = False
        self._lock = threading.Lock()

    @property
    def prometheus_port(self) -> int | None:
        """The port ``/metrics`` is served on (the one picked when 0 was asked for)."""
        return None if self._server is None else int(self._server.server_port)

    @property
    def metrics_url(self) -> str | None:
        if self._server is None:
            return None
        return f"http://{self.prometheus_addr}:{self.prometheus_port}/metrics"

    def flush(self, timeout: timedelta = timedelta(seconds=10)) -> bool:
        """Push what wmobs pushes over OTLP now (metrics, and the spans made so far), rather
        than at the next interval, once the counts being recalled for a micro-batch a sink
        skipped are in the counters; True if every push went through within ``timeout``.
        Without OTLP, only the wait for those counts."""
        millis = int(timeout.total_seconds() * 1000)
        failures = sum(push.failures for push in self._pushes)
        join = getattr(self.listener, "join_recalls", None)
        ok = join is None or bool(join(timeout.total_seconds()))
        for provider in (self._private_provider, self._private_tracing):
            if provider is not None and not self._closed:
                ok = bool(provider.force_flush(millis)) and ok
        return ok and sum(push.failures for push in self._pushes) == failures

    def snapshot(self, query: str) -> QuerySnapshot | None:
        """A copy of what wmobs knows of ``query`` (its name, or its id when unnamed)."""
        return self.tracker.snapshot(query)

    def snapshots(self) -> list[QuerySnapshot]:
        return self.tracker.snapshots()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if jvm_exited(self._spark):  # the listener went with it
            self._log.info("wmobs.listener_not_removed", reason="Spark's JVM has exited")
        else:
            try:
                self._spark.streams.removeListener(self.listener)
            except Exception:
                self._log.warning("wmobs.remove_listener_failed", exc_info=True)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        # No last push where the last one failed: no wait for it. Asked again before the
        # traces' shutdown: the metrics' last push may have found the Collector down.
        if self._private_provider is not None:
            self._stop_failing_pushes()
            self._private_provider.shutdown()  # a last OTLP push, with the final values
        if self._private_tracing is not None:
            self._stop_failing_pushes()
            self._private_tracing.shutdown()  # the spans not exported yet
        self.tracker.close()  # then an injected provider stops seeing wmobs' series

    def _stop_failing_pushes(self) -> None:
        for push in self._pushes:
            push.stop_if_failing()

    def __enter__(self) -> Monitor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _require_client_side_listeners(spark: Any) -> None:
    """Spark Connect runs a listener in the client only from PySpark 4.0 on: PySpark 3.5 pickles
    it to the server, which can neither pickle wmobs' listener (it holds locks) nor feed the
    client's metrics from there."""
    from wmobs._spark import is_connect

    if not is_connect(spark):
        return
    from pyspark import __version__ as version

    if int(version.split(".", 1)[0]) < 4:
        raise RuntimeError(
            f"wmobs.attach over Spark Connect needs PySpark >= 4.0 on the client (PySpark "
            f"{version} runs listeners on the Connect server, not in this process). Attach "
            "to a classic session of the application instead, or use a 4.x client."
        )


_monitors: weakref.WeakSet[Monitor] = weakref.WeakSet()
"""Every Monitor of this process, to name the one that holds a port another attach asks for."""


def _port_in_use(addr: str, port: int) -> str:
    holder = next(
        (
            m
            for m in list(_monitors)
            if not m.closed and m.prometheus_port == port and m.prometheus_addr == addr
        ),
        None,
    )
    where = f"wmobs.attach: cannot serve /metrics on {addr}:{port}, which is in use"
    if holder is not None:  # a notebook's cell run twice
        return (
            f"{where} by a wmobs Monitor attached earlier in this process, which still runs: "
            "use that one, or close it (monitor.close()) before attaching again"
        )
    return f"{where}: pass another prometheus_port (0 picks a free one)"


def attach(
    spark: Any,
    *,
    prometheus_port: int | None = None,
    prometheus_addr: str = "127.0.0.1",
    meter_provider: MeterProvider | None = None,
    otlp_endpoint: str | bool | None = None,
    logger: Any = None,
    on_progress: Callable[[QuerySnapshot, BatchSummary], None] | None = None,
    clock: Callable[[], float] = time.time,
    terminated_retention: timedelta | None = timedelta(hours=1),
    otlp_protocol: str | None = None,
    traces: bool | None = None,
    tracer_provider: TracerProvider | None = None,
) -> Monitor:
    """Watch every streaming query of ``spark`` (classic or Spark Connect) and export metrics.

    - ``meter_provider``: the OpenTelemetry provider to create the instruments on; default the
      global one (``opentelemetry.metrics.get_meter_provider()``), so an application that set
      up OpenTelemetry gets wmobs' metrics with its own.
    - ``prometheus_port``: also serve ``/metrics`` on ``prometheus_addr:prometheus_port``
      (``0`` picks a free port: read ``Monitor.prometheus_port``), rendered from the tracker
      when scraped (:mod:`wmobs.listener._exposition`), with a private registry, so nothing
      global is touched.
    - ``otlp_endpoint``: also push over OTLP (needs ``wmobs[otlp]``; gRPC ``wmobs[otlp-grpc]``)
      every instrument, the event distributions included: a URL such as
      ``http://127.0.0.1:4318`` (gRPC: ``http://127.0.0.1:4317``), or ``True`` to take
      everything from the standard ``OTEL_EXPORTER_OTLP_*`` variables (which also set
      headers, timeout and compression). A Collector that is down or slow never reaches the
      queries (pushes run on the SDK's thread); wmobs logs it once
      (``wmobs.otlp_export_failed``), not at every retry.
    - ``otlp_protocol``: ``"http/protobuf"`` (default) or ``"grpc"``; unset, the standard
      ``OTEL_EXPORTER_OTLP_{METRICS,TRACES}_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_PROTOCOL``.
    - ``traces``: a trace of every micro-batch (:mod:`wmobs.listener._traces`), pushed over
      OTLP to ``otlp_endpoint`` (or the standard variables). Unset, on when the standard
      ``OTEL_TRACES_EXPORTER`` says ``otlp`` or ``console``; ``False``: never.
    - ``tracer_provider``: make those spans on the application's own provider instead (its
      processors and exporters); implies ``traces``. The spans end on Spark's listener thread:
      give that provider a ``BatchSpanProcessor`` (a ``SimpleSpanProcessor`` exports each span
      there, as it ends).
    - ``logger``: a structlog-style logger to log with (default: wmobs' own, which goes to
      structlog if the application configured it, else to the standard library's ``wmobs``
      logger; wmobs never configures logging).
    - ``on_progress``: called with ``(snapshot, batch_summary)`` after each progress event,
      on Spark's listener thread; keep it quick. Its exceptions are logged and swallowed.
    - ``terminated_retention``: how long a terminated query's series stay exported (and its
      snapshot kept) once every query under its label has terminated; ``None``: for the
      monitor's life. A query that starts again under the same name within it continues its
      series; after it, they start again from zero, as a new series.

    Queries already running are picked up at once; queries started later, as they start.
    Spark 3.5 and 4.x; over Spark Connect, 4.x (see :func:`_require_client_side_listeners`).
    """
    _require_client_side_listeners(spark)
    from wmobs.listener._spark_listener import WmobsListener

    if terminated_retention is not None and terminated_retention.total_seconds() < 0:
        raise ValueError(f"terminated_retention: must not be negative, got {terminated_retention}")
    retention = None if terminated_retention is None else terminated_retention.total_seconds()
    tracker = Tracker(clock=clock, retention=retention)
    made: list[Any] = []  # what a failure below releases: no tracker read, no push, for ever
    pushes: list[Any] = []  # wmobs' own OTLP exporters (what flush() reports on)
    try:
        instruments = [Instruments(tracker, meter_provider)]
        private_provider = None
        if otlp_endpoint:
            from wmobs.listener._otlp import resolve_protocol

            protocol = resolve_protocol(otlp_protocol, "metrics")
            private_provider = _otlp_metrics(tracker, otlp_endpoint, protocol, logger, pushes)
            made.append(private_provider)
            instruments.append(Instruments(tracker, private_provider))
        tracer_provider, private_tracing = _tracing(
            traces, tracer_provider, otlp_endpoint, otlp_protocol, logger, pushes=pushes
        )
        made.append(private_tracing)
        server, registry = _endpoint(tracker, prometheus_addr, prometheus_port, logger)
    except BaseException:
        for provider in made:
            if provider is not None:
                provider.shutdown()
        tracker.close()
        raise

    log = logger if logger is not None else _log
    already = [m for m in list(_monitors) if not m.closed and m._spark is spark]
    if already:
        log.warning(
            "wmobs.attached_twice",
            metrics_url=already[0].metrics_url,
            hint="this session already has a wmobs monitor: a second one adds a second listener, "
            "doing the same work twice (with two endpoints, the same series twice); reuse the "
            "first, or close it (monitor.close()) first",
        )
    batch_tracer = None
    if tracer_provider is not None:
        from wmobs.listener._traces import BatchTracer

        batch_tracer = BatchTracer(tracer_provider)
    listener = WmobsListener(
        tracker, instruments, logger=logger, on_progress=on_progress, tracer=batch_tracer
    )
    monitor = Monitor(
        spark,
        tracker=tracker,
        listener=listener,
        private_provider=private_provider,
        private_tracing=private_tracing,
        pushes=pushes,
        server=server,
        registry=registry,
        prometheus_addr=prometheus_addr if server is not None else None,
        logger=log,
    )
    _monitors.add(monitor)
    try:
        spark.streams.addListener(listener)
        # Queries already running: seen now, without undoing an event that raced us.
        for query in spark.streams.active:
            ran = query.lastProgress is not None
            tracker.on_seen(str(query.id), str(query.runId), query.name, ran=ran)
    except BaseException:
        monitor.close()
        raise
    log.info(
        "wmobs.attached",
        metrics_url=monitor.metrics_url,
        otlp=bool(otlp_endpoint),
        traces=batch_tracer is not None,
        active_queries=len(tracker.snapshots()),
    )
    return monitor
