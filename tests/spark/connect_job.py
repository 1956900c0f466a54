"""Runs wmobs over Spark Connect (``remote("local[2]")``) and prints what it measured as JSON.

A child process of ``test_connect.py``: a Connect session cannot share a process with the
classic session the other tests use.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import wmobs
from tests.spark._streaming import ProgressWaiter, wait_until, windowed_query, write_events


def run_policy(spark: object, work: Path, now: float) -> int:
    """A global TimePolicy over Connect: the watermark source, observe and dead letters."""
    from wmobs import TimePolicy

    rows = [now - 1, now - 3600, now + 3600]  # on time; 1 h late (adjusted); 1 h early
    write_events(work / "policy_in", 0, rows)
    checkpoint = str(work / "policy_ckpt")
    stream = spark.readStream.schema("event_time TIMESTAMP, value LONG").json(  # type: ignore[attr-defined]
        str(work / "policy_in")
    )
    out = TimePolicy(event_time="event_time", arrival_time=None, late_arrival="5 minutes").apply(
        stream, checkpoint_location=checkpoint, dead_letter=str(work / "dead")
    )
    query = (
        out.writeStream.queryName("policy_connect")
        .format("memory")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return int(spark.sql("select count(*) from policy_connect").collect()[0][0])  # type: ignore[attr-defined]


def run_substreams(spark: object, work: Path, now: float) -> tuple[int, int]:
    """Substreams over Connect, in two micro-batches: key 0 goes back 10 s (out of order for
    it, adjusted), key 1 forward from 100 s back (in order for it)."""
    from wmobs import TimePolicy

    write_events(work / "sub_in", 0, [now, now - 100])
    write_events(work / "sub_in", 1, [now - 10, now - 50])
    checkpoint = str(work / "sub_ckpt")
    stream = (
        spark.readStream.schema("event_time TIMESTAMP, value LONG")  # type: ignore[attr-defined]
        .option("maxFilesPerTrigger", 1)
        .json(str(work / "sub_in"))
    )
    policy = TimePolicy(
        event_time="event_time",
        arrival_time=None,
        late_arrival="1 hour",
        substream_by=["value"],
        name="connect_substreams",
    )
    query = (
        policy.apply(stream, checkpoint_location=checkpoint)
        .writeStream.queryName("substreams_connect")
        .format("memory")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    kept = int(spark.sql("select count(*) from substreams_connect").collect()[0][0])  # type: ignore[attr-defined]
    adjusted = spark.sql(  # type: ignore[attr-defined]
        "select count(*) from substreams_connect where system_timestamp != event_time"
    ).collect()[0][0]
    return kept, int(adjusted)  # rows kept, rows whose system_timestamp was adjusted


def main() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.remote("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    work = Path(tempfile.mkdtemp(prefix="wmobs-connect-"))
    now = time.time()
    rows = write_events(work / "in", 0, [now - 30 + k for k in range(6)])
    waiter = ProgressWaiter()
    reader = InMemoryMetricReader()
    monitor = wmobs.attach(
        spark,
        meter_provider=MeterProvider(metric_readers=[reader]),
        prometheus_port=0,
        on_progress=waiter,
    )
    query = windowed_query(spark, work / "in", work / "ckpt", "wm_connect")
    query.processAllAvailable()
    waiter.wait_for_batch("wm_connect", query.lastProgress["batchId"])
    wait_until(lambda: monitor.snapshot("wm_connect").watermark is not None)  # type: ignore[union-attr]
    snap = monitor.snapshot("wm_connect")
    assert snap is not None
    with urllib.request.urlopen(monitor.metrics_url or "", timeout=10) as response:
        scraped = response.read().decode()
    measured_delay = time.time() - (snap.watermark or 0.0)
    query.stop()
    wait_until(lambda: not monitor.snapshot("wm_connect").active)  # type: ignore[union-attr]
    policy_counts = run_policy(spark, work, now)
    wait_until(lambda: monitor.snapshot("policy_connect").active is False)  # type: ignore[union-attr]
    policy_snap = monitor.snapshot("policy_connect")
    substreams_kept, substreams_adjusted = run_substreams(spark, work, now)
    wait_until(lambda: monitor.snapshot("substreams_connect").active is False)  # type: ignore[union-attr]
    substreams_snap = monitor.snapshot("substreams_connect")
    result = {
        "session": type(spark).__module__,
        "rows_written": rows,
        "input_rows": snap.input_rows,
        "watermark": snap.watermark,
        "expected_watermark": now - 30 + 5 - 10,
        "delay": measured_delay,
        "scraped": scraped,
        "active_after_stop": monitor.snapshot("wm_connect").active,  # type: ignore[union-attr]
        "errors": monitor.listener.errors,
        "policy_kept": policy_counts,
        "policy_events": {
            f"{p}:{a}": n
            for (p, a), n in (policy_snap.policy_events if policy_snap else {}).items()
        },
        "policy_dead_letters": policy_snap.dead_letter_rows if policy_snap else None,
        "substreams_kept": substreams_kept,
        "substreams_adjusted_rows": substreams_adjusted,
        "substreams_events": {
            f"{p}:{a}": n
            for (p, a), n in (substreams_snap.policy_events if substreams_snap else {}).items()
        },
    }
    monitor.close()
    spark.stop()
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
