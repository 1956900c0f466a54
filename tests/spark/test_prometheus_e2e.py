"""End to end: real queries -> wmobs endpoint -> a real Prometheus server -> panels and alerts."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import wmobs
from tests.ports import free_port
from wmobs.advise import advise, from_prometheus
from wmobs.observations import (
    ENGINE_COLUMN,
    IDLE_TIMEOUT_COLUMN,
    INPUT_EVENT_TIME_COLUMN,
    INPUT_WATERMARK_COLUMN,
    SUBSTREAM_SPREAD_COLUMN,
    rule_column,
)
from wmobs.policy import histogram_counts
from wmobs.rules import RulesConfig, render

from ._streaming import heard, wait_until, windowed_query, write_events

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
# Grafana's variables as a user would leave them: all jobs, all queries.
GRAFANA_VARIABLES = {
    "$__rate_interval": "15s",
    "$__range": "1h",
    "$job": ".*",
    "$query": ".*",
}


def api(base: str, path: str, **params: str) -> Any:
    url = f"{base}{path}?{urllib.parse.urlencode(params)}" if params else base + path
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path, int]]:
    """A Prometheus server on 127.0.0.1; the test writes its config before it starts."""
    binary = shutil.which("prometheus")
    if binary is None:  # fail, never skip: ./dev test installs Debian's prometheus package
        pytest.fail("prometheus not found: apt-get install prometheus (./dev test does)")
    port = free_port()
    config = tmp_path / "prometheus.yml"
    holder: dict[str, subprocess.Popen[bytes]] = {}

    def start() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=(tmp_path / "prometheus.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        holder["proc"] = proc
        return proc

    yield start, config, port  # type: ignore[misc]
    proc = holder.get("proc")
    if proc is not None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_dashboard_and_alerts_against_real_prometheus(
    spark: Any, tmp_path: Path, prometheus: Any, kafka: Any
) -> None:
    from pyspark.sql import functions as F

    start_prometheus, config, port = prometheus
    base = f"http://127.0.0.1:{port}"

    monitor = wmobs.attach(spark, prometheus_port=0)
    queries = []
    try:
        # A live query that keeps running batches, and counts through the observation
        # convention (so the policy, dead-letter, idle-firing and engine series exist).
        live = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", 20)
            .load()
            .withColumn("event_time", F.col("timestamp") - F.expr("INTERVAL 30 SECONDS"))
            .observe(
                "wmobs.e2e",
                F.count_if(F.col("value") % 10 == 0).alias(rule_column("late_arrival", "dropped")),
                F.lit("python").alias(ENGINE_COLUMN),
                F.count_if(F.col("value") % 10 == 0).alias("dead_letter_rows"),
                F.lit(0).alias(IDLE_TIMEOUT_COLUMN),
                F.max(F.unix_micros("event_time") - 5_000_000).alias(INPUT_WATERMARK_COLUMN),
                F.max(F.unix_micros("event_time")).alias(INPUT_EVENT_TIME_COLUMN),
                F.lit(5_000_000).cast("long").alias(SUBSTREAM_SPREAD_COLUMN),
                *histogram_counts(
                    "arrival_delay",
                    F.unix_micros("timestamp") - F.unix_micros("event_time"),
                    F.lit(True),
                ),
                *histogram_counts("lateness", F.lit(0).cast("long"), F.lit(True)),
                *histogram_counts("queueing_delay", F.lit(20_000).cast("long"), F.lit(True)),
            )
            .withWatermark("event_time", "5 seconds")
            .groupBy(F.window("event_time", "5 seconds"))
            .count()
            .writeStream.queryName("e2e_live")
            .outputMode("append")
            .format("noop")
            .option("checkpointLocation", str(tmp_path / "ckpt-live"))
            .trigger(processingTime="500 milliseconds")
            .start()
        )
        queries.append(live)
        # A query reading a Kafka topic: its source reports the backlog.
        from kafka import KafkaProducer
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
        admin.create_topics([NewTopic("e2e", num_partitions=1, replication_factor=1)])
        admin.close()
        producer = KafkaProducer(bootstrap_servers=kafka.bootstrap)
        for i in range(5):
            producer.send("e2e", value=str(i).encode())
        producer.flush()
        producer.close()
        from_kafka = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", kafka.bootstrap)
            .option("subscribe", "e2e")
            .option("startingOffsets", "earliest")
            .load()
            .writeStream.queryName("e2e_kafka")
            .format("noop")
            .option("checkpointLocation", str(tmp_path / "ckpt-kafka"))
            .trigger(processingTime="500 milliseconds")
            .start()
        )
        queries.append(from_kafka)
        # A stalled query: old event times, then no input at all.
        write_events(tmp_path / "in", 0, [time.time() - 120 + k for k in range(5)])
        stalled = windowed_query(spark, tmp_path / "in", tmp_path / "ckpt-stalled", "e2e_stalled")
        queries.append(stalled)
        stalled.processAllAvailable()

        _configure(config, RulesConfig(delay_threshold="30s", delay_for="3s"), monitor)
        proc = start_prometheus()
        wait_until(lambda: _ready(base), timeout=60, what="Prometheus to be ready")
        assert proc.poll() is None

        dashboard = json.loads((ROOT / "dashboards/wmobs-overview.json").read_text())
        panel_queries = {
            (panel["title"], target["refId"]): _substitute(target["expr"])
            for panel in dashboard["panels"]
            for target in panel["targets"]
        }
        pending = dict(panel_queries)

        def all_panels_have_data() -> bool:
            for key, expr in list(pending.items()):
                answer = api(base, "/api/v1/query", query=expr)
                assert answer["status"] == "success", (key, expr, answer)
                if answer["data"]["result"]:
                    del pending[key]
            return not pending

        wait_until(all_panels_have_data, timeout=120, what=f"data for panels {pending}")

        def delay_alert() -> dict[str, Any] | None:
            for alert in api(base, "/api/v1/alerts")["data"]["alerts"]:
                labels = alert["labels"]
                if (
                    labels["alertname"] == "WmobsWatermarkDelayHigh"
                    and labels["query"] == "e2e_stalled"
                    and alert["state"] == "firing"
                ):
                    return dict(alert)
            return None

        wait_until(lambda: delay_alert() is not None, timeout=60, what="the delay alert")
        alert = delay_alert()
        assert alert is not None
        assert alert["labels"]["severity"] == "warning"
        assert alert["labels"]["job"] == "wmobs"
        assert "e2e_stalled" in alert["annotations"]["description"]
        assert alert["annotations"]["runbook_url"].endswith("#wmobswatermarkdelayhigh")
    finally:
        for query in queries:
            query.stop()
        monitor.close()


def _configure(config: Path, rules: RulesConfig, monitor: wmobs.Monitor) -> None:
    """Prometheus' config: scrape ``monitor``'s endpoint every second, evaluate ``rules``."""
    rules_file = config.with_name("rules.yaml")
    rules_file.write_text(render(rules))
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {rules_file}\n"
        "scrape_configs:\n  - job_name: wmobs\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{monitor.prometheus_port}']\n"
    )


def _ready(base: str) -> bool:
    try:
        with urllib.request.urlopen(base + "/-/ready", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _substitute(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, expr
    return expr


def test_a_join_whose_one_input_stalls_fires_the_input_alert(
    spark: Any, tmp_path: Path, prometheus: Any
) -> None:
    """Two policed inputs joined in one query: views stalls (old events, then nothing), clicks
    keeps coming. WmobsInputWatermarkBehind fires for views, against a real Prometheus, while
    clicks' own series stay healthy."""
    from pyspark.sql import functions as F

    start_prometheus, config, port = prometheus
    base = f"http://127.0.0.1:{port}"
    checkpoint = str(tmp_path / "ckpt-join")

    def policed(name: str) -> Any:
        policy = wmobs.TimePolicy(
            event_time="event_time",
            arrival_time=None,
            early_arrival=None,
            late_arrival="1 day",
            name=name,
        )
        schema = "event_time TIMESTAMP, value LONG"
        stream = spark.readStream.schema(schema).json(str(tmp_path / name))
        return policy.apply(stream, checkpoint_location=checkpoint).select(
            F.col("value").alias(f"{name}_id"), F.col("system_timestamp").alias(f"{name}_t")
        )

    now = time.time()
    write_events(tmp_path / "views", 0, [now - 600 + k for k in range(3)])  # then nothing
    clicks_written = 0

    def click() -> None:
        nonlocal clicks_written
        write_events(tmp_path / "clicks", clicks_written, [time.time() - 1])
        clicks_written += 1

    click()
    monitor = wmobs.attach(spark, prometheus_port=0)
    query = None
    try:
        joined = policed("clicks").join(
            policed("views"),
            F.expr(
                "clicks_id = views_id AND views_t BETWEEN clicks_t - INTERVAL 1 HOUR "
                "AND clicks_t + INTERVAL 1 HOUR"
            ),
        )
        query = (
            joined.writeStream.queryName("e2e_join")
            .format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="500 milliseconds")
            .start()
        )
        query.processAllAvailable()
        last = query.lastProgress["batchId"]
        wait_until(  # every row of views counted before Prometheus watches: none while it does
            lambda: heard(monitor, "e2e_join", last),
            what="the listener hearing the micro-batches so far",
        )
        _configure(
            config, RulesConfig(input_behind_threshold="30s", input_behind_for="3s"), monitor
        )
        start_prometheus()
        wait_until(lambda: _ready(base), timeout=60, what="Prometheus ready")

        def firing() -> list[dict[str, str]]:
            alerts = api(base, "/api/v1/alerts")["data"]["alerts"]
            return [
                a["labels"]
                for a in alerts
                if a["labels"]["alertname"] == "WmobsInputWatermarkBehind"
                and a["state"] == "firing"
            ]

        deadline = time.monotonic() + 120
        while not firing():  # clicks keep arriving, about one file a second
            assert time.monotonic() < deadline, "WmobsInputWatermarkBehind never fired"
            click()
            time.sleep(1)
        labels = firing()
        assert [(a["query"], a["policy"]) for a in labels] == [("e2e_join", "views")]
        delays = {
            r["metric"]["policy"]: float(r["value"][1])
            for r in api(
                base,
                "/api/v1/query",
                query='wmobs_input_watermark_delay_seconds{query="e2e_join"}',
            )["data"]["result"]
        }
        assert delays["views"] > 500  # its events are 10 minutes old
        assert delays["clicks"] < 30  # the healthy input: within the threshold
        # The advisor over a range, from this Prometheus: both inputs; the stalled one had no
        # rows while Prometheus watched, the other had.
        advice = advise(from_prometheus(base, "e2e_join", "10m"))
        rows = {a.policy: a.rows for a in advice if a.query == "e2e_join"}
        assert set(rows) == {"clicks", "views"}
        assert rows["clicks"] > 0 and rows["views"] == 0
    finally:
        if query is not None:
            query.stop()
        monitor.close()
