"""The storage layer against real object-store servers on 127.0.0.1, and its clear errors.

No JVM: these run what the executors run (state versions, dead-letter files, the offsets log),
through the same layer, against moto's standalone S3 server and Azurite's blob service (started
by the ``s3_server`` and ``azure_server`` fixtures) and local paths.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from wmobs import DeadLetter, Storage, StorageError
from wmobs.policy._python._checkpoint import read_batch_times
from wmobs.policy._python._substream_state import StateStore

from ._substream_stage import SubstreamStage


def _python_with_aws_env(code: str, home: Path, **aws: str) -> subprocess.CompletedProcess[str]:
    """``python -c code`` with only the ``AWS_*`` variables given (none of this machine's) and
    ``home`` as its home (so no ``~/.aws`` either): credentials from the environment, as an
    executor finds them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= {"HOME": str(home), **aws}
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def _bucket(s3_server: Any) -> str:
    return s3_server.create_bucket(f"wmobs-{uuid.uuid4().hex[:12]}")


@pytest.mark.parametrize(
    ("uri", "path", "object_store"),
    [
        ("s3a://bucket/chk/q1", "bucket/chk/q1", True),
        ("s3://bucket/chk/", "bucket/chk", True),
        ("s3n://bucket/chk", "bucket/chk", True),
        ("/tmp/chk", "/tmp/chk", False),
        ("file:/tmp/chk", "/tmp/chk", False),
        ("file:///tmp/chk", "/tmp/chk", False),
        ("dbfs:/chk/q1", "/dbfs/chk/q1", False),
        ("dbfs:/Volumes/main/default/v/chk", "/Volumes/main/default/v/chk", False),
        ("/Volumes/main/default/v/chk", "/Volumes/main/default/v/chk", False),
    ],
)
def test_uris_as_spark_users_write_them(uri: str, path: str, object_store: bool) -> None:
    where = Storage().resolve(uri)
    assert (where.path, where.object_store) == (path, object_store)


def test_azure_uris_name_the_container_and_the_account() -> None:
    pytest.importorskip("adlfs")
    for uri in (
        "abfss://events@acct.dfs.core.windows.net/chk/q1",
        "wasbs://events@acct.blob.core.windows.net/chk/q1",
    ):
        where = Storage(options={"account_key": "a2V5"}).resolve(uri)
        assert where.path == "events/chk/q1" and where.anchor == "events"
        assert where.filesystem.account_name == "acct"


def test_an_unknown_scheme_is_named() -> None:
    with pytest.raises(StorageError, match=r"checkpoint_location: .*scheme 'foo'"):
        Storage().check("foo://bucket/chk", "checkpoint_location")


def test_a_missing_extra_names_the_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gcsfs", None)  # as if wmobs[gcs] were not installed
    with pytest.raises(StorageError, match=r"dead_letter: .*pip install 'wmobs\[gcs\]'"):
        Storage().check("gs://bucket/dead", "dead_letter")


def test_a_missing_bucket_is_named(s3_server: Any) -> None:
    with pytest.raises(StorageError, match="'no-such-bucket' does not exist"):
        s3_server.storage.check("s3a://no-such-bucket/chk", "checkpoint_location")


def test_a_bucket_that_refuses_writes_fails_the_write_check_naming_it(
    read_only_bucket: Any,
) -> None:
    """Readable is not writable: a user who may list and read a bucket, not write to it, passes
    ``check`` and fails ``check_writable`` (what ``apply`` asks of a dead-letter directory) with
    the argument, the URI and the store's refusal; nothing is left in the bucket."""
    storage, uri = read_only_bucket.storage, f"s3a://{read_only_bucket.bucket}/dead"
    storage.check(uri, "dead_letter")
    with pytest.raises(StorageError, match=rf"dead_letter: cannot write to {uri} .*Access Denied"):
        storage.check_writable(uri, "dead_letter")
    with pytest.raises(StorageError, match=rf"dead_letter: cannot write to {uri}"):
        DeadLetter(uri, storage=storage).check()
    assert list(storage.entries(f"s3a://{read_only_bucket.bucket}")) == []


def test_no_credentials_is_a_clear_error(s3_server: Any, tmp_path: Path) -> None:
    """Credentials from the environment: none there (and no config file) is said at once."""
    code = (
        "from wmobs import Storage, StorageError\n"
        "try:\n"
        f"    Storage(options={{'endpoint_url': {s3_server.endpoint!r}}}).check("
        "'s3a://b/chk', 'checkpoint_location')\n"
        "except StorageError as exc:\n"
        "    print('ERROR', exc)\n"
    )
    done = _python_with_aws_env(code, tmp_path, AWS_EC2_METADATA_DISABLED="true")
    assert "ERROR checkpoint_location: cannot read s3a://b/chk" in done.stdout, done.stderr
    assert "credentials" in done.stdout.lower()


def test_credentials_and_endpoint_from_the_environment(s3_server: Any, tmp_path: Path) -> None:
    bucket = _bucket(s3_server)
    code = (
        "from wmobs import Storage\n"
        f"Storage().write_once('s3a://{bucket}/from-env/x', b'env')\n"
        f"print(Storage().read_text('s3://{bucket}/from-env/x'))\n"
    )
    done = _python_with_aws_env(
        code,
        tmp_path,
        AWS_ENDPOINT_URL=s3_server.endpoint,
        AWS_ACCESS_KEY_ID="wmobs-test-key",
        AWS_SECRET_ACCESS_KEY="wmobs-test-secret",
    )
    assert done.stdout.strip() == "env", done.stderr
    assert s3_server.objects(bucket) == {"from-env/x": b"env"}


def test_write_once_is_one_whole_object_and_a_retry_replaces_it(s3_server: Any) -> None:
    bucket = _bucket(s3_server)
    storage = s3_server.storage
    storage.write_once(f"s3a://{bucket}/dl/batch_id=3/part-00001.parquet", b"first attempt")
    storage.write_once(f"s3a://{bucket}/dl/batch_id=3/part-00001.parquet", b"retry")
    # One object, whole, no temporary names left behind (there is no rename on S3).
    assert s3_server.objects(bucket) == {"dl/batch_id=3/part-00001.parquet": b"retry"}
    assert [e.name for e in storage.files(f"s3a://{bucket}/dl/batch_id=3")] == [
        "part-00001.parquet"
    ]
    assert [e.name for e in storage.entries(f"s3a://{bucket}/dl") if e.folder] == ["batch_id=3"]
    storage.delete(f"s3a://{bucket}/dl/batch_id=3/part-00001.parquet")
    storage.delete(f"s3a://{bucket}/dl/batch_id=3/part-00001.parquet")  # gone is fine
    assert s3_server.objects(bucket) == {}


def test_substream_state_versions_on_s3(s3_server: Any) -> None:
    """The real substream stage with its state in s3a://: versions by micro-batch, a retried
    batch judged as its first attempt, old versions pruned, read back from the bucket."""
    bucket = _bucket(s3_server)
    stage = SubstreamStage(f"s3a://{bucket}/chk", storage=s3_server.storage)
    stage.feed([(1, 500), (2, 900)])
    assert [row["ts"] for row in stage.feed([(1, 100)])] == [500]  # batch 1: out of order
    stage.batch -= 1  # batch 1 again (a retried task): the same verdict
    assert [row["ts"] for row in stage.feed([(1, 100)])] == [500]
    assert [row["ts"] for row in stage.feed([(1, 800), (2, 850)])] == [800, 900]
    assert stage.store.stored_keys() == 2
    # One file per task and batch, named by its buckets (keys 1 and 2: bits 0x6).
    assert sorted(s3_server.objects(bucket, "chk/state/")) == [
        "chk/state/0-0000000000000006.arrow",
        "chk/state/1-0000000000000002.arrow",  # the retry replaced the first attempt's
        "chk/state/2-0000000000000006.arrow",
    ]
    # Read back whole by a new store (another executor), through the same layer; read for
    # batch 3, the files batch 2 read (kept for a retry of 2) are gone.
    again = StateStore(f"s3a://{bucket}/chk/state", s3_server.storage).load([1, 2], 3)
    assert [again[1].max_us.tolist(), again[2].max_us.tolist()] == [[800], [900]]
    assert sorted(s3_server.objects(bucket, "chk/state/")) == ["chk/state/2-0000000000000006.arrow"]


def test_the_offsets_log_is_read_from_s3(s3_server: Any) -> None:
    bucket = _bucket(s3_server)
    client = s3_server.client()
    client.put_object(Bucket=bucket, Key="chk/metadata", Body=b'{"id":"q-1"}')
    client.put_object(
        Bucket=bucket,
        Key="chk/offsets/4",
        Body=b'v1\n{"batchWatermarkMs":1000,"batchTimestampMs":2000}\n{"logOffset":3}\n',
    )
    times = read_batch_times(f"s3a://{bucket}/chk", 4, "q-1", s3_server.storage)
    assert (times.watermark_ms, times.timestamp_ms) == (1000, 2000)
    with pytest.raises(RuntimeError, match="checkpoint of query q-1, not of q-2"):
        read_batch_times(f"s3a://{bucket}/chk", 4, "q-2", s3_server.storage)


def test_local_writes_are_renamed_into_place(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "file"
    Storage().write_once(str(target), b"whole")
    assert target.read_bytes() == b"whole"
    assert sorted(p.name for p in target.parent.iterdir()) == ["file"]  # no temporary left


def test_write_once_and_state_versions_on_azure(azure_server: Any) -> None:
    """``abfss://`` and ``wasbs://`` on Azurite: one whole blob per write, a retry replaces it,
    substream state versions read back by another store."""
    container = azure_server.create_container(f"wmobs-{uuid.uuid4().hex[:12]}")
    storage = azure_server.storage
    abfss = f"abfss://{container}@devstoreaccount1.dfs.core.windows.net"
    storage.write_once(f"{abfss}/dl/batch_id=3/part-00001.json", b"first attempt")
    storage.write_once(f"{abfss}/dl/batch_id=3/part-00001.json", b"retry")
    assert azure_server.blobs(container) == {"dl/batch_id=3/part-00001.json": b"retry"}
    wasbs = f"wasbs://{container}@devstoreaccount1.blob.core.windows.net"
    assert storage.read_text(f"{wasbs}/dl/batch_id=3/part-00001.json") == "retry"
    assert [e.name for e in storage.entries(f"{wasbs}/dl") if e.folder] == ["batch_id=3"]

    stage = SubstreamStage(f"{abfss}/chk", storage=storage)
    stage.feed([(1, 500)])
    assert [row["ts"] for row in stage.feed([(1, 100)])] == [500]
    stage.batch -= 1  # a retried batch
    assert [row["ts"] for row in stage.feed([(1, 100)])] == [500]
    assert sorted(azure_server.blobs(container, "chk/")) == [
        "chk/state/0-0000000000000002.arrow",
        "chk/state/1-0000000000000002.arrow",
    ]
    again = StateStore(f"{wasbs}/chk/state", storage).load([1], 2)
    assert again[1].max_us.tolist() == [500]
    assert sorted(azure_server.blobs(container, "chk/")) == ["chk/state/1-0000000000000002.arrow"]


def test_a_missing_container_is_named(azure_server: Any) -> None:
    with pytest.raises(StorageError, match="container 'no-such-container' does not exist"):
        azure_server.storage.check(
            "abfss://no-such-container@devstoreaccount1.dfs.core.windows.net/chk", "dead_letter"
        )


def test_a_named_querys_checkpoint_is_found_below_the_session_root_as_the_driver_saw_it() -> None:
    """A task finds a named query's checkpoint below the session's root; a relative root is
    resolved against the driver's working directory (``relative_to``), as Spark resolved it
    there, not against the task's own (an executor's, on a cluster)."""
    from wmobs.policy._python._checkpoint import CheckpointNotFoundError, resolve_checkpoint

    def props(root: str, name: str = "clicks") -> dict[str, str]:
        return {
            "spark.sql.streaming.checkpointLocation": root,
            "spark.job.description": f"{name}\nid = 1\nrunId = 2\nbatch = 3",
        }

    here = "file:/home/driver/job"
    assert resolve_checkpoint("s3a://b/ckpt", props("roots"), here) == "s3a://b/ckpt"
    assert resolve_checkpoint("", props("roots/"), here) == f"{here}/roots/clicks"
    assert resolve_checkpoint("", props("roots"), "") == "roots/clicks"  # as it was given
    for root in ("/data/roots", "s3a://b/roots", "dbfs:/roots"):
        assert resolve_checkpoint("", props(root + "/"), here) == f"{root}/clicks"
    for unnamed in (props("roots", name="id = 5"), props(""), {}):
        with pytest.raises(CheckpointNotFoundError, match="checkpoint_location"):
            resolve_checkpoint("", unnamed, here)
