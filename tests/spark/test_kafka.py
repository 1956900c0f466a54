"""Time policies reading a real Kafka broker (``tests/kafka.py``) with Spark's Kafka source:
arrival time is Kafka's ``timestamp`` (the time the broker appended the record, ASA's enqueue
time). The worked example exactly, globally and per key; a quiet topic's window closed by the
idle timeout; dead letters and counts that a replayed micro-batch does not write twice; the
backlog and queueing delay a Kafka user asks for first; an unreachable broker's clear error."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import wmobs
from wmobs import TimePolicy
from wmobs.listener._observed import parse_observed_metrics

from ._streaming import engines, firings, start_kept, wait_until

pytestmark = pytest.mark.spark

REFERENCE = json.loads(
    (Path(__file__).resolve().parents[1] / "reference" / "worked_example.json").read_text()
)
VALUE = "id INT, EventTime STRING, deviceId STRING"


@pytest.fixture(autouse=True)
def needs_spark_kafka(spark: Any) -> None:
    from tests.kafka import spark_kafka_jars

    if not spark_kafka_jars(spark.version):
        pytest.fail(f"Spark's Kafka source for Spark {spark.version} is missing (./dev fetches it)")


@pytest.fixture
def producer(kafka: Any) -> Iterator[Any]:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap)
    yield producer
    producer.close()


def topic(kafka: Any, name: str, partitions: int = 3) -> str:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    try:
        admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    finally:
        admin.close()
    return name


def send(producer: Any, name: str, rows: list[dict[str, Any]], arrival_ms: list[int]) -> None:
    """One record per row, keyed by device, its timestamp the given arrival time."""
    for row, arrival in zip(rows, arrival_ms, strict=True):
        producer.send(
            name,
            key=str(row["deviceId"]).encode(),
            value=json.dumps(row).encode(),
            timestamp_ms=arrival,
        )
    producer.flush()


def read(spark: Any, kafka: Any, name: str, **options: str) -> Any:
    """The topic as a stream of ``id, EventTime, deviceId`` and Kafka's ``timestamp``, with the
    consumer's ``fetch.max.wait.ms`` at 20 ms rather than its default 500 ms: a micro-batch of
    one record took ~750 ms here with the default, ~150 ms with this."""
    from pyspark.sql import functions as F

    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("subscribe", name)
        .option("startingOffsets", "earliest")
        .option("kafka.fetch.max.wait.ms", "20")
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    records = reader.load()
    value = F.from_json(F.col("value").cast("string"), VALUE)
    return records.select(value.alias("v"), "timestamp").select("v.*", "timestamp")


def worked_rows() -> tuple[list[dict[str, Any]], list[int]]:
    events = REFERENCE["events"]
    rows = [
        {"id": e["id"], "EventTime": f"2026-01-01T{e['event']}:00Z", "deviceId": e["device"]}
        for e in events
    ]
    return rows, [e["arrival_us"] // 1000 for e in events]


def expected(how: str) -> dict[int, int]:
    return {
        int(i): r["system_us"] // 10**6
        for i, r in REFERENCE[how].items()
        if r["system_us"] is not None
    }


def test_the_worked_example_from_kafka(
    spark: Any, kafka: Any, producer: Any, tmp_path: Path
) -> None:
    """Kafka's record timestamps are the arrival times. Globally one event per micro-batch
    (each produced once the one before is processed); per device all at once, from three
    partitions in no particular order: both exactly as the reference cases say, on each
    engine; the queueing delay of every row counted."""

    rows, arrivals = worked_rows()
    for engine in engines(spark):
        for how, by in (("global", None), ("substreams", ["deviceId"])):
            name = topic(kafka, f"worked-{how}-{engine}")
            policy = TimePolicy(
                event_time="EventTime",
                arrival_time="timestamp",
                early_arrival="5 minutes",
                late_arrival="5 minutes",
                out_of_order="2 minutes",
                substream_by=by,
                name=f"kafka_{how}_{engine}",
                engine=engine,
            )
            checkpoint = str(tmp_path / f"ckpt-{how}-{engine}")
            judged = policy.apply(read(spark, kafka, name), checkpoint_location=checkpoint)
            query_name = f"kafka_worked_{how}_{engine}"
            query = start_kept(judged, query_name, checkpoint)
            try:
                if by is None:
                    for row, arrival in zip(rows, arrivals, strict=True):
                        send(producer, name, [row], [arrival])
                        query.processAllAvailable()
                else:
                    send(producer, name, rows, arrivals)
                    query.processAllAvailable()
            finally:
                query.stop()
            assert query.exception() is None
            kept = {r.id: r.system for r in spark.sql(f"SELECT * FROM {query_name}").collect()}
            assert kept == expected(how), (how, engine)
            counted = [
                parse_observed_metrics(p["observedMetrics"]).policies[policy.state_name]
                for p in query.recentProgress
                if p["observedMetrics"]
            ]
            queued = sum(c.histograms["queueing_delay"].count for c in counted if c.histograms)
            assert queued == 12, (how, engine)  # every row: they all have a Kafka timestamp


def test_a_quiet_topic_closes_its_window(
    spark: Any, kafka: Any, producer: Any, tmp_path: Path
) -> None:
    """Three records, then silence: the idle timeout (1 s) closes their 3-second window, with
    exactly those rows, after its end plus the timeout; the backlog of the topic reads 0."""
    from pyspark.sql import functions as F

    name = topic(kafka, "quiet", partitions=1)
    now = time.time()
    start = float(int(now) // 3 * 3)
    times = [max(start, now - 0.3), max(start, now - 0.2), max(start, now - 0.1)]
    rows = [
        {"id": i, "EventTime": f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(t))}"
         f".{int(t % 1 * 1000):03d}Z", "deviceId": "A"}
        for i, t in enumerate(times)
    ]  # fmt: skip
    policy = TimePolicy(
        event_time="EventTime",
        arrival_time="timestamp",
        late_arrival="10 minutes",
        idle_timeout="1 second",
        name="quiet",
    )
    checkpoint = str(tmp_path / "ckpt")
    with wmobs.attach(spark) as monitor:
        judged = policy.apply(read(spark, kafka, name), checkpoint_location=checkpoint)
        query = (
            judged.groupBy(F.window("system_timestamp", "3 seconds"))
            .count()
            .writeStream.queryName("kafka_quiet")
            .format("memory")
            .outputMode("append")
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        send(producer, name, rows, [int(t * 1000) for t in times])
        try:
            wait_until(
                lambda: spark.sql("SELECT * FROM kafka_quiet").count() > 0,
                timeout=90,
                what="the quiet topic's window",
            )
            seen = time.time()
            windows = [(r.window.start.timestamp(), r["count"]) for r in spark.sql(
                "SELECT * FROM kafka_quiet").collect()]  # fmt: skip
            wait_until(  # the firing's micro-batch heard, not only an earlier one
                lambda: (
                    (s := monitor.snapshot("kafka_quiet")) is not None
                    and bool(s.backlogs)
                    and firings(monitor, "kafka_quiet", "quiet") >= 1
                ),
                what="the listener hearing the firing",
            )
            snap = monitor.snapshot("kafka_quiet")
        finally:
            query.stop()
    assert windows == [(start, 3)]
    assert seen >= start + 3 + 1.0  # the rule: after the window's end plus the timeout
    assert snap is not None
    assert list(snap.backlogs.values()) == [0]  # everything read
    policy_snap = snap.policy("quiet")
    assert policy_snap is not None and (policy_snap.idle_timeout_firings or 0) >= 1


def test_a_replayed_batch_writes_no_dead_letter_or_count_twice(
    spark: Any, kafka: Any, producer: Any, tmp_path: Path
) -> None:
    """Early records dropped and dead-lettered; then the query's last data micro-batch is left
    uncommitted, as a crash between writing and committing leaves it: the restart re-runs
    it. Its dead-letter file is written again (the same file), the listener does not count it
    again, and the sink (one directory per micro-batch, overwritten: idempotent) holds each
    kept row once: rows in = kept + dead-lettered = the counters."""
    import pyarrow.dataset as ds

    name = topic(kafka, "replayed")
    now_ms = int(time.time() * 1000)
    rows = [
        {"id": i, "EventTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(
            now_ms / 1000 + (3600 if i % 3 == 0 else -1))), "deviceId": f"d{i % 4}"}
        for i in range(12)
    ]  # fmt: skip
    checkpoint, sink, dead = tmp_path / "ckpt", tmp_path / "out", tmp_path / "dead"
    policy = TimePolicy(event_time="EventTime", arrival_time="timestamp", name="replayed")

    def run(monitor: wmobs.Monitor) -> Any:
        judged = policy.apply(
            read(spark, kafka, name, maxOffsetsPerTrigger="6"),
            checkpoint_location=str(checkpoint),
            dead_letter=str(dead),
        )

        def write(batch: Any, batch_id: int) -> None:
            batch.write.mode("overwrite").parquet(str(sink / f"batch={batch_id}"))

        query = (
            judged.writeStream.queryName("kafka_replayed")
            .foreachBatch(write)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        assert query.exception() is None
        wait_until(lambda: not monitor.snapshot("kafka_replayed").active)  # type: ignore[union-attr]
        return query

    send(producer, name, rows, [now_ms] * len(rows))
    with wmobs.attach(spark) as monitor:
        first = run(monitor)
        batches = sorted(
            int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()
        )
        assert len(batches) >= 2
        for file in (str(batches[-1]), f".{batches[-1]}.crc"):  # as a crash before the commit
            (checkpoint / "commits" / file).unlink(missing_ok=True)
        files_before = sorted(p.name for p in dead.rglob("*.parquet"))
        second = run(monitor)
        replayed = [p["batchId"] for p in second.recentProgress if p["numInputRows"]]
        snap = monitor.snapshot("kafka_replayed")
    assert replayed == [batches[-1]]  # the restart re-ran that micro-batch, and no other
    assert sorted(p.name for p in dead.rglob("*.parquet")) == files_before  # the same files
    dead_rows = ds.dataset(str(dead), format="parquet", partitioning="hive").to_table()
    kept = ds.dataset(str(sink), format="parquet", partitioning="hive").to_table()
    kept_ids = [r["id"] for r in kept.to_pylist()] if kept.num_rows else []
    assert sorted(dead_rows.column("id").to_pylist()) == [0, 3, 6, 9]
    assert sorted(kept_ids) == [i for i in range(12) if i % 3]
    assert snap is not None and first.id == second.id
    policy_snap = snap.policy("replayed")
    assert policy_snap is not None
    assert policy_snap.events[("early_arrival", "dropped")] == 4 == policy_snap.dead_letter_rows
    assert snap.input_rows == 12


def test_an_unreachable_broker_is_a_clear_error(spark: Any, tmp_path: Path) -> None:
    """Nothing listens at the broker's address: the query fails, and its error names the
    cause (Kafka's timeout), not wmobs."""
    from tests.ports import free_port

    port = free_port()  # closed again: nothing listens there
    records = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", f"127.0.0.1:{port}")
        .option("subscribe", "nowhere")
        .option("kafka.default.api.timeout.ms", "3000")
        .option("kafka.request.timeout.ms", "2000")
        .load()
    )
    judged = TimePolicy(event_time="timestamp", arrival_time=None).apply(
        records, checkpoint_location=str(tmp_path / "ckpt")
    )
    query = (
        judged.writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match=r"(?i)timeout|timed out"):
        query.awaitTermination(120)
        raise AssertionError("the query did not fail")
    assert query.exception() is not None


def test_the_kafka_example_runs_as_users_would(
    spark: Any, kafka: Any, producer: Any, tmp_path: Path
) -> None:
    """``examples/kafka_events.py`` against the broker, in its own process and session: every
    record read, the early one dead-lettered, on the JVM engine, the topic's backlog read."""
    import os
    import subprocess
    import sys

    from tests.kafka import spark_kafka_jars

    name = topic(kafka, "example")
    now = time.time()
    rows = [
        {"deviceId": f"d{i % 3}", "EventTime": time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + (3600 if i == 0 else -i))), "value": i}
        for i in range(20)
    ]  # fmt: skip
    send(producer, name, rows, [int(now * 1000)] * len(rows))
    example = Path(__file__).resolve().parents[2] / "examples" / "kafka_events.py"
    done = subprocess.run(
        [sys.executable, str(example), "--bootstrap", kafka.bootstrap, "--topic", name,
         "--checkpoint", str(tmp_path / "ckpt"), "--port", "0", "--until-rows", "20",
         "--duration", "300",
         "--jars", ",".join(str(j) for j in spark_kafka_jars(spark.version))],
        capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "rows 20, dropped 1, dead letters 1, engine jvm" in done.stdout, done.stdout[-2000:]
    assert "backlog {'KafkaV2[Subscribe[example]]': 0}" in done.stdout
