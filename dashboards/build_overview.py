"""Builds ``wmobs-overview.json`` (Grafana classic dashboard JSON). Run after editing:

    .venv/bin/python dashboards/build_overview.py

``tests/test_dashboards.py`` checks that the committed JSON is exactly what this writes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'job=~"$job", query=~"$query"'
RATE = "$__rate_interval"
DELAY_THRESHOLD_S = 300  # WmobsWatermarkDelayHigh's default (wmobs/rules.py)
OPTIONS: dict[str, dict[str, Any]] = {
    "timeseries": {"legend": {"displayMode": "list", "placement": "bottom"}},
    "stat": {"reduceOptions": {"calcs": ["lastNotNull"]}},
    # Prometheus' buckets as they are (no re-bucketing), le on the y axis.
    "heatmap": {"calculate": False, "yAxis": {"unit": "s"}, "cellGap": 1},
}


def panel(
    title: str,
    description: str,
    unit: str,
    targets: list[tuple[str, str]],
    grid: tuple[int, int, int, int],
    *,
    kind: str = "timeseries",
    threshold: float | None = None,
) -> dict[str, Any]:
    x, y, w, h = grid
    defaults: dict[str, Any] = {"unit": unit}
    if threshold is not None:
        defaults["thresholds"] = {
            "mode": "absolute",
            "steps": [{"color": "green", "value": None}, {"color": "red", "value": threshold}],
        }
        defaults["custom"] = {"thresholdsStyle": {"mode": "line+area"}}
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": OPTIONS[kind],
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "datasource": DS,
                "expr": expr,
                "legendFormat": legend,
                **({"format": "heatmap"} if kind == "heatmap" else {}),
            }
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def build() -> dict[str, Any]:
    panels = [
        panel(
            "Active queries",
            "Queries running now (wmobs_query_active).",
            "short",
            [(f"sum(wmobs_query_active{{{SEL}}})", "active")],
            (0, 0, 6, 4),
            kind="stat",
        ),
        panel(
            "Failed queries",
            "Queries that terminated with an exception in the dashboard's time range.",
            "short",
            [
                (
                    "sum(increase(wmobs_query_terminations_total"
                    f'{{{SEL}, outcome="failed"}}[$__range]))',
                    "failed",
                )
            ],
            (6, 0, 6, 4),
            kind="stat",
        ),
        panel(
            "Watermark",
            "Largest watermark seen per query (wmobs_watermark_timestamp_seconds), as a date.",
            "dateTimeAsIso",
            [(f"wmobs_watermark_timestamp_seconds{{{SEL}}} * 1000", "{{query}}")],
            (12, 0, 12, 4),
            kind="stat",
        ),
        panel(
            "Watermark delay",
            "Wall clock minus the largest watermark seen, computed at scrape time: it keeps "
            "growing while a query stalls or its source is idle. The red line is the "
            "WmobsWatermarkDelayHigh threshold.",
            "s",
            [(f"wmobs_watermark_delay_seconds{{{SEL}}}", "{{query}}")],
            (0, 4, 12, 8),
            threshold=DELAY_THRESHOLD_S,
        ),
        panel(
            "Event-time lag",
            "Wall clock minus the largest event time seen. Negative: events from the future "
            "(a producer clock running ahead).",
            "s",
            [(f"wmobs_event_time_lag_seconds{{{SEL}}}", "{{query}}")],
            (12, 4, 12, 8),
        ),
        panel(
            "Source idle time",
            "Time since the end of the last micro-batch that read input rows.",
            "s",
            [(f"wmobs_source_idle_seconds{{{SEL}}}", "{{query}}")],
            (0, 12, 12, 8),
        ),
        panel(
            "Input rate",
            "Rows read per second.",
            "cps",
            [(f"sum by (query) (rate(wmobs_input_rows_total{{{SEL}}}[{RATE}]))", "{{query}}")],
            (12, 12, 12, 8),
        ),
        panel(
            "Batch duration p50 / p95",
            "Trigger execution time per micro-batch, from the wmobs_batch_duration_seconds "
            "histogram.",
            "s",
            [
                (
                    f"histogram_quantile({q}, sum by (query, le) "
                    f"(rate(wmobs_batch_duration_seconds_bucket{{{SEL}}}[{RATE}])))",
                    f"{{{{query}}}} p{int(q * 100)}",
                )
                for q in (0.5, 0.95)
            ],
            (0, 20, 12, 8),
        ),
        panel(
            "Rows dropped by watermark",
            "Spark's numRowsDroppedByWatermark per stateful operator, per second. Counted after "
            "partial aggregation: groups, not input rows.",
            "cps",
            [
                (
                    "sum by (query, operator) "
                    f"(rate(wmobs_rows_dropped_by_watermark_total{{{SEL}}}[{RATE}]))",
                    "{{query}} {{operator}}",
                )
            ],
            (12, 20, 12, 8),
        ),
        panel(
            "Time-policy events",
            "Rows per second by time policy, rule (early_arrival, late_arrival, out_of_order, "
            "invalid_time) and action (adjusted or dropped), exact per row.",
            "cps",
            [
                (
                    "sum by (query, policy, rule, action) "
                    f"(rate(wmobs_policy_events_total{{{SEL}}}[{RATE}]))",
                    "{{query}} {{policy}} {{rule}} {{action}}",
                )
            ],
            (0, 28, 12, 8),
        ),
        panel(
            "Dead-lettered rows",
            "Rows per second each time policy wrote to its dead-letter destination.",
            "cps",
            [
                (
                    f"sum by (query, policy) (rate(wmobs_dead_letter_rows_total{{{SEL}}}[{RATE}]))",
                    "{{query}} {{policy}}",
                )
            ],
            (12, 28, 6, 8),
        ),
        panel(
            "Idle-timeout firings",
            "Windows closed by each time policy's idle timeout, per rate interval.",
            "short",
            [
                (
                    "sum by (query, policy) "
                    f"(increase(wmobs_idle_timeout_firings_total{{{SEL}}}[{RATE}]))",
                    "{{query}} {{policy}}",
                )
            ],
            (18, 28, 6, 8),
        ),
        panel(
            "State rows",
            "Rows held in state per stateful operator.",
            "short",
            [(f"wmobs_state_rows{{{SEL}}}", "{{query}} {{operator}}")],
            (0, 36, 12, 8),
        ),
        panel(
            "State memory",
            "Memory used by state per stateful operator.",
            "bytes",
            [(f"wmobs_state_memory_bytes{{{SEL}}}", "{{query}} {{operator}}")],
            (12, 36, 12, 8),
        ),
        panel(
            "Terminations",
            "Query terminations per rate interval, by outcome (stopped, failed).",
            "short",
            [
                (
                    "sum by (query, outcome) "
                    f"(increase(wmobs_query_terminations_total{{{SEL}}}[{RATE}]))",
                    "{{query}} {{outcome}}",
                )
            ],
            (0, 44, 24, 6),
        ),
        panel(
            "Input watermark delay",
            "Per input (time policy) of a query: wall clock minus that input's largest "
            "watermark. A join or union runs at the slowest input's watermark: the input far "
            "above the others holds the query back (WmobsInputWatermarkBehind).",
            "s",
            [(f"wmobs_input_watermark_delay_seconds{{{SEL}}}", "{{query}} {{policy}}")],
            (0, 50, 12, 8),
        ),
        panel(
            "Input event-time lag",
            "Per input (time policy) of a query: wall clock minus that input's largest event "
            "time. An input whose lag grows has stopped receiving events.",
            "s",
            [(f"wmobs_input_event_time_lag_seconds{{{SEL}}}", "{{query}} {{policy}}")],
            (12, 50, 12, 8),
        ),
        panel(
            "Arrival delay distribution",
            "Arrival time minus event time of every valid row, per rate interval, by bucket "
            "(negative: events that arrived before their event time). Counted exactly inside "
            "the query by each time policy.",
            "s",
            [
                (
                    "sum by (le) (increase(wmobs_event_arrival_delay_seconds_bucket"
                    f"{{{SEL}}}[{RATE}]))",
                    "{{le}}",
                )
            ],
            (0, 58, 12, 8),
            kind="heatmap",
        ),
        panel(
            "Lateness distribution",
            "How far each row was behind the largest system timestamp seen before it, per rate "
            "interval, by bucket: the out-of-order tolerance that would have kept a row is at "
            "least its lateness (see `wmobs advise`).",
            "s",
            [
                (
                    f"sum by (le) (increase(wmobs_event_lateness_seconds_bucket{{{SEL}}}[{RATE}]))",
                    "{{le}}",
                )
            ],
            (12, 58, 12, 8),
            kind="heatmap",
        ),
        panel(
            "Time policies by engine",
            "Time policies of running queries per engine and dead-letter plan "
            "(wmobs_policy_info): jvm is wmobs' Spark extension, python the Python engine, for "
            "sessions without the extension; dead letters none (counted only), jvm (Spark's "
            "Parquet writer in the tasks), python_dropped or python_all (rows through Python).",
            "short",
            [
                (
                    f"count by (engine, dead_letters) (wmobs_policy_info{{{SEL}}})",
                    "{{engine}}, dead letters: {{dead_letters}}",
                )
            ],
            (0, 66, 12, 4),
            kind="stat",
        ),
        panel(
            "Source backlog",
            "Records each source's broker holds that the query has not read yet (Kafka's "
            "maxOffsetsBehindLatest: the partition furthest behind). A backlog that keeps "
            "growing: the query reads more slowly than producers write "
            "(WmobsSourceBacklogGrowing).",
            "short",
            [(f"wmobs_source_backlog_records{{{SEL}}}", "{{query}} {{source}}")],
            (12, 66, 12, 8),
        ),
        panel(
            "Queueing delay distribution",
            "How long rows waited in the broker before a micro-batch read them (the batch's "
            "time minus the arrival time, e.g. Kafka's timestamp), per rate interval, by "
            "bucket. Counted exactly inside the query by each time policy with arrival times.",
            "s",
            [
                (
                    "sum by (le) (increase(wmobs_event_queueing_delay_seconds_bucket"
                    f"{{{SEL}}}[{RATE}]))",
                    "{{le}}",
                )
            ],
            (0, 74, 12, 8),
            kind="heatmap",
        ),
        panel(
            "Substream spread",
            "Per time policy with substream_by: how far its slowest key ran behind the fastest "
            "in the latest micro-batch. A window aggregation after the policy drops a key's "
            "rows once this passes out_of_order plus substream_skew: size substream_skew to "
            "its peaks.",
            "s",
            [(f"wmobs_substream_spread_seconds{{{SEL}}}", "{{query}} {{policy}}")],
            (12, 74, 12, 8),
        ),
    ]
    for i, p in enumerate(panels, start=1):
        p["id"] = i

    def query_var(name: str, label: str, query: str) -> dict[str, Any]:
        return {
            "name": name,
            "label": label,
            "type": "query",
            "datasource": DS,
            "query": {"query": query, "refId": f"{name}-var"},
            "definition": query,
            "refresh": 2,
            "includeAll": True,
            "multi": True,
            "allValue": ".*",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "sort": 1,
        }

    return {
        "uid": "wmobs-overview",
        "title": "wmobs / Streaming watermarks",
        "description": "Watermark delay, drops and health of Spark Structured Streaming "
        "queries, from wmobs.",
        "tags": ["wmobs", "spark", "streaming"],
        "timezone": "utc",
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-1h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                },
                query_var("job", "Job", "label_values(wmobs_query_active, job)"),
                query_var("query", "Query", 'label_values(wmobs_query_active{job=~"$job"}, query)'),
            ]
        },
        "annotations": {"list": []},
        "panels": panels,
    }


def main() -> None:
    out = Path(__file__).with_name("wmobs-overview.json")
    out.write_text(json.dumps(build(), indent=2) + "\n")


if __name__ == "__main__":
    main()
