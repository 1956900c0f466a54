"""Snapshot and metric logic from progress JSON: no JVM, no Spark session."""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from wmobs.listener import parse_timestamp
from wmobs.listener._observed import parse_observed_metrics
from wmobs.metrics import BATCH_DURATION_BUCKETS, CONTRACT
from wmobs.observations import ACTIONS, RULES, policy_column, rule_column
from wmobs.testing import MetricsRecorder, iso, progress_json, state_operator

NOW = 1_800_000_000.0


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def rec(clock: Clock) -> Iterator[MetricsRecorder]:
    recorder = MetricsRecorder(clock=clock)
    yield recorder
    recorder.shutdown()


def test_parse_timestamp_handles_spark_iso_and_epoch() -> None:
    assert parse_timestamp("2027-01-15T08:00:00.250Z") == pytest.approx(1_800_000_000.25)
    assert parse_timestamp(iso(NOW)) == NOW
    assert parse_timestamp("1970-01-01T00:00:00.000Z") is None  # Spark's "no watermark yet"
    assert parse_timestamp(None) is None
    assert parse_timestamp("") is None


def test_watermark_delay_is_computed_at_collection(rec: MetricsRecorder, clock: Clock) -> None:
    rec.tracker.on_progress(progress_json(watermark=NOW - 30, event_time_max=NOW - 20))
    assert rec.value("wmobs_watermark_delay_seconds", query="q") == 30.0
    assert rec.value("wmobs_watermark_timestamp_seconds", query="q") == NOW - 30
    assert rec.value("wmobs_event_time_lag_seconds", query="q") == 20.0
    clock.now += 45  # a stalled query: no event, the delay keeps growing
    assert rec.value("wmobs_watermark_delay_seconds", query="q") == 75.0
    assert rec.value("wmobs_event_time_lag_seconds", query="q") == 65.0


def test_largest_watermark_wins(rec: MetricsRecorder) -> None:
    rec.tracker.on_progress(progress_json(batch_id=0, watermark=NOW - 10))
    rec.tracker.on_progress(progress_json(batch_id=1, watermark=NOW - 50))  # never goes back
    assert rec.value("wmobs_watermark_timestamp_seconds", query="q") == NOW - 10


def test_epoch_watermark_and_no_watermark_export_no_time_gauges(rec: MetricsRecorder) -> None:
    rec.tracker.on_progress(progress_json(name="epoch", watermark=0))
    rec.tracker.on_progress(progress_json(name="none", watermark=None))
    for query in ("epoch", "none"):
        assert rec.value("wmobs_watermark_delay_seconds", query=query) is None
        assert rec.value("wmobs_watermark_timestamp_seconds", query=query) is None
        assert rec.value("wmobs_input_rows_total", query=query) == 10
    body = progress_json(name="none", watermark=None)
    assert "eventTime" not in body


def test_input_rows_counted_across_batches(rec: MetricsRecorder) -> None:
    for batch, rows in enumerate([5, 0, 7, 11]):
        rec.tracker.on_progress(progress_json(batch_id=batch, rows=rows))
    assert rec.value("wmobs_input_rows_total", query="q") == 23


def test_source_idle_counts_from_end_of_last_batch_with_rows(
    rec: MetricsRecorder, clock: Clock
) -> None:
    rec.tracker.on_progress(progress_json(timestamp=NOW - 100, duration_ms=2000, rows=3))
    rec.tracker.on_progress(progress_json(timestamp=NOW - 50, duration_ms=1000, rows=0))
    assert rec.value("wmobs_source_idle_seconds", query="q") == pytest.approx(98.0)
    clock.now += 10
    assert rec.value("wmobs_source_idle_seconds", query="q") == pytest.approx(108.0)


def test_source_idle_absent_before_any_input(rec: MetricsRecorder) -> None:
    rec.tracker.on_progress(progress_json(rows=0))
    assert rec.value("wmobs_source_idle_seconds", query="q") is None


def test_idle_event_keeps_gauges_growing(rec: MetricsRecorder, clock: Clock) -> None:
    body = progress_json(watermark=NOW - 5)
    rec.tracker.on_progress(body)
    assert rec.tracker.on_idle(body["id"]) == "q"
    assert rec.tracker.on_idle("unknown-id") is None
    clock.now += 60
    assert rec.value("wmobs_watermark_delay_seconds", query="q") == 65.0


def test_termination_hides_time_gauges_and_counts_outcome(
    rec: MetricsRecorder,
) -> None:
    body = progress_json(
        watermark=NOW - 5,
        event_time_max=NOW - 1,
        state_operators=[state_operator(rows_total=4)],
    )
    rec.tracker.on_progress(body)
    assert rec.value("wmobs_query_active", query="q") == 1
    assert rec.value("wmobs_query_terminations_total", query="q", outcome="stopped") == 0
    assert rec.value("wmobs_query_terminations_total", query="q", outcome="failed") == 0

    rec.tracker.on_terminated(body["id"], exception=None)
    assert rec.value("wmobs_query_active", query="q") == 0
    assert rec.value("wmobs_query_terminations_total", query="q", outcome="stopped") == 1
    for name in (
        "wmobs_watermark_delay_seconds",
        "wmobs_watermark_timestamp_seconds",
        "wmobs_event_time_lag_seconds",
        "wmobs_source_idle_seconds",
    ):
        assert rec.value(name, query="q") is None, name
    assert rec.value("wmobs_state_rows", query="q", operator="stateStoreSave") is None
    # counters survive termination
    assert rec.value("wmobs_input_rows_total", query="q") == 10

    # a restart (same id, new run) is active again and keeps its counters
    rec.tracker.on_started(body["id"], "run-2", "q")
    rec.tracker.on_progress(progress_json(batch_id=1, rows=2))
    assert rec.value("wmobs_query_active", query="q") == 1
    assert rec.value("wmobs_input_rows_total", query="q") == 12
    rec.tracker.on_terminated(body["id"], exception="java.lang.RuntimeException: boom\n\tat x")
    assert rec.value("wmobs_query_terminations_total", query="q", outcome="failed") == 1
    assert rec.value("wmobs_query_terminations_total", query="q", outcome="stopped") == 1


def test_multiple_queries_have_separate_series(rec: MetricsRecorder) -> None:
    rec.tracker.on_progress(progress_json(name="a", rows=3, watermark=NOW - 10))
    rec.tracker.on_progress(progress_json(name="b", rows=4, watermark=NOW - 20))
    assert rec.value("wmobs_input_rows_total", query="a") == 3
    assert rec.value("wmobs_input_rows_total", query="b") == 4
    assert rec.value("wmobs_watermark_delay_seconds", query="a") == 10.0
    assert rec.value("wmobs_watermark_delay_seconds", query="b") == 20.0


def test_unnamed_query_is_labelled_by_id_not_run_id(rec: MetricsRecorder) -> None:
    body = progress_json(name=None, id="7d7f3a3e-0000-4000-8000-000000000001", run_id="r-1")
    rec.tracker.on_progress(body)
    assert rec.value("wmobs_input_rows_total", query="7d7f3a3e-0000-4000-8000-000000000001") == 10
    assert rec.value("wmobs_input_rows_total", query="r-1") is None


def test_state_operators_and_drops(rec: MetricsRecorder) -> None:
    ops = [state_operator(rows_total=7, dropped_by_watermark=2, memory_bytes=4096)]
    rec.tracker.on_progress(progress_json(batch_id=0, state_operators=ops))
    ops = [state_operator(rows_total=9, dropped_by_watermark=3, memory_bytes=8192)]
    summary = rec.tracker.on_progress(progress_json(batch_id=1, state_operators=ops))
    assert summary.rows_dropped_by_watermark == 3
    labels = {"query": "q", "operator": "stateStoreSave"}
    assert rec.value("wmobs_rows_dropped_by_watermark_total", **labels) == 5
    assert rec.value("wmobs_state_rows", **labels) == 9
    assert rec.value("wmobs_state_memory_bytes", **labels) == 8192


def test_repeated_operator_names_get_positions(rec: MetricsRecorder) -> None:
    ops = [state_operator("stateStoreSave", rows_total=1), state_operator("stateStoreSave")]
    rec.tracker.on_progress(progress_json(state_operators=ops))
    assert rec.value("wmobs_state_rows", query="q", operator="stateStoreSave#0") == 1
    assert rec.value("wmobs_state_rows", query="q", operator="stateStoreSave#1") == 0


def test_batch_duration_histogram_uses_second_buckets() -> None:
    rec = MetricsRecorder()
    rec.instruments.record_batch_duration("q", 0.3)
    rec.instruments.record_batch_duration("q", 42.0)
    assert rec.sdk_value("wmobs_batch_duration_seconds_count", query="q") == 2
    assert rec.sdk_value("wmobs_batch_duration_seconds_sum", query="q") == pytest.approx(42.3)
    assert rec.sdk_value("wmobs_batch_duration_seconds_bucket", query="q", le="0.5") == 1
    assert rec.sdk_value("wmobs_batch_duration_seconds_bucket", query="q", le="60.0") == 2
    assert BATCH_DURATION_BUCKETS[-1] >= 600


def test_observed_metrics_follow_the_naming_convention(rec: MetricsRecorder) -> None:
    observed = {
        "wmobs.policy.p1": {
            rule_column("late_arrival", "adjusted"): 4,
            rule_column("early_arrival", "dropped"): 1,
            "dead_letter_rows": 1,
            "engine": "jvm",
            "dead_letter_plan": "jvm",
            "weird": 9,
        },
        "wmobs": {"idle_timeout_firings": 2, rule_column("late_arrival", "adjusted"): None},
        "someone_else": {rule_column("late_arrival", "adjusted"): 100},
    }
    summary = rec.tracker.on_progress(progress_json(batch_id=0, observed=observed))
    assert summary.unknown_columns == ("wmobs.policy.p1.weird",)
    rec.tracker.on_progress(progress_json(batch_id=1, observed=observed))
    late = {"query": "q", "policy": "p1", "rule": "late_arrival", "action": "adjusted"}
    assert rec.value("wmobs_policy_events_total", **late) == 8
    early = {"query": "q", "policy": "p1", "rule": "early_arrival", "action": "dropped"}
    assert rec.value("wmobs_policy_events_total", **early) == 2
    # every known label set of each policy exists, at 0
    for policy in ("p1", "wmobs"):
        for rule in RULES:
            for action in ACTIONS:
                labels = {"query": "q", "policy": policy, "rule": rule, "action": action}
                assert rec.value("wmobs_policy_events_total", **labels) is not None
    assert rec.value("wmobs_dead_letter_rows_total", query="q", policy="p1") == 2
    assert rec.value("wmobs_dead_letter_rows_total", query="q", policy="wmobs") is None
    assert rec.value("wmobs_idle_timeout_firings_total", query="q", policy="wmobs") == 4
    info = {"query": "q", "engine": "jvm", "dead_letters": "jvm"}
    assert rec.value("wmobs_policy_info", **info, policy="p1") == 1
    assert rec.value("wmobs_policy_info", **info, policy="wmobs") is None


def test_two_policies_of_one_query_are_counted_apart(rec: MetricsRecorder) -> None:
    """A union of two policed inputs: which one dropped what, and each one's dead letters
    and engine (the verdict kind is ``rule``, the policy's name ``policy``)."""
    observed = {
        "wmobs.policy.clicks": {
            rule_column("early_arrival", "dropped"): 3,
            "dead_letter_rows": 3,
            "engine": "jvm",
            "dead_letter_plan": "jvm",
        },
        "wmobs.policy.views": {
            rule_column("late_arrival", "dropped"): 5,
            "dead_letter_rows": 5,
            "engine": "python",
            "dead_letter_plan": "python_dropped",
        },
    }
    rec.tracker.on_progress(progress_json(observed=observed))
    events = "wmobs_policy_events_total"
    clicks = {"query": "q", "policy": "clicks"}
    views = {"query": "q", "policy": "views"}
    assert rec.value(events, **clicks, rule="early_arrival", action="dropped") == 3
    assert rec.value(events, **clicks, rule="late_arrival", action="dropped") == 0
    assert rec.value(events, **views, rule="late_arrival", action="dropped") == 5
    assert rec.value(events, **views, rule="early_arrival", action="dropped") == 0
    assert rec.value("wmobs_dead_letter_rows_total", **clicks) == 3
    assert rec.value("wmobs_dead_letter_rows_total", **views) == 5
    jvm = {"engine": "jvm", "dead_letters": "jvm"}
    assert rec.value("wmobs_policy_info", **clicks, **jvm) == 1
    assert (
        rec.value("wmobs_policy_info", **views, engine="python", dead_letters="python_dropped") == 1
    )
    rec.tracker.on_terminated(rec.tracker.snapshot("q").query_id, None)  # type: ignore[union-attr]
    assert rec.value("wmobs_policy_info", **clicks, **jvm) is None  # not running
    assert rec.value("wmobs_dead_letter_rows_total", **clicks) == 3  # counters stay


def test_columns_named_before_the_rule_label_are_read() -> None:
    """``policy:<rule>:<action>``, as wmobs 0.1 named the columns (and policy_column)."""
    counts = parse_observed_metrics({"wmobs.policy.p": {"policy:out_of_order:adjusted": 2}})
    assert counts.policies["p"].events == {("out_of_order", "adjusted"): 2}
    assert policy_column("out_of_order", "adjusted") == "rule:out_of_order:adjusted"
    unknown = parse_observed_metrics({"wmobs.policy.p": {"engine": "gpu"}})
    assert unknown.unknown_columns == ["wmobs.policy.p.engine"]


def test_queries_without_observations_export_no_policy_series(rec: MetricsRecorder) -> None:
    rec.tracker.on_progress(progress_json())
    assert not {n for n in rec.names() if n.startswith("wmobs_policy_events")}
    assert rec.value("wmobs_dead_letter_rows_total", query="q") is None


def test_rule_column_rejects_unknown_labels() -> None:
    with pytest.raises(ValueError, match="rule must be one of"):
        rule_column("too_late", "dropped")
    assert parse_observed_metrics(None).empty


def _every_series(rec: MetricsRecorder) -> None:
    """A micro-batch that gives every series progress can give, and a batch duration."""
    ops = [state_operator(rows_total=1, dropped_by_watermark=1)]
    observed = {
        "wmobs": {
            "dead_letter_rows": 0,
            "idle_timeout_firings": 0,
            "engine": "python",
            "input_watermark_us": int((NOW - 5) * 1e6),
            "input_event_time_us": int(NOW * 1e6),
            "hist:arrival_delay:buckets": [{"x": 3, "y": 1.0}],
            "hist:lateness:buckets": [{"x": 0, "y": 1.0}],
            "hist:queueing_delay:buckets": [{"x": 7, "y": 1.0}],
            "substream_spread_us": 0,
        }
    }
    body = progress_json(
        watermark=NOW - 1,
        event_time_max=NOW,
        state_operators=ops,
        observed=observed,
        kafka_backlog=12,
    )
    rec.tracker.on_progress(body)
    rec.instruments.record_batch_duration("q", 0.1)


def test_prometheus_names_are_the_contract(rec: MetricsRecorder) -> None:
    """Every name of the metric contract (README, "Metrics") that progress can provide is
    exposed, exactly so."""
    _every_series(rec)
    expected = set()
    for name, (kind, _labels) in CONTRACT.items():
        suffixes = ("_bucket", "_count", "_sum") if kind == "histogram" else ("",)
        expected |= {name + suffix for suffix in suffixes}
    assert {n for n in rec.names() if n.startswith("wmobs_")} == expected


def test_opentelemetry_names_translate_to_the_contracts(rec: MetricsRecorder) -> None:
    """Every instrument, read by the SDK's Prometheus exporter (the names a Collector's
    Prometheus exporter or a Prometheus OTLP receiver gives it, its unit made a suffix, a unit in
    braces dropped), is the contract's name: all but the event distributions, which OTLP gets
    from wmobs' own push (``_otlp.py``), not from an instrument."""
    _every_series(rec)
    sdk = {s.name for family in rec.sdk_registry.collect() for s in family.samples}
    sdk = {n for n in sdk if n.startswith("wmobs_")}
    ours = {n for n in rec.names() if n.startswith("wmobs_")}
    events = ("wmobs_event_arrival_delay", "wmobs_event_lateness", "wmobs_event_queueing_delay")
    assert sdk == {n for n in ours if not n.startswith(events)}


def test_the_substream_spread_is_the_latest_batchs(rec: MetricsRecorder) -> None:
    """Per substream policy, the spread of its latest micro-batch that had one (not the
    largest, not a sum); none for a policy without substreams; gone once the query stops."""
    for batch_id, spread_us in enumerate([600_000_000, None, 90_500_000]):
        observed: dict[str, dict[str, int | None]] = {
            "wmobs.policy.devices": {"substream_spread_us": spread_us},
            "wmobs.policy.global": {"input_watermark_us": int(NOW * 1e6)},
        }
        rec.tracker.on_progress(progress_json(batch_id=batch_id, observed=observed))
    spread = "wmobs_substream_spread_seconds"
    assert rec.value(spread, query="q", policy="devices") == pytest.approx(90.5)
    assert rec.value(spread, query="q", policy="global") is None
    rec.tracker.on_terminated(rec.tracker.snapshot("q").query_id, None)  # type: ignore[union-attr]
    assert rec.value(spread, query="q", policy="devices") is None


def test_each_input_has_its_own_watermark_delay_and_lag(rec: MetricsRecorder, clock: Clock) -> None:
    """Two time policies of one query (a join): per input, the largest watermark and event
    time over the batches, as delays computed at collection; none for an input without
    rows in a batch; gone once the query stops."""

    def batch(batch_id: int, a: tuple[float, float] | None, b: tuple[float, float] | None) -> None:
        observed = {}
        for name, times in (("wmobs.policy.clicks", a), ("wmobs.policy.views", b)):
            watermark, event = (None, None) if times is None else times
            observed[name] = {
                rule_column("late_arrival", "adjusted"): 0,
                "input_watermark_us": None if watermark is None else int(watermark * 1e6),
                "input_event_time_us": None if event is None else int(event * 1e6),
            }
        rec.tracker.on_progress(progress_json(batch_id=batch_id, observed=observed))

    batch(0, (NOW - 100, NOW - 90), (NOW - 20, NOW - 10))
    batch(1, (NOW - 110, NOW - 95), None)  # older times and an empty input: nothing moves
    clock.now = NOW + 5
    delay = "wmobs_input_watermark_delay_seconds"
    lag = "wmobs_input_event_time_lag_seconds"
    assert rec.value(delay, query="q", policy="clicks") == pytest.approx(105)
    assert rec.value(delay, query="q", policy="views") == pytest.approx(25)
    assert rec.value(lag, query="q", policy="clicks") == pytest.approx(95)
    assert rec.value(lag, query="q", policy="views") == pytest.approx(15)
    batch(2, (NOW - 3, NOW), None)  # the stalled input catches up
    assert rec.value(delay, query="q", policy="clicks") == pytest.approx(8)
    rec.tracker.on_terminated(rec.tracker.snapshot("q").query_id, None)  # type: ignore[union-attr]
    assert rec.value(delay, query="q", policy="clicks") is None


def test_policy_labels_come_from_the_observation_name() -> None:
    from wmobs.observations import input_label, policy_label

    assert policy_label("wmobs.policy.sensors") == "sensors"
    assert policy_label("wmobs.e2e") == "e2e"
    assert policy_label("wmobs") == "wmobs"
    assert input_label("wmobs.policy.sensors") == "sensors"


def test_closed_tracker_exports_nothing(rec: MetricsRecorder) -> None:
    rec.tracker.on_progress(progress_json(watermark=NOW - 1))
    rec.tracker.close()
    assert rec.value("wmobs_query_active", query="q") is None
    assert rec.value("wmobs_watermark_delay_seconds", query="q") is None


def test_progress_json_roundtrips_through_pyspark_fromjson() -> None:
    listener = pytest.importorskip("pyspark.sql.streaming.listener")
    body = progress_json(
        watermark=NOW - 1,
        event_time_max=NOW,
        state_operators=[state_operator()],
        observed={"wmobs": {"dead_letter_rows": 3}},
    )
    event = listener.QueryProgressEvent.fromJson({"progress": json.loads(json.dumps(body))})
    assert event.progress.name == "q"
    assert event.progress.observedMetrics["wmobs"]["dead_letter_rows"] == 3
    assert event.progress.eventTime["watermark"] == iso(NOW - 1)


def test_a_joint_histogram_column_counts_like_one_column_per_histogram() -> None:
    """``hist:arrival_delay*lateness:buckets`` (one aggregate for both histograms) decodes to
    the counts the two columns give, rows without a value in one of them included."""
    from collections import Counter

    from wmobs.observations import HISTOGRAMS

    sizes = {h: len(bounds) + 1 for h, bounds in HISTOGRAMS.items()}
    # (delay bucket, lateness bucket), None where the row has no value in that histogram
    rows = [(0, 0), (3, 0), (3, 0), (23, 17), (5, None), (None, 2), (sizes["arrival_delay"] - 1, 1)]
    absent = {"arrival_delay": sizes["arrival_delay"], "lateness": sizes["lateness"]}
    joint = Counter(
        (absent["arrival_delay"] if d is None else d) * (sizes["lateness"] + 1)
        + (absent["lateness"] if late is None else late)
        for d, late in rows
    )
    separate = {
        h: Counter(row[i] for row in rows if row[i] is not None)
        for i, h in enumerate(("arrival_delay", "lateness"))
    }

    def points(counts: Counter[int]) -> list[dict[str, float]]:
        return [{"x": float(x), "y": float(n)} for x, n in counts.items()]

    one = parse_observed_metrics(
        {"wmobs.policy.p": {"hist:arrival_delay*lateness:buckets": points(joint)}}
    )
    two = parse_observed_metrics(
        {"wmobs.policy.p": {f"hist:{h}:buckets": points(c) for h, c in separate.items()}}
    )
    assert one.policies["p"].histograms == two.policies["p"].histograms
    assert one.policies["p"].histograms["lateness"].count == 6
    assert one.policies["p"].histograms["arrival_delay"].buckets[3] == 2
    assert not one.unknown_columns
    unknown = parse_observed_metrics({"wmobs": {"hist:arrival_delay*nope:buckets": []}})
    assert unknown.unknown_columns == ["wmobs.hist:arrival_delay*nope:buckets"]
    twice = parse_observed_metrics({"wmobs": {"hist:lateness*lateness:buckets": []}})
    assert twice.unknown_columns == ["wmobs.hist:lateness*lateness:buckets"]


def test_a_bucket_index_a_rounding_error_off_is_read_rounded() -> None:
    """``histogram_numeric`` merges two bins of the same index into their weighted mean, which
    can come out a rounding error off it: the index is read rounded, not truncated."""
    below, above = 3 * (1 - 2**-52), 4 * (1 + 2**-52)
    counts = parse_observed_metrics(
        {
            "wmobs.policy.p": {
                "hist:lateness:buckets": [
                    {"x": below, "y": 5.0},
                    {"x": 3.0, "y": 1.0},
                    {"x": above, "y": 2.0},
                ]
            }
        }
    )
    assert int(below) == 2  # what truncation would have counted
    assert counts.policies["p"].histograms["lateness"].buckets[2:5] == [0, 6, 2]


def test_the_columns_of_a_struct_column_are_read_as_columns() -> None:
    """wmobs' JAR observes a policy's columns as members of one JSON object, ``columns``: they
    count as if observed one by one (a struct is read the same way, in a Row as in progress
    JSON)."""
    from pyspark.sql import Row

    flat = {
        "rule:late_arrival:adjusted": 3,
        "dead_letter_rows": 1,
        "engine": "jvm",
        "input_watermark_us": 5_000_000,
        "input_event_time_us": None,
        "hist:arrival_delay*lateness:buckets": [{"x": 21.0, "y": 2.0}],
        "hist:arrival_delay:sum_us": 7,
        "hist:lateness:sum_us": None,
    }
    expected = parse_observed_metrics({"wmobs.policy.p": flat})
    assert expected.policies["p"].events[("late_arrival", "adjusted")] == 3
    as_json = parse_observed_metrics({"wmobs.policy.p": {"columns": flat}})
    as_row = parse_observed_metrics({"wmobs.policy.p": Row(columns=Row(**flat))})
    as_text = parse_observed_metrics({"wmobs.policy.p": Row(columns=json.dumps(flat))})
    assert as_json == expected == as_row == as_text
    assert not as_text.unknown_columns


def test_the_backlog_of_each_source_is_its_last_report(rec: MetricsRecorder) -> None:
    """Kafka's ``maxOffsetsBehindLatest``, per source, the last value reported; none for a
    source that reports nothing, and none once the query stops."""
    rec.tracker.on_progress(progress_json(batch_id=0, kafka_backlog=500))
    source = {"query": "q", "source": "KafkaV2[Subscribe[events]]"}
    assert rec.value("wmobs_source_backlog_records", **source) == 500
    rec.tracker.on_progress(progress_json(batch_id=1, kafka_backlog=20))
    assert rec.value("wmobs_source_backlog_records", **source) == 20
    rec.tracker.on_progress(progress_json(name="files"))
    files = {"query": "files", "source": "FileStreamSource[file:/tmp/in]"}
    assert rec.value("wmobs_source_backlog_records", **files) is None
    rec.tracker.on_terminated(rec.tracker.snapshot("q").query_id, None)  # type: ignore[union-attr]
    assert rec.value("wmobs_source_backlog_records", **source) is None


def test_a_replayed_micro_batch_is_not_counted_twice(rec: MetricsRecorder) -> None:
    """A restart re-runs the micro-batch whose commit was not written, under a new run id:
    the same offsets, the same rows and verdicts. Its rows, verdicts and dead letters were
    counted when it first ran."""
    observed = {
        "wmobs.policy.p": {rule_column("late_arrival", "dropped"): 2, "dead_letter_rows": 2}
    }
    first = rec.tracker.on_progress(progress_json(batch_id=3, rows=10, observed=observed))
    again = rec.tracker.on_progress(
        progress_json(batch_id=3, rows=10, observed=observed, run_id="restarted")
    )
    assert (first.replayed, again.replayed) == (False, True)
    rec.tracker.on_progress(progress_json(batch_id=4, rows=5, observed=observed))
    labels = {"query": "q", "policy": "p", "rule": "late_arrival", "action": "dropped"}
    assert rec.value("wmobs_policy_events_total", **labels) == 4
    assert rec.value("wmobs_dead_letter_rows_total", query="q", policy="p") == 4
    assert rec.value("wmobs_input_rows_total", query="q") == 15


def test_a_new_query_under_an_earlier_ones_name_continues_its_series(
    rec: MetricsRecorder,
) -> None:
    """Each new checkpoint is a new query id; under the same name it is the same series: one
    sample per label set (never two, which Prometheus refuses), counters and histograms that
    go on from the earlier query's, gauges of the new one. The earlier query's termination
    arrives after the new one started (Spark frees the name first): it still counts, and the
    new query stays active."""
    observed = {
        "wmobs.policy.p": {rule_column("late_arrival", "dropped"): 2, "dead_letter_rows": 2}
    }
    ops = [state_operator(rows_total=7, dropped_by_watermark=3)]
    rec.tracker.on_started("old", "run-1", "q")
    rec.tracker.on_progress(
        progress_json(id="old", batch_id=5, rows=10, watermark=NOW - 5, observed=observed,
                      state_operators=ops)
    )  # fmt: skip
    rec.tracker.on_started("new", "run-2", "q")
    rec.tracker.on_terminated("old", exception="java.lang.RuntimeException: boom")
    rec.tracker.on_progress(
        progress_json(id="new", batch_id=0, rows=4, watermark=NOW - 60, observed=observed,
                      state_operators=[state_operator(rows_total=1, dropped_by_watermark=1)])
    )  # fmt: skip

    samples = [s for f in rec.registry.collect() for s in f.samples]
    keys = [(s.name, tuple(sorted(s.labels.items()))) for s in samples]
    assert len(keys) == len(set(keys)), "a series exported twice"
    assert rec.value("wmobs_query_active", query="q") == 1
    assert rec.value("wmobs_query_terminations_total", query="q", outcome="failed") == 1
    assert rec.value("wmobs_input_rows_total", query="q") == 14  # the new batch 0 is no replay
    labels = {"query": "q", "policy": "p", "rule": "late_arrival", "action": "dropped"}
    assert rec.value("wmobs_policy_events_total", **labels) == 4
    assert rec.value("wmobs_dead_letter_rows_total", query="q", policy="p") == 4
    assert rec.value("wmobs_batch_duration_seconds_count", query="q") == 2
    operator = {"query": "q", "operator": "stateStoreSave"}
    assert rec.value("wmobs_rows_dropped_by_watermark_total", **operator) == 4
    assert rec.value("wmobs_state_rows", **operator) == 1  # the new query's state
    assert rec.value("wmobs_watermark_delay_seconds", query="q") == 60  # the new checkpoint's
    assert rec.sdk_value("wmobs_input_rows_total", query="q") == 14  # OpenTelemetry alike
    assert rec.sdk_value("wmobs_state_rows", **operator) == 1
    snap = rec.tracker.snapshot("q")
    assert snap is not None and snap.query_id == "new" and snap.input_rows == 14
    assert [s.label for s in rec.tracker.snapshots()] == ["q"]


def test_a_terminated_querys_series_go_after_the_retention(clock: Clock) -> None:
    """A driver that runs many short queries (a notebook's: unnamed, each labelled by its id)
    does not export them for its whole life: a label goes once every query under it has been
    terminated for ``retention`` seconds; never one query of a label, whose counters would
    then run backwards."""
    rec = MetricsRecorder(clock=clock)
    rec.tracker.retention = 3600.0
    try:
        rec.tracker.on_started("adhoc", "r-1", None)
        rec.tracker.on_progress(progress_json(name=None, id="adhoc", rows=3))
        rec.tracker.on_started("old", "r-2", "q")  # "q" in two checkpoints, one after the other
        rec.tracker.on_progress(progress_json(id="old", rows=10))
        rec.tracker.on_terminated("old", exception=None)
        rec.tracker.on_started("new", "r-3", "q")
        rec.tracker.on_progress(progress_json(id="new", rows=4))
        rec.tracker.on_terminated("adhoc", exception="boom")
        clock.now += 3599
        assert rec.value("wmobs_query_terminations_total", query="adhoc", outcome="failed") == 1
        clock.now += 2  # an hour after "adhoc" and "old" terminated
        assert rec.value("wmobs_query_active", query="adhoc") is None
        assert rec.value("wmobs_input_rows_total", query="adhoc") is None
        assert rec.sdk_value("wmobs_input_rows_total", query="adhoc") is None
        assert rec.tracker.snapshot("adhoc") is None
        assert rec.value("wmobs_input_rows_total", query="q") == 14  # "new" still runs
        rec.tracker.on_terminated("new", exception=None)
        clock.now += 3601
        assert rec.value("wmobs_input_rows_total", query="q") is None
        assert rec.tracker.snapshots() == []
        rec.tracker.on_started("new", "r-4", "q")  # back under its name: a new series
        rec.tracker.on_progress(progress_json(id="new", batch_id=7, rows=2))
        assert rec.value("wmobs_input_rows_total", query="q") == 2
        assert rec.value("wmobs_query_terminations_total", query="q", outcome="stopped") == 0
    finally:
        rec.shutdown()


def test_a_negative_retention_is_an_error() -> None:
    from datetime import timedelta

    import wmobs

    with pytest.raises(ValueError, match="terminated_retention: must not be negative"):
        wmobs.attach(object(), terminated_retention=timedelta(seconds=-1))


def test_a_batch_summary_says_what_the_sink_wrote(rec: MetricsRecorder) -> None:
    """``on_progress`` callbacks learn the rows the sink wrote without asking Spark (the demo
    prints the windows an idle timeout closed from it); a sink that does not count says -1."""
    written = rec.tracker.on_progress(progress_json(batch_id=0, output_rows=7))
    assert written.output_rows == 7
    uncounted = rec.tracker.on_progress(progress_json(batch_id=1, output_rows=-1))
    assert uncounted.output_rows is None


class _Streams:
    """What ``attach`` uses of ``spark.streams``."""

    def __init__(self) -> None:
        self.listeners: list[Any] = []
        self.active: list[Any] = []

    def addListener(self, listener: Any) -> None:
        self.listeners.append(listener)

    def removeListener(self, listener: Any) -> None:
        self.listeners.remove(listener)


def test_a_second_attach_on_one_session_warns() -> None:
    """Each attach adds a listener: a second one on the same session does the work twice, with
    two endpoints serving the same series; one warning line says so (another session's attach
    does not)."""
    from structlog.testing import capture_logs

    import wmobs

    session, other = SimpleNamespace(streams=_Streams()), SimpleNamespace(streams=_Streams())
    with capture_logs() as logs:
        first = wmobs.attach(session)
        elsewhere = wmobs.attach(other)
        second = wmobs.attach(session)
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert [e["event"] for e in warnings] == ["wmobs.attached_twice"]
    assert "reuse the first, or close it" in warnings[0]["hint"]
    assert len(session.streams.listeners) == 2
    for monitor in (first, elsewhere, second):
        monitor.close()
    with capture_logs() as logs:
        wmobs.attach(session).close()  # the earlier ones closed: no warning
    assert [e for e in logs if e["log_level"] == "warning"] == []


def test_a_monitor_attached_again_on_one_meter_provider_exports_again() -> None:
    # OpenTelemetry's SDK hands back the instruments made before on a meter, with their
    # callbacks: a tracker made after the first was closed must still be read.
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from wmobs.listener import Instruments, Tracker

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])

    def input_rows() -> dict[str, float]:
        data = reader.get_metrics_data()
        return {
            str(point.attributes["query"]): point.value
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            for metric in sm.metrics
            if metric.name == "wmobs.input.rows"
            for point in metric.data.data_points
        }

    first = Tracker()
    Instruments(first, provider).record_batch_duration("q", 1.0)
    first.on_progress(progress_json(name="first", rows=3))
    assert input_rows() == {"first": 3}
    first.close()

    second = Tracker()
    Instruments(second, provider)
    second.on_progress(progress_json(name="second", rows=5))
    assert input_rows() == {"second": 5}  # the closed tracker's series end
    provider.shutdown()


def test_an_attach_that_fails_leaves_nothing_read_or_pushing() -> None:
    """A port taken (a notebook cell run again) fails ``attach`` with one clear error, and
    leaves no tracker for a provider to read for the rest of the process."""
    import socket

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    import wmobs

    provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    session = SimpleNamespace(streams=_Streams())
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match="in use"):
            wmobs.attach(session, prometheus_port=port, meter_provider=provider)
    monitor = wmobs.attach(session, prometheus_port=None, meter_provider=provider)
    try:
        (on_provider,) = {
            id(i._on_meter): i._on_meter for i in monitor.listener._instruments
        }.values()
        assert on_provider.trackers() == [monitor.tracker]
        assert session.streams.listeners == [monitor.listener]
    finally:
        monitor.close()


def test_monitors_on_the_global_provider_before_one_is_set_are_let_go() -> None:
    """Before the application sets a global meter provider, OpenTelemetry hands out a new
    proxy meter at each call and keeps each for good: monitors attached and closed there are
    not held by it, and a provider set later reads the monitor attached last."""
    import gc
    import weakref

    from opentelemetry.metrics import get_meter_provider

    from wmobs.listener import Instruments, Tracker

    closed = []
    for _ in range(3):
        tracker = Tracker()
        Instruments(tracker, get_meter_provider())
        tracker.close()
        closed.append(weakref.ref(tracker))
    live = Tracker()
    instruments = Instruments(live, get_meter_provider())
    del tracker
    gc.collect()
    assert [ref() for ref in closed] == [None, None, None]
    assert instruments._on_meter.trackers() == [live]


def test_a_start_event_heard_after_its_runs_end_or_progress_changes_nothing(
    rec: MetricsRecorder,
) -> None:
    """Spark Connect's client posts a query's start event from the thread that started it, and
    the rest on its listener thread: a run's start can come after its first progress, or after
    its end. A run that failed in its first micro-batch stays terminated (no gauges growing for
    a dead query), and a progress heard first stays the run's first."""
    run = "11111111-2222-4333-8444-555555555555"
    rec.tracker.on_terminated("id-1", "boom", run)
    rec.tracker.on_started("id-1", run, "q")
    assert rec.value("wmobs_query_active", query="q") == 0
    assert rec.value("wmobs_query_terminations_total", query="q", outcome="failed") == 1
    other = "66666666-7777-4888-8999-aaaaaaaaaaaa"
    rec.tracker.on_progress(progress_json(id="id-2", name="r", batch_id=0, run_id=other))
    rec.tracker.on_started("id-2", other, "r")
    rec.tracker.on_progress(progress_json(id="id-2", name="r", batch_id=1, run_id=other))
    snap = rec.tracker.snapshot("r")
    assert snap is not None and snap.run_batches == 2


def test_a_name_started_again_and_again_keeps_two_snapshots_not_one_per_run(
    rec: MetricsRecorder,
) -> None:
    """A named query started again on a new checkpoint each time (a memory sink's temporary
    one): its ended runs are folded into one snapshot as each new one starts, and its counters
    still count every run."""
    for run in range(5):
        query_id = f"id-{run}"
        rec.tracker.on_started(query_id, f"run-{run}", "q")
        rec.tracker.on_progress(
            progress_json(id=query_id, batch_id=0, rows=10, run_id=f"run-{run}")
        )
        rec.tracker.on_terminated(query_id, None, f"run-{run}")
    assert len(rec.tracker._queries) == 2
    assert rec.value("wmobs_input_rows_total", query="q") == 50
    assert rec.value("wmobs_query_terminations_total", query="q", outcome="stopped") == 5


def test_a_query_started_again_under_another_name_is_labelled_by_it(rec: MetricsRecorder) -> None:
    """The ``query`` label is the query's name: restarted from its checkpoint (the same id)
    under a new ``queryName``, its new run's series are under that name, and the earlier
    name's stay as they were (never running backwards). The micro-batch the restart runs
    again is known as one all the same."""
    rec.tracker.on_started("id-1", "run-1", "before")
    for batch in (0, 1):
        rec.tracker.on_progress(
            progress_json(id="id-1", name="before", batch_id=batch, rows=10, run_id="run-1")
        )
    rec.tracker.on_terminated("id-1", None, "run-1")
    rec.tracker.on_started("id-1", "run-2", "after")
    again = rec.tracker.on_progress(
        progress_json(id="id-1", name="after", batch_id=1, rows=10, run_id="run-2")
    )
    assert again.replayed
    rec.tracker.on_progress(
        progress_json(id="id-1", name="after", batch_id=2, rows=5, run_id="run-2")
    )
    assert rec.value("wmobs_input_rows_total", query="after") == 5
    assert rec.value("wmobs_input_rows_total", query="before") == 20
    assert rec.value("wmobs_query_active", query="after") == 1


def test_a_folded_checkpoint_restarted_still_knows_its_last_micro_batch(
    rec: MetricsRecorder,
) -> None:
    """Runs of one name on checkpoints A, B and C: A's and B's snapshots are folded into one
    as C starts. A restarted then runs its last micro-batch again (a crash before Spark's
    commit): known as a re-run, not counted twice. And the end of A's earlier run, heard
    late, leaves the running one running."""
    for query_id in ("A", "B", "C"):
        rec.tracker.on_started(query_id, f"{query_id}-1", "q")
        rec.tracker.on_progress(
            progress_json(id=query_id, batch_id=3, rows=10, run_id=f"{query_id}-1")
        )
        rec.tracker.on_terminated(query_id, None, f"{query_id}-1")
    rec.tracker.on_started("A", "A-2", "q")
    again = rec.tracker.on_progress(progress_json(id="A", batch_id=3, rows=10, run_id="A-2"))
    assert again.replayed
    assert rec.value("wmobs_input_rows_total", query="q") == 30
    rec.tracker.on_terminated("A", None, "A-1")  # late, of the run before
    assert rec.value("wmobs_query_active", query="q") == 1


_LATE_GLOBAL_PROVIDER = """
import opentelemetry.metrics as m
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from wmobs.listener import Tracker
from wmobs.listener.metrics import Instruments
from wmobs.testing import progress_json

first = Tracker()
Instruments(first)  # attached before the application sets its global provider
reader = InMemoryMetricReader()
provider = MeterProvider(metric_readers=[reader])
m.set_meter_provider(provider)
first.close()
on_global, given = Tracker(), Tracker()
Instruments(on_global)
Instruments(given, provider)
on_global.on_progress(progress_json(name="global", rows=3))
given.on_progress(progress_json(name="given", rows=4))
print(sorted(
    (point.attributes["query"], point.value)
    for rm in reader.get_metrics_data().resource_metrics
    for sm in rm.scope_metrics
    for metric in sm.metrics
    if metric.name == "wmobs.input.rows"
    for point in metric.data.data_points
))
"""


def test_monitors_attached_after_a_global_provider_is_set_late_export_there() -> None:
    """Attached before the application sets its global meter provider, closed, attached again
    (on the global provider, or given it): OpenTelemetry's SDK keeps the instruments made
    first under a name, with their callbacks, and those read the new monitors. (A process of
    its own: a global provider is set once per process.)"""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _LATE_GLOBAL_PROVIDER], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[('given', 4), ('global', 3)]"
