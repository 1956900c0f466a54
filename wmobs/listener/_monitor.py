"""``wmobs.attach``: one call that wires a listener, the instruments and the exporters."""

from __future__ import annotations

import errno
import threading
import time
import weakref
from collections.abc import Callable
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from opentelemetry.metrics import MeterProvider

from wmobs._log import get_logger
from wmobs._spark import jvm_exited
from wmobs.listener._tracker import BatchSummary, QuerySnapshot, Tracker
from wmobs.listener.metrics import Instruments

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
    from prometheus_client import CollectorRegistry

    from wmobs.listener._exposition import MetricsServer

__all__ = ["Monitor", "attach"]

_log = get_logger()


def _otlp_reader(endpoint: str | bool) -> Any:
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError(
            "otlp_endpoint needs the OTLP exporter: pip install 'wmobs[otlp]'"
        ) from exc
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    if endpoint is True:  # everything from the standard OTEL_EXPORTER_OTLP_* variables
        exporter = OTLPMetricExporter()
    else:
        url = str(endpoint)
        if urlsplit(url).path in ("", "/"):
            url = url.rstrip("/") + "/v1/metrics"
        exporter = OTLPMetricExporter(endpoint=url)
    return PeriodicExportingMetricReader(exporter)


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
        server: MetricsServer | None,
        registry: CollectorRegistry | None,
        prometheus_addr: str | None,
    ) -> None:
        self._spark = spark
        self.tracker = tracker
        self.listener = listener
        self._private_provider = private_provider
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
            _log.info("wmobs.listener_not_removed", reason="Spark's JVM has exited")
        else:
            try:
                self._spark.streams.removeListener(self.listener)
            except Exception:
                _log.warning("wmobs.remove_listener_failed", exc_info=True)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._private_provider is not None:
            self._private_provider.shutdown()  # a last OTLP push, with the final values
        self.tracker.close()  # then an injected provider stops seeing wmobs' series

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
) -> Monitor:
    """Watch every streaming query of ``spark`` (classic or Spark Connect) and export metrics.

    - ``meter_provider``: the OpenTelemetry provider to create the instruments on; default the
      global one (``opentelemetry.metrics.get_meter_provider()``), so an application that set
      up OpenTelemetry gets wmobs' metrics with its own.
    - ``prometheus_port``: also serve ``/metrics`` on ``prometheus_addr:prometheus_port``
      (``0`` picks a free port: read ``Monitor.prometheus_port``), rendered from the tracker
      when scraped (:mod:`wmobs.listener._exposition`), with a private registry, so nothing
      global is touched.
    - ``otlp_endpoint``: also push over OTLP/HTTP (needs ``wmobs[otlp]``): a URL such as
      ``http://127.0.0.1:4318``, or ``True`` to take everything from the standard
      ``OTEL_EXPORTER_OTLP_*`` variables (which also set headers, timeout and compression).
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
    instruments = [Instruments(tracker, meter_provider)]

    private_provider = None
    if otlp_endpoint:
        from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource

        private_provider = SdkMeterProvider(
            metric_readers=[_otlp_reader(otlp_endpoint)],
            resource=Resource.create({SERVICE_NAME: "wmobs"}),
        )
        instruments.append(Instruments(tracker, private_provider))

    server = None
    registry = None
    if prometheus_port is not None:
        from prometheus_client import CollectorRegistry

        from wmobs.listener._exposition import Exposition, MetricsServer

        exposition = Exposition(tracker)
        registry = CollectorRegistry()
        registry.register(exposition)
        try:
            server = MetricsServer(
                prometheus_addr, int(prometheus_port or 0), exposition, logger=logger
            )
        except OSError as exc:
            if private_provider is not None:
                private_provider.shutdown()
            if exc.errno != errno.EADDRINUSE:
                raise
            raise OSError(exc.errno, _port_in_use(prometheus_addr, int(prometheus_port))) from exc

    already = [m for m in list(_monitors) if not m.closed and m._spark is spark]
    if already:
        _log.warning(
            "wmobs.attached_twice",
            metrics_url=already[0].metrics_url,
            hint="this session already has a wmobs monitor: a second one adds a second listener, "
            "doing the same work twice (with two endpoints, the same series twice); reuse the "
            "first, or close it (monitor.close()) first",
        )
    listener = WmobsListener(tracker, instruments, logger=logger, on_progress=on_progress)
    monitor = Monitor(
        spark,
        tracker=tracker,
        listener=listener,
        private_provider=private_provider,
        server=server,
        registry=registry,
        prometheus_addr=prometheus_addr if server is not None else None,
    )
    _monitors.add(monitor)
    try:
        spark.streams.addListener(listener)
        # Queries already running: seen now, without undoing an event that raced us.
        for query in spark.streams.active:
            tracker.on_seen(str(query.id), str(query.runId), query.name)
    except BaseException:
        monitor.close()
        raise
    _log.info(
        "wmobs.attached",
        metrics_url=monitor.metrics_url,
        otlp=bool(otlp_endpoint),
        active_queries=len(tracker.snapshots()),
    )
    return monitor
