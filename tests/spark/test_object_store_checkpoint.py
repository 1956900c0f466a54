"""Spark's own checkpoint on object stores, against real servers on 127.0.0.1: ``s3a://``
(Hadoop's S3A connector and the AWS SDK from Maven Central, at PySpark's Hadoop version) on
moto's S3 server, and ``wasbs://`` (Hadoop's WASB driver, where PySpark's Hadoop still has it:
before 3.5) on Azurite. The global policy with dead letters and an idle timeout, and
substreams, on each engine. The JVM engine reads and writes beside Spark through Hadoop with the
session's configuration; the Python engine through fsspec with ``storage=`` options."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import wmobs
from wmobs import DeadLetter, Storage, TimePolicy
from wmobs.testing import iso

from ._streaming import engines, session_conf, wait_until, write_rows

pytestmark = pytest.mark.spark

SCHEMA = "id INT, EventTime TIMESTAMP, deviceId STRING"


@dataclass(frozen=True)
class Store:
    """An object store as a query sees it: a URI per bucket (or container), and its objects
    read back with the store's own SDK, not through Hadoop or wmobs."""

    scheme: str
    uri: Callable[[str], str]
    create: Callable[[str], Any]
    objects: Callable[[str], dict[str, bytes]]
    storage: Storage


@contextlib.contextmanager
def _session_conf(spark: Any, conf: dict[str, str]) -> Iterator[None]:
    """``conf`` on the session's Hadoop configuration, as a cluster sets it."""
    from tests.object_store import hadoop_aws_jars

    if not hadoop_aws_jars():  # fail, never skip: ./dev test fetches them
        pytest.fail("Hadoop's object-store connectors are missing from .tools/ (./dev gets them)")
    with session_conf(spark, conf):
        yield


@pytest.fixture
def s3a(spark: Any, s3_server: Any) -> Iterator[Any]:
    """The session's Hadoop configured for the server."""
    from tests.object_store import s3a_conf

    with _session_conf(spark, s3a_conf(s3_server)):
        yield s3_server


@pytest.fixture(scope="module")
def wasb_azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Azurite where Hadoop's WASB driver looks for Azure's storage emulator."""
    from tests.object_store import AZURITE, WASB_EMULATOR_PORT, start_azurite

    if not AZURITE.exists():  # fail, never skip: ./dev installs it
        pytest.fail(f"Azurite is not installed at {AZURITE} (./dev installs it with npm)")
    with (
        contextlib.suppress(OSError),
        socket.create_connection(("127.0.0.1", WASB_EMULATOR_PORT), timeout=1),
    ):
        pytest.fail(
            f"127.0.0.1:{WASB_EMULATOR_PORT} is taken: Hadoop's WASB driver reaches Azure's "
            "storage emulator there and nowhere else"
        )
    server = start_azurite(tmp_path_factory.mktemp("wasb"), port=WASB_EMULATOR_PORT)
    yield server
    server.process.terminate()
    server.process.wait(timeout=30)


def _stores() -> list[str]:
    from tests.object_store import hadoop_has_wasb

    return ["s3a", "wasbs"] if hadoop_has_wasb() else ["s3a"]


@pytest.fixture(params=_stores())
def store(request: pytest.FixtureRequest, spark: Any) -> Iterator[Store]:
    """Each object store this Spark's Hadoop reaches, the session configured for it."""
    from tests.object_store import ACCOUNT, wasb_conf

    if request.param == "s3a":
        server = request.getfixturevalue("s3a")
        yield Store(
            "s3a", lambda b: f"s3a://{b}", server.create_bucket, server.objects, server.storage
        )
        return
    azure = request.getfixturevalue("wasb_azurite")
    with _session_conf(spark, wasb_conf()):
        yield Store(
            "wasbs",
            lambda c: f"wasbs://{c}@{ACCOUNT}.blob.core.windows.net",
            azure.create_container,
            azure.blobs,
            azure.storage,
        )


@contextlib.contextmanager
def running(query: Any, store: Store) -> Iterator[Any]:
    """``query`` until the block ends, then stopped; it must not have failed before ``stop()``,
    nor because of it, with the two exceptions :func:`_stop_taken_for_failure` names."""
    try:
        yield query
        assert query.isActive, str(query.exception())  # it failed while the block ran
    finally:
        query.stop()
    error = query._jsq.exception()
    if error.isDefined() and not _stop_taken_for_failure(store, error.get()):
        pytest.fail(f"stop() ended the query as failed: {query.exception()}")


def _stop_taken_for_failure(store: Store, error: Any) -> bool:
    """Whether ``error`` is a ``stop()`` interrupting a write of Spark's own checkpoint that the
    connector turns into something Spark does not take for a stop (docs/guide/deploying.md):
    WASB wraps the ``InterruptedException`` in an ``IOException``; Hadoop 3.3's S3A (Spark 3.5)
    swallows it in the object's upload ("Interrupted object upload", HADOOP-19221, fixed in
    3.4.1), so Spark renames a temporary file that was never written: FileNotFoundException."""
    from pyspark import SparkContext

    from tests.object_store import hadoop_version

    causes, cause = [], error
    while cause is not None:
        causes.append(cause.getClass().getName())
        cause = cause.getCause()
    if store.scheme == "wasbs":
        return causes[-1] == "java.lang.InterruptedException"
    version = tuple(int(p) for p in (hadoop_version() or "0").split(".")[:3])
    if store.scheme != "s3a" or version >= (3, 4, 1):
        return False
    jvm: Any = SparkContext._jvm  # set while a context is active
    trace = jvm.org.apache.spark.util.Utils.exceptionString(error)
    return causes[-1] == "java.io.FileNotFoundException" and (
        "RenameBasedFSDataOutputStream.close" in trace
    )


@pytest.mark.parametrize("engine", ["jvm", "python"])
def test_the_policies_with_the_checkpoint_on_an_object_store(
    spark: Any, store: Store, tmp_path: Path, engine: str
) -> None:
    """On each engine and object store, a query whose checkpoint is there: the global policy
    (an early row dropped and dead-lettered to the store, a late one adjusted) with an idle
    timeout that closes the quiet window, then substreams in a query of their own, restarted
    once from the checkpoint (each key's state in the bucket, next to Spark's own)."""
    from pyspark.sql import functions as F

    if engine not in engines(spark):
        pytest.skip(f"Spark {spark.version} has no Python engine")
    bucket = f"wmobs-ckpt-{engine}"
    store.create(bucket)
    storage = store.storage if engine == "python" else None
    now = time.time()
    window = float(int(now) // 3 * 3)
    rows = [
        {"id": 1, "EventTime": iso(max(window, now - 0.2)), "deviceId": "A"},
        {"id": 2, "EventTime": iso(now + 3600), "deviceId": "A"},  # early: dropped
        {"id": 3, "EventTime": iso(max(window, now - 0.1)), "deviceId": "B"},
    ]
    source = tmp_path / f"in-{engine}"
    write_rows(source, "rows", rows)
    checkpoint = f"{store.uri(bucket)}/checkpoints/global"
    dead = f"{store.uri(bucket)}/dead"
    policy = TimePolicy(
        arrival_time=None,
        late_arrival="10 minutes",
        idle_timeout="1 second",
        name=f"{store.scheme}_{engine}",
        engine=engine,
    )
    stream = spark.readStream.schema(SCHEMA).json(str(source))
    judged = policy.apply(
        stream,
        checkpoint_location=checkpoint,
        dead_letter=DeadLetter(dead),
        storage=storage,
    )
    name = f"{store.scheme}_global_{engine}"
    with wmobs.attach(spark) as monitor:
        query = (
            judged.groupBy(F.window("system_timestamp", "3 seconds"))
            .count()
            .writeStream.queryName(name)
            .format("memory")
            .outputMode("append")
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        with running(query, store):
            wait_until(
                lambda n=name: spark.sql(f"SELECT * FROM {n}").count() > 0,  # type: ignore[misc]
                timeout=120,
                what="the quiet window, closed by the idle timeout",
            )
            counted = spark.sql(f"SELECT sum(count) FROM {name}").first()[0]
            wait_until(
                lambda n=name: (
                    (s := monitor.snapshot(n)) is not None  # type: ignore[misc]
                    and (p := s.policy(policy.state_name)) is not None
                    and p.dead_letter_rows == 1
                )
            )
    assert counted == 2, engine  # the two on-time rows, in their window
    objects = store.objects(bucket)
    assert any(k.startswith("checkpoints/global/offsets/") for k in objects)  # Spark's
    dead_files = [k for k in objects if k.startswith("dead/") and k.endswith(".parquet")]
    assert len(dead_files) == 1, objects.keys()

    # Substreams: the per-key state in the bucket, carried over a restart.
    keyed = TimePolicy(
        arrival_time=None,
        late_arrival="1 hour",
        substream_by=["deviceId"],
        name=f"{store.scheme}_keys_{engine}",
        engine=engine,
    )
    keyed_source = tmp_path / f"keys-{engine}"
    key_checkpoint = f"{store.uri(bucket)}/checkpoints/keys"
    base = now - 600

    kept = tmp_path / f"kept-{engine}"  # a file sink: one that restarts

    def run_keys(files: list[tuple[str, list[dict[str, Any]]]], query_name: str) -> Any:
        for file, batch in files:
            write_rows(keyed_source, file, batch)
        stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
        out = keyed.apply(
            stream.json(str(keyed_source)),
            checkpoint_location=key_checkpoint,
            storage=storage,
        )
        query = (
            out.select("id", F.unix_seconds("system_timestamp").alias("s"))
            .writeStream.queryName(query_name)
            .format("parquet")
            .option("checkpointLocation", key_checkpoint)
            .trigger(processingTime="100 milliseconds")
            .start(str(kept))
        )
        with running(query, store):
            query.processAllAvailable()
        return {r.id: r.s for r in spark.read.parquet(str(kept)).collect()}

    first = run_keys(
        [("1", [{"id": 1, "EventTime": iso(base + 100), "deviceId": "A"},
                {"id": 2, "EventTime": iso(base), "deviceId": "B"}])],
        f"{store.scheme}_keys_a_{engine}",
    )  # fmt: skip
    second = run_keys(
        [("2", [{"id": 3, "EventTime": iso(base + 50), "deviceId": "A"},
                {"id": 4, "EventTime": iso(base + 1), "deviceId": "B"}])],
        f"{store.scheme}_keys_b_{engine}",
    )  # fmt: skip
    assert first == {1: int(base + 100), 2: int(base)}
    # After the restart, 3 is behind A's maximum from before it: adjusted up to it.
    assert second == first | {3: int(base + 100), 4: int(base + 1)}, engine
    # The per-key state: in Spark's state store (JVM engine), or wmobs' files (Python engine).
    objects = store.objects(bucket)
    folder = "checkpoints/keys/state/" if engine == "jvm" else "checkpoints/keys/wmobs/substreams/"
    assert any(k.startswith(folder) for k in objects)
    if engine == "jvm":
        assert not [k for k in objects if "/wmobs/substreams/" in k]


def test_spark_checkpoint_on_wasbs_is_not_to_be_had_on_hadoop_3_5(
    spark: Any, tmp_path: Path
) -> None:
    """What fails, so that the docs can say what is untested: Hadoop 3.5 (Spark 4.2 and 4.3)
    removed the WASB driver (``hadoop-azure`` 3.5 has no ``Wasbs`` class; its file system says
    "WASB Driver ... is no longer supported"), and ABFS needs Azure's Data Lake endpoint,
    which Azurite does not serve. Spark's checkpoint on Azure is therefore not run here; wmobs'
    own files on Azure (the Python engine's, through adlfs) are, against Azurite
    (``test_storage``, ``test_deadletter_spark``)."""
    from tests.object_store import hadoop_version

    if not (hadoop_version() or "").startswith("3.5"):
        pytest.skip(f"Hadoop {hadoop_version()} still has the WASB driver")
    stream = spark.readStream.format("rate").load()
    checkpoint = "wasbs://c@devstoreaccount1.blob.core.windows.net/ckpt"
    with pytest.raises(Exception, match=r"Class org\.apache\.hadoop\.fs\.azure\.Wasbs not found"):
        stream.writeStream.format("noop").option("checkpointLocation", checkpoint).start()


def test_a_missing_bucket_fails_the_query_naming_it(spark: Any, s3a: Any, tmp_path: Path) -> None:
    """On the JVM engine the checkpoint is Hadoop's: a bucket that does not exist fails the
    query as it starts, and the error names the bucket; nothing runs, nothing is lost."""
    (tmp_path / "in").mkdir()
    stream = spark.readStream.schema(SCHEMA).json(str(tmp_path / "in"))
    checkpoint = "s3a://wmobs-no-such-bucket/ckpt"
    judged = TimePolicy(arrival_time=None, engine="jvm").apply(
        stream, checkpoint_location=checkpoint
    )
    with pytest.raises(Exception, match="wmobs-no-such-bucket"):
        query = _until_caught_up(judged, checkpoint)
        assert query.exception() is not None
        raise AssertionError(str(query.exception()))


def _until_caught_up(judged: Any, checkpoint: str) -> Any:
    """``judged`` to the ``noop`` sink, run until it has read all its input (or failed)."""
    query = (
        judged.writeStream.format("noop")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    return query


def test_a_dead_letter_bucket_that_refuses_writes_is_an_error_at_apply(
    spark: Any, s3a: Any, read_only_bucket: Any, tmp_path: Path
) -> None:
    """On the JVM engine, through Hadoop: a bucket whose credentials (per-bucket settings, as a
    cluster would have them) may list and read it but not write to it passes Hadoop's read and
    fails the write of ``apply``'s probe, a StorageError naming ``dead_letter`` and the
    refusal, not a failure at the first dropped row."""
    from tests.object_store import hadoop_version
    from wmobs import StorageError

    if (hadoop_version() or "").startswith("3.3."):
        pytest.skip(
            "moto's access control refuses every request of Hadoop 3.3's AWS SDK v1 (403 on the "
            "first HEAD, whatever the signer): a read-only user cannot be told from none there"
        )
    (tmp_path / "in").mkdir()
    stream = spark.readStream.schema(SCHEMA).json(str(tmp_path / "in"))
    read_only = f"s3a://{read_only_bucket.bucket}/dead"
    refused = rf"dead_letter: cannot write to .* {read_only} .*Access Denied"
    with (
        _session_conf(spark, {"fs.s3a.impl.disable.cache": "true"} | read_only_bucket.s3a_conf()),
        pytest.raises(StorageError, match=refused),
    ):
        TimePolicy(arrival_time=None, engine="jvm", name="read_only").apply(
            stream, checkpoint_location=str(tmp_path / "ckpt"), dead_letter=DeadLetter(read_only)
        )


def test_dead_letters_hadoop_cannot_write_fail_early_and_lose_nothing(
    spark: Any, s3a: Any, tmp_path: Path
) -> None:
    """On the JVM engine, dead letters go through Hadoop. A bucket without credentials (a
    per-bucket setting, as a cluster would have it) is a StorageError naming ``dead_letter``
    at ``apply``, as on the Python engine, not a failure at the first dropped row. A bucket
    that goes away after ``apply`` fails the micro-batch with an error naming the directory,
    and the batch is not committed; once the bucket is back, the restarted query replays it and
    the dead letter is written. Nothing is lost."""
    from wmobs import StorageError

    good, bare, gone = "wmobs-ckpt-creds", "wmobs-dead-nocreds", "wmobs-dead-gone"
    for bucket in (good, bare, gone):
        s3a.create_bucket(bucket)
    source = tmp_path / "in"
    write_rows(source, "rows", [{"id": 1, "EventTime": None, "deviceId": "A"}])  # dropped
    checkpoint = f"s3a://{good}/checkpoints/dead-letters"

    def judged(dead: str) -> Any:
        return TimePolicy(arrival_time=None, engine="jvm", name="unwritable").apply(
            spark.readStream.schema(SCHEMA).json(str(source)),
            checkpoint_location=checkpoint,
            dead_letter=DeadLetter(dead),
        )

    # Hadoop caches a file system per bucket in the JVM: this one must not outlive the test.
    without = {f"fs.s3a.bucket.{bare}.{k}": "" for k in ("access.key", "secret.key")}
    cause = rf"dead_letter: cannot reach .* s3a://{bare}/dead .*No AWS credentials"
    with (
        _session_conf(spark, {"fs.s3a.impl.disable.cache": "true"} | without),
        pytest.raises(StorageError, match=cause),
    ):
        judged(f"s3a://{bare}/dead")

    unwritable = judged(f"s3a://{gone}/dead")
    s3a.client().delete_bucket(Bucket=gone)
    with pytest.raises(Exception, match=rf"dead letters of batch 0 to s3a://{gone}/dead"):
        _until_caught_up(unwritable, checkpoint)
    keys = s3a.objects(good)
    assert not any(key.endswith("/commits/0") for key in keys), f"batch 0 committed: {sorted(keys)}"
    s3a.create_bucket(gone)
    replayed = _until_caught_up(judged(f"s3a://{gone}/dead"), checkpoint)
    assert replayed.exception() is None
    written = [key for key in s3a.objects(gone) if key.endswith(".parquet")]
    assert len(written) == 1 and "batch_id=0/" in written[0], written
    assert any(key.endswith("/commits/0") for key in s3a.objects(good))  # committed now
