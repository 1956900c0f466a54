"""OTLP through a real OpenTelemetry Collector (tests/otelcol.py): what wmobs pushes, as the
Collector's Prometheus exporter serves it, equals wmobs' own /metrics sample for sample, over
OTLP/HTTP and OTLP/gRPC; a trace of every micro-batch arrives with its phases and verdicts; a
Collector that is down or never answers leaves the query unharmed and is logged once."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import wmobs
from tests.events import RecordingLogger
from tests.otelcol import Collector, running_collector
from wmobs import TimePolicy
from wmobs.listener import parse_timestamp
from wmobs.listener._traces import PHASES
from wmobs.testing import parse_metrics

from ._streaming import heard, start_kept, stopped, wait_until, write_rows
from .cluster_job import WORKED
from .test_policy_spark import GLOBAL_EXPECTED, SCHEMA, worked_rows

pytestmark = pytest.mark.spark

NOW = parse_timestamp("2026-01-01T12:00:00Z") or 0.0
"""The monitors' clock: the gauges computed at a push and at a scrape agree."""

ADDED_BY_THE_COLLECTOR = ("job", "instance", "otel_scope_name", "otel_scope_version")
"""Labels the Collector's Prometheus exporter adds (from the resource and the scope)."""

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Collector]:
    yield from running_collector(tmp_path_factory.mktemp("otelcol"))


def _wmobs_samples(text: str) -> Samples:
    """wmobs' samples of a scrape, without what the Collector adds, ``le`` as a number (Go and
    Python write ``1`` and ``1.0``)."""
    samples: Samples = {}
    for (name, labels), value in parse_metrics(text).items():
        if not name.startswith("wmobs_") or name.endswith("_created"):
            continue
        kept = tuple(
            (k, str(float(v)) if k == "le" else v)
            for k, v in labels
            if k not in ADDED_BY_THE_COLLECTOR and k != "otel_scope_schema_url"
        )
        samples[(name, kept)] = value
    return samples


def _policy_stream(spark: Any, work: Path, name: str, policy: TimePolicy) -> Any:
    source = work / "in"
    for i, row in enumerate(worked_rows()):
        write_rows(source, f"{i:02d}", [row])
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 4).json(str(source))
    checkpoint = str(work / "ckpt")
    return start_kept(policy.apply(df, checkpoint_location=checkpoint), name, checkpoint)


def test_otlp_equals_the_metrics_endpoint_through_a_collector(
    spark: Any, tmp_path: Path, collector: Collector
) -> None:
    def clock() -> float:
        return NOW

    over_http = wmobs.attach(spark, prometheus_port=0, otlp_endpoint=collector.http, clock=clock)
    over_grpc = wmobs.attach(spark, otlp_endpoint=collector.grpc, otlp_protocol="grpc", clock=clock)
    policy = TimePolicy(**WORKED, name="otlp_policy", engine="jvm")
    query = _policy_stream(spark, tmp_path, "otlp_q", policy)
    try:
        query.processAllAvailable()
        query.stop()
        # Spark delivers a query's events in order, and the last is its termination: once both
        # monitors have heard it, none is in flight, and the scrape and the pushes see one
        # state (a progress event still on its way after processAllAvailable() made them
        # differ by a micro-batch).
        for monitor in (over_http, over_grpc):
            wait_until(lambda m=monitor: stopped(m, "otlp_q") == 1, what="the termination")
            spark.streams.removeListener(monitor.listener)
        assert over_http.metrics_url is not None
        own = _wmobs_samples(collector.scrape(over_http.metrics_url))
        assert over_http.flush() and over_grpc.flush()
        via_http = _wmobs_samples(collector.scrape(collector.prometheus_http))
        via_grpc = _wmobs_samples(collector.scrape(collector.prometheus_grpc))
    finally:
        query.stop()
        over_http.close()
        over_grpc.close()

    families = {name for name, _ in own}
    for distribution in ("arrival_delay", "lateness", "queueing_delay"):
        assert f"wmobs_event_{distribution}_seconds_bucket" in families
    assert {"wmobs_policy_events_total", "wmobs_batch_duration_seconds_bucket"} <= families
    verdicts = [v for (name, _), v in own.items() if name == "wmobs_policy_events_total"]
    assert sum(verdicts) > 0
    assert via_http == own
    assert via_grpc == own


def test_the_standard_variables_name_the_endpoint_and_close_pushes_what_is_left(
    spark: Any, collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``otlp_endpoint=True`` takes the endpoint from ``OTEL_EXPORTER_OTLP_ENDPOINT`` (a base
    URL: the SDK adds ``/v1/metrics``), and ``close()`` pushes once more before it returns: a
    query's figures reach the Collector with no interval passed."""
    from wmobs.testing import progress_json

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.http)
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "3600000")  # no push but the last
    monitor = wmobs.attach(spark, otlp_endpoint=True)
    spark.streams.removeListener(monitor.listener)  # this test's event only
    monitor.tracker.on_progress(progress_json(name="otlp_env_q", watermark=1.0))
    monitor.close()
    samples = _wmobs_samples(collector.scrape(collector.prometheus_http))
    queries = {
        dict(labels).get("query") for name, labels in samples if name == "wmobs_input_rows_total"
    }
    assert "otlp_env_q" in queries


def test_a_trace_per_micro_batch_through_a_collector(
    spark: Any, tmp_path: Path, collector: Collector
) -> None:
    policy = TimePolicy(**WORKED, name="traced_policy", engine="jvm")
    with wmobs.attach(
        spark, otlp_endpoint=collector.grpc, otlp_protocol="grpc", traces=True
    ) as monitor:
        query = _policy_stream(spark, tmp_path, "traced_q", policy)
        query.processAllAvailable()
        query.stop()
        # Every micro-batch's event heard (the termination comes last) before the monitor
        # closes: a span is made when its event arrives.
        wait_until(lambda: stopped(monitor, "traced_q") == 1, what="the termination")
        progress = [p for p in query.recentProgress if p["batchId"] >= 0]
        snap = monitor.snapshot("traced_q")
    assert snap is not None and snap.policy("traced_policy") is not None
    run_id = str(query.runId)

    def roots_of_run(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            s
            for s in spans
            if s["name"] == "micro-batch traced_q" and _attrs(s)["spark.query.run_id"] == run_id
        ]

    spans = collector.wait_for_spans(lambda found: len(roots_of_run(found)) >= len(progress))
    roots = sorted(roots_of_run(spans), key=lambda s: _attrs(s)["spark.batch.id"])
    assert [_attrs(r)["spark.batch.id"] for r in roots] == [p["batchId"] for p in progress]
    verdicts: dict[str, int] = {}
    for i, (root, event) in enumerate(zip(roots, progress, strict=True)):
        attributes = _attrs(root)
        assert "parentSpanId" not in root or not root["parentSpanId"]
        assert attributes["spark.query.id"] == str(query.id)
        assert attributes["spark.batch.input_rows"] == event["numInputRows"]
        start = int(root["startTimeUnixNano"])
        end = int(root["endTimeUnixNano"])
        assert start == round(parse_timestamp(event["timestamp"]) * 1e9)  # type: ignore[operator]
        assert end - start == event["durationMs"]["triggerExecution"] * 1_000_000
        if i:  # linked to the micro-batch before it
            assert [link["spanId"] for link in root.get("links", [])] == [roots[i - 1]["spanId"]]
        children = [s for s in spans if s.get("parentSpanId") == root["spanId"]]
        assert [c["name"] for c in children] == [p for p in PHASES if p in event["durationMs"]]
        at = start
        for child in children:
            assert child["traceId"] == root["traceId"]
            assert int(child["startTimeUnixNano"]) == at
            assert int(child["endTimeUnixNano"]) <= end
            at = int(child["endTimeUnixNano"])
        add_batch = next(c for c in children if c["name"] == "addBatch")
        (policy_span,) = [s for s in spans if s.get("parentSpanId") == add_batch["spanId"]]
        assert policy_span["name"] == "policy traced_policy"
        for key, value in _attrs(policy_span).items():
            if key.count(".") == 3:  # wmobs.policy.<rule>.<action>
                verdicts[key] = verdicts.get(key, 0) + value
        assert _attrs(policy_span)["wmobs.policy.engine"] == "jvm"
    policy_snap = snap.policy("traced_policy")
    assert policy_snap is not None
    _keep_a_sample(roots, spans)
    assert {k: v for k, v in verdicts.items() if v} == {
        f"wmobs.policy.{rule}.{action}": count
        for (rule, action), count in policy_snap.events.items()
        if count
    }


def _keep_a_sample(roots: list[dict[str, Any]], spans: list[dict[str, Any]]) -> None:
    """With ``WMOBS_TRACE_SAMPLE=<file>``: the spans of the micro-batch whose policy judged the
    most rows, as the Collector wrote them, into that file (the docs' picture of a trace,
    ``docs/guide/micro-batch-trace.json``, comes from here)."""
    target = os.environ.get("WMOBS_TRACE_SAMPLE")
    if not target:
        return
    judged = {
        s["traceId"]: _attrs(s)["wmobs.policy.events"]
        for s in spans
        if s["name"].startswith("policy ")
    }
    root = max(roots, key=lambda r: judged.get(r["traceId"], 0))
    sample = [s for s in spans if s["traceId"] == root["traceId"]]
    Path(target).write_text(json.dumps(sample, indent=1) + "\n")


def _attrs(span: dict[str, Any]) -> dict[str, Any]:
    """A span's attributes from the file exporter's OTLP JSON, as Python values."""
    out: dict[str, Any] = {}
    for attribute in span.get("attributes", []):
        value = attribute["value"]
        if "intValue" in value:
            out[attribute["key"]] = int(value["intValue"])
        elif "stringValue" in value:
            out[attribute["key"]] = value["stringValue"]
        else:
            out[attribute["key"]] = next(iter(value.values()))
    return out


@pytest.fixture(params=["down", "silent"])
def unreachable(request: pytest.FixtureRequest) -> Iterator[str]:
    """An OTLP endpoint where nothing listens ("down"), or a TCP server that accepts
    connections and never answers ("silent": a Collector that hangs)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    endpoint = f"http://127.0.0.1:{server.getsockname()[1]}"
    if request.param == "down":
        server.close()
        yield endpoint
        return
    server.listen()
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield endpoint
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_a_collector_down_or_silent_leaves_the_query_unharmed_and_is_logged_once(
    spark: Any,
    tmp_path: Path,
    unreachable: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")  # seconds, per push
    caplog.set_level(logging.DEBUG)
    policy = TimePolicy(**WORKED, name="unharmed", engine="jvm")
    events = RecordingLogger()
    monitor = wmobs.attach(spark, otlp_endpoint=unreachable, traces=True, logger=events)
    try:
        query = _policy_stream(spark, tmp_path, "unharmed", policy)
        query.processAllAvailable()
        last = query.lastProgress["batchId"]
        wait_until(
            lambda: heard(monitor, "unharmed", last),
            what="the listener hearing the last micro-batch (a span and figures to push)",
        )
        assert not monitor.flush()
        assert not monitor.flush()
        kept = spark.sql("select * from unharmed").count()
        query.stop()
        assert query.exception() is None
    finally:
        monitor.close()
    assert kept == sum(1 for system in GLOBAL_EXPECTED.values() if system is not None)
    assert monitor.listener.errors == 0
    failed = [(level, fields["signal"]) for level, event, fields in events.seen
              if event == "wmobs.otlp_export_failed" and level != "debug"]  # fmt: skip
    assert sorted(failed) == [("warning", "metrics"), ("warning", "traces")], "once per signal"
    skipped = [fields["signal"] for _, event, fields in events.seen
               if event == "wmobs.otlp_last_push_skipped"]  # fmt: skip
    assert sorted(skipped) == ["metrics", "traces"], "close does not wait out the retries"
    sdk = [r for r in caplog.records if r.name.startswith("opentelemetry")]
    assert not [r for r in sdk if r.levelno >= logging.WARNING], [r.getMessage() for r in sdk]
