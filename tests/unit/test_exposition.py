"""The Prometheus endpoint renders from the tracker exactly what OpenTelemetry's exporter would:
the same samples, names, labels and values, over a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import socket
import struct
import urllib.error
import urllib.request
from typing import Any

import pytest
from prometheus_client import generate_latest
from structlog.testing import capture_logs

from tests.events import RecordingLogger
from wmobs.listener._exposition import CONTENT_TYPE, Exposition, MetricsServer
from wmobs.listener._spark_listener import WmobsListener
from wmobs.listener.metrics import EVENT_HISTOGRAMS
from wmobs.testing import MetricsRecorder, parse_metrics, progress_json, state_operator

NOW = 1_800_000_000.0
DISTRIBUTIONS = tuple(name for name, _ in EVENT_HISTOGRAMS.values())


def _feed(listener: WmobsListener, names: list[str]) -> None:
    for q, name in enumerate(names):
        for batch, duration_ms in enumerate([10, 50, 240, 999, 2_500, 700_000, 0]):
            listener._progress(
                progress_json(
                    name=name,
                    batch_id=batch,
                    duration_ms=duration_ms,
                    watermark=NOW - 30 - q,
                    event_time_max=NOW - q,
                    timestamp=NOW - 5,
                    state_operators=[
                        state_operator(rows_total=batch, dropped_by_watermark=1),
                        state_operator(rows_total=2 * batch),
                    ],
                    observed={
                        "wmobs.policy.p": {
                            "rule:late_arrival:adjusted": batch,
                            "rule:early_arrival:dropped": 1,
                            "dead_letter_rows": 1,
                            "idle_timeout_firings": batch % 2,
                            "hist:lateness:buckets": [
                                {"x": 0, "y": float(batch)},
                                {"x": 5, "y": 1.0},
                                {"x": 0, "y": 2.0},  # an index repeats: its counts add up
                            ],
                            "hist:lateness:sum_us": 3_000_000,
                        }
                    },
                )
            )


def _busy_recorder() -> MetricsRecorder:
    """Queries of every kind, fed through the real listener (which also records the SDK's
    histogram): watermarks, operators (one repeated), policy counts, dead letters, firings, a
    failed and a stopped query, a name that needs escaping, batches in every duration bucket."""
    rec = MetricsRecorder(clock=lambda: NOW)
    listener = WmobsListener(rec.tracker, [rec.instruments])
    with capture_logs():  # the listener's own log lines are not what this is about
        _feed(listener, ["plain", 'quote"and\\slash', "stopped", "failed"])
    for name, exception in (("stopped", None), ("failed", "boom")):
        snap = rec.tracker.snapshot(name)
        assert snap is not None
        rec.tracker.on_terminated(snap.query_id, exception)
    rec.tracker.on_started("new-id", "run", "not_yet")  # no progress: active, no time gauges
    return rec


def _without_target_info(samples: dict[Any, float]) -> dict[Any, float]:
    return {k: v for k, v in samples.items() if k[0] != "target_info"}


def _without_event_histograms(samples: dict[Any, float]) -> dict[Any, float]:
    """The distributions arrive pre-aggregated, which the SDK cannot take: only the endpoint
    has them (tested on their own)."""
    return {k: v for k, v in samples.items() if not k[0].startswith(DISTRIBUTIONS)}


def test_the_endpoint_renders_what_the_sdk_exporter_would() -> None:
    rec = _busy_recorder()
    direct = parse_metrics(Exposition(rec.tracker).render().decode())
    via_sdk = _without_target_info(parse_metrics(generate_latest(rec.sdk_registry).decode()))
    assert any(k[0].startswith(DISTRIBUTIONS) for k in direct)
    direct = _without_event_histograms(direct)
    assert len(direct) > 100
    assert direct == via_sdk
    rec.shutdown()


def test_help_and_type_lines_match_the_sdk_exporter() -> None:
    rec = _busy_recorder()

    def headers(text: str) -> list[str]:
        lines = [line for line in text.splitlines() if line.startswith("#")]
        kept = [line for line in lines if "target_info" not in line]
        return sorted(line for line in kept if not line.split()[2].startswith(DISTRIBUTIONS))

    assert headers(Exposition(rec.tracker).render().decode()) == headers(
        generate_latest(rec.sdk_registry).decode()
    )
    rec.shutdown()


def test_served_over_http_and_collected_through_a_registry() -> None:
    from prometheus_client import CollectorRegistry

    rec = _busy_recorder()
    exposition = Exposition(rec.tracker)
    server = MetricsServer("127.0.0.1", 0, exposition)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.headers["Content-Type"] == CONTENT_TYPE
            body = response.read()
        assert body == exposition.render()
    finally:
        server.shutdown()
        server.server_close()
    registry = CollectorRegistry()
    registry.register(exposition)
    assert registry.get_sample_value("wmobs_input_rows_total", {"query": "plain"}) == 70
    assert parse_metrics(generate_latest(registry).decode()) == parse_metrics(body.decode())
    rec.tracker.close()
    assert exposition.render() == b""  # a closed monitor exports nothing
    rec.shutdown()


def test_a_scraper_that_hangs_up_and_a_failed_render_print_nothing(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A scrape abandoned mid-response (Prometheus' scrape timeout) is a debug line and a render
    that fails is a 500 naming the error and one warning: neither prints socketserver's
    traceback on the application's stderr, and the next scrape is served."""
    body = {"now": b"x" * 32_000_000}

    class Switchable:
        def render(self) -> bytes:
            if isinstance(body["now"], Exception):
                raise body["now"]
            return body["now"]

    log = RecordingLogger()
    server = MetricsServer("127.0.0.1", 0, Switchable(), logger=log)  # type: ignore[arg-type]
    url = f"http://127.0.0.1:{server.server_port}/metrics"
    try:
        with socket.create_connection(("127.0.0.1", server.server_port), timeout=10) as client:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert client.recv(12).startswith(b"HTTP/1.0 200")  # then hung up, reset
        assert log.logged.wait(10), "the abandoned scrape was not logged"
        assert log.events() == [("debug", "wmobs.scrape_abandoned")]

        body["now"] = ValueError("a bug in rendering")
        with pytest.raises(urllib.error.HTTPError) as failed:
            urllib.request.urlopen(url, timeout=10)
        assert failed.value.code == 500
        assert "a bug in rendering" in failed.value.read().decode()
        assert log.events()[1:] == [("warning", "wmobs.exposition_failed")]

        body["now"] = b"wmobs_up 1\n"
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.read() == b"wmobs_up 1\n"
    finally:
        server.shutdown()
        server.server_close()
    assert capfd.readouterr().err == ""
