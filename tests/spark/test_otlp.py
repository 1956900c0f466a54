"""OTLP push: attach(otlp_endpoint=...) posts real OTLP/HTTP protobuf to a local receiver."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

import wmobs
from wmobs.testing import progress_json

pytestmark = pytest.mark.spark


class _Receiver(BaseHTTPRequestHandler):
    bodies: ClassVar[list[tuple[str, bytes]]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        type(self).bodies.append((self.path, self.rfile.read(length)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[tuple[str, bytes]]]]:
    _Receiver.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", _Receiver.bodies
    server.shutdown()
    server.server_close()


def _metric_names(body: bytes) -> set[str]:
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )

    request = ExportMetricsServiceRequest()
    request.ParseFromString(body)
    return {
        metric.name
        for resource in request.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }


def test_otlp_push_on_close(spark: Any, receiver: tuple[str, list[tuple[str, bytes]]]) -> None:
    url, bodies = receiver
    monitor = wmobs.attach(spark, otlp_endpoint=url)
    monitor.tracker.on_progress(progress_json(name="otlp_q", watermark=1.0))
    monitor.close()  # shuts the private provider down: a final export
    assert bodies, "nothing was pushed"
    path, body = bodies[-1]
    assert path == "/v1/metrics"
    names = _metric_names(body)
    assert {"wmobs.query.active", "wmobs.input.rows", "wmobs.watermark.delay"} <= names


def test_otlp_endpoint_from_standard_variables(
    spark: Any, receiver: tuple[str, list[tuple[str, bytes]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, bodies = receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", f"{url}/custom/metrics")
    monitor = wmobs.attach(spark, otlp_endpoint=True)
    monitor.tracker.on_progress(progress_json(name="otlp_env"))
    monitor.close()
    assert [path for path, _ in bodies] == ["/custom/metrics"]
    assert "wmobs.input.rows" in _metric_names(bodies[-1][1])
