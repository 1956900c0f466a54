"""wmobs' OTLP exporters against a Collector that fails every push, on the SDK's own exporters
(no Spark): a failure is logged once, and closing does not wait out the SDK's retries."""

from __future__ import annotations

import http.server
import logging
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult

from tests.events import RecordingLogger
from wmobs.listener import Tracker
from wmobs.listener._otlp import MetricsExporter, QuietExports, QuietSpanExporter, span_exporter


class _Unavailable(http.server.BaseHTTPRequestHandler):
    """Answers every push 503 (retryable, as a Collector that is overloaded or starting)."""

    pushes = 0

    def do_POST(self) -> None:
        type(self).pushes += 1
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def unavailable() -> Iterator[tuple[str, type[_Unavailable]]]:
    handler = type("Handler", (_Unavailable,), {"pushes": 0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def test_an_exporter_whose_last_push_failed_stops_without_retrying(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    unavailable: tuple[str, type[_Unavailable]],
) -> None:
    """The push fails (the SDK retries it until its timeout) and is logged once; at close, wmobs
    shuts the SDK's exporter down before the provider's last push, so that push sends nothing
    instead of retrying against the Collector for seconds."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")  # seconds: the first push gives up
    endpoint, collector = unavailable
    log = RecordingLogger()
    quiet = QuietExports("traces", endpoint, "http/protobuf", log)
    inner = span_exporter(endpoint, "http/protobuf")
    quiet.stops_with(inner.shutdown)  # as attach does for its OTLP exporters
    exporter = QuietSpanExporter(inner, quiet)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    with provider.get_tracer("t").start_as_current_span("first"):
        pass
    assert collector.pushes >= 1
    assert quiet.failures == 1
    assert log.events() == [("warning", "wmobs.otlp_export_failed")]
    working = QuietExports("traces", endpoint, "http/protobuf", log)
    working.stops_with(lambda: None)
    assert working.stop_if_failing() is False  # its last push did not fail
    working.close()

    assert quiet.stop_if_failing() is True
    assert log.events()[-1] == ("info", "wmobs.otlp_last_push_skipped")
    before = collector.pushes
    assert exporter.export([]) == SpanExportResult.FAILURE  # the provider's last push
    assert collector.pushes == before, "a stopped exporter sends nothing"
    caplog.set_level(logging.WARNING, logger="opentelemetry")
    provider.shutdown()  # the exporter was stopped already: not again (the SDK would warn)
    assert not [r.getMessage() for r in caplog.records if r.name.startswith("opentelemetry")]
    assert [e for e in log.events() if e[0] in ("warning", "error")] == [
        ("warning", "wmobs.otlp_export_failed")
    ]


class _Inner:
    """An SDK exporter that counts its shutdowns (the SDK warns at a second one)."""

    _preferred_temporality: ClassVar[dict[Any, Any]] = {}
    _preferred_aggregation: ClassVar[dict[Any, Any]] = {}

    def __init__(self) -> None:
        self.shutdowns = 0

    def shutdown(self, **kwargs: Any) -> None:
        self.shutdowns += 1


@pytest.mark.parametrize("stoppable", [True, False], ids=["otlp", "console"])
def test_an_exporter_is_shut_down_once_whichever_way_it_ends(stoppable: bool) -> None:
    """A healthy close: the provider's shutdown reaches the SDK's exporter once, however often
    the wrapper is shut down; an exporter wmobs cannot stop early (the console's) still gets it;
    one stopped at close is not shut down again."""
    for stop_first in (False, True):
        inner = _Inner()
        quiet = QuietExports("metrics", "http://127.0.0.1:1", "http/protobuf", RecordingLogger())
        if stoppable:
            quiet.stops_with(inner.shutdown)
        exporter = MetricsExporter(inner, Tracker(), quiet)
        if stop_first:
            quiet.stop()
        exporter.shutdown()
        exporter.shutdown()
        assert inner.shutdowns == 1, (stoppable, stop_first)


def _arrivals(tracker: Tracker, bucket: int, rows: float, batch: int) -> None:
    """A micro-batch of query ``q`` whose policy ``p`` counted ``rows`` arrival delays in
    ``bucket``."""
    from wmobs.testing import progress_json

    observed = {"wmobs.policy.p": {"hist:arrival_delay:buckets": [{"x": bucket, "y": rows}]}}
    tracker.on_progress(progress_json(batch_id=batch, observed=observed))


def _point(metrics: list[Any]) -> Any:
    (metric,) = [m for m in metrics if m.name == "wmobs.event.arrival_delay"]
    (point,) = metric.data.data_points
    return metric.data.aggregation_temporality, point


def test_event_distributions_go_out_as_deltas_where_the_exporter_prefers_them() -> None:
    """``OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE=delta``: each push carries what was
    counted since the one before, from its time, as the SDK's own instruments then do."""
    from opentelemetry.sdk.metrics.export import AggregationTemporality

    from wmobs.listener._otlp_histograms import EventHistograms

    tracker = Tracker()
    events = EventHistograms(tracker, delta=True, start_ns=100)
    _arrivals(tracker, 3, 1, 0)
    temporality, first = _point(events.collect(200))
    assert temporality == AggregationTemporality.DELTA
    assert (first.start_time_unix_nano, first.count, first.bucket_counts[3]) == (100, 1, 1)
    _arrivals(tracker, 3, 2, 1)
    _, second = _point(events.collect(300))
    assert (second.start_time_unix_nano, second.count, second.bucket_counts[3]) == (200, 2, 2)
    assert sum(second.bucket_counts) == second.count


def test_a_cumulative_series_counted_from_zero_again_starts_again() -> None:
    """A query's label forgotten after the retention, and a query under it counting from zero
    again: its cumulative series gets a new start time, so that a consumer sees a reset rather
    than counts that went down."""
    from opentelemetry.sdk.metrics.export import AggregationTemporality

    from wmobs.listener._otlp_histograms import EventHistograms

    now = [1_000.0]
    tracker = Tracker(clock=lambda: now[0], retention=0.0)
    events = EventHistograms(tracker, delta=False, start_ns=100)
    _arrivals(tracker, 3, 5, 0)
    temporality, first = _point(events.collect(200))
    assert temporality == AggregationTemporality.CUMULATIVE
    assert (first.start_time_unix_nano, first.count) == (100, 5)
    _arrivals(tracker, 3, 1, 1)
    _, grown = _point(events.collect(300))
    assert (grown.start_time_unix_nano, grown.count) == (100, 6)
    (snap,) = tracker.snapshots()
    tracker.on_terminated(snap.query_id, None)
    now[0] += 1
    tracker.on_started("another", None, "another")  # the retention pass: q's label goes
    _arrivals(tracker, 3, 2, 0)
    _, again = _point(events.collect(400))
    assert (again.start_time_unix_nano, again.count) == (300, 2)
