"""Exact counts across a crash that lands after the sink has committed a micro-batch and before
Spark has: the micro-batch runs again on restart, and its counts are reported once, whether
the sink skips it (the file sink; a ``foreachBatch`` that skips batches it has seen, as Delta's
sink does by its transaction version) or runs it again (an at-least-once sink, here one that
writes on a thread of its own, which the JVM engine's tasks need no local properties of; the
Python engine's sink writes on a ``pyspark.InheritableThread``, which hands them on). Spark's
checkpoint (and the counts kept beside it) on a local directory, and on ``s3a://`` on moto's
S3 server."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import wmobs
from wmobs import TimePolicy
from wmobs.testing import iso

from ._streaming import stopped, wait_until, write_rows
from .test_policy_spark import expected_histogram

pytestmark = pytest.mark.spark

SCHEMA = "id INT, EventTime TIMESTAMP, ArrivalTime TIMESTAMP"
MINUTE = 60.0
SINKS = ("files", "foreachBatch skipping", "foreachBatch again")


def batch_rows(batch: int, now: float) -> list[dict[str, Any]]:
    """Ten rows: on time, 10 minutes early (dropped, dead-lettered), 10 minutes late
    (adjusted); ids unique across batches."""
    rows = []
    for i in range(10):
        kind = i % 3
        event = now + (10 * MINUTE if kind == 1 else -10 * MINUTE if kind == 2 else 0)
        rows.append({"id": batch * 100 + i, "EventTime": iso(event), "ArrivalTime": iso(now)})
    return rows


def ids(batches: Any, *, kept: bool) -> list[int]:
    """The ids of the rows of ``batches`` that the sink keeps, or that are dead-lettered."""
    return [b * 100 + i for b in batches for i in range(10) if (i % 3 != 1) == kept]


def expected(batches: int) -> dict[tuple[str, str], int]:
    early = sum(1 for i in range(10) if i % 3 == 1) * batches
    late = sum(1 for i in range(10) if i % 3 == 2) * batches
    return {("early_arrival", "dropped"): early, ("late_arrival", "adjusted"): late}


@pytest.fixture
def checkpoints(request: pytest.FixtureRequest, spark: Any, tmp_path: Path) -> Iterator[Any]:
    """Where Spark's checkpoint goes, how a test plants a file there, and how the Python engine
    reaches it: ``(uri, plant, remove, storage)``."""
    if request.param == "local":
        root = tmp_path / "ckpt"

        def plant(name: str) -> None:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text("")

        yield str(root), plant, lambda name: (root / name).unlink(), None
        return
    from tests.object_store import hadoop_aws_jars, s3a_conf

    if not hadoop_aws_jars():  # fail, never skip: ./dev test fetches them
        pytest.fail("Hadoop's S3A connector is missing from .tools/ (./dev gets it)")
    server = request.getfixturevalue("s3_server")
    bucket = server.create_bucket(f"crash-{abs(hash(str(tmp_path))) % 10**8}")
    client = server.client()
    conf = s3a_conf(server)
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield (
            f"s3a://{bucket}/ckpt",
            lambda name: client.put_object(Bucket=bucket, Key=f"ckpt/{name}", Body=b""),
            lambda name: client.delete_object(Bucket=bucket, Key=f"ckpt/{name}"),
            server.storage,
        )
    finally:
        for key in conf:
            spark.conf.unset(key)


def policed(
    spark: Any,
    tmp_path: Path,
    sink: str,
    *,
    engine: str,
    checkpoint: str,
    storage: Any,
    on_batch: Callable[[int], None] | None = None,
) -> tuple[TimePolicy, Callable[[], Any], list[int]]:
    """The policy, how the query starts (again) with ``sink`` (``on_batch(batch_id)`` called
    once a ``foreachBatch`` sink has committed), and the ids of the micro-batches the sink was
    given."""
    policy = TimePolicy(
        arrival_time="ArrivalTime",
        late_arrival="5 minutes",
        out_of_order="1 hour",
        name=f"crash_{sink.rsplit(maxsplit=1)[-1]}",
        engine=engine,
    )
    out = tmp_path / "out"
    given: list[int] = []
    seen: set[int] = set()

    def write_batch(df: Any, batch_id: int) -> None:
        """A sink that writes each micro-batch under its id; "skipping": not again once it has
        (as Delta's sink does by its transaction version)."""
        given.append(batch_id)
        # As a user's function may: the description Spark gave the micro-batch's thread, with
        # its query run, is not what tells a micro-batch run again.
        df.sparkSession.sparkContext.setJobDescription("a sink of the user's")
        if sink == "foreachBatch skipping" and batch_id in seen:
            return
        write = df.write.mode("overwrite")
        if engine == "python":  # on a thread that inherits the query's local properties
            on_thread(lambda: write.parquet(str(out / f"batch_id={batch_id}")), inherit=True)
        elif sink == "foreachBatch skipping" or storage is not None:
            write.parquet(str(out / f"batch_id={batch_id}"))
        else:  # on a thread of its own, without the query's local properties: the JVM engine,
            # its dead letters written by the JVM (a Storage of the policy's hands them to Python)
            on_thread(lambda: write.parquet(str(out / f"batch_id={batch_id}")), inherit=False)
        seen.add(batch_id)
        if on_batch is not None:
            on_batch(batch_id)

    def start() -> Any:
        source = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
        judged = policy.apply(
            source.json(str(tmp_path / "in")),
            checkpoint_location=checkpoint,
            dead_letter=str(tmp_path / "dead"),
            storage=storage,
        ).select("id")
        writer = judged.writeStream.queryName("crash").option("checkpointLocation", checkpoint)
        writer = writer.trigger(processingTime="100 milliseconds")
        if sink == "files":
            return writer.format("parquet").start(str(out))
        return writer.foreachBatch(write_batch).start()

    return policy, start, given


def on_thread(action: Callable[[], None], *, inherit: bool) -> None:
    """``action`` on a thread of its own, as a ``foreachBatch`` function may write (two writes
    side by side), waited for; ``inherit``: a ``pyspark.InheritableThread``, which hands it
    the caller's local properties (those of the query's micro-batch)."""
    from pyspark import InheritableThread

    failed: list[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as exc:
            failed.append(exc)

    thread = InheritableThread(target=run) if inherit else threading.Thread(target=run)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]


def counted_once(
    spark: Any, monitor: Any, policy: TimePolicy, tmp_path: Path, *, ends: dict[str, int]
) -> None:
    """Batches 0 to 2 ran, batch 1 twice, in two runs of query ``crash`` that ended as ``ends``
    says: every counter equals what the sink and the dead letters hold, nothing lost, nothing
    twice."""

    def ended() -> dict[str, int]:
        snap = monitor.snapshot("crash")
        return {} if snap is None else snap.terminations

    wait_until(lambda: ended() == ends, what=f"the listener hearing the runs end: {ends}")
    assert monitor.flush()
    snap = monitor.snapshot("crash")
    assert snap is not None
    counts = snap.policy(policy.state_name)
    assert counts is not None
    kept = sorted(r.id for r in spark.read.parquet(str(tmp_path / "out")).collect())
    assert kept == ids(range(3), kept=True)
    dead_ids = sorted(
        i
        for f in (tmp_path / "dead").rglob("*.parquet")
        for i in pq.read_table(f).column("id").to_pylist()
    )
    assert dead_ids == ids(range(3), kept=False)
    events = {k: v for k, v in counts.events.items() if v}
    assert events == expected(3)
    assert counts.dead_letter_rows == len(dead_ids)
    # The distributions too: every row's arrival delay once (0, 10 minutes early, late).
    delays = [{0: 0, 1: -600, 2: 600}[i % 3] * 10**6 for _ in range(3) for i in range(10)]
    ((buckets, _),) = expected_histogram("arrival_delay", delays).values()
    assert counts.histograms["arrival_delay"].buckets == buckets


@pytest.mark.parametrize(
    ("sink", "engine", "checkpoints"),
    [
        *[(sink, "jvm", at) for sink in SINKS for at in ("local", "s3a")],
        ("files", "python", "local"),
        ("files", "python", "s3a"),
        ("foreachBatch skipping", "python", "local"),
    ],
    indirect=["checkpoints"],
)
def test_a_micro_batch_the_sink_committed_before_a_crash_counts_once(
    spark: Any, tmp_path: Path, sink: str, engine: str, checkpoints: Any
) -> None:
    """Spark's commit of micro-batch 1 fails after the sink's (a file waits at
    ``commits/1``): the query dies with batch 1 in the sink and in the dead letters, and its
    progress never posted. Restarted, Spark runs batch 1 again. Every counter then equals what
    the sink and the dead letters hold: nothing lost, nothing twice. (On the Python engine,
    the listener recalls what the tasks kept of batch 1, off its callback: ``flush`` waits.)"""
    checkpoint, plant, remove, storage = checkpoints
    now = float(int(time.time()))  # whole seconds: each delay exactly on its bucket bound
    policy, start, _ = policed(
        spark, tmp_path, sink, engine=engine, checkpoint=checkpoint, storage=storage
    )
    with wmobs.attach(spark, prometheus_port=None) as monitor:
        write_rows(tmp_path / "in", "0", batch_rows(0, now))
        query = start()
        query.processAllAvailable()
        # Spark's commit of batch 1 will find a file where it writes: it fails after the sink's.
        plant("commits/1")
        write_rows(tmp_path / "in", "1", batch_rows(1, now))
        with pytest.raises(Exception, match="1"):
            query.awaitTermination(120)
        remove("commits/1")
        kept_before = sorted(r.id for r in spark.read.parquet(str(tmp_path / "out")).collect())
        assert kept_before == ids((0, 1), kept=True)

        query = start()  # batch 1 again: the sink skips it, or runs it again
        write_rows(tmp_path / "in", "2", batch_rows(2, now))
        query.processAllAvailable()
        query.stop()
        counted_once(spark, monitor, policy, tmp_path, ends={"stopped": 1, "failed": 1})


@pytest.mark.parametrize(
    ("engine", "checkpoints"), [("jvm", "s3a"), ("python", "s3a")], indirect=["checkpoints"]
)
def test_a_stop_after_the_sinks_commit_counts_once(
    spark: Any, tmp_path: Path, engine: str, checkpoints: Any
) -> None:
    """``query.stop()`` as the sink of micro-batch 1 returns, as users stop a query: Spark
    interrupts the query's thread once the sink has committed, and its own commit of batch 1
    on ``s3a://`` (the first call after the sink's that heeds an interrupt) does not happen.
    The query stops with batch 1 in the sink and in the dead letters, its progress never
    posted; restarted, Spark runs batch 1 again, and the sink skips it."""
    checkpoint, _, _, storage = checkpoints
    now = float(int(time.time()))
    stopping: list[threading.Thread] = []
    query: Any = None

    def stop_now(batch_id: int) -> None:
        """The stop that the issue's users made by hand, without the race: from another
        thread, as Spark's own thread returns from the sink once it is interrupted."""
        if batch_id != 1 or stopping:
            return
        stopper = threading.Thread(target=query.stop)
        stopper.start()  # before the test's thread can see it, and join it
        stopping.append(stopper)
        thread = query._jsq.streamingQuery().queryExecutionThread()
        wait_until(thread.isInterrupted, what="Spark interrupting the query's thread")

    sink = "foreachBatch skipping"
    policy, start, given = policed(
        spark,
        tmp_path,
        sink,
        engine=engine,
        checkpoint=checkpoint,
        storage=storage,
        on_batch=stop_now,
    )
    with wmobs.attach(spark, prometheus_port=None) as monitor:
        write_rows(tmp_path / "in", "0", batch_rows(0, now))
        query = start()
        query.processAllAvailable()
        write_rows(tmp_path / "in", "1", batch_rows(1, now))
        wait_until(lambda: bool(stopping), timeout=120, what="micro-batch 1 in the sink")
        stopping[0].join(120)
        assert not query.isActive
        query = start()
        write_rows(tmp_path / "in", "2", batch_rows(2, now))
        query.processAllAvailable()
        query.stop()
        assert given == [0, 1, 1, 2], "Spark did not run batch 1 again: the stop missed"
        # Spark tells the interrupted commit of the first run as a stop, not a failure.
        counted_once(spark, monitor, policy, tmp_path, ends={"stopped": 2, "failed": 0})


def test_two_policies_of_one_query_count_once_across_a_crash(spark: Any, tmp_path: Path) -> None:
    """A union of two policed inputs, one global, one per key (its keys in Spark's state
    store), crashed as above with the file sink: each policy's kept counts are read back for
    the micro-batch the sink skips."""
    checkpoint = str(tmp_path / "ckpt")
    now = time.time()
    policies = [
        TimePolicy(arrival_time="ArrivalTime", late_arrival="5 minutes", out_of_order="1 hour",
                   name=name, engine="jvm", substream_by=keys)
        for name, keys in (("left", None), ("right", ["id"]))
    ]  # fmt: skip

    def start() -> Any:
        judged = [
            policy.apply(
                spark.readStream.schema(SCHEMA)
                .option("maxFilesPerTrigger", 1)
                .json(str(tmp_path / policy.name)),
                checkpoint_location=checkpoint,
            ).select("id")
            for policy in policies
        ]
        return (
            judged[0]
            .unionByName(judged[1])
            .writeStream.queryName("crash_two")
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="100 milliseconds")
            .format("parquet")
            .start(str(tmp_path / "out"))
        )

    with wmobs.attach(spark, prometheus_port=None) as monitor:
        for policy in policies:
            write_rows(tmp_path / policy.name, "0", batch_rows(0, now))
        query = start()
        query.processAllAvailable()
        (tmp_path / "ckpt" / "commits" / "1").write_text("")
        for policy in policies:
            write_rows(tmp_path / policy.name, "1", batch_rows(1, now))
        with pytest.raises(Exception, match="1"):
            query.awaitTermination(120)
        (tmp_path / "ckpt" / "commits" / "1").unlink()
        query = start()
        query.processAllAvailable()
        operators = [o["operatorName"] for o in query.lastProgress["stateOperators"]]
        query.stop()
        wait_until(
            lambda: stopped(monitor, "crash_two") == 1, what="the listener seeing the query stop"
        )
        snap = monitor.snapshot("crash_two")
    assert snap is not None
    for policy in policies:
        counts = snap.policy(policy.state_name)
        assert counts is not None
        assert {k: v for k, v in counts.events.items() if v} == expected(2), policy.name
    assert len(operators) == 1  # the per-key policy's
