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
