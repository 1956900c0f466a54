"""Test helpers for real streaming queries: deterministic file input, waiting on events."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from wmobs import BatchSummary, QuerySnapshot


def write_events(directory: Path, index: int, event_times: Iterable[float]) -> int:
    """One JSON-lines file of ``{"event_time", "value"}`` rows, appearing atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps(
            {
                "event_time": datetime.fromtimestamp(t, tz=timezone.utc).isoformat(),
                "value": i,
            }
        )
        for i, t in enumerate(event_times)
    ]
    tmp = directory / f".part-{index:05d}.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, directory / f"part-{index:05d}.json")
    return len(lines)


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


def wait_until(predicate: Callable[[], bool], timeout: float = 60.0, what: str = "") -> None:
    """Poll ``predicate`` for an asynchronous listener event (termination) to arrive."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what or predicate}"
        time.sleep(0.05)
