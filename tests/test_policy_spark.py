"""Time policies on real Spark: DESIGN.md's worked example, row by row, and the exported counts."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import wmobs
from wmobs import TimePolicy
from wmobs.policy import ROCKSDB_PROVIDER

from ._streaming import wait_until

pytestmark = pytest.mark.spark

PROVIDER = "spark.sql.streaming.stateStore.providerClass"
SCHEMA = "id INT, EventTime TIMESTAMP, ArrivalTime TIMESTAMP, deviceId STRING"

# DESIGN.md §2: (#, event time, arrival time, device), in arrival order.
WORKED = [
    (1, "12:07", "12:07", "device1"),
    (2, "12:08", "12:08", "device2"),
    (3, "12:17", "12:11", "device1"),
    (4, "12:08", "12:13", "device3"),
    (5, "12:19", "12:16", "device1"),
    (6, "12:12", "12:17", "device3"),
    (7, "12:17", "12:18", "device2"),
    (8, "12:20", "12:19", "device2"),
    (9, "12:16", "12:21", "device3"),
    (10, "12:23", "12:22", "device2"),
    (11, "12:22", "12:24", "device2"),
    (12, "12:21", "12:27", "device3"),
]
# Worked out from the rules (early 5 min drop, late 5 min adjust, out of order 2 min adjust):
# id -> system timestamp, or None when dropped.
GLOBAL_EXPECTED = {
    1: "12:07", 2: "12:08", 3: None, 4: "12:08", 5: "12:19",
    6: "12:17",   # behind the watermark 12:19 - 2 = 12:17: adjusted to it
    7: "12:17",   # equal to the watermark (12:17) is not behind it
    8: "12:20",
    9: "12:18",   # behind the watermark 12:20 - 2 = 12:18: adjusted
    10: "12:23",
    11: "12:22",  # the watermark is 12:21
    12: "12:22",  # 6 min late: adjusted to 12:27 - 5 = 12:22, above the watermark
}  # fmt: skip
# With substreams by device every device has its own watermark: nothing is out of order.
SUBSTREAM_EXPECTED = {
    **GLOBAL_EXPECTED,
    6: "12:12",   # device3's watermark is 12:08 - 2 = 12:06
    9: "12:16",   # device3's watermark is 12:12 - 2 = 12:10
}  # fmt: skip


def ts(hhmm: str) -> str:
    return f"2026-01-01T{hhmm}:00Z"


def epoch(hhmm: str) -> int:
    return int(datetime.fromisoformat(ts(hhmm).replace("Z", "+00:00")).timestamp())


def write_rows(directory: Path, name: str, rows: list[dict[str, Any]]) -> None:
    """One JSON-lines file; each later file gets a later mtime (the file source's order)."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}.tmp"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    target = directory / f"{name}.json"
    os.replace(tmp, target)
    mtime = time.time() - 3600 + len(list(directory.glob("*.json")))
    os.utime(target, (mtime, mtime))


def worked_rows() -> list[dict[str, Any]]:
    return [
        {"id": i, "EventTime": ts(e), "ArrivalTime": ts(a), "deviceId": d} for i, e, a, d in WORKED
    ]


@pytest.fixture
def rocksdb(spark: Any) -> Iterator[None]:
    previous = spark.conf.get(PROVIDER, None)
    spark.conf.set(PROVIDER, ROCKSDB_PROVIDER)
    yield
    if previous is None:
        spark.conf.unset(PROVIDER)
    else:
        spark.conf.set(PROVIDER, previous)


def run_policy(
    spark: Any,
    policy: TimePolicy,
    source: Path,
    work: Path,
    name: str,
    *,
    schema: str = SCHEMA,
    files_per_trigger: int = 1,
) -> tuple[dict[int, int | None], dict[tuple[str, str], int], Any]:
    """Run ``policy`` over ``source``: (id -> system seconds, policy counts, progress)."""
    from pyspark.sql import functions as F

    reader = InMemoryMetricReader()
    checkpoint = str(work / f"ckpt-{name}")
    with wmobs.attach(spark, meter_provider=MeterProvider(metric_readers=[reader])) as monitor:
        df = spark.readStream.schema(schema).option("maxFilesPerTrigger", files_per_trigger)
        out = policy.apply(df.json(str(source)), checkpoint_location=checkpoint)
        query = (
            out.select("id", F.unix_seconds("system_timestamp").alias("system"))
            .writeStream.queryName(name)
            .format("memory")
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="100 milliseconds")
            .start()
        )
        # Not availableNow: with a ProcessingTime operator in the plan it never stops.
        query.processAllAvailable()
        query.stop()
        assert query.exception() is None
        wait_until(lambda: (s := monitor.snapshot(name)) is not None and not s.active)
        snap = monitor.snapshot(name)
        assert snap is not None
        kept = {r.id: r.system for r in spark.sql(f"select * from {name}").collect()}
    return kept, dict(snap.policy_events), query.recentProgress


def expected_seconds(expected: dict[int, str | None]) -> dict[int, int]:
    return {i: epoch(t) for i, t in expected.items() if t is not None}


def test_worked_example_global_one_event_per_batch(spark: Any, tmp_path: Path) -> None:
    for row in worked_rows():
        write_rows(tmp_path / "in", f"event-{row['id']:02d}", [row])
    policy = TimePolicy(
        event_time="EventTime",
        arrival_time="ArrivalTime",
        early_arrival="5 minutes",
        late_arrival="5 minutes",
        out_of_order="2 minutes",
    )
    kept, counts, progress = run_policy(spark, policy, tmp_path / "in", tmp_path, "worked_global")
    assert len([p for p in progress if p["numInputRows"]]) == 12  # one event per micro-batch
    assert kept == expected_seconds(GLOBAL_EXPECTED)
    assert counts[("early_arrival", "dropped")] == 1
    assert counts[("out_of_order", "adjusted")] == 2
    assert counts[("late_arrival", "adjusted")] == 1
    others = {k: v for k, v in counts.items() if k not in {
        ("early_arrival", "dropped"), ("out_of_order", "adjusted"), ("late_arrival", "adjusted")
    }}  # fmt: skip
    assert set(others.values()) == {0}


def test_worked_example_substreams_in_one_batch(spark: Any, tmp_path: Path, rocksdb: None) -> None:
    rows = worked_rows()
    scrambled = rows[5:] + rows[:5]  # file order is not arrival order
    write_rows(tmp_path / "in", "all", scrambled)
    policy = TimePolicy(
        event_time="EventTime",
        arrival_time="ArrivalTime",
        late_arrival="5 minutes",
        out_of_order="2 minutes",
        substream_by=["deviceId"],
    )
    kept, counts, _ = run_policy(spark, policy, tmp_path / "in", tmp_path, "worked_substreams")
    assert kept == expected_seconds(SUBSTREAM_EXPECTED)
    assert counts[("early_arrival", "dropped")] == 1
    assert counts[("late_arrival", "adjusted")] == 1
    assert counts[("out_of_order", "adjusted")] == 0


def test_substreams_need_rocksdb(spark: Any, tmp_path: Path) -> None:
    previous = spark.conf.get(PROVIDER, None)
    spark.conf.unset(PROVIDER)
    try:
        df = spark.readStream.schema(SCHEMA).json(str(tmp_path))
        with pytest.raises(ValueError, match=r"RocksDBStateStoreProvider"):
            TimePolicy(substream_by=["deviceId"]).apply(df)
    finally:
        if previous is not None:
            spark.conf.set(PROVIDER, previous)
