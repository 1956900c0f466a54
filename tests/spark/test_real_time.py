"""Spark's real-time mode (4.1+, ``trigger(realTime=...)``) with a real Kafka broker: a global
time policy on the JVM engine judges the worked example exactly as in micro-batches (each
real-time batch reads the watermark in force when it started, from where Spark fixed it, not
from the offsets log it writes at the end), its counts arrive per real-time batch; what real-time
mode cannot run is refused with an error naming it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import wmobs
from wmobs import TimePolicy

from ._streaming import ROCKSDB, session_conf, state_store, wait_until
from .cluster_job import WORKED as CLUSTER_WORKED
from .test_kafka import expected, read, send, topic, worked_rows

pytestmark = pytest.mark.spark

WORKED = {**CLUSTER_WORKED, "arrival_time": "timestamp"}  # Kafka's timestamp


@pytest.fixture(autouse=True)
def real_time_mode(spark: Any) -> Iterator[None]:
    """Spark 4.1+ with Spark's Kafka source; real-time batches of 1 s (Spark's floor is 5 s)."""
    from tests.kafka import spark_kafka_jars

    if not _python_has_real_time() and not _spark_real_time_trigger(spark):
        pytest.skip(f"Spark {spark.version} has no real-time mode (4.1+)")
    if not spark_kafka_jars(spark.version):
        pytest.fail(f"Spark's Kafka source for Spark {spark.version} is missing (./dev fetches it)")
    spark.conf.set("spark.sql.streaming.realTimeMode.minBatchDuration", "1000")
    yield
    spark.conf.unset("spark.sql.streaming.realTimeMode.minBatchDuration")


@pytest.fixture
def producer(kafka: Any) -> Iterator[Any]:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap)
    yield producer
    producer.close()


def _python_has_real_time() -> bool:
    """PySpark 4.2+: ``trigger(realTime=...)``."""
    import inspect

    from pyspark.sql.streaming.readwriter import DataStreamWriter

    return "realTime" in inspect.signature(DataStreamWriter.trigger).parameters


def _spark_real_time_trigger(spark: Any) -> Any:
    """Spark's own real-time trigger (``RealTimeTrigger``, Scala and Java's on Spark 4.1, which
    PySpark 4.1's ``trigger`` lacks), or None."""
    from py4j.java_gateway import JavaClass

    found = spark._jvm.org.apache.spark.sql.execution.streaming.RealTimeTrigger
    return found if isinstance(found, JavaClass) else None  # else a JavaPackage: no such class


def _start(judged: Any, kafka: Any, out: str, checkpoint: Path) -> Any:
    """Each kept row's id and system time to the topic ``out`` (Kafka's sink: real-time mode
    allows it, not the memory sink), in real-time batches of 1 s: ``trigger(realTime=...)``,
    or on PySpark 4.1 Spark's trigger as a Scala or Java query sets it."""
    from pyspark.sql import functions as F

    row = F.struct("id", F.unix_seconds("system_timestamp").alias("system"))
    writer = (
        judged.select(F.to_json(row).alias("value"))
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("topic", out)
        .option("checkpointLocation", str(checkpoint))
        .outputMode("update")
    )
    if _python_has_real_time():
        return writer.trigger(realTime="1 second").start()
    trigger = _spark_real_time_trigger(judged.sparkSession).apply("1 second")
    writer._jwrite = writer._jwrite.trigger(trigger)
    return writer.start()


def _consume(kafka: Any, name: str, count: int) -> dict[int, int]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        name, bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
    )  # fmt: skip
    try:
        kept: dict[int, int] = {}
        for record in consumer:
            row = json.loads(record.value)
            kept[row["id"]] = row["system"]
            if len(kept) >= count:
                break
        return kept
    finally:
        consumer.close()


def test_the_worked_example_in_real_time_batches(
    spark: Any, kafka: Any, producer: Any, tmp_path: Path
) -> None:
    """One event per real-time batch: the reference's global verdicts, counts and dead letters,
    each batch judged against the watermark in force when it started."""
    rows, arrivals = worked_rows()
    source = topic(kafka, "rt-worked", partitions=1)
    out = topic(kafka, "rt-worked-out", partitions=1)
    policy = TimePolicy(**WORKED, name="rt_global", engine="jvm")
    with wmobs.attach(spark) as monitor:
        judged = policy.apply(read(spark, kafka, source), dead_letter=str(tmp_path / "dead"))
        query = _start(judged, kafka, out, tmp_path / "ckpt")
        try:
            for i, (row, arrival) in enumerate(zip(rows, arrivals, strict=True)):
                send(producer, source, [row], [arrival])
                # one event per real-time batch, as the reference's micro-batches have them
                wait_until(
                    lambda i=i: (
                        (s := monitor.snapshot(str(query.id))) is not None and s.input_rows > i
                    ),
                    timeout=60,
                    what=f"event {row['id']} read",
                )
            wanted = expected("global")
            kept = _consume(kafka, out, len(wanted))
            snap = monitor.snapshot(str(query.id))
        finally:
            query.stop()
    assert query.exception() is None
    assert kept == wanted
    assert snap is not None
    assert snap.input_rows == len(rows)  # exact per real-time batch (the metrics reference)
    counts = snap.policy("rt_global")
    assert counts is not None and counts.engine == "jvm"
    dropped = sum(n for (_, action), n in counts.events.items() if action == "dropped")
    assert dropped == len(rows) - len(wanted)
    # Dead letters per real-time batch: each dropped row once, in the file of its own batch
    # (one event per batch), and counted as the destination received them.
    dead = spark.read.parquet(str(tmp_path / "dead")).collect()
    assert sorted(r.id for r in dead) == sorted(r["id"] for r in rows if r["id"] not in wanted)
    assert len({r.wmobs_batch_id for r in dead}) == len(dead)
    assert counts.dead_letter_rows == len(dead)


def test_substreams_in_real_time_batches_on_rocksdb(
    spark: Any, kafka: Any, producer: Any, tmp_path: Path
) -> None:
    """On RocksDB, substreams run in Spark's ``transformWithState``, which real-time mode runs
    (``flatMapGroupsWithState``, on Spark's default store, it refuses: below): the worked
    example per device, all at once, kept and counted exactly as the reference cases say. One
    source partition and one shuffle partition: a real-time batch runs its stages at once, one
    task slot each, and this machine has two. (Spark 4.1 and 4.2 cannot plan
    ``transformWithState`` in a real-time batch: wmobs refuses substreams there, below.)"""
    if not _keyed_state_runs(spark):
        pytest.skip(f"Spark {spark.version} cannot plan transformWithState in real-time mode")
    rows, arrivals = worked_rows()
    source = topic(kafka, "rt-keys", partitions=1)
    out = topic(kafka, "rt-keys-out", partitions=1)
    policy = TimePolicy(**WORKED, substream_by=["deviceId"], name="rt_keys", engine="jvm")
    one_task = {"spark.sql.shuffle.partitions": "1"}
    with state_store(spark, ROCKSDB), session_conf(spark, one_task), wmobs.attach(spark) as monitor:
        query = _start(policy.apply(read(spark, kafka, source)), kafka, out, tmp_path / "ckpt")
        try:
            send(producer, source, rows, arrivals)
            wanted = expected("substreams")
            kept = _consume(kafka, out, len(wanted))
            wait_until(
                lambda: (
                    (s := monitor.snapshot(str(query.id))) is not None and s.input_rows == len(rows)
                ),
                timeout=60,
                what="the listener counting every row",
            )
            snap = monitor.snapshot(str(query.id))
            operators = [o["operatorName"] for o in query.lastProgress["stateOperators"]]
        finally:
            query.stop()
    assert query.exception() is None
    assert kept == wanted
    assert operators == ["transformWithStateExec"]
    assert snap is not None
    counts = snap.policy("rt_keys")
    assert counts is not None and counts.engine == "jvm"
    dropped = sum(n for (_, action), n in counts.events.items() if action == "dropped")
    assert dropped == len(rows) - len(wanted)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"engine": "python"}, "wmobs TimePolicy in real-time mode (trigger(realTime=...)): this "
         "query's policy runs on the Python engine"),
        ({"substream_by": ["deviceId"], "engine": "jvm"},
         "flatMapGroupsWithState in append mode is not supported with Update output mode"),
        ({"idle_timeout": "1 second", "engine": "jvm"},
         "input stream io.wmobs.spark.IdleHeartbeat$Stream is not supported in Real-time Mode"),
        ({"substream_by": ["deviceId"], "substream_ttl": "1 hour", "engine": "jvm", "rocksdb": 1},
         "input stream io.wmobs.spark.IdleHeartbeat$Stream is not supported in Real-time Mode"),
        ({"substream_by": ["deviceId"], "engine": "jvm", "rocksdb": 1, "before_4_3": 1},
         "wmobs TimePolicy in real-time mode (trigger(realTime=...)): substreams (substream_by) "
         "run in Spark's transformWithState, which Spark 4."),
    ],
    ids=["python-engine", "substreams", "idle-timeout", "substream-ttl-on-rocksdb",
         "substreams-on-rocksdb-before-4.3"],
)  # fmt: skip
def test_what_real_time_mode_cannot_run_is_refused_as_the_query_starts(
    spark: Any, kafka: Any, tmp_path: Path, options: dict[str, Any], says: str
) -> None:
    """The Python engine: wmobs' error, as the first real-time batch is planned. Substreams on
    Spark's default store (``flatMapGroupsWithState``, which real-time mode does not run), and
    the idle timeout or a substream TTL (served by a source of their own, which real-time mode
    does not read): Spark's own errors, at ``start()`` or as the query starts, before any batch
    runs. Substreams on RocksDB before Spark 4.3 (``transformWithState``, which Spark 4.1 and
    4.2 fail to plan in a real-time batch with ``STDS_FAILED_TO_READ_OPERATOR_METADATA``):
    wmobs' error naming the line, as the first real-time batch is planned."""
    options = dict(options)
    if options.pop("before_4_3", None) and _keyed_state_runs(spark):
        pytest.skip(f"Spark {spark.version} plans transformWithState in real-time mode")
    with state_store(spark, ROCKSDB if options.pop("rocksdb", None) else None):
        _refused(spark, kafka, tmp_path, options, says)


def _keyed_state_runs(spark: Any) -> bool:
    """Spark 4.3+: ``transformWithState`` (substreams on RocksDB) in real-time batches."""
    major, minor = (int(part) for part in spark.version.split(".")[:2])
    return (major, minor) >= (4, 3)


def _refused(spark: Any, kafka: Any, tmp_path: Path, options: dict[str, Any], says: str) -> None:
    source = topic(kafka, f"rt-refused-{tmp_path.name}", partitions=1)
    policy = TimePolicy(**WORKED, name="rt_refused", **options)
    judged = policy.apply(read(spark, kafka, source), checkpoint_location=str(tmp_path / "ckpt"))
    try:
        query = _start(judged, kafka, source + "-out", tmp_path / "ckpt")
    except Exception as refused:  # Spark's checks at start()
        error = str(refused)
    else:
        try:
            wait_until(lambda: not query.isActive, timeout=60, what="the query to stop")
        finally:
            query.stop()
        error = str(query.exception())
    assert says in error
