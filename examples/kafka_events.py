"""Device events from Kafka, judged per device, counted per minute, watched by wmobs.

Arrival time is Kafka's ``timestamp`` (when the record was appended); the event time is in the
record's JSON value. Each device has its own watermark (``substream_by``), a device that goes
quiet has its windows closed by the idle timeout, dropped records go to a dead-letter
directory, and the metrics — the topic's backlog and how long records waited in it among them —
are served on 127.0.0.1:9464.

Run it next to a broker, with Spark's Kafka source of your Spark version on the session:

    python examples/kafka_events.py --bootstrap 127.0.0.1:9092 --topic events \\
        --checkpoint /tmp/kafka-events --jars spark-sql-kafka-0-10_2.13-4.2.0.jar,...

Records look like ``{"deviceId": "d1", "EventTime": "2026-11-25T12:00:00.250Z", "value": 1.5}``.
``--duration`` stops it after so many seconds, ``--until-rows`` once it has read so many
records (the tests do); without either, Ctrl-C. A query that fails ends the job with its error.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import wmobs

VALUE = "deviceId STRING, EventTime STRING, value DOUBLE"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True, help="Kafka's bootstrap servers")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--checkpoint", required=True, help="the query's checkpoint location")
    parser.add_argument("--dead-letters", default=None, help="default: <checkpoint>-dead")
    parser.add_argument("--jars", default="", help="Spark's Kafka source and its dependencies")
    parser.add_argument("--port", type=int, default=9464, help="metrics port (0: a free one)")
    parser.add_argument("--duration", type=float, default=None, help="stop after N seconds")
    parser.add_argument("--until-rows", type=int, default=None, help="stop once N rows are read")
    parser.add_argument(
        "--shuffle-partitions",
        type=int,
        default=4,
        help="the state's partitions, fixed by the checkpoint's first run (Spark's 200 are for "
        "clusters: on a laptop each micro-batch would take seconds)",
    )
    args = parser.parse_args(argv)

    builder = SparkSession.builder.appName("kafka-events").config(
        "spark.sql.shuffle.partitions", str(args.shuffle_partitions)
    )
    if args.jars:
        builder = builder.config("spark.jars", args.jars)
    spark = wmobs.configure_spark(builder).getOrCreate()
    monitor = wmobs.attach(spark, prometheus_port=args.port)
    print(f"metrics at {monitor.metrics_url}", flush=True)

    records = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    events = records.select(
        F.from_json(F.col("value").cast("string"), VALUE).alias("v"), "timestamp"
    ).select("v.*", "timestamp")
    policy = wmobs.TimePolicy(
        event_time="EventTime",
        arrival_time="timestamp",  # Kafka's record timestamp
        late_arrival="1 minute",
        out_of_order="10 seconds",
        substream_by=["deviceId"],
        idle_timeout="30 seconds",
        name="device_events",
    )
    judged = policy.apply(
        events,
        checkpoint_location=args.checkpoint,
        dead_letter=args.dead_letters or args.checkpoint.rstrip("/") + "-dead",
    )
    per_minute = judged.groupBy(F.window("system_timestamp", "1 minute"), "deviceId").agg(
        F.count("*").alias("events"), F.avg("value").alias("mean_value")
    )
    query = (
        per_minute.writeStream.queryName("device_events")
        .outputMode("append")
        .format("console")
        .option("checkpointLocation", args.checkpoint)
        .start()
    )
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        deadline = None if args.duration is None else time.monotonic() + args.duration
        while not stop.wait(0.2) and query.isActive:
            if deadline is not None and time.monotonic() >= deadline:
                break
            seen = monitor.snapshot("device_events")
            if args.until_rows is not None and seen and seen.input_rows >= args.until_rows:
                break
        query.stop()
        if query.exception() is not None:
            print(f"the query failed: {query.exception()}", file=sys.stderr, flush=True)
            return 1
        # The listener hears of the query's end after its last progress event: wait for that.
        deadline = time.monotonic() + 30
        snap = monitor.snapshot("device_events")
        while (snap is None or snap.active) and time.monotonic() < deadline:
            time.sleep(0.1)
            snap = monitor.snapshot("device_events")
        counted = None if snap is None else snap.policy("device_events")
        if snap is None or counted is None:
            print("no micro-batch finished", flush=True)
            return 0
        dropped = sum(n for (_, action), n in counted.events.items() if action == "dropped")
        print(
            f"rows {snap.input_rows}, dropped {dropped}, dead letters "
            f"{counted.dead_letter_rows or 0}, engine {counted.engine}, "
            f"backlog {dict(snap.backlogs)}",
            flush=True,
        )
        return 0
    finally:
        monitor.close()
        spark.stop()


if __name__ == "__main__":
    raise SystemExit(main())
