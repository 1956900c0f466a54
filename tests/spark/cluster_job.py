"""The time policies on ``local-cluster[2,1,1024]``: two executor JVMs, each with its own Python
workers (the worked example, dead letters, the idle timeout globally and per key, the last two
with paths relative to the driver's working directory), then one executor killed mid-stream.
Prints what it measured as JSON.

A child process of ``test_cluster.py`` (one process has one Spark master):
``python -m tests.spark.cluster_job``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pyspark
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import wmobs
from tests.object_store import hadoop_aws_jars, s3a_conf, start_s3_server
from tests.spark._streaming import engines, firings, wait_until, write_rows
from tests.spark.test_policy_spark import (
    GLOBAL_EXPECTED,
    SUBSTREAM_EXPECTED,
    expected_seconds,
    run_policy,
    ts,
    worked_rows,
)
from wmobs import BatchSummary, DeadLetter, QuerySnapshot, TimePolicy
from wmobs.testing import iso, local_spark

WORKED = {
    "event_time": "EventTime",
    "arrival_time": "ArrivalTime",
    "early_arrival": "5 minutes",
    "late_arrival": "5 minutes",
    "out_of_order": "2 minutes",
}


def executor_pids(app_id: str) -> list[int]:
    """The executor JVMs of this application (separate processes in local-cluster mode)."""
    listing = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True)
    return [
        int(line.split(None, 1)[0])
        for line in listing.stdout.splitlines()[1:]
        if "CoarseGrainedExecutorBackend" in line and app_id in line
    ]


def kill_one_executor_mid_stream(
    spark: Any, work: Path, files: int, checkpoint: str
) -> dict[str, Any]:
    """A stream of ``files`` micro-batches with every kind of dropped row, dead-lettered, its
    checkpoint at ``checkpoint`` (``s3a://``); one executor is killed (SIGKILL) after the third
    micro-batch. Two policies of one query over the same files: a global one, and one per
    device, whose keys' state the executor left loads again from the checkpoint."""
    from pyspark.sql import functions as F

    source, sink, dead = work / "kill-in", work / "kill-out", work / "kill-dead"
    rows_in = 0
    for f in range(files):
        rows = []
        for i in range(40):
            n = f * 40 + i
            event = ts("12:10") if i % 5 else None  # every fifth: invalid time
            if i % 7 == 0:
                event = ts("12:30")  # 20 minutes early: dropped
            rows.append({"id": n, "ts": event, "arr": ts("12:10"), "dev": n % 4})
        write_rows(source, f"part-{f:03d}", rows)
        rows_in += len(rows)
    policies = [
        TimePolicy(event_time="ts", arrival_time="arr", name="kill"),
        TimePolicy(event_time="ts", arrival_time="arr", substream_by=["dev"], name="kill_keys"),
    ]
    killed: list[int] = []
    kill_now = threading.Event()

    def on_progress(snap: QuerySnapshot, batch: BatchSummary) -> None:
        if batch.batch_id == 2:
            kill_now.set()

    def judged(policy: TimePolicy) -> Any:
        stream = spark.readStream.schema("id INT, ts STRING, arr TIMESTAMP, dev INT")
        out = policy.apply(
            stream.option("maxFilesPerTrigger", 1).json(str(source)),
            checkpoint_location=checkpoint,
            dead_letter=DeadLetter(dead.name),  # relative: the driver's working directory
        )
        return out.select("id", F.lit(policy.name).alias("policy"))

    reader = InMemoryMetricReader()
    with wmobs.attach(
        spark, meter_provider=MeterProvider(metric_readers=[reader]), on_progress=on_progress
    ) as monitor:
        query = (
            judged(policies[0])
            .unionByName(judged(policies[1]))
            .writeStream.queryName("kill")
            .format("parquet")
            .option("path", str(sink))
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        assert kill_now.wait(300), "the stream never reached its third micro-batch"
        pids = executor_pids(spark.sparkContext.applicationId)
        os.kill(pids[0], signal.SIGKILL)
        killed.append(pids[0])
        query.processAllAvailable()
        operators = [o["operatorName"] for o in query.lastProgress["stateOperators"]]
        query.stop()
        wait_until(lambda: (s := monitor.snapshot("kill")) is not None and not s.active)
        snap = monitor.snapshot("kill")
    assert snap is not None and query.exception() is None
    kept = [(r.policy, r.id) for r in spark.read.parquet(str(sink)).collect()]
    dead_rows = ds.dataset(str(dead), format="parquet", partitioning="hive").to_table()
    dead_ids = list(
        zip(
            dead_rows.column("wmobs_policy").to_pylist(),
            dead_rows.column("id").to_pylist(),
            strict=True,
        )
    )
    by_policy: dict[str, dict[str, int]] = {}
    for policy in policies:
        counts = snap.policy(policy.name)
        assert counts is not None
        by_policy[policy.name] = {
            "dead": sum(1 for name, _ in dead_ids if name == policy.name),
            "dead_letter_counter": counts.dead_letter_rows or 0,
            "dropped_counters": sum(
                v for (_, action), v in counts.events.items() if action == "dropped"
            ),
        }
    return {
        "executors_before": len(pids),
        "killed": killed,
        "executors_after": len(executor_pids(spark.sparkContext.applicationId)),
        "rows_in": rows_in * len(policies),
        "kept": len(kept),
        "kept_unique": len(set(kept)),
        "dead": len(dead_ids),
        "dead_unique": len(set(dead_ids)),
        "overlap": len(set(kept) & set(dead_ids)),
        "by_policy": by_policy,
        "input_rows_counter": snap.input_rows,
        "state_operators": operators,
    }


def idle_window_closes(spark: Any, work: Path, *, substreams: bool) -> dict[str, Any]:
    """Three events in one 3-second window, then silence: the idle timeout (1 s) must close
    the window with exactly those rows, after its end plus the timeout."""
    import time

    from pyspark.sql import functions as F

    name = "c_idle_sub" if substreams else "c_idle"
    source = work / f"{name}-in"
    now = time.time()
    start = now // 3 * 3
    times = [max(t, start) for t in (now - 0.2, now - 0.1, now)]
    write_rows(source, "burst", [{"ts": iso(t), "device": "A", "v": 1} for t in times])
    policy = TimePolicy(
        event_time="ts",
        arrival_time=None,
        late_arrival="10 minutes",
        idle_timeout="1 second",
        substream_by=["device"] if substreams else None,
        name=name,
    )
    # Relative, as Spark resolves the query's own: against the driver's working directory
    # (``work``), which is not the executors'.
    checkpoint = f"{name}-ckpt"
    stream = spark.readStream.schema("ts TIMESTAMP, device STRING, v LONG").json(str(source))
    out = policy.apply(stream, checkpoint_location=checkpoint)
    windows = out.groupBy(F.window("system_timestamp", "3 seconds")).agg(F.count("*").alias("n"))
    with wmobs.attach(spark) as monitor:
        query = (
            windows.writeStream.queryName(name)
            .format("memory")
            .outputMode("append")
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="200 milliseconds")
            .start()
        )

        def emitted() -> list[Any]:
            return spark.sql(f"SELECT window.start AS s, n FROM {name}").collect()

        wait_until(lambda: bool(emitted()), timeout=120, what="the idle window")
        seen = time.time()
        rows = emitted()
        with contextlib.suppress(AssertionError):  # none heard: the test says so
            wait_until(lambda: firings(monitor, name) >= 1, timeout=30, what="the firing")
        snap = monitor.snapshot(name)
        query.stop()
    return {
        "windows": [[r.s.timestamp(), r.n] for r in rows],
        "window_start": start,
        "after_end_plus_timeout": seen >= start + 3 + 1.0,
        "firings": None
        if snap is None or not snap.policy()
        else snap.policy().idle_timeout_firings,  # type: ignore[union-attr]
    }


def main() -> None:
    os.environ["SPARK_HOME"] = str(Path(pyspark.__file__).resolve().parent)
    # Spark's own checkpoint of the killed stream on s3a:// (a real S3 server on 127.0.0.1):
    # Hadoop's S3A connector on the driver's and the executors' class path (the same machine's
    # files, not copied to each executor) and its settings as a cluster gives them.
    s3 = start_s3_server()
    classpath = ":".join(str(jar) for jar in hadoop_aws_jars())
    conf = {f"spark.hadoop.{key}": value for key, value in s3a_conf(s3).items()}
    if classpath:
        conf |= {"spark.driver.extraClassPath": classpath}
        conf |= {"spark.executor.extraClassPath": classpath}
    work = Path(tempfile.mkdtemp(prefix="wmobs-cluster-"))
    os.chdir(work)  # the driver's working directory, for the relative paths below
    spark = local_spark("wmobs-cluster", master="local-cluster[2,1,1024]", conf=conf)
    result: dict[str, Any] = {"master": spark.sparkContext.master, "s3a": bool(classpath)}
    try:
        result["executors"] = len(executor_pids(spark.sparkContext.applicationId))
        for row in worked_rows():
            write_rows(work / "in", f"event-{row['id']:02d}", [row])
        kept, counts, _ = run_policy(spark, TimePolicy(**WORKED), work / "in", work, "c_global")
        result["global_exact"] = kept == expected_seconds(GLOBAL_EXPECTED)
        result["global_counts"] = {f"{p}:{a}": v for (p, a), v in counts.items() if v}
        # Named queries, their checkpoints below a relative session root: as Spark resolves it,
        # against the driver's working directory.
        spark.conf.set("spark.sql.streaming.checkpointLocation", "roots")
        write_rows(work / "sub", "all", worked_rows())
        policy = TimePolicy(**WORKED, substream_by=["deviceId"], name="c_sub")
        kept, counts, _ = run_policy(spark, policy, work / "sub", work, "c_sub", by_name=True)
        result["substreams_exact"] = kept == expected_seconds(SUBSTREAM_EXPECTED)
        if "python" in engines(spark):
            policy = TimePolicy(**WORKED, name="c_py", engine="python")
            kept, _, _ = run_policy(spark, policy, work / "in", work, "c_py", by_name=True)
            result["python_global_exact"] = kept == expected_seconds(GLOBAL_EXPECTED)
        spark.conf.unset("spark.sql.streaming.checkpointLocation")
        result["idle"] = idle_window_closes(spark, work, substreams=False)
        result["idle_substreams"] = idle_window_closes(spark, work, substreams=True)
        result["relative_paths_under_the_drivers_directory"] = all(
            (work / path).is_dir()
            for path in (
                "c_idle-ckpt/offsets",
                "c_idle_sub-ckpt/offsets",
                "c_idle_sub-ckpt/state",
                "roots/c_sub/state",
            )
        )
        bucket = s3.create_bucket("wmobs-cluster")
        checkpoint = f"s3a://{bucket}/kill-ckpt" if classpath else str(work / "kill-ckpt")
        result["kill"] = kill_one_executor_mid_stream(spark, work, 8, checkpoint)
        result["kill"]["checkpoint_objects"] = len(s3.objects(bucket, "kill-ckpt/offsets/"))
    finally:
        spark.stop()
        s3.process.terminate()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
