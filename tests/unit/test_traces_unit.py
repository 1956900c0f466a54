"""The trace of a micro-batch (wmobs.listener._traces) and the OTLP choices of attach, on the
OpenTelemetry SDK's own in-memory exporter, from progress events as Spark writes them."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.events import RecordingLogger
from wmobs.listener import Tracker
from wmobs.listener._monitor import _resource, _tracing
from wmobs.listener._otlp import _grpc_target, _http_url, resolve_protocol
from wmobs.listener._traces import PHASES, BatchTracer
from wmobs.observations import rule_column
from wmobs.testing import progress_json

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


@pytest.fixture
def spans() -> tuple[BatchTracer, InMemorySpanExporter, Tracker]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return BatchTracer(provider), exporter, Tracker()


def _batch(
    setup: tuple[BatchTracer, InMemorySpanExporter, Tracker], **kwargs: Any
) -> dict[str, Any]:
    tracer, _, tracker = setup
    progress = progress_json(**kwargs)
    tracer.on_progress(progress, tracker.on_progress(progress))
    return progress


def _by_name(exporter: InMemorySpanExporter) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in exporter.get_finished_spans():
        found.setdefault(span.name, []).append(span)
    return found


def test_a_micro_batch_is_a_root_span_with_its_phases_end_to_end(spans: Any) -> None:
    progress = progress_json(name="q", batch_id=3, timestamp=T0, rows=7, watermark=T0 - 60)
    progress["durationMs"] = {
        "triggerExecution": 1000,
        "addBatch": 600,
        "latestOffset": 50,
        "walCommit": 100,
        "getBatch": 10,
        "queryPlanning": 40,
        "commitOffsets": 90,
        "setOffsetRange": 3,
    }
    tracer, exporter, tracker = spans
    tracer.on_progress(progress, tracker.on_progress(progress))
    found = _by_name(exporter)
    (root,) = found["micro-batch q"]
    assert root.parent is None
    assert root.start_time == int(T0 * 1e9)
    assert root.end_time == int(T0 * 1e9) + 1000 * 1_000_000
    attributes = dict(root.attributes or {})
    assert attributes["spark.batch.id"] == 3
    assert attributes["spark.batch.input_rows"] == 7
    assert attributes["spark.query.run_id"] == progress["runId"]
    assert attributes["spark.query.id"] == progress["id"]
    assert attributes["spark.watermark"] == "2025-12-31T23:59:00.000+00:00"
    assert attributes["wmobs.watermark.delay_s"] == 61.0  # the batch's end minus the watermark
    assert attributes["spark.duration.setOffsetRange_ms"] == 3
    at = root.start_time
    for phase, ms in (
        ("latestOffset", 50),
        ("walCommit", 100),
        ("getBatch", 10),
        ("queryPlanning", 40),
        ("addBatch", 600),
        ("commitOffsets", 90),
    ):
        (span,) = found[phase]
        assert span.parent is not None and span.parent.span_id == root.context.span_id
        assert span.context.trace_id == root.context.trace_id
        assert (span.start_time, span.end_time) == (at, at + ms * 1_000_000)
        at = span.end_time or 0
    assert set(PHASES) <= set(found)


def test_phases_never_run_past_the_micro_batch(spans: Any) -> None:
    progress = progress_json(timestamp=T0, duration_ms=100)
    progress["durationMs"] = {"triggerExecution": 100, "latestOffset": 80, "addBatch": 80}
    tracer, exporter, tracker = spans
    tracer.on_progress(progress, tracker.on_progress(progress))
    found = _by_name(exporter)
    (root,) = found["micro-batch q"]
    assert found["addBatch"][0].end_time == root.end_time


def test_each_micro_batch_is_its_own_trace_linked_to_the_one_before_in_its_run(
    spans: Any,
) -> None:
    _batch(spans, run_id="run-1", batch_id=0, timestamp=T0)
    _batch(spans, run_id="run-1", batch_id=1, timestamp=T0 + 1)
    _batch(spans, run_id="run-2", batch_id=2, timestamp=T0 + 2)  # a restart
    roots = sorted(_by_name(spans[1])["micro-batch q"], key=lambda s: s.start_time or 0)
    assert len({r.context.trace_id for r in roots}) == 3
    assert [[link.context.span_id for link in r.links] for r in roots] == [
        [],
        [roots[0].context.span_id],
        [],
    ]


def test_each_policy_is_a_span_under_add_batch_with_its_verdicts(spans: Any) -> None:
    observed = {
        "wmobs.policy.clicks": {
            rule_column("early_arrival", "dropped"): 3,
            rule_column("late_arrival", "adjusted"): 2,
            "dead_letter_rows": 3,
            "engine": "jvm",
            "dead_letter_plan": "jvm",
        },
        "wmobs.policy.views": {"idle_timeout_firings": 1, "engine": "python"},
    }
    _batch(spans, timestamp=T0, observed=observed)
    found = _by_name(spans[1])
    (add_batch,) = found["addBatch"]
    (clicks,) = found["policy clicks"]
    (views,) = found["policy views"]
    for span in (clicks, views):
        assert span.parent is not None and span.parent.span_id == add_batch.context.span_id
        assert (span.start_time, span.end_time) == (add_batch.start_time, add_batch.end_time)
    attributes = dict(clicks.attributes or {})
    assert attributes["wmobs.policy"] == "clicks"
    assert attributes["wmobs.policy.engine"] == "jvm"
    assert attributes["wmobs.policy.dead_letters"] == "jvm"
    assert attributes["wmobs.policy.early_arrival.dropped"] == 3
    assert attributes["wmobs.policy.late_arrival.adjusted"] == 2
    assert attributes["wmobs.policy.events"] == 5
    assert attributes["wmobs.policy.dead_letter_rows"] == 3
    assert dict(views.attributes or {})["wmobs.policy.idle_timeout_firings"] == 1


def test_a_replayed_micro_batch_says_so(spans: Any) -> None:
    _batch(spans, run_id="r", batch_id=4, timestamp=T0)
    _batch(spans, run_id="r2", batch_id=4, timestamp=T0 + 5)
    roots = sorted(_by_name(spans[1])["micro-batch q"], key=lambda s: s.start_time or 0)
    assert "spark.batch.replayed" not in (roots[0].attributes or {})
    assert (roots[1].attributes or {})["spark.batch.replayed"] is True


def test_traces_follow_the_standard_variable_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    events = RecordingLogger()

    def chosen(traces: bool | None) -> Any:
        provider, private = _tracing(traces, None, None, None, events, pushes=[])
        if private is not None:
            private.shutdown()
        return provider

    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    assert chosen(None) is None
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert chosen(None) is None
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    assert chosen(None) is not None
    assert chosen(False) is None
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    assert chosen(None) is None
    assert events.events() == [("warning", "wmobs.traces_exporter_unsupported")]
    own = TracerProvider()
    assert _tracing(None, own, None, None, None, pushes=[]) == (own, None)
    with pytest.raises(ValueError, match="traces=False"):
        _tracing(False, own, None, None, None, pushes=[])


def test_otlp_protocol_and_endpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"):
        monkeypatch.delenv(variable, raising=False)
    assert resolve_protocol(None, "metrics") == "http/protobuf"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    assert resolve_protocol(None, "metrics") == "grpc"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf")
    assert resolve_protocol(None, "metrics") == "http/protobuf"
    assert resolve_protocol(None, "traces") == "grpc"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(ValueError, match=r"OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json'"):
        resolve_protocol(None, "traces")
    with pytest.raises(ValueError, match="otlp_protocol: 'udp'"):
        resolve_protocol("udp", "traces")
    assert _http_url("http://c:4318", "traces") == "http://c:4318/v1/traces"
    assert _http_url("http://c:4318/", "metrics") == "http://c:4318/v1/metrics"
    assert _http_url("http://c:4318/custom", "metrics") == "http://c:4318/custom"
    assert _grpc_target("http://c:4317") == ("c:4317", True)
    assert _grpc_target("https://c:4317") == ("c:4317", False)
    assert _grpc_target("c:4317") == ("c:4317", True)


@pytest.mark.parametrize(
    ("environment", "service"),
    [
        ({}, "wmobs"),
        ({"OTEL_SERVICE_NAME": "payments"}, "payments"),
        ({"OTEL_RESOURCE_ATTRIBUTES": "service.name=fleet,deployment.environment=prod"}, "fleet"),
        (
            {"OTEL_SERVICE_NAME": "payments", "OTEL_RESOURCE_ATTRIBUTES": "service.name=fleet"},
            "payments",
        ),
    ],
)
def test_the_service_is_named_by_the_standard_variables_else_wmobs(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], service: str
) -> None:
    for name in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    attributes = _resource().attributes
    assert attributes["service.name"] == service
    if "deployment.environment" in environment.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        assert attributes["deployment.environment"] == "prod"
