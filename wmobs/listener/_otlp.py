"""OTLP push: wmobs' own exporters for metrics and spans, over OTLP/HTTP or OTLP/gRPC.

Three things the OpenTelemetry SDK's exporters do not do on their own, done here:

- **The event distributions.** ``wmobs_event_*_seconds`` are counted inside the query and
  arrive as bucket counts, which OpenTelemetry's API cannot record. The SDK's exporters do
  accept data points built directly: :class:`MetricsExporter` adds one ``Histogram`` per
  distribution (a ``HistogramDataPoint`` per policy, with its bounds and counts, in the
  temporality the exporter prefers: :mod:`._otlp_histograms`) to every push, so a
  Collector's Prometheus exporter serves the same buckets as wmobs' own ``/metrics``.
- **Quiet failures.** A Collector that is down makes the SDK log a warning per retry and an
  error per push, forever. The records the SDK logs *while wmobs' exporters export* (on their
  own thread) are dropped by a filter on the SDK's exporter loggers, and wmobs logs once:
  ``wmobs.otlp_export_failed`` at warning on the first failure (with the SDK's reason),
  further failures at debug, ``wmobs.otlp_export_recovered`` when a push goes through again.
  The application's own exporters, on other threads, keep their logs.
- **One choice of protocol** for both signals: ``http/protobuf`` (default) or ``grpc``, from
  ``attach(otlp_protocol=...)`` or the standard ``OTEL_EXPORTER_OTLP_{METRICS,TRACES}_PROTOCOL``
  and ``OTEL_EXPORTER_OTLP_PROTOCOL`` variables.

- **A close that does not wait for a Collector that is down.** Where a signal's last push
  failed, ``Monitor.close`` shuts its exporter down before the provider's last push
  (:meth:`QuietExports.stop_if_failing`), rather than wait out the SDK's retries.

Everything here runs on the SDK's export threads or ``close``'s, never on Spark's listener
thread.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.sdk.metrics import Histogram as SdkHistogram
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.trace.export import SpanExporter as SdkSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from wmobs._log import get_logger
from wmobs._version import __version__
from wmobs.listener._otlp_histograms import EventHistograms
from wmobs.listener._tracker import Tracker

__all__ = [
    "PROTOCOLS",
    "MetricsExporter",
    "QuietExports",
    "QuietSpanExporter",
    "metric_exporter",
    "resolve_protocol",
    "span_exporter",
]

PROTOCOLS = ("http/protobuf", "grpc")
"""The OTLP protocols wmobs pushes with (OpenTelemetry's names for them)."""

_SDK_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
    "opentelemetry.sdk.metrics._internal.export",
    "opentelemetry.sdk.trace.export",
    "opentelemetry.sdk._shared_internal",
)
"""The SDK's loggers that speak of a failed export."""

_NANOS = 1_000_000_000


def resolve_protocol(protocol: str | None, signal: str) -> str:
    """``protocol``, else ``OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL``, else
    ``OTEL_EXPORTER_OTLP_PROTOCOL``, else ``http/protobuf``; a clear error for anything else."""
    where = "otlp_protocol"
    if protocol is None:
        variables = (f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
        for variable in variables:
            if os.environ.get(variable):
                protocol, where = os.environ[variable].strip(), variable
                break
    protocol = protocol or "http/protobuf"
    if protocol not in PROTOCOLS:
        raise ValueError(
            f"{where}: {protocol!r} is not an OTLP protocol wmobs pushes with; use one of "
            f"{', '.join(PROTOCOLS)}"
        )
    return protocol


def _http_url(endpoint: str, signal: str) -> str:
    """A base URL gets the signal's path (``/v1/metrics``); a URL with a path is used as it is."""
    if urlsplit(endpoint).path in ("", "/"):
        return endpoint.rstrip("/") + f"/v1/{signal}"
    return endpoint


def _grpc_target(endpoint: str) -> tuple[str, bool]:
    """``host:port`` and whether it is plain text (``http://`` or no scheme), for gRPC."""
    parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    return parts.netloc, parts.scheme != "https"


def _missing(protocol: str, exc: ImportError) -> ImportError:
    extra = "otlp-grpc" if protocol == "grpc" else "otlp"
    return ImportError(f"OTLP over {protocol} needs its exporter: pip install 'wmobs[{extra}]'")


_EXPORTERS = {
    ("metrics", "grpc"): (
        "opentelemetry.exporter.otlp.proto.grpc.metric_exporter",
        "OTLPMetricExporter",
    ),
    ("metrics", "http/protobuf"): (
        "opentelemetry.exporter.otlp.proto.http.metric_exporter",
        "OTLPMetricExporter",
    ),
    ("traces", "grpc"): (
        "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
        "OTLPSpanExporter",
    ),
    ("traces", "http/protobuf"): (
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
        "OTLPSpanExporter",
    ),
}
"""The SDK's exporter class per (signal, protocol): module and name (imported when used)."""


def _exporter(signal: str, endpoint: str | bool, protocol: str) -> Any:
    """The SDK's OTLP exporter of ``signal`` for ``endpoint`` (``True``: the standard
    variables)."""
    import importlib

    module, name = _EXPORTERS[(signal, protocol)]
    try:
        exporter = getattr(importlib.import_module(module), name)
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise _missing(protocol, exc) from exc
    if endpoint is True:
        return exporter()
    if protocol == "grpc":
        target, insecure = _grpc_target(str(endpoint))
        return exporter(endpoint=target, insecure=insecure)
    return exporter(endpoint=_http_url(str(endpoint), signal))


def metric_exporter(endpoint: str | bool, protocol: str) -> Any:
    """The SDK's OTLP metric exporter for ``endpoint`` (``True``: the standard variables)."""
    return _exporter("metrics", endpoint, protocol)


def span_exporter(endpoint: str | bool, protocol: str) -> Any:
    """The SDK's OTLP span exporter for ``endpoint`` (``True``: the standard variables)."""
    return _exporter("traces", endpoint, protocol)


class _Quiet(logging.Filter):
    """Drops the SDK's records logged on threads where a wmobs exporter is exporting, keeping
    the last one's text (the reason wmobs names when it logs the failure once)."""

    def __init__(self) -> None:
        super().__init__("wmobs")
        self._threads: dict[int, int] = {}
        self._lock = threading.Lock()
        self.last: dict[int, str] = {}
        self.users = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.thread not in self._threads:
            return True
        if record.levelno >= logging.WARNING:
            self.last[record.thread or 0] = record.getMessage()
        return False

    def enter(self) -> int:
        ident = threading.get_ident()
        with self._lock:
            self._threads[ident] = self._threads.get(ident, 0) + 1
        self.last.pop(ident, None)
        return ident

    def leave(self, ident: int) -> str | None:
        with self._lock:
            if self._threads.get(ident, 0) <= 1:
                self._threads.pop(ident, None)
            else:
                self._threads[ident] -= 1
        return self.last.pop(ident, None)

    def install(self) -> None:
        """Filter the SDK's exporter loggers while any wmobs exporter lives."""
        with self._lock:
            self.users += 1
            if self.users == 1:
                for name in _SDK_LOGGERS:
                    logging.getLogger(name).addFilter(self)

    def remove(self) -> None:
        with self._lock:
            self.users -= 1
            if self.users == 0:
                for name in _SDK_LOGGERS:
                    logging.getLogger(name).removeFilter(self)


_quiet = _Quiet()


class QuietExports:
    """Runs exports with the SDK's failure logs held back, and logs a failure once.

    ``run(fn)`` calls ``fn()`` (an export) and reads its success from ``ok(result)``;
    transitions are logged: the first failure at warning, the rest at debug, a recovery at
    info. Never raises.
    """

    def __init__(self, signal: str, endpoint: str | bool, protocol: str, logger: Any) -> None:
        self._signal = signal
        self._endpoint = "from OTEL_EXPORTER_OTLP_* variables" if endpoint is True else endpoint
        self._protocol = protocol
        self._log = logger if logger is not None else get_logger()
        self._failing = False
        self.failures = 0
        """Pushes that failed so far."""
        self._closed = False
        self._stop: Any = None
        self._stopped = False
        self._stop_lock = threading.Lock()
        _quiet.install()

    def stops_with(self, stop: Any) -> None:
        """``stop()`` shuts the SDK's OTLP exporter down: from OpenTelemetry 1.36 on, that ends a
        push's retries at once and fails the pushes after it without a request."""
        self._stop = stop

    def stop(self) -> bool:
        """Shut the SDK's OTLP exporter down, once (on the caller's thread: ``close``'s, or the
        SDK's at its shutdown). Whether it was shut down by now (by this call or an earlier)."""
        with self._stop_lock:
            if self._stop is None:
                return False
            if self._stopped:
                return True
            self._stopped = True
        try:
            self._stop()
        except Exception:
            self._log.debug("wmobs.otlp_exporter_shutdown_failed", exc_info=True)
        return True

    def stop_if_failing(self) -> bool:
        """At ``close``: where the last push failed, shut the exporter down before its
        provider's last push, which would otherwise wait out the SDK's retries against an
        endpoint that is down (about 6 s a signal). Whether it did."""
        if not self._failing or self._stop is None:
            return False
        if self._stopped:
            return True
        self._log.info(
            "wmobs.otlp_last_push_skipped",
            signal=self._signal,
            endpoint=self._endpoint,
            reason="the last push failed",
        )
        self.stop()
        return True

    def run(self, fn: Any, ok: Any) -> Any:
        ident = _quiet.enter()
        reason: str | None = None
        result: Any = None
        try:
            result = fn()
        except Exception as exc:
            reason = repr(exc)
        finally:
            reason = _quiet.leave(ident) or reason
        if reason is None and ok(result):
            if self._failing:
                self._failing = False
                self._log.info(
                    "wmobs.otlp_export_recovered", signal=self._signal, endpoint=self._endpoint
                )
            return result
        self.failures += 1
        log = self._log.debug if self._failing else self._log.warning
        self._failing = True
        log(
            "wmobs.otlp_export_failed",
            signal=self._signal,
            endpoint=self._endpoint,
            protocol=self._protocol,
            reason=reason or "the exporter reported a failure",
            note="the queries are not affected; wmobs keeps pushing at each interval and logs "
            "further failures at debug, and once when a push goes through again",
        )
        return result

    def shutdown(self, inner_shutdown: Any) -> None:
        """A wrapper's shutdown, once: the SDK's exporter shut down by ``inner_shutdown()``
        unless :meth:`stop` did it already, then the log filter released."""
        if self._closed:
            return
        try:
            if not self.stop():
                inner_shutdown()
        finally:
            self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _quiet.remove()


class MetricsExporter(MetricExporter):
    """The SDK's OTLP exporter with wmobs' event distributions added to each push and its
    failures logged once (:class:`QuietExports`)."""

    def __init__(self, inner: Any, tracker: Tracker, quiet: QuietExports) -> None:
        super().__init__(
            preferred_temporality=inner._preferred_temporality,
            preferred_aggregation=inner._preferred_aggregation,
        )
        self._inner = inner
        self._quiet = quiet
        preferred = getattr(inner, "_preferred_temporality", None) or {}
        delta = preferred.get(SdkHistogram) == AggregationTemporality.DELTA
        self._events = EventHistograms(tracker, delta=delta, start_ns=time.time_ns())

    def _with_distributions(self, data: MetricsData) -> MetricsData:
        extra = self._events.collect(time.time_ns())
        if not extra:
            return data
        resources = list(data.resource_metrics)
        if not resources:
            return data
        first = resources[0]
        scopes = list(first.scope_metrics)
        for i, scope in enumerate(scopes):
            if scope.scope.name == "wmobs":
                scopes[i] = ScopeMetrics(scope.scope, [*scope.metrics, *extra], scope.schema_url)
                break
        else:
            scopes.append(ScopeMetrics(InstrumentationScope("wmobs", __version__), extra, ""))
        resources[0] = ResourceMetrics(first.resource, scopes, first.schema_url)
        return MetricsData(resources)

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        def push() -> MetricExportResult:
            data = self._with_distributions(metrics_data)
            result: MetricExportResult = self._inner.export(data, timeout_millis=timeout_millis)
            return result

        result = self._quiet.run(push, lambda r: r == MetricExportResult.SUCCESS)
        return result if result is not None else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return bool(self._inner.force_flush(timeout_millis))

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self._quiet.shutdown(lambda: self._inner.shutdown(timeout_millis=timeout_millis))


class QuietSpanExporter(SdkSpanExporter):
    """The SDK's span exporter (OTLP or console) with its failures logged once."""

    def __init__(self, inner: Any, quiet: QuietExports) -> None:
        self._inner = inner
        self._quiet = quiet

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        result = self._quiet.run(
            lambda: self._inner.export(spans), lambda r: r == SpanExportResult.SUCCESS
        )
        return result if result is not None else SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return bool(self._inner.force_flush(timeout_millis))

    def shutdown(self) -> None:
        self._quiet.shutdown(self._inner.shutdown)
