"""Runs wmobs over Spark Connect (``remote("local[2]")``) and prints what it measured as JSON.

A child process of ``test_connect.py``: a Connect session cannot share a process with the
classic session the other tests use. ``python -m tests.spark.connect_job`` starts the Connect
server without wmobs' extension (the listener, and the policies on the Python engine);
``--extension`` starts it with the extension (``wmobs.configure_spark``): the worked example
on the JVM engine, called by name from the client.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import wmobs
from tests.spark._streaming import (
    ProgressWaiter,
    start_kept,
    wait_until,
    windowed_query,
    write_events,
    write_rows,
)


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


def appended_to(directory: str) -> Any:
    """A ``foreachBatch`` function that appends each micro-batch to Parquet files in
    ``directory``: over Spark Connect the server runs it in a Python process of its own, whose
    actions run on a thread of the server's, not the query's."""

    def append(batch: Any, batch_id: int) -> None:
        batch.write.mode("append").parquet(directory)

    return append


def parquet_rows(spark: Any, directory: Path) -> list[Any]:
    """The rows of the Parquet files in ``directory`` (none before the first is written)."""
    if not any(directory.glob("*.parquet")):
        return []
    return list(spark.read.parquet(str(directory)).collect())


def _policy(snap: wmobs.QuerySnapshot | None) -> Any:
    """The only policy of a query's snapshot."""
    assert snap is not None
    policy = snap.policy()
    assert policy is not None
    return policy


def worked_example(spark: Any, work: Path) -> dict[str, Any]:
    """DESIGN's worked example (tests/reference/worked_example.json), one event per micro-batch
    globally and all at once per device: every row's system timestamp (None: dropped), and
    the engine and counts the listener saw. The global policy's output goes through a
    ``foreachBatch`` function, whose actions run off the query's thread."""

    from pyspark.sql import functions as F

    from wmobs import TimePolicy

    reference = json.loads(
        (Path(__file__).resolve().parents[1] / "reference" / "worked_example.json").read_text()
    )
    events = reference["events"]
    rows = [
        {
            "id": e["id"],
            "EventTime": f"2026-01-01T{e['event']}:00Z",
            "ArrivalTime": f"2026-01-01T{e['arrival']}:00Z",
            "deviceId": e["device"],
        }
        for e in events
    ]
    schema = "id INT, EventTime TIMESTAMP, ArrivalTime TIMESTAMP, deviceId STRING"
    out: dict[str, Any] = {}
    monitor = wmobs.attach(spark)
    # "sql": the global policy from SQL, Azure Stream Analytics' TIMESTAMP BY over a view
    for how, by in (("global", None), ("substreams", ["deviceId"]), ("sql", None)):
        source = work / f"worked_{how}"
        if by is None:
            for row in rows:
                write_rows(source, f"event-{row['id']:02d}", [row])
        else:
            write_rows(source, "all", rows[5:] + rows[:5])  # file order is not arrival order
        policy = TimePolicy(
            early_arrival="5 minutes",
            late_arrival="5 minutes",
            out_of_order="2 minutes",
            substream_by=by,
            name=f"worked_{how}",
        )
        checkpoint = str(work / f"ckpt_{how}")
        stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(source))
        if how == "sql":
            # As Azure Stream Analytics writes it, read by the parser of the server's extension:
            # the tolerances are the session's settings, the policy named after its input.
            stream.createOrReplaceTempView("worked_sql")
            for option in ("early_arrival", "late_arrival", "out_of_order"):
                spark.conf.set(f"spark.wmobs.sql.{option}", getattr(policy, option))
            judged = spark.sql("SELECT * FROM worked_sql TIMESTAMP BY EventTime")
        else:
            judged = policy.apply(stream, checkpoint_location=checkpoint)
        name = f"connect_worked_{how}"
        if how == "global":
            written = work / f"written_{how}"
            query = (
                judged.select("id", F.unix_seconds("system_timestamp").alias("system"))
                .writeStream.queryName(name)
                .option("checkpointLocation", checkpoint)
                .foreachBatch(appended_to(str(written)))
                .start()
            )
        else:
            query = start_kept(judged, name, checkpoint)
        query.processAllAvailable()
        query.stop()
        wait_until(lambda n=name: not monitor.snapshot(n).active)  # type: ignore[union-attr,misc]
        if how == "global":
            kept = {r.id: r.system for r in parquet_rows(spark, written)}
        else:
            kept = {r.id: r.system for r in spark.sql(f"select * from {name}").collect()}
        cases = reference["global" if how == "sql" else how]
        expected = {
            e["id"]: None
            if cases[str(e["id"])]["system_us"] is None
            else cases[str(e["id"])]["system_us"] // 10**6
            for e in events
        }
        policy_snap = _policy(monitor.snapshot(name))
        out[how] = {
            "exact": {i: kept.get(i) for i in expected} == expected,
            "kept": kept,
            "engine": policy_snap.engine,
            "events": {f"{r}:{a}": n for (r, a), n in policy_snap.events.items() if n},
        }
    monitor.close()
    return out


def idle_and_dead_letters(spark: Any, work: Path) -> dict[str, Any]:
    """The idle timeout (the extension's heartbeat source) and dead letters over Connect, per
    device: an old event's window is emitted once the source has been quiet for a second, and
    an event two hours early is counted and written as a dead letter, in its micro-batch's
    folder; the windows go through a ``foreachBatch`` function."""
    from pyspark.sql import functions as F

    from wmobs import TimePolicy
    from wmobs.testing import iso

    now = time.time()
    rows = [
        {"EventTime": iso(now - 60), "deviceId": "A"},
        {"EventTime": iso(now + 7200), "deviceId": "A"},  # early: dropped, dead-lettered
    ]
    write_rows(work / "idle_in", "0", rows)
    policy = TimePolicy(
        event_time="EventTime",
        arrival_time=None,
        late_arrival="10 minutes",
        idle_timeout="1 second",
        substream_by=["deviceId"],
        name="connect_idle",
        engine="jvm",
    )
    checkpoint = str(work / "idle_ckpt")
    stream = spark.readStream.schema("EventTime TIMESTAMP, deviceId STRING").json(
        str(work / "idle_in")
    )
    judged = policy.apply(stream, checkpoint_location=checkpoint, dead_letter=str(work / "dead"))
    windows = judged.groupBy(F.window("system_timestamp", "3 seconds"), "deviceId").count()
    written = work / "idle_out"
    query = (
        windows.writeStream.queryName("connect_idle")
        .outputMode("append")
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .foreachBatch(appended_to(str(written)))
        .start()
    )
    wait_until(lambda: parquet_rows(spark, written), timeout=120, what="the quiet window")
    emitted = [int(r["count"]) for r in parquet_rows(spark, written)]
    query.stop()
    dead = spark.read.parquet(str(work / "dead")).collect()
    return {
        "emitted": emitted,
        "dead_letter_files_rows": len(dead),
        "dead_letter_batches": sorted({r["wmobs_batch_id"] for r in dead}),
    }


def with_extension() -> dict[str, Any]:
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.remote("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
    )
    spark = wmobs.configure_spark(builder).getOrCreate()
    work = Path(tempfile.mkdtemp(prefix="wmobs-connect-"))
    result = {"session": type(spark).__module__, **worked_example(spark, work)}
    result["idle"] = idle_and_dead_letters(spark, work)
    result["unwritable"] = unwritable_dead_letters(spark, work)
    spark.stop()
    return result


def unwritable_dead_letters(spark: Any, work: Path) -> str:
    """The error of ``apply`` for dead letters the server cannot write (a local directory under
    ``/proc``): as in a classic session, at ``apply``, not at the first dropped row."""
    from wmobs import StorageError, TimePolicy

    (work / "unwritable_in").mkdir()
    stream = spark.readStream.schema("EventTime TIMESTAMP, deviceId STRING")
    stream = stream.json(str(work / "unwritable_in"))
    policy = TimePolicy(event_time="EventTime", arrival_time=None, name="unwritable", engine="jvm")
    try:
        policy.apply(stream, dead_letter="/proc/wmobs-dead")
    except StorageError as refused:
        return f"StorageError: {refused}"
    return "accepted"


def main() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if "--extension" in sys.argv:
        print("RESULT " + json.dumps(with_extension()))
        return
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
    wait_until(lambda: (s := monitor.snapshot("wm_connect")) is not None and not s.active)
    policy_counts = run_policy(spark, work, now)
    wait_until(lambda: (s := monitor.snapshot("policy_connect")) is not None and not s.active)
    policy_snap = monitor.snapshot("policy_connect")
    substreams_kept, substreams_adjusted = run_substreams(spark, work, now)
    try:  # a server without wmobs' extension: engine="jvm" is an error, not a fallback
        wmobs.TimePolicy(event_time="event_time", arrival_time=None, engine="jvm").apply(
            spark.readStream.schema("event_time TIMESTAMP").json(str(work / "in")),
            checkpoint_location=str(work / "never"),
        )
        jvm_error = None
    except wmobs.EngineError as exc:
        jvm_error = str(exc)
    wait_until(lambda: (s := monitor.snapshot("substreams_connect")) is not None and not s.active)
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
        "policy_events": {f"{r}:{a}": n for (r, a), n in _policy(policy_snap).events.items()},
        "policy_dead_letters": _policy(policy_snap).dead_letter_rows,
        "policy_engine": _policy(policy_snap).engine,
        "substreams_kept": substreams_kept,
        "substreams_adjusted_rows": substreams_adjusted,
        "substreams_events": {
            f"{r}:{a}": n for (r, a), n in _policy(substreams_snap).events.items()
        },
        "substreams_engine": _policy(substreams_snap).engine,
        "jvm_error": jvm_error,
    }
    monitor.close()
    spark.stop()
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    try:
        main()
    except BaseException:  # a Connect server's threads would keep a failed job alive
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
