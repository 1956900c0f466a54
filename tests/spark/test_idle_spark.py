"""Idle timeout on real Spark, in real time at small scale: 3-second tumbling windows, a
1-second idle timeout (a scaled-down version of Atlas Stream Processing's example)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import wmobs
from wmobs import TimePolicy
from wmobs.listener import parse_timestamp
from wmobs.policy._python._substream_state import StateStore, state_directory
from wmobs.testing import iso

from ._streaming import (
    ROCKSDB,
    firings,
    keyed_operator_expected,
    state_store,
    wait_until,
    write_rows,
)

pytestmark = pytest.mark.spark

SCHEMA = "EventTime TIMESTAMP, deviceId STRING, v LONG"
WINDOW = 3
BIG = 2**53 + 1  # not exact as a float: proves no value went through a float on its way


@pytest.fixture
def monitor(spark: Any) -> Iterator[wmobs.Monitor]:
    with wmobs.attach(spark, prometheus_port=None) as monitor:
        yield monitor
    for query in spark.streams.active:
        query.stop()


def start(
    spark: Any, policy: TimePolicy, tmp: Path, name: str, *, as_users_do: bool = False, **apply: Any
) -> Any:
    """The windows of ``policy``'s output; ``as_users_do``: with a binary column in the input
    (Kafka's ``key`` and ``value``), and a filter of the user's on the policy's output that
    does not read the event time, which Spark's optimizer would push below ``withWatermark``
    (every real row passes it; a synthetic row's placeholders would not)."""
    from pyspark.sql import functions as F

    source = spark.readStream.schema(SCHEMA).json(str(tmp / "in"))
    if as_users_do:
        source = source.withColumn("value", F.col("deviceId").cast("binary"))
    checkpoint = tmp / f"ckpt-{name}"
    # The JVM engine finds the query's checkpoint (its heartbeat from its own source folder,
    # its functions from the running query); the Python engine is told.
    told = None if policy.engine == "jvm" else str(checkpoint)
    out = policy.apply(source, checkpoint_location=told, **apply)
    if as_users_do:
        out = out.filter(F.col("v") > 1)
    windows = out.groupBy(F.window("system_timestamp", f"{WINDOW} seconds"), "deviceId").agg(
        F.count("*").alias("n"), F.sum("v").alias("total")
    )
    return (
        windows.writeStream.queryName(name)
        .format("memory")
        .outputMode("append")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def emitted(spark: Any, name: str) -> dict[tuple[float, str], tuple[int, int]]:
    """The sink: (window start, device) -> (rows, sum of v)."""
    rows = spark.sql(f"SELECT window.start AS s, deviceId, n, total FROM {name}").collect()
    return {(r.s.timestamp(), r.deviceId): (r.n, r.total) for r in rows}


def events(device: str, times: list[float]) -> list[dict[str, Any]]:
    return [{"EventTime": iso(t), "deviceId": device, "v": BIG} for t in times]


def window_of(t: float) -> float:
    return float(int(t) // WINDOW * WINDOW)


def dead_letters(monitor: wmobs.Monitor, name: str) -> int:
    snap = monitor.snapshot(name)
    policy = None if snap is None else snap.policy()
    return (policy.dead_letter_rows or 0) if policy is not None else 0


def heartbeat_sources(query: Any) -> list[str]:
    """The descriptions of the query's idle-timeout heartbeat sources (its offsets carry the
    tick)."""
    progress = query.lastProgress or {}
    return [
        s["description"]
        for s in progress.get("sources", [])
        if "wmobs_idle_tick" in str(s.get("endOffset"))
    ]


@pytest.mark.parametrize("engine", ["jvm", "python"])
def test_a_quiet_source_closes_its_window_and_late_rows_are_dead_lettered(
    spark: Any, monitor: wmobs.Monitor, tmp_path: Path, engine: str
) -> None:
    """Events, then silence: with ``idle_timeout`` the window is emitted once processing time
    passes its end plus the timeout, with exactly the real rows; the same query without it
    never emits. A row that then arrives for the closed window is out of order: dropped,
    counted and dead-lettered (allowed lateness). The JVM engine's heartbeat is a source of
    wmobs' extension, the Python engine's a Python data source. The input has a binary
    column, and the policy's output a filter of the user's after it."""
    common: dict[str, Any] = {
        "event_time": "EventTime",
        "arrival_time": None,
        "late_arrival": "10 minutes",
        "engine": engine,
    }
    idle = TimePolicy(**common, idle_timeout="1 second", out_of_order_action="drop", name="idle")
    control = TimePolicy(**common, out_of_order_action="drop", name="control")
    dead = tmp_path / "dead"
    # Warm up both queries on one old event (the first micro-batch is slow to start).
    warm = time.time() - 60
    write_rows(tmp_path / "in", "0-warm", events("A", [warm]))
    idle_q = start(spark, idle, tmp_path, "idle_q", as_users_do=True, dead_letter=str(dead))
    control_q = start(spark, control, tmp_path, "control_q")
    wait_until(lambda: (window_of(warm), "A") in emitted(spark, "idle_q"), what="warm window")
    wait_until(lambda: control_q.lastProgress is not None, what="control batch 0")
    wait_until(lambda: firings(monitor, "idle_q") == 1, what="the warm-up's firing")

    # A burst inside one window, none of it in the future: a burst across a window boundary
    # would let the control's own watermark close the first window.
    now = time.time()
    times = [max(t, window_of(now)) for t in (now - 0.2, now - 0.1, now)]
    write_rows(tmp_path / "in", "1-burst", events("A", times))
    expected = {(window_of(warm), "A"): 1}
    for t in times:
        expected[(window_of(t), "A")] = expected.get((window_of(t), "A"), 0) + 1
    window = window_of(times[-1])
    end = window + WINDOW
    wait_until(lambda: (window, "A") in emitted(spark, "idle_q"), what="idle window", timeout=90)
    seen_at = time.time()
    # Not before processing time passed end + timeout: the rule, not a speed check (the
    # events' event times are before their arrival, so the clock lags processing time).
    assert seen_at >= end + 1.0
    # Exactly the real rows in exactly the real windows: no synthetic row got through.
    by_window = emitted(spark, "idle_q")
    assert {k: n for k, (n, _) in by_window.items()} == expected
    assert all(total == n * BIG for n, total in by_window.values())
    # The control never emitted the burst's windows: nothing moved its watermark past them
    # (the burst itself closed the warm-up window there).
    assert set(emitted(spark, "control_q")) == {(window_of(warm), "A")}
    control_mark = parse_timestamp(control_q.lastProgress["eventTime"]["watermark"])
    assert control_mark is not None and control_mark < end
    wait_until(lambda: firings(monitor, "idle_q") == 2, what="the second firing")
    snap = monitor.snapshot("idle_q")
    assert snap is not None and snap.input_rows == 1 + len(times)  # heartbeats are not input
    (source,) = heartbeat_sources(idle_q)
    assert ("IdleHeartbeat" in source) == (engine == "jvm"), source

    # Allowed lateness: a row for the closed window is behind the watermark: dropped, counted,
    # dead-lettered, never silently lost.
    write_rows(tmp_path / "in", "2-late", events("A", [window + 0.5]))
    wait_until(lambda: dead_letters(monitor, "idle_q") == 1, what="dead letter")
    snap = monitor.snapshot("idle_q")
    policy = None if snap is None else snap.policy("idle")
    assert policy is not None
    assert policy.events[("out_of_order", "dropped")] == 1
    assert firings(monitor, "idle_q") == 2  # the late row is input: a new quiet period follows
    assert emitted(spark, "idle_q")[(window, "A")] == (
        expected[(window, "A")],
        by_window[(window, "A")][1],
    )
    dead_rows = spark.read.parquet(str(dead)).collect()
    got = [(r.deviceId, r.value, r.v, r.wmobs_rule, r.wmobs_policy) for r in dead_rows]
    assert got == [("A", bytearray(b"A"), BIG, "out_of_order", "idle")]
    idle_q.stop()
    control_q.stop()


@pytest.mark.parametrize("engine", ["jvm", "jvm, RocksDB", "python"])
def test_a_quiet_substream_fires_while_a_busy_one_does_not(
    spark: Any, monitor: wmobs.Monitor, tmp_path: Path, engine: str
) -> None:
    """Key A sends two events and goes quiet; key B keeps sending. A's idle timeout fires,
    B's never does while B is busy; once B stops, B fires too. Every window holds exactly the
    real rows, and the quiet keys' state is evicted after ``substream_ttl``. On Spark 4 with
    RocksDB, the JVM engine keeps the keys in ``transformWithState`` and its timers."""
    if engine == "jvm, RocksDB":
        with state_store(spark, ROCKSDB):
            _quiet_and_busy(spark, monitor, tmp_path, "jvm")
    else:
        _quiet_and_busy(spark, monitor, tmp_path, engine)


def _quiet_and_busy(spark: Any, monitor: wmobs.Monitor, tmp_path: Path, engine: str) -> None:
    policy = TimePolicy(
        event_time="EventTime",
        arrival_time=None,
        late_arrival="10 minutes",  # rows written while the first batch starts stay as they are
        substream_by=["deviceId"],
        idle_timeout="2 seconds",  # B writes every 0.1 s: a slow machine still keeps it busy
        substream_ttl="8 seconds",  # > timeout + window: a key's clock stops when evicted
        name=f"subs_{engine}",
        engine=engine,
    )
    start_time = time.time()
    write_rows(tmp_path / "in", "a-0000", events("A", [start_time, start_time + 0.1]))
    sent_b: list[float] = []
    stop = threading.Event()

    def busy_b() -> None:
        index = 1
        while not stop.is_set():
            t = time.time()
            write_rows(tmp_path / "in", f"b-{index:04d}", events("B", [t]))
            sent_b.append(t)
            index += 1
            stop.wait(0.1)

    writer = threading.Thread(target=busy_b, daemon=True)
    query = start(spark, policy, tmp_path, "subs_q")
    writer.start()
    try:
        wait_until(lambda: firings(monitor, "subs_q") >= 1, what="A's firing", timeout=90)
        a_window = window_of(start_time + 0.1)
        wait_until(lambda: (a_window, "A") in emitted(spark, "subs_q"), what="A's window")
        assert firings(monitor, "subs_q") == 1  # B is busy: only A has fired
    finally:
        stop.set()
        writer.join()
    wait_until(lambda: firings(monitor, "subs_q") == 2, what="B's firing once B is quiet")
    expected: dict[tuple[float, str], int] = {}
    for t in [start_time, start_time + 0.1]:
        expected[(window_of(t), "A")] = expected.get((window_of(t), "A"), 0) + 1
    for t in sent_b:
        expected[(window_of(t), "B")] = expected.get((window_of(t), "B"), 0) + 1
    wait_until(lambda: len(emitted(spark, "subs_q")) == len(expected), what="every window")
    assert {k: n for k, (n, _) in emitted(spark, "subs_q").items()} == expected
    assert all(total == n * BIG for n, total in emitted(spark, "subs_q").values())
    # Heartbeats are not input; the listener may trail the sink by a progress event. (Spark
    # 3.5 reports no input rows for a batch where its file source had none and the heartbeat
    # ticked: its progress cannot match the plan's leaves then. The query's own count.)
    if int(spark.version.split(".")[0]) >= 4:
        wait_until(
            lambda: (
                (s := monitor.snapshot("subs_q")) is not None and s.input_rows == 2 + len(sent_b)
            ),
            what=f"the listener counting {2 + len(sent_b)} input rows",
        )

    (source,) = heartbeat_sources(query)
    assert ("IdleHeartbeat" in source) == (engine == "jvm"), source
    if engine == "jvm":  # Spark's processing-time timeouts, and Spark's own state
        wait_until(lambda: keys_held(query) == 0, what="idle keys evicted", timeout=60)
        assert keyed_operator(query) == keyed_operator_expected(spark)
    else:
        store = StateStore(str(tmp_path / "ckpt-subs_q" / state_directory(f"subs_{engine}")))
        wait_until(lambda: store.stored_keys() == 0, what="idle keys evicted", timeout=60)
    query.stop()


@pytest.mark.parametrize("timeout", ["idle_timeout", "substream_ttl"])
def test_substreams_with_timeouts_refuse_available_now(
    spark: Any, tmp_path: Path, timeout: str
) -> None:
    """The JVM engine's substreams keep idle clocks and TTL with Spark's processing-time
    timeouts, for which Spark runs a micro-batch after every micro-batch: under
    ``Trigger.AvailableNow`` the query would never end. It stops when it starts, saying so."""
    policy = TimePolicy(
        event_time="EventTime",
        arrival_time=None,
        substream_by=["deviceId"],
        engine="jvm",
        **{timeout: "1 second"},  # type: ignore[arg-type]
    )
    write_rows(tmp_path / "in", "a", events("A", [time.time()]))
    source = spark.readStream.schema(SCHEMA).json(str(tmp_path / "in"))
    checkpoint = str(tmp_path / "ckpt")
    query = (
        policy.apply(source, checkpoint_location=checkpoint)
        .writeStream.format("noop")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match=r"a Trigger\.AvailableNow query would never end"):
        query.awaitTermination(60)
    assert not query.isActive


_KEYED = ("flatMapGroupsWithState", "transformWithStateExec")


def _keyed(query: Any) -> dict[str, Any] | None:
    """The progress of Spark's operator that keeps the JVM engine's substreams, as the query's
    last progress has it."""
    operators = (query.lastProgress or {}).get("stateOperators", [])
    return next((o for o in operators if o["operatorName"] in _KEYED), None)


def keys_held(query: Any) -> int | None:
    """The keys in the JVM engine's substream state."""
    operator = _keyed(query)
    return None if operator is None else int(operator["numRowsTotal"])


def keyed_operator(query: Any) -> str | None:
    """The name of Spark's operator that keeps the JVM engine's substreams."""
    operator = _keyed(query)
    return None if operator is None else str(operator["operatorName"])


def _available_now_for_python_sources() -> bool:
    try:
        from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow  # noqa: F401
    except ImportError:
        return False
    return True


def _watermark_committed(checkpoint: Path) -> int:
    """Spark's watermark after the query's last micro-batch (its commit log)."""
    last = max(
        (p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()),
        key=lambda p: int(p.name),
    )
    return int(json.loads(last.read_text().splitlines()[1]).get("nextBatchWatermarkMs", 0))


@pytest.mark.parametrize(
    ("engine", "trigger"),
    [("jvm", "availableNow"), ("jvm", "processingTime"), ("python", "availableNow")],
)
def test_a_backlog_read_after_a_pause_is_judged_before_an_idle_clock_moves(
    spark: Any, tmp_path: Path, engine: str, trigger: str
) -> None:
    """A query stopped for longer than its idle timeout and started again on a backlog, which it
    reads one file per micro-batch (``maxFilesPerTrigger``, as ``maxOffsetsPerTrigger`` caps a
    Kafka backlog). The heartbeat's tick comes with the backlog's first micro-batch and moves
    no clock there: the files read after it are judged against the watermark their own rows
    make (before, a clock run on through the pause dropped all three as out of order). Under
    ``Trigger.AvailableNow`` the backlog takes as many micro-batches as without idle timeout
    (Spark ran a single one for a query whose heartbeat did not support the trigger), and a
    later run that finds no input fires: Spark's watermark moves on."""
    if engine == "python" and not _available_now_for_python_sources():
        pytest.skip(
            "PySpark < 4.2 runs Trigger.AvailableNow in one micro-batch with a Python source"
        )
    from pyspark.sql import functions as F

    checkpoint = tmp_path / "ckpt"
    dead = tmp_path / "dead"
    policy = TimePolicy(
        arrival_time="ArrivalTime",
        late_arrival="1 hour",
        out_of_order_action="drop",
        idle_timeout="1 second",
        name=f"backlog_{engine}",
        engine=engine,
    )
    schema = "id INT, EventTime TIMESTAMP, ArrivalTime TIMESTAMP"

    def row(i: int, t: float) -> dict[str, Any]:
        return {"id": i, "EventTime": iso(t), "ArrivalTime": iso(t)}

    def run() -> Any:
        source = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1)
        judged = policy.apply(
            source.json(str(tmp_path / "in")),
            checkpoint_location=str(checkpoint),
            dead_letter=str(dead),
        )
        writer = (
            judged.select("id", F.col("system_timestamp").alias("t"))
            .writeStream.option("checkpointLocation", str(checkpoint))
            .format("parquet")
        )
        if trigger == "availableNow":
            query = writer.trigger(availableNow=True).start(str(tmp_path / "out"))
            assert query.awaitTermination(120)
        else:
            query = writer.trigger(processingTime="100 milliseconds").start(str(tmp_path / "out"))
            query.processAllAvailable()
            query.stop()
        assert query.exception() is None
        return query

    t = time.time()
    write_rows(tmp_path / "in", "first", [row(0, t)])
    run()
    for i in (1, 2, 3):  # in order, after the first row: none is out of order
        write_rows(tmp_path / "in", f"backlog-{i}", [row(i, t + i / 10)])
    time.sleep(1.5)  # the pause under test: longer than the idle timeout
    query = run()

    kept = sorted(r.id for r in spark.read.parquet(str(tmp_path / "out")).collect())
    assert kept == [0, 1, 2, 3]
    assert not dead.exists() or not list(dead.rglob("*.parquet"))
    # One file per micro-batch (by the file source's offsets: Spark 3.5 counts no input rows
    # in a micro-batch where the heartbeat read nothing).
    files = [
        s
        for p in query.recentProgress
        for s in p["sources"]
        if "FileStreamSource" in s["description"]
    ]
    assert [s["startOffset"] != s["endOffset"] for s in files].count(True) == 3
    if trigger == "availableNow":
        before = _watermark_committed(checkpoint)
        time.sleep(1.5)  # idle again, with nothing to read: this run's tick fires
        run()
        assert _watermark_committed(checkpoint) > before
