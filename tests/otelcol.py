"""A real OpenTelemetry Collector on 127.0.0.1 for the tests: ``tools/otelcol`` (the OTLP
receiver, the Prometheus and file exporters, every collector module at one release), built by
``./dev`` into ``.tools/otelcol/wmobs-otelcol`` with ``go build``.

One collector, two metrics pipelines (OTLP/HTTP in, Prometheus out on one port; OTLP/gRPC in,
Prometheus out on another), so a test compares each protocol's arrivals apart; spans of both
into one file (the file exporter's OTLP JSON lines).
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.ports import free_port, stop_process

ROOT = Path(__file__).resolve().parents[1]
BINARY = ROOT / ".tools" / "otelcol" / "wmobs-otelcol"


@dataclass
class Collector:
    http: str
    """The OTLP/HTTP receiver's base URL."""
    grpc: str
    """The OTLP/gRPC receiver's URL."""
    prometheus_http: str
    """The Prometheus exporter's /metrics for what came over OTLP/HTTP."""
    prometheus_grpc: str
    """... and over OTLP/gRPC."""
    spans_file: Path
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        stop_process(self.process)

    def scrape(self, url: str) -> str:
        with urllib.request.urlopen(url, timeout=10) as response:
            return str(response.read().decode("utf-8"))

    def spans(self) -> list[dict[str, Any]]:
        """Every span the file exporter wrote so far, each with its resource's attributes."""
        if not self.spans_file.exists():
            return []
        found = []
        for line in self.spans_file.read_text().splitlines():
            if not line.strip():
                continue
            for resource in json.loads(line).get("resourceSpans", []):
                for scope in resource.get("scopeSpans", []):
                    found.extend(scope.get("spans", []))
        return found

    def wait_for_spans(self, ready: Any, timeout: float = 30) -> list[dict[str, Any]]:
        """The spans once ``ready(spans)`` holds (the file exporter flushes each second)."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.spans()
            if ready(spans):
                return spans
            assert time.monotonic() < deadline, f"the spans did not arrive: {len(spans)} so far"
            time.sleep(0.2)


def start_collector(work: Path, timeout: float = 60) -> Collector:
    """Starts the collector with a configuration written into ``work``; returns once both
    receivers and both Prometheus endpoints accept connections."""
    assert BINARY.is_file(), f"the collector is not built at {BINARY} (./dev builds it)"
    http, grpc, prom_http, prom_grpc = (free_port() for _ in range(4))
    spans = work / "spans.jsonl"
    config = work / "otelcol.yaml"
    config.write_text(
        f"""
receivers:
  otlp/http:
    protocols:
      http:
        endpoint: 127.0.0.1:{http}
  otlp/grpc:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{grpc}
exporters:
  prometheus/http:
    endpoint: 127.0.0.1:{prom_http}
  prometheus/grpc:
    endpoint: 127.0.0.1:{prom_grpc}
  file/spans:
    path: {spans}
    flush_interval: 200ms
service:
  telemetry:
    logs:
      level: warn
    metrics:
      level: none
  pipelines:
    metrics/http:
      receivers: [otlp/http]
      exporters: [prometheus/http]
    metrics/grpc:
      receivers: [otlp/grpc]
      exporters: [prometheus/grpc]
    traces:
      receivers: [otlp/http, otlp/grpc]
      exporters: [file/spans]
"""
    )
    log = work / "otelcol.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(BINARY), f"--config={config}"], stdout=out, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + timeout
    for port in (http, grpc, prom_http, prom_grpc):
        while True:
            assert process.poll() is None, f"the collector exited: {log.read_text()[-3000:]}"
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline, "the collector did not start in time"
                time.sleep(0.1)
    return Collector(
        http=f"http://127.0.0.1:{http}",
        grpc=f"http://127.0.0.1:{grpc}",
        prometheus_http=f"http://127.0.0.1:{prom_http}/metrics",
        prometheus_grpc=f"http://127.0.0.1:{prom_grpc}/metrics",
        spans_file=spans,
        process=process,
        log=log,
    )


def running_collector(work: Path) -> Iterator[Collector]:
    """A fixture body: the collector for a test, stopped after it."""
    collector = start_collector(work)
    try:
        yield collector
    finally:
        collector.stop()
