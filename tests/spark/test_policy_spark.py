"""Time policies on real Spark: the worked example (README, "Time policies"), row by row, and
the exported counts."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import random
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import wmobs
from tests.unit._reference import lateness_reference
from wmobs import DeadLetter, TimePolicy
from wmobs.listener import parse_timestamp
from wmobs.listener._observed import observation_columns, parse_observed_metrics
from wmobs.observations import HISTOGRAMS
from wmobs.policy._histograms import histogram_index, joint_histogram_counts
from wmobs.policy._jvm import _extension
from wmobs.testing import iso

from ._streaming import (
    ROCKSDB,
    engines,
    keyed_operator_expected,
    session_conf,
    start_kept,
    state_store,
    wait_until,
    write_rows,
)

pytestmark = pytest.mark.spark

SCHEMA = "id INT, EventTime TIMESTAMP, ArrivalTime TIMESTAMP, deviceId STRING"

# The worked example (DESIGN §2), as both engines' reference cases have it
# (tests/reference/worked_example.json): (#, event time, arrival time, device), in arrival
# order, and per row its system timestamp, or None when dropped, globally and per device.
REFERENCE = json.loads(
    (Path(__file__).resolve().parents[1] / "reference" / "worked_example.json").read_text()
)
WORKED = [(e["id"], e["event"], e["arrival"], e["device"]) for e in REFERENCE["events"]]
GLOBAL_EXPECTED = {int(i): r["system"] for i, r in REFERENCE["global"].items()}
SUBSTREAM_EXPECTED = {int(i): r["system"] for i, r in REFERENCE["substreams"].items()}


def ts(hhmm: str) -> str:
    return f"2026-01-01T{hhmm}:00Z"


def epoch(hhmm: str) -> int:
    return int(parse_timestamp(ts(hhmm)) or 0)


def worked_rows() -> list[dict[str, Any]]:
    return [
        {"id": i, "EventTime": ts(e), "ArrivalTime": ts(a), "deviceId": d} for i, e, a, d in WORKED
    ]


def run_policy(
    spark: Any,
    policy: TimePolicy,
    source: Path,
    work: Path,
    name: str,
    *,
    schema: str = SCHEMA,
    files_per_trigger: int = 1,
    parquet: Path | None = None,
    by_name: bool = False,
) -> tuple[dict[int, int | None], dict[tuple[str, str], int], Any]:
    """Run ``policy`` over ``source``: (id -> system seconds, policy counts, progress).
    The memory sink, or with ``parquet`` a Parquet sink there (which a restart can resume).
    ``by_name``: no checkpoint location given, the query's is found by its name below the
    session's ``spark.sql.streaming.checkpointLocation``."""

    reader = InMemoryMetricReader()
    checkpoint = None if by_name else str(work / f"ckpt-{name}")
    with wmobs.attach(spark, meter_provider=MeterProvider(metric_readers=[reader])) as monitor:
        df = spark.readStream.schema(schema).option("maxFilesPerTrigger", files_per_trigger)
        out = policy.apply(df.json(str(source)), checkpoint_location=checkpoint)
        query = start_kept(out, name, checkpoint, parquet=None if parquet is None else str(parquet))
        # Not availableNow: with a ProcessingTime operator in the plan it never stops.
        query.processAllAvailable()
        query.stop()
        assert query.exception() is None
        wait_until(lambda: (s := monitor.snapshot(name)) is not None and not s.active)
        snap = monitor.snapshot(name)
        assert snap is not None
        table = (
            spark.sql(f"select * from {name}")
            if parquet is None
            else spark.read.parquet(str(parquet))
        )
        kept = {r.id: r.system for r in table.collect()}
    policy_snap = snap.policy(policy.state_name)
    assert policy_snap is not None and policy.engine in ("auto", policy_snap.engine)
    return kept, dict(policy_snap.events), query.recentProgress


def queued_long_ago(progress: Any, policy: TimePolicy, rows: int) -> bool:
    """Every row waited in the broker more than a day: arrival times of long ago, read now
    (the queueing delay's top bucket)."""
    counts = observed_histograms(progress, policy, ("queueing_delay",))
    buckets, sum_us = counts["queueing_delay"]
    return buckets[-1] == sum(buckets) == rows and sum_us > rows * 86_400 * 10**6


def observed_histograms(
    progress: Any, policy: TimePolicy, names: tuple[str, ...] = ("arrival_delay", "lateness")
) -> dict[str, Any]:
    """The policy's two distributions over all micro-batches, as the listener reads them:
    ``{histogram: (count per bucket, sum µs)}``."""
    totals: dict[str, Any] = {}
    for p in progress:
        found = p["observedMetrics"][policy.observation_name]
        row = found.asDict(recursive=True) if hasattr(found, "asDict") else found  # 3.5: dict
        observed = parse_observed_metrics({policy.observation_name: row})
        for histogram, counts in observed.policies[policy.state_name].histograms.items():
            if histogram not in names:
                continue
            buckets, sum_us = totals.get(histogram, ([0] * len(counts.buckets), 0))
            totals[histogram] = (
                [a + b for a, b in zip(buckets, counts.buckets, strict=True)],
                sum_us + counts.sum_us,
            )
    return totals


def expected_histogram(histogram: str, values_us: list[int]) -> dict[str, Any]:
    """``{histogram: (count per bucket, sum µs)}`` for ``values_us``, one value at a time."""
    bounds = [round(bound * 1e6) for bound in HISTOGRAMS[histogram]]
    buckets = [0] * (len(bounds) + 1)
    for v in values_us:
        buckets[sum(v > b for b in bounds)] += 1
    return {histogram: (buckets, sum(values_us))}


def worked_histograms(per_key: bool) -> dict[str, int]:
    """The worked example's two distributions, event at a time: arrival - event of every row;
    lateness of every row the arrival policies kept, behind the largest system timestamp
    before it (globally, or of its device)."""
    delays = [(epoch(a) - epoch(e)) * 10**6 for _, e, a, _ in WORKED]
    system = {i: epoch(GLOBAL_EXPECTED[i] if i == 12 else e) * 10**6 for i, e, _, _ in WORKED}
    kept = {i: GLOBAL_EXPECTED[i] is not None for i, *_ in WORKED}  # 3: early, dropped
    streams: dict[str, list[int]] = {}
    for i, _, _, device in WORKED:
        streams.setdefault(device if per_key else "all", []).append(i)
    lateness = []
    for ids in streams.values():
        behind = lateness_reference(None, [(system[i], kept[i]) for i in ids])
        lateness += [b for b in behind if b >= 0]
    return expected_histogram("arrival_delay", delays) | expected_histogram("lateness", lateness)


def input_times(progress: Any, policy: TimePolicy) -> tuple[int, int]:
    """The largest ``input_watermark_us`` and ``input_event_time_us`` the policy observed."""
    observed = [
        observation_columns(p["observedMetrics"][policy.observation_name]) for p in progress
    ]
    return (
        max(o["input_watermark_us"] for o in observed if o["input_watermark_us"] is not None),
        max(o["input_event_time_us"] for o in observed if o["input_event_time_us"] is not None),
    )


def compilations(spark: Any) -> int:
    """Generated classes Spark has compiled so far in this JVM (cached code is not counted)."""
    metrics = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics
    return int(metrics.METRIC_COMPILATION_TIME().getCount())


def expected_seconds(expected: dict[int, str | None]) -> dict[int, int]:
    return {i: epoch(t) for i, t in expected.items() if t is not None}


def on(engine: str, policy: TimePolicy) -> TimePolicy:
    """``policy`` on ``engine`` (``jvm``; ``jvm without codegen``, the JVM engine's functions
    evaluated without generated code; ``python``)."""
    return replace(policy, engine=engine.split(maxsplit=1)[0].rstrip(","))


def needs_python_engine(spark: Any) -> None:
    """Skips a test that needs the Python engine where Spark has none (3.5: no Python data
    sources; ``test_an_engine_that_cannot_run_is_an_error`` checks that it says so)."""
    if "python" not in engines(spark):
        pytest.skip(f"Spark {spark.version} has no Python engine")


def without_codegen(spark: Any) -> Any:
    """Queries started in this block evaluate every expression without generated code: the
    JAR's functions take their ``eval`` path."""
    confs = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
    return session_conf(spark, confs)


@pytest.mark.parametrize("read", ["jvm", "jvm without codegen", "python"])
def test_worked_example_global_one_event_per_batch(spark: Any, tmp_path: Path, read: str) -> None:
    """Both engines: wmobs' Spark extension (its functions in generated code, and evaluated
    without) and the Python engine."""
    for row in worked_rows():
        write_rows(tmp_path / "in", f"event-{row['id']:02d}", [row])
    policy = TimePolicy(
        event_time="EventTime",
        arrival_time="ArrivalTime",
        early_arrival="5 minutes",
        late_arrival="5 minutes",
        out_of_order="2 minutes",
        engine=read.split(maxsplit=1)[0],
    )
    with without_codegen(spark) if "codegen" in read else contextlib.nullcontext():
        kept, counts, progress = run_policy(
            spark, policy, tmp_path / "in", tmp_path, f"worked_global_{read.replace(' ', '_')}"
        )
    assert len([p for p in progress if p["numInputRows"]]) == 12  # one event per micro-batch
    # This input's watermark (largest system timestamp 12:23 - 2 min) and largest event time.
    assert input_times(progress, policy) == (epoch("12:21") * 10**6, epoch("12:23") * 10**6)
    assert observed_histograms(progress, policy) == worked_histograms(per_key=False)
    assert queued_long_ago(progress, policy, 12)
    late_us = observed_histograms(progress, policy)["lateness"][1]
    assert late_us == (7 + 2 + 4 + 1 + 1) * 60 * 10**6  # rows 6, 7, 9, 11, 12
    assert kept == expected_seconds(GLOBAL_EXPECTED)
    assert counts[("early_arrival", "dropped")] == 1
    assert counts[("out_of_order", "adjusted")] == 2
    assert counts[("late_arrival", "adjusted")] == 1
    others = {k: v for k, v in counts.items() if k not in {
        ("early_arrival", "dropped"), ("out_of_order", "adjusted"), ("late_arrival", "adjusted")
    }}  # fmt: skip
    assert set(others.values()) == {0}


@pytest.mark.parametrize("judge", ["jvm", "jvm, RocksDB", "python"])
def test_worked_example_substreams_in_one_batch(spark: Any, tmp_path: Path, judge: str) -> None:
    """Judged per key by wmobs' extension in Spark's ``flatMapGroupsWithState`` (Spark 4 with
    RocksDB: ``transformWithState``) and by the Python engine (``mapInArrow``)."""
    with state_store(spark, ROCKSDB if judge == "jvm, RocksDB" else None):
        _worked_substreams(spark, tmp_path, judge.partition(",")[0], judge.replace(", ", "_"))


def _worked_substreams(spark: Any, tmp_path: Path, engine: str, name: str) -> None:
    rows = worked_rows()
    scrambled = rows[5:] + rows[:5]  # file order is not arrival order
    write_rows(tmp_path / "in", "all", scrambled)
    policy = TimePolicy(
        event_time="EventTime",
        arrival_time="ArrivalTime",
        late_arrival="5 minutes",
        out_of_order="2 minutes",
        substream_by=["deviceId"],
        name=f"worked_{name}",
        engine=engine,
    )
    stream = spark.readStream.schema(SCHEMA).json(str(tmp_path / "in"))
    plan = policy.apply(stream, checkpoint_location=str(tmp_path / "plan"))
    analyzed = plan._jdf.queryExecution().analyzed().toString()
    assert ("MapInArrow" in analyzed) == (engine == "python")
    keyed = {"flatMapGroupsWithState": "FlatMapGroupsWithState"}.get(
        keyed_operator_expected(spark), "TransformWithState"
    )
    assert (keyed in analyzed) == (engine == "jvm")
    kept, counts, progress = run_policy(
        spark, policy, tmp_path / "in", tmp_path, f"worked_substreams_{name}"
    )
    assert kept == expected_seconds(SUBSTREAM_EXPECTED)
    assert input_times(progress, policy) == (epoch("12:21") * 10**6, epoch("12:23") * 10**6)
    assert observed_histograms(progress, policy) == worked_histograms(per_key=True)
    assert queued_long_ago(progress, policy, 12)
    assert observed_histograms(progress, policy)["lateness"][1] == 60 * 10**6
    assert counts[("early_arrival", "dropped")] == 1
    assert counts[("late_arrival", "adjusted")] == 1
    assert counts[("out_of_order", "adjusted")] == 0


def test_the_global_policy_compiles_its_code_once_not_per_batch(spark: Any, tmp_path: Path) -> None:
    """Spark caches generated code by its text; a per-batch literal in it (as
    ``current_timestamp()`` becomes) made every micro-batch compile its stages anew."""

    def write(first: int, count: int) -> None:
        for i in range(first, first + count):
            write_rows(tmp_path / "in", f"{i:03d}", [{"id": i, "EventTime": iso(time.time())}])

    policy = TimePolicy(arrival_time=None, out_of_order="1 minute", engine="jvm")
    checkpoint = str(tmp_path / "ckpt")
    write(0, 2)
    stream = spark.readStream.schema("id INT, EventTime TIMESTAMP").option("maxFilesPerTrigger", 1)
    out = policy.apply(stream.json(str(tmp_path / "in")), checkpoint_location=checkpoint)
    query = (
        out.select("id", "system_timestamp")
        .writeStream.format("memory")
        .queryName("compiled_once")
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()  # the first micro-batches compile everything
        compiled = compilations(spark)
        batches = len(query.recentProgress)
        write(2, 6)
        query.processAllAvailable()
        later = len(query.recentProgress) - batches
        assert later >= 6  # one file per micro-batch
        assert compilations(spark) - compiled < later
        assert spark.sql("SELECT count(*) FROM compiled_once").first()[0] == 8
        # On the JVM engine the batch's times are read in the tasks: no job, broadcast or join.
        plan = query._jsq.streamingQuery().lastExecution().executedPlan().toString()
        assert "wmobs_batch_watermark()" in plan and "wmobs_policy_observation(" in plan
        assert "BroadcastNestedLoopJoin" not in plan and "BatchScan" not in plan
    finally:
        query.stop()


@pytest.mark.parametrize("read", ["jvm", "python"])
def test_another_querys_checkpoint_fails_the_query(spark: Any, tmp_path: Path, read: str) -> None:
    """A checkpoint_location that is not the running query's: the first micro-batch fails,
    naming both queries, rather than judging rows against another query's watermark."""
    write_rows(tmp_path / "in", "rows", [{"id": 1, "EventTime": iso(time.time())}])
    stream = spark.readStream.schema("id INT, EventTime TIMESTAMP").json(str(tmp_path / "in"))

    def run(checkpoint: Path, policy_checkpoint: Path) -> Any:
        out = TimePolicy(arrival_time=None, engine=read).apply(
            stream, checkpoint_location=str(policy_checkpoint)
        )
        query = (
            out.writeStream.format("noop")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        with contextlib.suppress(Exception):
            query.awaitTermination()
        return query

    first = run(tmp_path / "first", tmp_path / "first")
    assert first.exception() is None
    second = run(tmp_path / "second", tmp_path / "first")
    error = str(second.exception())
    assert f"is the checkpoint of query {first.id}, not of {second.id}" in error, error


@pytest.mark.parametrize("read", ["jvm", "python"])
def test_asynchronous_progress_tracking(spark: Any, tmp_path: Path, read: str) -> None:
    """A query that tracks its progress asynchronously writes its offsets log late or not at
    all (here only batch 0's, within the minute). The JVM engine does not read it (the
    extension's optimizer rule gives the tasks each micro-batch's watermark and time as Spark
    plans it): every row is judged. The Python engine reads it: the micro-batch whose entry is
    missing fails, naming the option, where it named the checkpoint location as the likely
    mistake."""
    for i in range(3):
        write_rows(tmp_path / "in", str(i), [{"id": i, "EventTime": iso(time.time())}])
    stream = (
        spark.readStream.schema("id INT, EventTime TIMESTAMP")
        .option("maxFilesPerTrigger", 1)
        .json(str(tmp_path / "in"))
    )
    checkpoint = str(tmp_path / "ckpt")
    out = TimePolicy(arrival_time=None, engine=read).apply(stream, checkpoint_location=checkpoint)
    query = (
        out.writeStream.format("memory")
        .queryName(f"async_{read}")
        .option("checkpointLocation", checkpoint)
        .option("asyncProgressTrackingEnabled", "true")
        .option("asyncProgressTrackingCheckpointIntervalMs", "60000")
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        if read == "jvm":
            query.processAllAvailable()
            assert spark.sql(f"SELECT * FROM async_{read}").count() == 3
            return
        with pytest.raises(Exception, match="asyncProgressTrackingEnabled") as failed:
            query.processAllAvailable()
        assert f"the offsets log of query {query.id} in" in str(failed.value)
        assert "has no entry for batch" in str(failed.value)
    finally:
        query.stop()


@pytest.mark.parametrize("engine", ["jvm", "jvm, RocksDB", "python"])
def test_substream_state_survives_a_restart(spark: Any, tmp_path: Path, engine: str) -> None:
    """Each key's watermark is kept in the checkpoint: after a restart an event behind its
    key's maximum from before the restart is still out of order; another key's is not. The
    JVM engine keeps it in Spark's state store (a ``flatMapGroupsWithState`` operator, or
    ``transformWithState`` on Spark 4 with RocksDB, which Spark's state reader reads); the
    Python engine in files of its own."""
    if engine == "python":
        needs_python_engine(spark)
    with state_store(spark, ROCKSDB if engine == "jvm, RocksDB" else None):
        _restarted_substreams(spark, tmp_path, engine.partition(",")[0])


def _restarted_substreams(spark: Any, tmp_path: Path, engine: str) -> None:
    def row(i: int, event: str, arrival: str, device: str) -> dict[str, Any]:
        return {"id": i, "EventTime": ts(event), "ArrivalTime": ts(arrival), "deviceId": device}

    policy = on(engine, TimePolicy(late_arrival="1 hour", substream_by=["deviceId"], name="re"))
    write_rows(tmp_path / "in", "1", [row(1, "12:10", "12:10", "A"), row(2, "12:00", "12:10", "B")])
    out = tmp_path / "out"
    before, counts_before, progress = run_policy(
        spark, policy, tmp_path / "in", tmp_path, "re", parquet=out
    )
    checkpoint = tmp_path / "ckpt-re"
    if engine == "jvm":
        (operator,) = progress[-1]["stateOperators"]
        assert operator["operatorName"] == keyed_operator_expected(spark)
        assert operator["numRowsTotal"] == 2  # A and B
        if int(spark.version.split(".")[0]) >= 4:  # Spark's state reader (not in 3.5)
            reader = spark.read.format("statestore")
            if operator["operatorName"] == "transformWithStateExec":
                state = reader.option("stateVarName", "clock").load(str(checkpoint))
                values = [r["value"] for r in state.collect()]
            else:
                state = reader.load(str(checkpoint))
                values = [r["value"]["groupState"] for r in state.collect()]
            largest = sorted(v["largestUs"] for v in values)
            assert largest == [epoch("12:00") * 10**6, epoch("12:10") * 10**6]
        assert not (checkpoint / "wmobs" / "substreams").exists()
    else:
        assert (checkpoint / "wmobs" / "substreams" / "re").is_dir()
    write_rows(tmp_path / "in", "2", [row(3, "12:05", "12:11", "A"), row(4, "12:01", "12:11", "B")])
    after, counts_after, _ = run_policy(spark, policy, tmp_path / "in", tmp_path, "re", parquet=out)
    assert before == {1: epoch("12:10"), 2: epoch("12:00")}
    # 3 is behind A's 12:10 from before the restart: adjusted up to it.
    assert after == before | {3: epoch("12:10"), 4: epoch("12:01")}
    assert counts_before[("out_of_order", "adjusted")] == 0
    assert counts_after[("out_of_order", "adjusted")] == 1


def test_the_jvm_engine_refuses_the_per_key_state_files_of_wmobs_0_2(
    spark: Any, tmp_path: Path
) -> None:
    """A checkpoint that ran substreams with the per-key state files that wmobs 0.2 (and the
    Python engine) keep beside Spark's: the JVM engine keeps that state in a stateful operator
    of Spark's, which Spark cannot add to a checkpoint that ran without it, so the query stops
    as it plans its first micro-batch with wmobs' error saying what to do (not Spark's own, of
    a state missing), rather than start every key's watermark afresh unseen. Where Spark has
    no Python engine (3.5), a checkpoint that ran a global policy, with such files put in."""
    write_rows(tmp_path / "in", "1", [{"id": 1, "EventTime": ts("12:10"), "deviceId": "A"}])
    jvm = TimePolicy(arrival_time=None, substream_by=["deviceId"], name="legacy", engine="jvm")
    files = tmp_path / "ckpt-legacy" / "wmobs" / "substreams" / "legacy"
    out = tmp_path / "out"  # a sink that a restart resumes (not the memory sink)
    if "python" in engines(spark):
        run_policy(
            spark, replace(jvm, engine="python"), tmp_path / "in", tmp_path, "legacy", parquet=out
        )
        assert files.is_dir()
    else:
        run_policy(
            spark, replace(jvm, substream_by=None), tmp_path / "in", tmp_path, "legacy", parquet=out
        )
        (files / "64").mkdir(parents=True)
        (files / "64" / "0-1.arrow").write_bytes(b"")
    write_rows(tmp_path / "in", "2", [{"id": 2, "EventTime": ts("12:11"), "deviceId": "A"}])
    with pytest.raises(Exception, match=r"substreams' per-key state as wmobs 0\.2") as failed:
        run_policy(spark, jvm, tmp_path / "in", tmp_path, "legacy", parquet=out)
    message = str(failed.value)
    assert str(files) in message, message
    assert "new checkpoint" in message and 'engine="python"' in message, message


def test_substreams_planned_for_rocksdb_on_another_stores_checkpoint_say_so(
    spark: Any, tmp_path: Path
) -> None:
    """Spark restores the state store provider a checkpoint began with, whatever the session
    sets; substreams planned in ``transformWithState`` (RocksDB only) because the session sets
    RocksDB, on a checkpoint that began on Spark's default store, stop with wmobs' error
    saying so, before Spark's own."""
    if int(spark.version.split(".")[0]) < 4:
        pytest.skip("Spark 3.5 has no transformWithState")
    write_rows(tmp_path / "in", "1", [{"id": 1, "EventTime": ts("12:10"), "deviceId": "A"}])
    policy = TimePolicy(arrival_time=None, substream_by=["deviceId"], name="store", engine="jvm")
    out = tmp_path / "out"
    with state_store(
        spark, "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
    ):
        run_policy(spark, policy, tmp_path / "in", tmp_path, "store", parquet=out)
    write_rows(tmp_path / "in", "2", [{"id": 2, "EventTime": ts("12:11"), "deviceId": "A"}])
    refused = pytest.raises(Exception, match="restores the state store provider")
    with state_store(spark, ROCKSDB), refused as failed:
        run_policy(spark, policy, tmp_path / "in", tmp_path, "store", parquet=out)
    assert "HDFSBackedStateStoreProvider" in str(failed.value)


def test_the_python_engine_on_the_jvm_engines_substreams_is_stopped_by_spark(
    spark: Any, tmp_path: Path
) -> None:
    """The other way round: the JVM engine's keys are in a stateful operator of Spark's that a
    query on the Python engine lacks, and Spark stops it as it starts (rather than every key's
    watermark starting afresh), with the error class the listener's hint names the engine for."""
    needs_python_engine(spark)
    write_rows(tmp_path / "in", "1", [{"id": 1, "EventTime": ts("12:10"), "deviceId": "A"}])
    jvm = TimePolicy(arrival_time=None, substream_by=["deviceId"], name="moved", engine="jvm")
    out = tmp_path / "out"
    run_policy(spark, jvm, tmp_path / "in", tmp_path, "moved", parquet=out)
    write_rows(tmp_path / "in", "2", [{"id": 2, "EventTime": ts("12:11"), "deviceId": "A"}])
    python = replace(jvm, engine="python")
    with pytest.raises(Exception, match="STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA"):
        run_policy(spark, python, tmp_path / "in", tmp_path, "moved", parquet=out)


@pytest.mark.parametrize("engine", ["jvm", "python"])
def test_a_rows_place_is_taken_before_the_shuffle_by_key(
    spark: Any, tmp_path: Path, engine: str
) -> None:
    """A key's rows of equal arrival (every row, without an arrival column) are judged in
    their place: taken before the shuffle by key, since the shuffle hands a partition's rows
    over in an order that changes from one attempt of a task to the next."""
    if engine == "python":
        needs_python_engine(spark)
    write_rows(tmp_path / "in", "1", [{"id": 1, "EventTime": ts("12:10"), "deviceId": "A"}])
    stream = spark.readStream.schema(SCHEMA).json(str(tmp_path / "in"))
    policy = on(engine, TimePolicy(arrival_time=None, substream_by=["deviceId"], name="placed"))
    judged = policy.apply(stream, checkpoint_location=str(tmp_path / "ckpt"))
    plan = judged._jdf.queryExecution().analyzed().toString().lower()  # parents first
    place = "wmobs_row_place()" if engine == "jvm" else "spark_partition_id()"
    assert plan.count(place) == 1
    assert plan.index("repartitionbyexpression") < plan.index(place)


@pytest.mark.parametrize("engine", ["jvm", "python"])
def test_keys_that_differ_only_in_which_column_is_null_are_two_substreams(
    spark: Any, tmp_path: Path, engine: str
) -> None:
    """Spark's hash skips a null: ``(7, null)`` and ``(null, 7)`` hashed alike and shared a
    watermark, so the second's event ten minutes behind the first's was adjusted."""
    if engine == "python":
        needs_python_engine(spark)
    write_rows(
        tmp_path / "in",
        "1",
        [
            {"id": 1, "EventTime": ts("12:10"), "ArrivalTime": ts("12:10"), "site": "7"},
            {"id": 2, "EventTime": ts("12:00"), "ArrivalTime": ts("12:11"), "device": "7"},
            {"id": 3, "EventTime": ts("11:50"), "ArrivalTime": ts("12:12")},
        ],
    )
    policy = on(
        engine,
        TimePolicy(late_arrival="1 hour", substream_by=["site", "device"], name=f"nulls_{engine}"),
    )
    kept, counts, _ = run_policy(
        spark,
        policy,
        tmp_path / "in",
        tmp_path,
        f"null_keys_{engine}",
        schema="id INT, EventTime TIMESTAMP, ArrivalTime TIMESTAMP, site STRING, device STRING",
    )
    assert kept == {1: epoch("12:10"), 2: epoch("12:00"), 3: epoch("11:50")}
    assert counts[("out_of_order", "adjusted")] == 0


@pytest.mark.parametrize(
    ("skew", "engine"), [(None, "jvm"), ("15 minutes", "jvm"), ("15 minutes", "python")]
)
def test_a_lagging_keys_rows_reach_downstream_windows_with_substream_skew(
    spark: Any, tmp_path: Path, skew: str | None, engine: str
) -> None:
    """Device A's clock runs 10 minutes behind B's; both send every micro-batch. Per key, no
    row is out of order, so the policy keeps all of A's. A window aggregation after it closes
    windows by Spark's one watermark (B's time minus out of order): without an allowance Spark
    drops A's rows for windows already closed (counting groups); with ``substream_skew`` of 15
    minutes every row of both keys is counted."""
    from pyspark.sql import functions as F

    if engine == "python":
        needs_python_engine(spark)

    for b in range(6):
        rows = []
        for i in range(5):
            at = epoch("12:10") + b * 60 + i * 10  # the broker's time, both devices
            for device, lag in (("A", 600), ("B", 0)):
                rows.append({"id": b * 10 + i, "EventTime": iso(at - lag), "ArrivalTime": iso(at),
                             "deviceId": device})  # fmt: skip
        write_rows(tmp_path / "in", f"part-{b:02d}", rows)
    policy = TimePolicy(
        late_arrival="1 hour",
        out_of_order="1 minute",
        substream_by=["deviceId"],
        substream_skew=skew,
        name=f"skew_{'none' if skew is None else 'allowed'}_{engine}",
        engine=engine,
    )
    checkpoint = str(tmp_path / "ckpt")
    stream = (
        spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
    )
    counts = policy.apply(stream, checkpoint_location=checkpoint).groupBy(
        "deviceId", F.window("system_timestamp", "1 minute")
    )
    query = (
        counts.count()
        .writeStream.queryName(policy.state_name)
        .format("memory")
        .outputMode("update")
        .option("checkpointLocation", checkpoint)
        .start()
    )
    query.processAllAvailable()
    query.stop()
    latest = spark.sql(
        f"SELECT deviceId, window, max(count) AS n FROM {policy.state_name} GROUP BY 1, 2"
    )
    counted = {r[0]: r[1] for r in latest.groupBy("deviceId").sum("n").collect()}
    dropped = sum(
        o.get("numRowsDroppedByWatermark", 0)
        for p in query.recentProgress
        for o in p["stateOperators"]
    )
    if skew is None:  # the trap: A's rows reach the aggregation behind Spark's watermark
        assert counted["B"] == 30 and counted["A"] < 30 and dropped > 0, (counted, dropped)
    else:
        assert counted == {"A": 30, "B": 30} and dropped == 0, (counted, dropped)
    # The input's watermark, as exported, is the one the policy puts on its output. (Spark
    # 3.5's progress of a micro-batch without input has no observedMetrics at all.)
    judged = [p for p in query.recentProgress if p["numInputRows"]]
    delay = 60 + (0 if skew is None else 900)
    largest = epoch("12:10") + 5 * 60 + 40  # B's last row
    assert input_times(judged, policy)[0] == (largest - delay) * 10**6
    # What substream_skew must cover, observed in every micro-batch: A 10 minutes behind B.
    spreads = {
        observation_columns(p["observedMetrics"][policy.observation_name])["substream_spread_us"]
        for p in judged
    }
    assert spreads == {600 * 10**6}, spreads


def test_adjusted_rows_survive_a_downstream_window_aggregation(spark: Any, tmp_path: Path) -> None:
    """Rows adjusted exactly to the watermark are not dropped by Spark's aggregation."""
    from pyspark.sql import functions as F

    for row in worked_rows():
        write_rows(tmp_path / "in", f"event-{row['id']:02d}", [row])
    policy = TimePolicy(late_arrival="5 minutes", out_of_order="2 minutes")
    checkpoint = str(tmp_path / "ckpt")
    out = policy.apply(
        spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in")),
        checkpoint_location=checkpoint,
    )
    query = (
        out.groupBy(F.window("system_timestamp", "1 minute"))
        .count()
        .writeStream.queryName("adjusted_survive")
        .format("memory")
        .outputMode("update")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    latest = spark.sql(
        "select window.start as w, max(count) as n from adjusted_survive group by window.start"
    ).collect()
    assert sum(r.n for r in latest) == 11  # 12 events, the early one dropped
    dropped = sum(
        op["numRowsDroppedByWatermark"] for p in query.recentProgress for op in p["stateOperators"]
    )
    assert dropped == 0


def test_batch_time_arrival_and_early_variants(spark: Any, tmp_path: Path) -> None:
    """arrival_time=None, early disabled or adjusted, a function as dead-letter destination;
    the first policy without its distributions (the verdicts and counts do not change)."""
    now = time.time()
    # Tolerances of minutes: the micro-batch's time (the arrival time here) is whenever
    # Spark runs it, seconds after `now` on a slow machine.
    rows = [
        {"id": 1, "EventTime": iso(now - 1200)},  # late by 20 min: adjusted to batch - 5 min
        {"id": 2, "EventTime": iso(now + 3600)},  # an hour early
        {"id": 3, "EventTime": None},  # invalid
        {"id": 4, "EventTime": iso(now - 1)},  # on time
    ]
    write_rows(tmp_path / "in", "rows", rows)
    seen: list[int] = []
    got: dict[str, dict[int, int | None]] = {}
    for label, early in (("disabled", None), ("adjust", "adjust")):
        policy = TimePolicy(
            arrival_time=None,
            early_arrival=None if early is None else "5 minutes",
            early_arrival_action=early or "drop",
            late_arrival="5 minutes",
            distributions=early is not None,
        )
        sink = tmp_path / f"dead-{label}"
        kept, counts, progress = _run_with_function_sink(spark, policy, tmp_path, label, sink)
        got[label] = kept
        observed = observation_columns(progress[0]["observedMetrics"][policy.observation_name])
        histograms = sorted(c for c in observed if c.startswith("hist:"))
        assert len(histograms) == (3 if policy.distributions else 0), histograms
        assert observed["input_watermark_us"] is not None
        batch_time = parse_timestamp(progress[0]["timestamp"])
        assert kept[1] == pytest.approx(batch_time - 300, abs=1)
        assert kept[4] == int(now - 1) and 3 not in kept
        assert counts[("late_arrival", "adjusted")] == 1
        assert counts[("invalid_time", "dropped")] == 1
        seen += sorted(int(p.name.split("-")[1]) for p in sink.glob("dead-*"))
    assert got["disabled"][2] == int(now + 3600)  # no early policy: passes as is
    assert got["adjust"][2] == pytest.approx(got["adjust"][1] + 300, abs=1)  # batch time
    assert seen == [3, 3]  # the invalid row reached each function destination


@pytest.mark.parametrize("engine", ["jvm", "python"])
def test_string_event_times_keep_their_offset_where_timestamps_have_no_time_zone(
    spark: Any, tmp_path: Path, engine: str
) -> None:
    """``spark.sql.timestampType=TIMESTAMP_NTZ`` in a session in New York: an event time given
    as a string with an offset is the instant it names, as Spark casts it to a timestamp with a
    time zone (not read without its offset, then placed in New York)."""
    if engine == "python":
        needs_python_engine(spark)
    arrival = ts("10:01")
    rows = [
        {"id": 1, "EventTime": "2026-01-01T10:00:00Z", "ArrivalTime": arrival},
        {"id": 2, "EventTime": "2026-01-01T12:00:00+02:00", "ArrivalTime": arrival},
    ]
    write_rows(tmp_path / "in", "rows", rows)
    policy = on(engine, TimePolicy(arrival_time="ArrivalTime", late_arrival="5 minutes"))
    ntz = {
        "spark.sql.timestampType": "TIMESTAMP_NTZ",
        "spark.sql.session.timeZone": "America/New_York",
    }
    with session_conf(spark, ntz):
        kept, counts, _ = run_policy(
            spark,
            policy,
            tmp_path / "in",
            tmp_path,
            f"ntz_{engine}",
            schema="id INT, EventTime STRING, ArrivalTime TIMESTAMP_LTZ",
        )
    assert kept == {1: epoch("10:00"), 2: epoch("10:00")}
    assert not any(counts.values()), counts


class _RecordingSink:
    """A dead-letter function: one file per dropped row id (runs in the executor)."""

    def __init__(self, directory: Path) -> None:
        self.directory = str(directory)

    def __call__(self, table: Any, batch_id: int, partition_id: int) -> None:
        os.makedirs(self.directory, exist_ok=True)
        for row in table.to_pylist():
            assert row["wmobs_rule"] == "invalid_time" and row["wmobs_batch_id"] == batch_id
            Path(self.directory, f"dead-{row['id']}").write_text(row["wmobs_policy"])


def _run_with_function_sink(
    spark: Any, policy: TimePolicy, work: Path, label: str, sink: Path
) -> tuple[dict[int, int | None], dict[tuple[str, str], int], Any]:

    name = f"variants_{label}"
    checkpoint = str(work / f"ckpt-{label}")
    reader = InMemoryMetricReader()
    with wmobs.attach(spark, meter_provider=MeterProvider(metric_readers=[reader])) as monitor:
        stream = spark.readStream.schema("id INT, EventTime TIMESTAMP").json(str(work / "in"))
        out = policy.apply(stream, checkpoint_location=checkpoint, dead_letter=_RecordingSink(sink))
        query = start_kept(out, name, checkpoint, trigger={"availableNow": True})
        query.awaitTermination()
        wait_until(lambda: (s := monitor.snapshot(name)) is not None and not s.active)
        snap = monitor.snapshot(name)
        policy_snap = None if snap is None else snap.policy(policy.state_name)
        assert policy_snap is not None and policy_snap.dead_letter_rows == 1
        kept = {r.id: r.system for r in spark.sql(f"select * from {name}").collect()}
    return kept, dict(policy_snap.events), query.recentProgress


def test_an_absolute_path_is_on_the_clusters_default_filesystem(spark: Any, tmp_path: Path) -> None:
    """Where the default filesystem is a cluster's (HDFS here; DBFS on Databricks), a directory
    given as ``/data/dl`` is there, as Spark and the JVM engine read it, for the dead letters
    that Python writes as well: not each executor's own disk, whose files would be lost with
    it. Where Python cannot reach that filesystem, ``apply`` says so, naming the directory."""
    from wmobs._spark import qualified_path

    stream = spark.readStream.schema(SCHEMA).json(tmp_path.as_uri())
    json_letters = DeadLetter("/data/dl", format="json")
    with session_conf(spark, {"fs.defaultFS": "hdfs://127.0.0.1:1"}):
        assert qualified_path(spark, "/data/dl") == "hdfs://127.0.0.1:1/data/dl"
        with pytest.raises(wmobs.StorageError, match=r"hdfs://127\.0\.0\.1:1/data/dl"):
            TimePolicy(arrival_time="ArrivalTime").apply(stream, dead_letter=json_letters)
    assert qualified_path(spark, "/data/dl") == "/data/dl"  # a local default: as given


def test_invalid_arguments_fail_at_apply(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    stream = spark.readStream.schema(SCHEMA).json(str(tmp_path))
    with pytest.raises(ValueError, match="event_time: column 'when' is not in the DataFrame"):
        TimePolicy(event_time="when").apply(stream)
    # Names resolve as Spark resolves them: without case, unless the session says otherwise.
    spelled = TimePolicy(
        event_time="eventtime", arrival_time="ARRIVALTIME", substream_by=["deviceid"], name="sp"
    )
    assert "system_timestamp" in spelled.apply(stream).columns
    sensitive = session_conf(spark, {"spark.sql.caseSensitive": "true"})
    with sensitive, pytest.raises(ValueError, match="event_time: column 'eventtime' is not in"):
        spelled.apply(stream)
    with pytest.raises(
        TypeError,
        match=r"arrival_time: column 'id' is int, expected timestamp.*F.timestamp_millis",
    ):
        TimePolicy(arrival_time="id").apply(stream)
    with pytest.raises(TypeError, match="event_time: column 'id' is int"):
        TimePolicy(event_time="id").apply(stream)
    with pytest.raises(
        ValueError,
        match=r"substream_by: column 'device' is not in the DataFrame \(columns: id, EventTime, "
        r"ArrivalTime, deviceId\)",
    ):
        TimePolicy(substream_by=["device"]).apply(stream)
    nested = stream.select(F.struct("EventTime", "deviceId").alias("payload"))
    with pytest.raises(
        ValueError, match=r"withColumn\('EventTime', F.col\('payload.EventTime'\)\)"
    ):
        TimePolicy(event_time="payload.EventTime", arrival_time=None).apply(nested)
    tagged = stream.withColumn("tags", F.create_map(F.lit("k"), stream.deviceId))
    with pytest.raises(TypeError, match=r"substream_by: column 'tags' is map<string,string>; a"):
        TimePolicy(substream_by=["deviceId", "tags"]).apply(tagged)
    with pytest.raises(TypeError, match=r"substream_by: column 'nested' is array<map<"):
        TimePolicy(substream_by=["nested"]).apply(tagged.withColumn("nested", F.array("tags")))
    with pytest.raises(TypeError, match="streaming DataFrame"):
        TimePolicy().apply(spark.range(3))
    with pytest.raises(ValueError, match="dead_letter: format"):
        TimePolicy().apply(stream, dead_letter=DeadLetter(str(tmp_path), format="csv"))
    if "python" in engines(spark):  # the JVM engine's finds the checkpoint itself
        with pytest.raises(ValueError, match=r"idle_timeout: .* checkpoint_location"):
            TimePolicy(idle_timeout="1 minute", engine="python").apply(stream)
    with pytest.raises(ValueError, match="column 'wmobs_watermark_ms' has a name wmobs uses"):
        TimePolicy().apply(stream.withColumn("wmobs_watermark_ms", stream.id))
    # arrival_time left at its default needs no column: the micro-batch's time, said at info;
    # a column named explicitly must exist.
    from structlog.testing import capture_logs

    without = stream.drop("ArrivalTime")
    with pytest.raises(ValueError, match="arrival_time: column 'ArrivalTime' is not in the"):
        TimePolicy(arrival_time="ArrivalTime").apply(without)
    with capture_logs() as logs:
        TimePolicy(name="no_arrival").apply(without, checkpoint_location=str(tmp_path / "c"))
        TimePolicy(name="arrival").apply(stream, checkpoint_location=str(tmp_path / "d"))
    said = {e["policy"]: e["arrival_time"] for e in logs if e["event"] == "wmobs.engine"}
    assert said == {"no_arrival": "the micro-batch's time", "arrival": "ArrivalTime"}
    assert TimePolicy().arrival_time == "ArrivalTime"


@pytest.mark.parametrize("dead_letters", ["jvm", "text forms", "mapInArrow"])
def test_dotted_column_names_with_substreams_and_dead_letters(
    spark: Any, tmp_path: Path, dead_letters: str
) -> None:
    """Columns with a '.' in their name keep it in the output and in the dead letters, through
    the substream stage and the three dead-letter plans (written by the JVM engine, an array
    column too; handed to Python as text on the Python engine; there an array column has no
    text form: every row then crosses into Python with ``mapInArrow``)."""
    import pyarrow.dataset as ds

    rows = [
        {"id": 1, "EventTime": ts("12:00"), "ArrivalTime": ts("12:00"), "dev": "a", "tags": [1]},
        {"id": 2, "EventTime": None, "ArrivalTime": ts("12:01"), "dev": "b", "tags": [2, 3]},
        {"id": 3, "EventTime": ts("12:01"), "ArrivalTime": ts("12:02"), "dev": "a", "tags": []},
    ]
    write_rows(tmp_path / "in", "rows", rows)
    schema = "id INT, EventTime TIMESTAMP, ArrivalTime TIMESTAMP, dev STRING, tags ARRAY<INT>"
    stream = spark.readStream.schema(schema).json(str(tmp_path / "in"))
    stream = stream.withColumnsRenamed({"dev": "device.id", "id": "event.id"})
    if dead_letters == "text forms":  # an array has no text form: every row would cross
        stream = stream.drop("tags")
    engine = "jvm" if dead_letters == "jvm" else "python"
    if engine == "python":
        needs_python_engine(spark)
    policy = TimePolicy(
        substream_by=["device.id"], name=f"dotted_{dead_letters[:4]}", engine=engine
    )
    checkpoint = str(tmp_path / "ckpt")
    out = policy.apply(stream, checkpoint_location=checkpoint, dead_letter=str(tmp_path / "dead"))
    applied = out._jdf.queryExecution().analyzed().toString()
    assert ("wmobs_dead_letters(" in applied) == (dead_letters == "jvm")
    assert out.columns == [*stream.columns, "system_timestamp"]
    name = f"dotted_{dead_letters.replace(' ', '_')}"
    query = (
        out.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    kept = spark.sql(f"SELECT * FROM {name}").collect()
    assert sorted((r["event.id"], r["device.id"]) for r in kept) == [(1, "a"), (3, "a")]
    dead = ds.dataset(str(tmp_path / "dead"), format="parquet", partitioning="hive").to_table()
    assert [(r["event.id"], r["device.id"]) for r in dead.to_pylist()] == [(2, "b")]
    assert {"event.id", "device.id"} <= set(dead.column_names)
    assert ("tags" in dead.column_names) == (dead_letters != "text forms")


def test_an_unnamed_substream_policy_warns_where_its_state_goes(spark: Any, tmp_path: Path) -> None:
    """On the Python engine, whose per-key state files are named after the policy. The JVM
    engine's state is Spark's, found by its operator's place in the plan: no warning."""
    from structlog.testing import capture_logs

    stream = spark.readStream.schema(SCHEMA).json(str(tmp_path))
    with capture_logs() as logs:
        TimePolicy(substream_by=["deviceId"], name="devices").apply(stream)
        policy = TimePolicy(substream_by=["deviceId"])
        policy.apply(stream)
    warnings = [entry for entry in logs if entry["log_level"] == "warning"]
    assert warnings == []
    # The engine of each policy, once per apply, at info, with its reason.
    chosen = [entry for entry in logs if entry["event"] == "wmobs.engine"]
    assert [(e["policy"], e["engine"], e["log_level"]) for e in chosen] == [
        ("devices", "jvm", "info"),
        (policy.state_name, "jvm", "info"),
    ]
    assert "extension" in chosen[0]["reason"]
    if "python" not in engines(spark):
        return
    with capture_logs() as logs:
        TimePolicy(substream_by=["deviceId"], engine="python").apply(stream)
    warnings = [entry for entry in logs if entry["log_level"] == "warning"]
    assert [entry["event"] for entry in warnings] == ["wmobs.substream_policy_unnamed"]
    assert warnings[0]["state"].startswith("wmobs/substreams/EventTime_")


@pytest.mark.parametrize("read", ["jvm", "python"])
@pytest.mark.parametrize(
    "shape", [(False, 40, 5), (True, 40, 5), (True, 400, 5), (True, 4500, 1)], ids=str
)
def test_distributions_on_a_random_multi_batch_stream(
    spark: Any, tmp_path: Path, shape: tuple[bool, int, int], read: str
) -> None:
    """Random event and arrival times over 6 micro-batches of ``size`` rows and ``devices``
    devices, each batch's file in no particular order: both distributions equal an
    event-at-a-time computation, globally (lateness behind the largest system timestamp of the
    earlier batches) and per key (behind the key's, in arrival order); counted by wmobs' JAR
    and by Spark's aggregates on the Python engine. ``shape``: per key or not, rows per batch,
    devices (4,500 rows of one key in a batch: one busy key)."""
    per_key, size, devices = shape
    rnd = random.Random(11 + per_key + size)
    late_tolerance = 120  # seconds: late rows are adjusted to arrival - 2 min
    start = epoch("12:00")
    batches = []
    for b in range(6):
        rows = []
        for i in range(size):
            arrival = start + b * 300 + i * 7  # distinct; batches overlap in arrival time
            event = arrival - rnd.choice([0, 1, 5, 30, 90, 400, 3000]) + rnd.choice([0, 0, 20])
            rows.append((b * size + i, event, arrival, f"d{rnd.randrange(devices)}"))
        batches.append(rows)
        scrambled = rnd.sample(rows, len(rows))  # the policy judges in arrival order
        write_rows(
            tmp_path / "in",
            f"part-{b:02d}",
            [{"id": i, "EventTime": iso(e), "ArrivalTime": iso(a), "deviceId": d}
             for i, e, a, d in scrambled],
        )  # fmt: skip
    policy = TimePolicy(
        event_time="EventTime",
        arrival_time="ArrivalTime",
        early_arrival=None,
        late_arrival=f"{late_tolerance} seconds",
        out_of_order="1 minute",
        substream_by=["deviceId"] if per_key else None,
        name=f"random_{'per_key' if per_key else 'global'}_{size}_{read}",
        engine=read,
    )
    _, counts, progress = run_policy(spark, policy, tmp_path / "in", tmp_path, policy.state_name)

    delays, lateness = [], []
    largest: dict[str, int] = {}  # per stream: largest system timestamp so far (µs)
    for rows in batches:
        before = dict(largest)  # globally: as of the end of the previous micro-batch
        for _, event, arrival, device in rows:
            delays.append(round((arrival - event) * 1e6))
            system = round(max(event, arrival - late_tolerance) * 1e6)
            stream = device if per_key else "all"
            reference = largest.get(stream) if per_key else before.get(stream)
            lateness.append(0 if reference is None else max(reference - system, 0))
            largest[stream] = max(largest.get(stream, system), system)
    expected = expected_histogram("arrival_delay", delays) | expected_histogram(
        "lateness", lateness
    )
    assert observed_histograms(progress, policy) == expected
    assert queued_long_ago(progress, policy, 6 * size)
    assert sum(lateness) > 0  # the stream has rows behind others
    late = sum(1 for rows in batches for _, e, a, _ in rows if e < a - late_tolerance)
    assert counts[("late_arrival", "adjusted")] == late > 0
    behind = sum(1 for x in lateness if x > 60 * 10**6)  # the out-of-order tolerance
    assert counts[("out_of_order", "adjusted")] == behind > 0


@pytest.mark.parametrize("read", ["jvm", "python"])
def test_rows_stamped_decades_ago_do_not_overflow_the_distributions(
    spark: Any, tmp_path: Path, read: str
) -> None:
    """A producer that stamps epoch 0: 6,000 rows of 1970 arriving in 2026, in one micro-batch.
    Their arrival delays sum past 2^63 µs, which failed the query ("long overflow") on both
    engines; the sums are doubles now, the query goes on and the sum is right."""
    if read == "python":
        needs_python_engine(spark)
    rows = 6_000
    arrival = epoch("12:00")
    write_rows(
        tmp_path / "in",
        "part-00",
        [{"id": i, "EventTime": iso(i), "ArrivalTime": iso(arrival), "deviceId": "d"}
         for i in range(rows)],
    )  # fmt: skip
    policy = TimePolicy(
        event_time="EventTime",
        arrival_time="ArrivalTime",
        early_arrival=None,
        late_arrival="2 minutes",
        out_of_order="1 minute",
        name=f"epoch_zero_{read}",
        engine=read,
    )
    kept, counts, progress = run_policy(spark, policy, tmp_path / "in", tmp_path, policy.state_name)
    assert len(kept) == rows and counts[("late_arrival", "adjusted")] == rows  # none lost
    buckets, sum_us = observed_histograms(progress, policy, ("arrival_delay",))["arrival_delay"]
    expected = sum((arrival - i) * 10**6 for i in range(rows))
    assert expected > 2**63 and buckets[-1] == rows
    assert sum_us == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("counted_by", ["jvm", "histogram_numeric"])
def test_joint_histogram_is_exact_over_many_partitions(spark: Any, counted_by: str) -> None:
    """Tens of thousands of rows in 40 partitions, most of the joint buckets used: both ways
    of counting the distributions equal counting row by row, on every bucket. (Spark's
    ``histogram_numeric`` of an integer index lost rows to a neighbouring bucket here when its
    partitions' bins merged.)"""
    from bisect import bisect_left

    from pyspark.sql import functions as F

    from wmobs.observations import bounds_us
    from wmobs.policy._histograms import joint_histogram_index

    names = ("arrival_delay", "lateness")
    bounds = [bounds_us(h) for h in names]
    rnd = random.Random(5)
    rows: list[tuple[int | None, int | None]] = []
    for _ in range(30_000):
        pair: list[int | None] = []
        for b in bounds:
            bound = rnd.choice(b)
            pair.append(
                None if rnd.random() < 0.1
                else bound + rnd.choice([-1, 0, 1]) if rnd.random() < 0.3
                else rnd.choice([-1, 1]) * int(10 ** rnd.uniform(0, 11.5))
            )  # fmt: skip
        rows.append((pair[0], pair[1]))
    expected: dict[str, list[int]] = {
        h: [0] * (len(b) + 1) for h, b in zip(names, bounds, strict=True)
    }
    for row in rows:
        if row != (None, None):
            for h, b, value in zip(names, bounds, row, strict=True):
                if value is not None:
                    expected[h][bisect_left(b, value)] += 1
    df = spark.createDataFrame(rows, "delay LONG, lateness LONG").repartition(40)
    values, valid = [F.col("delay"), F.col("lateness")], F.lit(True)
    if counted_by == "jvm":  # the JVM engine's aggregate of a policy's observations, alone
        from wmobs.policy._jvm._specs import HistogramSpec, ObservationSpec

        spec = ObservationSpec(
            counts=[],
            dropped_bits=0,
            dead_letters=None,
            firings=None,
            watermark="w",
            event_time="e",
            tolerance_us=0,
            histogram=HistogramSpec(
                buckets="hist:arrival_delay*lateness:buckets",
                sums=["hist:arrival_delay:sum_us", "hist:lateness:sum_us"],
                bounds=bounds,
            ),
            queueing=None,
            spread=None,
            kept=None,
        )
        nothing = F.lit(None).cast("long")
        arguments = [F.lit(0).cast("long"), nothing, nothing, F.lit(-1).cast("long"), *values]
        counts = [_extension.observation(spec, *arguments).alias("columns")]
    else:
        indexes = [histogram_index(h, v, valid) for h, v in zip(names, values, strict=True)]
        df = df.withColumn("index", joint_histogram_index(names, indexes))
        counts = joint_histogram_counts(names, values, valid, index="index")
    row = observation_columns(df.select(*counts).first().asDict(recursive=True))
    points = row["hist:arrival_delay*lateness:buckets"]
    assert len({p["x"] for p in points}) > 300  # most of the 494 joint buckets
    parsed = parse_observed_metrics({"wmobs.policy.p": row}).policies["p"].histograms
    assert {h: parsed[h].buckets for h in names} == expected


def rules_rows(seed: int, count: int) -> list[tuple[int | None, int | None, int | None, int]]:
    """Random inputs of the stateless rules: event and arrival time (µs), the batch's watermark
    and time (ms), with nulls, around every tolerance's edge."""
    rng = random.Random(seed)
    minute = 60_000_000
    rows = []
    for _ in range(count):
        batch_ms = 1_767_000_000_000 + rng.randrange(0, 3_600_000)
        arrival = None if rng.random() < 0.1 else batch_ms * 1000 - rng.randrange(0, 10 * minute)
        anchor = batch_ms * 1000 if arrival is None else arrival
        event = None if rng.random() < 0.1 else anchor + rng.randrange(-20 * minute, 20 * minute)
        mark = None if rng.random() < 0.2 else batch_ms - rng.randrange(-600_000, 1_800_000)
        rows.append((event, arrival, mark, batch_ms))
    return rows


def test_both_engines_stateless_rules_agree_row_by_row(spark: Any) -> None:
    """Invalid time, early and late arrival and the global policy's out of order: the JVM
    engine's ``PolicyRules`` (``wmobs_judge``, in generated code and evaluated without) and the
    Python engine's Column expressions give every row the same system timestamp, verdict,
    delays and lateness, for every combination of actions, with and without arrival times.
    Every combination in one query per engine (a union), not a job each."""
    from functools import reduce

    from pyspark.sql import functions as F

    from wmobs.policy._context import Context
    from wmobs.policy._engine import choose
    from wmobs.policy._jvm._rules import _rules_spec
    from wmobs.policy._python._rules import arrival_policies, out_of_order_against_watermark
    from wmobs.policy._storage import Storage
    from wmobs.policy._verdicts import (
        ARRIVAL,
        BATCH_TIME,
        DELAY,
        LATENESS,
        QUEUE,
        TS,
        VERDICT,
        WATERMARK,
    )

    engine = choose(spark, "jvm")
    rows = rules_rows(seed=11, count=500)
    schema = f"id INT, {TS} LONG, {ARRIVAL} LONG, {WATERMARK} LONG, {BATCH_TIME} LONG"
    with_arrival = spark.createDataFrame([(i, *r) for i, r in enumerate(rows)], schema)
    without_arrival = with_arrival.withColumn(ARRIVAL, F.lit(None).cast("long"))
    fields = {TS: "system", VERDICT: "verdict", DELAY: "delay", LATENESS: "lateness"}
    fields |= {QUEUE: "queue"}
    times = [F.col(TS), F.col(ARRIVAL), F.col(WATERMARK), F.col(BATCH_TIME)]
    actions = itertools.product([None, "adjust", "drop"], ["adjust", "drop"], ["adjust", "drop"])
    cases = list(itertools.product(actions, ["ArrivalTime", None]))
    pythons, jvms = [], []
    for case, ((early, late, ooo), arrival) in enumerate(cases):
        policy = TimePolicy(late_arrival="3 minutes", out_of_order="2 minutes")
        ctx = Context(
            name="rules",
            named=True,
            event_time="EventTime",
            arrival_time=arrival,
            early_arrival_action=early,
            late_arrival_action=late,
            out_of_order_action=ooo,
            substream_by=None,
            distributions=True,
            tolerances=policy.tolerances,
            checkpoint=None,
            storage=Storage.of(None),
            engine=engine,
        )
        df = with_arrival if arrival else without_arrival
        python = out_of_order_against_watermark(
            ctx, arrival_policies(ctx, df, F.col(BATCH_TIME) * F.lit(1000))
        )
        pythons.append(python.select(F.lit(case).alias("case"), "id", *fields))
        spec = _rules_spec(ctx, out_of_order=True)
        judged = [
            _extension.judge(dataclasses.replace(spec, field=f), *times).alias(c)
            for c, f in fields.items()
        ]
        jvms.append(df.select(F.lit(case).alias("case"), "id", *judged))

    def by_case(df: Any) -> dict[int, list[tuple[Any, ...]]]:
        found: dict[int, list[tuple[Any, ...]]] = {case: [] for case in range(len(cases))}
        for r in df.collect():
            found[r[0]].append(tuple(r)[1:])
        return {case: sorted(rows) for case, rows in found.items()}

    expected = by_case(reduce(lambda a, b: a.unionAll(b), pythons))
    jvm = reduce(lambda a, b: a.unionAll(b), jvms)
    for codegen in (True, False):
        with contextlib.nullcontext() if codegen else without_codegen(spark):
            got = by_case(jvm)
        for case, ((early, late, ooo), arrival) in enumerate(cases):
            pairs = zip(got[case], expected[case], strict=True)
            wrong = [(g, e) for g, e in pairs if g != e]
            assert not wrong, (codegen, early, late, ooo, arrival, wrong[:3])
            verdicts = {r[2] for r in got[case]}
            assert len(verdicts) >= 4, (early, late, ooo)  # the rows reach every rule


def test_the_bucket_index_is_exact_at_every_edge(spark: Any) -> None:
    """The bucket index (a tree of comparisons in generated code) against counting the bounds
    below, on every bound and power of two ±1, 0 and the extremes of a long."""
    from bisect import bisect_left

    from pyspark.sql import functions as F

    from wmobs.policy._histograms import _bucket_index

    edges = {0, 1, -1, 2**63 - 1, -(2**63), -(2**63) + 1}
    for k in range(63):
        edges |= {2**k + d for d in (-1, 0, 1)} | {-(2**k) + d for d in (-1, 0, 1)}
    for bounds in HISTOGRAMS.values():
        edges |= {round(b * 1e6) + d for b in bounds for d in (-1, 0, 1)}
    values = sorted(v for v in edges if -(2**63) <= v < 2**63)
    df = spark.createDataFrame([(v,) for v in values], "x LONG")
    for name, bounds in HISTOGRAMS.items():
        micros = [round(b * 1e6) for b in bounds]
        rows = df.select(
            "x",
            _bucket_index(F.col("x"), micros).alias("bucket"),
        ).collect()
        wrong = [(r.x, r.bucket) for r in rows if r.bucket != bisect_left(micros, r.x)]
        assert not wrong, (name, wrong[:5])


def test_the_bucket_index_gives_the_reference_buckets(spark: Any) -> None:
    """The Python engine's bucket index against ``tests/reference/histogram_buckets.json``, the
    cases the JVM engine's aggregate answers to in JUnit."""
    from pyspark.sql import functions as F

    cases = json.loads(
        (Path(__file__).resolve().parents[1] / "reference" / "histogram_buckets.json").read_text()
    )
    for name, case in cases.items():
        df = spark.createDataFrame([(v,) for v, _ in case["values"]], "x LONG")
        got = df.select(histogram_index(name, F.col("x"), F.lit(True)).alias("b")).collect()
        assert [r.b for r in got] == [bucket for _, bucket in case["values"]], name


@pytest.mark.parametrize("engine", ["jvm", "python"])
def test_two_policies_of_one_query_export_their_counts_apart(
    spark: Any, tmp_path: Path, engine: str
) -> None:
    """A union of two policed inputs: ``clicks`` drops 3 rows early, ``views`` 5 late. Each
    policy's verdicts, dead letters and engine are exported under its own ``policy`` label, the
    verdict kind under ``rule`` (not added together, as before the ``rule`` label)."""
    from wmobs.testing import parse_metrics

    now = time.time()
    clicks_rows = [{"id": i, "EventTime": iso(now + 600 if i < 3 else now)} for i in range(5)]
    views_rows = [{"id": 10 + i, "EventTime": iso(now - 900 if i < 5 else now)} for i in range(6)]
    write_rows(tmp_path / "clicks", "rows", clicks_rows)
    write_rows(tmp_path / "views", "rows", views_rows)
    schema = "id INT, EventTime TIMESTAMP"
    checkpoint = str(tmp_path / "ckpt")
    name = f"two_policies_{engine}"

    def policed(source: str, policy: TimePolicy) -> Any:
        stream = spark.readStream.schema(schema).json(str(tmp_path / source))
        dead = str(tmp_path / f"dead-{source}")
        return policy.apply(stream, checkpoint_location=checkpoint, dead_letter=dead)

    clicks = policed("clicks", TimePolicy(arrival_time=None, name="clicks", engine=engine))
    views = policed(
        "views",
        TimePolicy(
            arrival_time=None,
            late_arrival="5 minutes",
            late_arrival_action="drop",
            name="views",
            engine=engine,
        ),
    )
    with wmobs.attach(spark, prometheus_port=0) as monitor:
        query = (
            clicks.unionByName(views)
            .writeStream.queryName(name)
            .format("memory")
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="100 milliseconds")
            .start()
        )
        query.processAllAvailable()

        def counted() -> int:
            snap = monitor.snapshot(name)
            return 0 if snap is None else len([p for p in snap.policies.values() if p.engine])

        wait_until(lambda: counted() == 2, what="both policies' observations")
        assert monitor.metrics_url is not None
        from urllib.request import urlopen

        with urlopen(monitor.metrics_url, timeout=10) as response:  # while the query runs
            samples = parse_metrics(response.read().decode())
        query.stop()
        assert query.exception() is None

    def sample(metric: str, **labels: str) -> float | None:
        key = (metric, tuple(sorted({"query": name, **labels}.items())))
        return samples.get(key)

    events = "wmobs_policy_events_total"
    assert sample(events, policy="clicks", rule="early_arrival", action="dropped") == 3
    assert sample(events, policy="clicks", rule="late_arrival", action="dropped") == 0
    assert sample(events, policy="views", rule="late_arrival", action="dropped") == 5
    assert sample(events, policy="views", rule="early_arrival", action="dropped") == 0
    assert sample("wmobs_dead_letter_rows_total", policy="clicks") == 3
    assert sample("wmobs_dead_letter_rows_total", policy="views") == 5
    from pyspark.sql import functions as F

    plan = (
        "jvm" if engine == "jvm" else "python_dropped" if hasattr(F, "arrow_udf") else "python_all"
    )
    for policy in ("clicks", "views"):
        assert sample("wmobs_policy_info", policy=policy, engine=engine, dead_letters=plan) == 1
        dead = spark.read.parquet(str(tmp_path / f"dead-{policy}")).collect()
        assert {r.wmobs_policy for r in dead} == {policy}
    assert sorted(r.id for r in spark.sql(f"SELECT id FROM {name}").collect()) == [3, 4, 15]


def test_an_engine_that_cannot_run_is_an_error(spark: Any, tmp_path: Path) -> None:
    """Spark 3.5 has no Python data sources: ``engine="python"`` is one clear error there,
    naming the JVM engine's setting; ``"auto"`` is the JVM engine."""
    stream = spark.readStream.schema(SCHEMA).json(str(tmp_path))
    if int(spark.version.split(".")[0]) >= 4:
        assert TimePolicy(engine="python").apply(stream).isStreaming
        return
    with pytest.raises(wmobs.EngineError, match=r"needs Spark >= 4\.0.*spark\.sql\.extensions"):
        TimePolicy(engine="python").apply(stream)
    assert TimePolicy().apply(stream).isStreaming


def _shuffle_files_lost_once(marker: Path) -> Any:
    """A UDF passing ``id`` through that, on the row ``id == 0`` while ``marker`` exists, waits
    for another map task's shuffle output, deletes every shuffle file written since ``marker``
    (as an executor lost with its disk would) and removes ``marker``: the reduce stage then
    fails to fetch it, and Spark runs the map stage's tasks again (a fetch failure)."""
    from pyspark.sql import functions as F

    flag = str(marker)

    def lose(i: int) -> int:
        import glob
        import os
        import time

        if i != 0 or not os.path.exists(flag):
            return i
        since = os.path.getmtime(flag)
        roots = os.environ["SPARK_LOCAL_DIRS"].split(",")  # Spark gives its workers its disk

        def written() -> list[str]:
            found = (glob.glob(f"{root}/*/shuffle_*.data") for root in roots)
            return [f for files in found for f in files if os.path.getmtime(f) >= since]

        deadline = time.monotonic() + 60
        while not written() and time.monotonic() < deadline:
            time.sleep(0.05)  # inside the task: another task's shuffle file to appear
        for file in written():
            os.remove(file)
        os.remove(flag)
        return i

    return F.udf(lose, "int")


@pytest.mark.parametrize("engine", ["jvm", "python"])
def test_a_stage_spark_runs_again_is_counted_once(spark: Any, tmp_path: Path, engine: str) -> None:
    """A micro-batch's map output is lost before the aggregation reads it (an executor gone
    with its disk): Spark runs the map tasks, and the policy in them, again. Before Spark 4.3
    the accumulator behind ``observe`` adds every successful attempt's counts; the JVM engine
    counts each partition once on every line, the Python engine's counts are Spark's."""
    from pyspark.sql import functions as F

    if engine == "python":
        needs_python_engine(spark)
    rows = []
    for i in range(40):  # every fourth row an hour early: dropped; the rest late: adjusted
        event = "13:00" if i % 4 == 0 else "12:00"
        rows.append({"id": i, "EventTime": ts(event), "ArrivalTime": ts("12:30")})
    for part in range(2):  # two files: two map tasks
        write_rows(tmp_path / "in", f"part-{part}", rows[part * 20 : (part + 1) * 20])
    marker = tmp_path / "lose-shuffle-files"
    marker.write_text("")
    checkpoint, dead = str(tmp_path / "ckpt"), str(tmp_path / "dead")
    lose = _shuffle_files_lost_once(marker)
    stream = spark.readStream.schema("id INT, EventTime TIMESTAMP, ArrivalTime TIMESTAMP")
    events = stream.json(str(tmp_path / "in")).withColumn("id", lose("id"))
    policy = TimePolicy(late_arrival="5 minutes", name="rerun", engine=engine)
    judged = policy.apply(events, checkpoint_location=checkpoint, dead_letter=dead)
    counts = judged.groupBy(F.window("system_timestamp", "1 hour")).count()
    name = f"rerun_{engine}"
    with wmobs.attach(spark) as monitor:
        query = (
            counts.writeStream.queryName(name)
            .format("memory")
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .start()
        )
        query.processAllAvailable()
        query.stop()
        assert query.exception() is None
        wait_until(lambda: (s := monitor.snapshot(name)) is not None and not s.active)
        snap = monitor.snapshot(name)
    assert not marker.exists(), "the shuffle files were never lost"
    read = sum(p["numInputRows"] for p in query.recentProgress)
    assert read > 40, "Spark did not run the map stage again"  # Spark's count: every attempt
    policy_snap = snap.policy("rerun") if snap is not None else None
    assert policy_snap is not None
    counted = (
        policy_snap.events[("early_arrival", "dropped")],
        policy_snap.events[("late_arrival", "adjusted")],
        policy_snap.dead_letter_rows,
    )
    assert spark.read.parquet(dead).count() == 10  # each dropped row written once
    assert spark.sql(f"SELECT sum(count) AS n FROM {name}").collect()[0].n == 30
    spark_counts_once = tuple(int(p) for p in spark.version.split(".")[:2]) >= (4, 3)
    if engine == "jvm" or spark_counts_once:
        assert counted == (10, 30, 10)
    else:  # documented: docs/guide/engines.md
        assert counted[0] > 10 and counted[2] > 10


@contextlib.contextmanager
def sorts_spilling_every(spark: Any, rows: int) -> Iterator[None]:
    """Spark's external sorters of this (local) application spill to disk every ``rows`` rows
    (its test setting, read when a sorter is made), as a task short of memory would."""
    key = "spark.shuffle.spill.numElementsForceSpillThreshold"
    conf = spark.sparkContext._jsc.sc().conf()  # the live SparkConf, SparkEnv's in local mode
    conf.set(key, str(rows))
    try:
        yield
    finally:
        conf.remove(key)


@pytest.mark.parametrize("engine", ["jvm", "python"])
def test_a_partition_of_few_keys_is_judged_exactly_when_sorts_spill(
    spark: Any, tmp_path: Path, engine: str
) -> None:
    """300 rows of 3 keys in one micro-batch, arrival times tied ten at a time: every key's rows
    are judged in arrival order, ties in the order they came, as an event-at-a-time
    computation says, also where the JVM engine's sorts spill to disk every 8 rows (no task
    holds its partition on the heap, and a key with more than 8 rows has them sorted by Spark's
    external sorter rather than on the heap)."""
    if engine == "python":
        needs_python_engine(spark)
    rnd = random.Random(5)
    start, tolerance = epoch("12:00"), 30
    rows = []
    for i in range(300):
        arrival = start + i // 10
        rows.append((i, arrival - rnd.randrange(0, 120), arrival, f"d{rnd.randrange(3)}"))
    write_rows(
        tmp_path / "in",
        "rows",
        [{"id": i, "EventTime": iso(e), "ArrivalTime": iso(a), "deviceId": d}
         for i, e, a, d in rows],
    )  # fmt: skip
    expected, best = {}, {}
    for i, event, _, device in sorted(rows, key=lambda r: r[2]):  # stable: ties keep order
        mark = best.get(device)
        expected[i] = mark - tolerance if mark is not None and event < mark - tolerance else event
        best[device] = max(best.get(device, event), event)
    policy = TimePolicy(
        early_arrival=None,
        late_arrival="10 minutes",
        out_of_order=f"{tolerance} seconds",
        substream_by=["deviceId"],
        name=f"spilled_{engine}",
        engine=engine,
    )
    with sorts_spilling_every(spark, 8):
        kept, counts, _ = run_policy(spark, policy, tmp_path / "in", tmp_path, policy.state_name)
    assert kept == expected
    adjusted = sum(1 for i, e, _, _ in rows if expected[i] != e)
    assert counts[("out_of_order", "adjusted")] == adjusted > 0
