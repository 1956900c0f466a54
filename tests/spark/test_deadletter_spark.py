"""Nothing lost: rows in = rows kept + rows dead-lettered, across a restart from the checkpoint."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import wmobs
from wmobs import DeadLetter, TimePolicy

from ._streaming import engines, stopped, wait_until, write_rows
from .test_policy_spark import ts

pytestmark = pytest.mark.spark

SCHEMA = "id INT, ts STRING, arr TIMESTAMP"
# (id, event time as a string, arrival) per file; one file per micro-batch.
# early 5 min drop, late 5 min drop, out of order 1 min drop.
BEFORE_RESTART = [
    [(1, ts("12:10"), "12:10"), (2, None, "12:10"), (3, "not a time", "12:10"),
     (4, ts("12:30"), "12:10")],                        # kept, invalid, invalid, early
    [(5, ts("12:05"), "12:06"), (6, ts("12:11"), "12:11"),
     (7, ts("12:00"), "12:12")],                        # behind 12:09: out of order; kept; late
    [(8, ts("12:12"), "12:12")],                        # kept
]  # fmt: skip
AFTER_RESTART = [
    [(9, ts("12:10"), "12:11"), (10, ts("12:15"), "12:15"),
     (11, "2026-13-45T99:00:00Z", "12:15")],            # behind 12:11: out of order; kept; invalid
    [(12, ts("12:14"), "12:14")],                       # at the watermark 12:14: kept
]  # fmt: skip
EXPECTED_DEAD = {
    2: "invalid_time", 3: "invalid_time", 4: "early_arrival", 5: "out_of_order",
    7: "late_arrival", 9: "out_of_order", 11: "invalid_time",
}  # fmt: skip
EXPECTED_KEPT = {1, 6, 8, 10, 12}
DROPPING = TimePolicy(
    event_time="ts",
    arrival_time="arr",
    early_arrival="5 minutes",
    late_arrival="5 minutes",
    late_arrival_action="drop",
    out_of_order="1 minute",
    out_of_order_action="drop",
)
"""The rules the rows above are judged by: every rule drops."""


def _read_dead_letters(dead: str, request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    """Every dead-letter row with its ``batch_id`` partition, read back without wmobs."""
    if "://" not in dead:
        return ds.dataset(dead, format="parquet", partitioning="hive").to_table().to_pylist()
    import io

    import pyarrow.parquet as pq

    if dead.startswith("s3a://"):
        bucket, prefix = dead[len("s3a://") :].split("/", 1)
        objects = request.getfixturevalue("s3_server").objects(bucket, prefix + "/")
    else:
        container, _, rest = dead[len("abfss://") :].partition("@")
        prefix = rest.split("/", 1)[1]
        objects = request.getfixturevalue("azure_server").blobs(container, prefix + "/")
    rows = []
    for key, body in objects.items():
        assert key.endswith(".parquet") and "/batch_id=" in key, key  # no temporary objects
        batch = int(key.split("/batch_id=")[1].split("/")[0])
        rows += [r | {"batch_id": batch} for r in pq.read_table(io.BytesIO(body)).to_pylist()]
    return rows


def _files(directory: Path, batches: list[list[tuple[Any, ...]]], start: int) -> int:
    rows = 0
    for i, batch in enumerate(batches, start=start):
        write_rows(
            directory,
            f"part-{i:02d}",
            [{"id": r[0], "ts": r[1], "arr": ts(r[2])} for r in batch],
        )
        rows += len(batch)
    return rows


@pytest.mark.parametrize("destination", ["local", "s3a", "abfss"])
def test_conservation_across_restart(
    spark: Any, tmp_path: Path, destination: str, request: pytest.FixtureRequest
) -> None:
    """On a local directory, on ``s3a://`` and on ``abfss://`` (real servers on 127.0.0.1,
    written by the executors' Python workers, read back with the stores' own SDKs)."""
    source, sink = tmp_path / "in", tmp_path / "kept"
    checkpoint = str(tmp_path / "ckpt")
    if destination == "local":
        dead, storage = str(tmp_path / "dead"), None
    elif destination == "s3a":
        s3 = request.getfixturevalue("s3_server")
        dead, storage = f"s3a://{s3.create_bucket('wmobs-dead-letters')}/dead", s3.storage
    else:
        azure = request.getfixturevalue("azure_server")
        container = azure.create_container("wmobs-dead-letters")
        dead = f"abfss://{container}@devstoreaccount1.dfs.core.windows.net/dead"
        storage = azure.storage
    policy = replace(DROPPING, name="conservation")
    reader = InMemoryMetricReader()
    rows_in = 0

    def run() -> None:
        stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
        out = policy.apply(
            stream, checkpoint_location=checkpoint, dead_letter=DeadLetter(dead), storage=storage
        )
        query = (
            out.writeStream.queryName("conservation")
            .format("parquet")
            .option("path", str(sink))
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        assert query.exception() is None

    with wmobs.attach(spark, meter_provider=MeterProvider(metric_readers=[reader])) as monitor:
        rows_in += _files(source, BEFORE_RESTART, 0)
        run()
        rows_in += _files(source, AFTER_RESTART, len(BEFORE_RESTART))
        run()  # restart from the checkpoint: the watermark and the file log carry over
        # Both runs' ends heard (the first run's end may arrive after the second run started).
        wait_until(lambda: stopped(monitor, "conservation") == 2, what="both runs' ends")
        snap = monitor.snapshot("conservation")
        assert snap is not None and not snap.active

    kept = spark.read.parquet(str(sink)).select("id", "ts", "system_timestamp").collect()
    dead_rows = _read_dead_letters(dead, request)

    assert rows_in == 12 == len(kept) + len(dead_rows)
    assert {r.id for r in kept} == EXPECTED_KEPT
    assert {r["id"]: r["wmobs_rule"] for r in dead_rows} == EXPECTED_DEAD
    assert {r["wmobs_policy"] for r in dead_rows} == {"conservation"}
    assert all(r["wmobs_batch_id"] == r["batch_id"] for r in dead_rows)
    assert {r["id"]: r["wmobs_batch_id"] for r in dead_rows if r["id"] in (9, 11)} == {9: 3, 11: 3}
    assert {r["id"]: r["ts"] for r in dead_rows}[3] == "not a time"  # original value kept

    counted = snap.policy("conservation")
    assert counted is not None
    dropped = {k: v for k, v in counted.events.items() if k[1] == "dropped"}
    assert sum(dropped.values()) == len(dead_rows) == counted.dead_letter_rows == 7
    assert dropped[("invalid_time", "dropped")] == 3
    assert dropped[("out_of_order", "dropped")] == 2
    assert snap.input_rows == rows_in


@pytest.mark.parametrize("engine", ["jvm", "python"])
def test_writers_sharing_a_directory_keep_each_others_dead_letters(
    spark: Any, tmp_path: Path, engine: str
) -> None:
    """One dead-letter directory, three writers of the same micro-batches and partitions: a
    query, the same query started afresh on a new checkpoint (a new query id), and a query of
    another policy. Files were named by batch and partition only: each overwrote the others'."""
    if engine not in engines(spark):
        pytest.skip(f"Spark {spark.version} has no {engine} engine")
    source, dead = tmp_path / "in", tmp_path / "dead"
    rows_in = _files(source, BEFORE_RESTART, 0)
    for name, checkpoint in (("first", "c1"), ("first", "c2"), ("second", "c3")):
        policy = replace(DROPPING, name=name, engine=engine)
        stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
        out = policy.apply(
            stream, checkpoint_location=str(tmp_path / checkpoint), dead_letter=str(dead)
        )
        query = (
            out.writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        assert query.exception() is None
    dead_rows = ds.dataset(str(dead), format="parquet", partitioning="hive").to_table().to_pylist()
    per_writer = sorted((r["wmobs_policy"], r["id"]) for r in dead_rows)
    dropped = [2, 3, 4, 5, 7]  # of each writer's 8 rows: invalid, early, out of order, late
    assert rows_in == 8
    assert per_writer == sorted(
        [("first", i) for i in dropped * 2] + [("second", i) for i in dropped]
    )


def test_apply_checks_where_it_reads_and_writes_on_the_driver(
    spark: Any, tmp_path: Path, s3_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bad storage for what Python reads and writes is one clear error from ``apply``, never
    a traceback from an executor: the Python engine's checkpoint, and a dead-letter directory
    that Python writes (with ``storage=`` options) on either engine. (The JVM engine reaches
    the checkpoint through Hadoop, as Spark does: ``test_object_store_checkpoint`` checks its
    error.)"""
    (tmp_path / "in").mkdir()
    stream = spark.readStream.schema(SCHEMA).json(str(tmp_path / "in"))
    policy = TimePolicy(event_time="ts", arrival_time="arr")
    with pytest.raises(wmobs.StorageError, match=r"dead_letter: .*'missing-dead' does not exist"):
        policy.apply(
            stream,
            checkpoint_location=str(tmp_path / "chk"),
            dead_letter="s3a://missing-dead/x",
            storage=s3_server.storage,
        )
    if "python" not in engines(spark):
        return  # Spark 3.5: no Python engine
    python = TimePolicy(event_time="ts", arrival_time="arr", engine="python")
    with pytest.raises(wmobs.StorageError, match=r"checkpoint_location: .*scheme 'foo'"):
        python.apply(stream, checkpoint_location="foo://bucket/chk")
    with pytest.raises(wmobs.StorageError, match="'no-such-bucket' does not exist"):
        python.apply(
            stream, checkpoint_location="s3a://no-such-bucket/chk", storage=s3_server.storage
        )
    monkeypatch.setitem(sys.modules, "gcsfs", None)  # as without wmobs[gcs]
    with pytest.raises(wmobs.StorageError, match=r"pip install 'wmobs\[gcs\]'"):
        python.apply(stream, checkpoint_location="gs://bucket/chk")


# Every scalar type, at its edges: what a dead letter must give back exactly.
TYPED_SCHEMA = (
    "ts TIMESTAMP, b TINYINT, s SMALLINT, i INT, l BIGINT, f FLOAT, d DOUBLE, "
    "dec DECIMAL(20,4), ok BOOLEAN, str STRING, bin BINARY, day DATE, at TIMESTAMP"
)


def _typed_input(directory: Path) -> Any:
    """Rows with no event time (so every one is dropped as invalid), one Parquet file."""
    import datetime as dt
    from decimal import Decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "ts": pa.array([None] * 5, pa.timestamp("us", tz="UTC")),
            "b": pa.array([-128, 127, 0, None, 1], pa.int8()),
            "s": pa.array([-32768, 32767, 0, None, 1], pa.int16()),
            "i": pa.array([-(2**31), 2**31 - 1, 0, None, 1], pa.int32()),
            "l": pa.array([-(2**63), 2**63 - 1, 0, None, 1], pa.int64()),
            "f": pa.array([float("nan"), 3.4028235e38, -0.0, None, 1.1], pa.float32()),
            "d": pa.array([float("inf"), -float("inf"), 5e-324, None, 0.1 + 0.2], pa.float64()),
            "dec": pa.array(
                [
                    Decimal("-9999999999999999.9999"),
                    Decimal("0.0001"),
                    Decimal(0),
                    None,
                    Decimal("1E+3"),
                ],
                pa.decimal128(20, 4),
            ),
            "ok": pa.array([True, False, None, True, False]),
            "str": pa.array(["", 'é,"\n{', None, "null", "x" * 1000]),
            "bin": pa.array([b"", b"\x00\xff", None, b"null", bytes(range(256))]),
            "day": pa.array(
                [
                    dt.date(1, 1, 1),
                    dt.date(9999, 12, 31),
                    None,
                    dt.date(1970, 1, 1),
                    dt.date(2026, 1, 1),
                ],
                pa.date32(),
            ),
            "at": pa.array(
                [
                    dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=dt.timezone.utc),
                    dt.datetime(2026, 1, 1, 12, 0, 0, 1, tzinfo=dt.timezone.utc),
                    None,
                    dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc),
                    dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.timezone.utc),
                ],
                pa.timestamp("us", tz="UTC"),
            ),
        }
    )
    directory.mkdir(parents=True)
    pq.write_table(table, directory / "part-0.parquet")
    return table


def to_arrow(df: Any) -> Any:
    """``df`` collected as an Arrow table (``DataFrame.toArrow`` is PySpark 4's)."""
    import pyarrow as pa

    if hasattr(df, "toArrow"):
        return df.toArrow()
    return pa.Table.from_batches(df._collect_as_arrow())


def _run_dead_letters(
    spark: Any, stream: Any, work: Path, engine: str = "jvm", name: str = "typed"
) -> Path:
    """One run of an invalid-time policy over streaming ``stream``: its dead letters'
    directory."""
    out = TimePolicy(event_time="ts", arrival_time=None, engine=engine, name=name).apply(
        stream, checkpoint_location=str(work / "ckpt"), dead_letter=str(work / "dead")
    )
    query = (
        out.writeStream.format("noop")
        .option("checkpointLocation", str(work / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    return work / "dead"


def _dead_letters_of(spark: Any, source: Path, schema: str, work: Path, engine: str = "jvm") -> Any:
    """The dead-letter table of one run of an invalid-time policy over ``source``, as pyarrow
    reads it."""
    import pyarrow.parquet as pq

    stream = spark.readStream.schema(schema).parquet(str(source))
    (file,) = _run_dead_letters(spark, stream, work, engine).rglob("*.parquet")
    return pq.read_table(file)


def _plan_of(applied: Any) -> str:
    return str(applied._jdf.queryExecution().analyzed().toString())


def test_dead_letters_keep_every_scalar_type_exactly(spark: Any, tmp_path: Path) -> None:
    """Three plans, one result: the JVM engine writes the Parquet file with Spark's Parquet
    writer (no row crosses into Python); on the Python engine dropped rows reach Python in a
    text form, kept rows stay in the JVM; every row crosses (``mapInArrow``, the plan for
    columns without a text form, forced here on the same input). What lands is what came in,
    value for value: the Python plans' files of the Arrow types the every-row plan gives, and
    every file read back by ``spark.read.parquet`` as the input's schema and values."""
    from unittest import mock

    from pyspark.sql import functions as F

    from wmobs.policy._deadletter_plan import DeadLetterPlan

    if "python" not in engines(spark):
        pytest.skip("Spark 3.5 has no Python engine to compare with")
    expected = _typed_input(tmp_path / "in")
    stream = spark.readStream.schema(TYPED_SCHEMA).parquet(str(tmp_path / "in"))
    applied = TimePolicy(event_time="ts", arrival_time=None, engine="jvm").apply(
        stream, checkpoint_location=str(tmp_path / "plan"), dead_letter=str(tmp_path / "x")
    )
    plan = _plan_of(applied)
    assert "MapInArrow" not in plan and "hand_over" not in plan  # the JVM's plan
    assert "wmobs_dead_letters(" in plan

    jvm = _run_dead_letters(spark, stream, tmp_path / "jvm")
    text = _dead_letters_of(spark, tmp_path / "in", TYPED_SCHEMA, tmp_path / "text", "python")
    applied = TimePolicy(event_time="ts", arrival_time=None, engine="python").apply(
        stream, checkpoint_location=str(tmp_path / "plan1"), dead_letter=str(tmp_path / "w")
    )
    # PySpark 4.0 has no Arrow-iterator UDFs: its Python engine takes the every-row plan.
    text_plan = "hand_over" if hasattr(F, "arrow_udf") else "MapInArrow"
    assert text_plan in _plan_of(applied)
    # Not an engine: the Python engine's plan for a column without an exact text form.
    every = DeadLetterPlan("python_all", "forced by the test")
    with mock.patch("wmobs.policy._time_policy.choose_plan", lambda *a, **k: every):
        every_row = _dead_letters_of(
            spark, tmp_path / "in", TYPED_SCHEMA, tmp_path / "slow", "python"
        )

    columns = expected.column_names
    as_written = expected.cast(every_row.select(columns).schema)  # the session's time zone
    assert text.schema == every_row.schema
    # repr: NaN equals NaN there, and -0.0 differs from 0.0
    assert repr(text.to_pylist()) == repr(every_row.to_pylist())
    assert repr(text.select(columns).to_pylist()) == repr(as_written.to_pylist())
    for table in (text, every_row):
        assert table.column("wmobs_rule").to_pylist() == ["invalid_time"] * 5
        assert table.column("wmobs_policy").to_pylist() == ["typed"] * 5
        assert table.column("wmobs_batch_id").to_pylist() == [0] * 5

    # Spark reads the JVM's file as it reads the Python plans': the input's schema, then the
    # policy's columns, the same values.
    read = spark.read.parquet(str(jvm)).drop("batch_id")
    assert read.schema == stream.schema.add("wmobs_rule", "string").add(
        "wmobs_policy", "string"
    ).add("wmobs_batch_id", "long")
    python_read = spark.read.parquet(str(tmp_path / "slow" / "dead")).drop("batch_id")
    got, want = (to_arrow(df.orderBy("l")) for df in (read, python_read))
    assert want.schema == got.schema
    assert repr(got.to_pylist()) == repr(want.to_pylist())

    # A column without an exact text form (here a map) takes the every-row plan on the Python
    # engine's destinations; the JVM's writer takes it.
    nested = stream.withColumn("m", F.create_map(F.col("str"), F.col("l")))
    applied = TimePolicy(event_time="ts", arrival_time=None).apply(
        nested, checkpoint_location=str(tmp_path / "plan2"), dead_letter=str(tmp_path / "y")
    )
    assert "wmobs_dead_letters(" in _plan_of(applied)
    applied = TimePolicy(event_time="ts", arrival_time=None).apply(
        nested,
        checkpoint_location=str(tmp_path / "plan3"),
        dead_letter=wmobs.DeadLetter(str(tmp_path / "z"), format="json"),
    )
    assert "MapInArrow" in _plan_of(applied)


def test_the_jvm_writes_every_type_spark_writes_to_parquet(spark: Any, tmp_path: Path) -> None:
    """On the JVM engine a Parquet directory is written by Spark's own Parquet writer: structs,
    arrays, maps (Kafka headers, ``from_json`` output), ``TIMESTAMP_NTZ`` and ANSI intervals
    come back from ``spark.read.parquet`` as they went in, with no fallback plan; a column
    Parquet cannot hold (an interval of months and days) is an error at ``apply`` naming it."""
    from pyspark.sql import functions as F

    rows = spark.sql(
        """SELECT CAST(NULL AS TIMESTAMP) AS ts, id,
                  named_struct('x', id * 1.5D, 'tags', array('a', CAST(id AS STRING))) AS point,
                  array(named_struct('key', 'k', 'value', CAST('v' AS BINARY))) AS headers,
                  CASE WHEN id = 2 THEN NULL ELSE map('n', CAST(id AS BIGINT)) END AS attrs,
                  TIMESTAMP_NTZ'2026-11-27 10:00:00.123456' AS local,
                  INTERVAL '1 02:03:04.5' DAY TO SECOND * id AS took,
                  INTERVAL '2-3' YEAR TO MONTH AS months
           FROM range(0, 4) AS r(id)"""
    )
    rows.write.parquet(str(tmp_path / "in"))
    stream = spark.readStream.schema(rows.schema).parquet(str(tmp_path / "in"))
    dead = _run_dead_letters(spark, stream, tmp_path / "run", name="nested")

    read = spark.read.parquet(str(dead))
    assert read.drop("batch_id").schema == stream.schema.add("wmobs_rule", "string").add(
        "wmobs_policy", "string"
    ).add("wmobs_batch_id", "long")
    # PySpark cannot collect year-month intervals: both as text
    comparable = [F.col(c).cast("string") if c in ("took", "months") else c for c in rows.columns]
    got = read.select(*comparable).orderBy("id").collect()
    assert got == rows.select(*comparable).orderBy("id").collect()
    assert {r.wmobs_rule for r in read.select("wmobs_rule").collect()} == {"invalid_time"}

    if spark.version.startswith("3."):
        return  # PySpark 3.5 cannot read the schema of a DataFrame with such a column
    calendar = stream.withColumn("span", F.expr("make_interval(0, 1, 0, 2)"))
    with pytest.raises(TypeError, match=r"dead_letter: .*`span` \(interval\)"):
        TimePolicy(event_time="ts", arrival_time=None).apply(
            calendar,
            checkpoint_location=str(tmp_path / "c"),
            dead_letter=str(tmp_path / "never"),
        )


def test_a_tasks_dead_letters_past_16_mib_go_through_a_local_file(
    spark: Any, tmp_path: Path
) -> None:
    """On the JVM engine a task's dead letters past 16 MiB wait for the task's end in a file of
    Spark's local directories, not on the heap: 20 rows of 1 MiB of random bytes (Parquet
    cannot shrink them), all dropped in one task, come back exactly (``SpoolFileTest``: the
    local file is removed when the task ends)."""
    import hashlib
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    blobs = [os.urandom(1 << 20) for _ in range(20)]
    (tmp_path / "in").mkdir()
    table = pa.table(
        {
            "ts": pa.array([None] * len(blobs), pa.timestamp("us", tz="UTC")),
            "id": pa.array(range(len(blobs)), pa.int32()),
            "blob": pa.array(blobs, pa.binary()),
        }
    )
    pq.write_table(table, tmp_path / "in" / "part-0.parquet")  # one file: one task
    stream = spark.readStream.schema("ts TIMESTAMP, id INT, blob BINARY").parquet(
        str(tmp_path / "in")
    )
    dead = _run_dead_letters(spark, stream, tmp_path / "run", name="large")

    (file,) = dead.rglob("*.parquet")
    assert file.stat().st_size > 16 << 20
    read = pq.read_table(file).sort_by("id")
    digest = [hashlib.sha256(b).hexdigest() for b in read.column("blob").to_pylist()]
    assert digest == [hashlib.sha256(b).hexdigest() for b in blobs]
    assert set(read.column("wmobs_rule").to_pylist()) == {"invalid_time"}


@pytest.mark.parametrize("judge", ["jvm", "python"])
def test_substreams_pass_every_scalar_type_through_exactly(
    spark: Any, tmp_path: Path, judge: str
) -> None:
    """The per-key judge hands every input column on unchanged: the JVM engine's (which passes
    times, dates and text as longs and bytes) and the Python engine's, every scalar type at its
    edges."""
    import datetime as dt

    import pyarrow as pa
    import pyarrow.parquet as pq

    typed = _typed_input(tmp_path / "typed")
    start = dt.datetime(2026, 1, 1, 12, tzinfo=dt.timezone.utc)
    times = [start + dt.timedelta(seconds=s) for s in range(typed.num_rows)]
    table = typed.set_column(0, "ts", pa.array(times, pa.timestamp("us", tz="UTC")))
    table = table.append_column("n", pa.array(range(table.num_rows), pa.int32()))
    (tmp_path / "in").mkdir()
    pq.write_table(table, tmp_path / "in" / "part-0.parquet")

    stream = spark.readStream.schema(TYPED_SCHEMA + ", n INT").parquet(str(tmp_path / "in"))
    policy = TimePolicy(
        event_time="ts", arrival_time=None, substream_by=["str", "day"], engine=judge
    )
    out = policy.apply(stream, checkpoint_location=str(tmp_path / "ckpt"))
    plan = out._jdf.queryExecution().analyzed().toString()
    assert ("FlatMapGroupsWithState" in plan) == (judge == "jvm")
    name = f"typed_substreams_{judge}"
    query = (
        out.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    got = to_arrow(spark.sql(f"SELECT * FROM {name} ORDER BY n"))
    columns = table.column_names
    assert got.column_names == [*columns, "system_timestamp"]
    expected = table.cast(got.select(columns).schema)  # the session's time zone
    # repr: NaN equals NaN there, and -0.0 differs from 0.0
    assert repr(got.select(columns).to_pylist()) == repr(expected.to_pylist())


@pytest.mark.parametrize("engine", ["jvm", "python"])
def test_a_dead_letter_directory_that_cannot_be_written_is_an_error_at_apply(
    spark: Any, tmp_path: Path, engine: str
) -> None:
    """A directory that cannot be created or written to (here one below ``/proc``) is a
    ``StorageError`` when the policy is applied, naming it and the cause, on both engines:
    not a failed micro-batch at the first dropped row."""
    if engine not in engines(spark):
        pytest.skip(f"Spark {spark.version} has no {engine} engine")
    stream = spark.readStream.schema("id INT, EventTime TIMESTAMP").json(str(tmp_path))
    policy = TimePolicy(arrival_time=None, engine=engine)
    with pytest.raises(wmobs.StorageError, match=r"dead_letter: .*cannot write to .*/proc/wmobs"):
        policy.apply(
            stream, checkpoint_location=str(tmp_path / "ckpt"), dead_letter="/proc/wmobs-dead"
        )
    # A directory that does not exist yet can be created: nothing to refuse, and no trace left.
    policy.apply(
        stream, checkpoint_location=str(tmp_path / "ckpt"), dead_letter=str(tmp_path / "a" / "b")
    )
    assert not (tmp_path / "a" / "b").exists()
