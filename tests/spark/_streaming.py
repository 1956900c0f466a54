"""Test helpers for real streaming queries: deterministic file input, waiting on events."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from wmobs import BatchSummary, QuerySnapshot


def user_env(first_on_path: Path) -> dict[str, str]:
    """A user's shell for a command a docs page or an example gives: ``first_on_path`` first on
    the ``PATH``, this Python for Spark's workers, no ``PYTHONPATH`` (wmobs as installed) and no
    ``SPARK_HOME`` (PySpark's own Spark)."""
    import sys

    env = {
        **os.environ,
        "PATH": f"{first_on_path}{os.pathsep}{os.environ['PATH']}",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    env.pop("PYTHONPATH", None)
    env.pop("SPARK_HOME", None)
    return env


def write_rows(directory: Path, name: str, rows: list[dict[str, Any]]) -> None:
    """One JSON-lines file, appearing atomically; each later file gets a later mtime (the
    order in which Spark's file source reads them)."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}.tmp"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    target = directory / f"{name}.json"
    os.replace(tmp, target)
    mtime = time.time() - 3600 + len(list(directory.glob("*.json")))
    os.utime(target, (mtime, mtime))


def write_events(directory: Path, index: int, event_times: Iterable[float]) -> int:
    """One file of ``{"event_time", "value"}`` rows (``part-<index>``); how many."""
    rows = [
        {"event_time": datetime.fromtimestamp(t, tz=timezone.utc).isoformat(), "value": i}
        for i, t in enumerate(event_times)
    ]
    write_rows(directory, f"part-{index:05d}", rows)
    return len(rows)


def windowed_query(
    spark: Any, source: Path, checkpoint: Path, name: str, sink: str = "memory"
) -> Any:
    """A watermarked 5-second windowed count over ``source``, appending to a memory sink."""
    from pyspark.sql import functions as F

    events = spark.readStream.schema("event_time TIMESTAMP, value LONG").json(str(source))
    counts = (
        events.withWatermark("event_time", "10 seconds")
        .groupBy(F.window("event_time", "5 seconds"))
        .agg(F.count("*").alias("n"))
    )
    return (
        counts.writeStream.queryName(name)
        .format(sink)
        .outputMode("append")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


class ProgressWaiter:
    """An ``on_progress`` hook that lets a test wait for the listener to see a batch."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.batches: dict[str, int] = {}

    def __call__(self, snap: QuerySnapshot, batch: BatchSummary) -> None:
        with self._cond:
            self.batches[snap.label] = batch.batch_id
            self._cond.notify_all()

    def wait_for_batch(self, label: str, batch_id: int, timeout: float = 60.0) -> None:
        with self._cond:
            ok = self._cond.wait_for(lambda: self.batches.get(label, -1) >= batch_id, timeout)
        assert ok, f"listener never saw batch {batch_id} of {label}: {self.batches}"


def engines(spark: Any) -> list[str]:
    """The engines a time policy can run on in ``spark``'s Spark: the Python engine needs
    Python data sources (Spark >= 4.0)."""
    return ["jvm", "python"] if int(spark.version.split(".")[0]) >= 4 else ["jvm"]


def start_kept(
    judged: Any,
    name: str,
    checkpoint: str | None,
    *,
    parquet: str | None = None,
    trigger: dict[str, Any] | None = None,
) -> Any:
    """The worked example's output of a policy: each kept row's ``id`` and its system time in
    seconds (``system``), to the memory sink ``name`` (or Parquet files at ``parquet``),
    every 100 ms unless ``trigger`` says otherwise; without ``checkpoint``, below the session's
    checkpoint root."""
    from pyspark.sql import functions as F

    writer = (
        judged.select("id", F.unix_seconds("system_timestamp").alias("system"))
        .writeStream.queryName(name)
        .trigger(**(trigger or {"processingTime": "100 milliseconds"}))
    )
    if checkpoint is not None:
        writer = writer.option("checkpointLocation", checkpoint)
    if parquet is None:
        return writer.format("memory").start()
    return writer.format("parquet").start(parquet)


def stopped(monitor: Any, query: str) -> int:
    """How many runs of ``query`` ``monitor`` has heard stop (a query's events reach the
    listener in order, its end last; a run's end may still be on its way when the next run of
    the same query starts, so a test that restarts waits for a count, not for ``active``)."""
    snap = monitor.snapshot(query)
    return 0 if snap is None else snap.terminations["stopped"]


def heard(monitor: Any, query: str, batch: int) -> bool:
    """Whether ``monitor`` has heard micro-batch ``batch`` of ``query`` (or a later one)."""
    snap = monitor.snapshot(query)
    return snap is not None and snap.batch_id is not None and snap.batch_id >= batch


def firings(monitor: Any, query: str, policy: str | None = None) -> int:
    """The idle-timeout firings ``monitor`` has heard of ``query``'s ``policy`` (its only one
    by default)."""
    snap = monitor.snapshot(query)
    counts = None if snap is None else snap.policy(policy)
    return (counts.idle_timeout_firings or 0) if counts is not None else 0


def wait_until(predicate: Callable[[], bool], timeout: float = 60.0, what: str = "") -> None:
    """Poll ``predicate`` for an asynchronous listener event (termination) to arrive."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what or predicate}"
        time.sleep(0.05)


def run_job(module: str, timeout: float = 900) -> dict[str, Any]:
    """Run ``python -m <module> [ARGS]`` from the repository root (a child job that needs a Spark
    session of its own) and return what it printed as ``RESULT <json>``."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", *module.split()],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-5000:]
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    return result


ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
_PROVIDER = "spark.sql.streaming.stateStore.providerClass"


@contextmanager
def session_conf(spark: Any, conf: dict[str, str]) -> Iterator[None]:
    """``conf`` set on the session while the block runs, each setting as it was after."""
    before = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def state_store(spark: Any, provider: str | None) -> Any:
    """The session's state store provider set to ``provider`` (None: as it is) while the block
    runs."""
    return session_conf(spark, {} if provider is None else {_PROVIDER: provider})


def keyed_operator_expected(spark: Any) -> str:
    """The operator that keeps the JVM engine's substreams in this session:
    ``transformWithState`` on Spark 4 with RocksDB, ``flatMapGroupsWithState`` otherwise."""
    rocksdb = spark.conf.get(_PROVIDER, "").endswith(".RocksDBStateStoreProvider")
    spark4 = int(spark.version.split(".")[0]) >= 4
    return "transformWithStateExec" if rocksdb and spark4 else "flatMapGroupsWithState"
