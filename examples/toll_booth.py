"""Toll booths with time policies: late uploads, skewed clocks, garbage — nothing lost.

Each toll booth records EntryTime on its own clock and uploads in bursts; ArrivalTime is when
the broker received the record. Some booths' clocks run minutes ahead, some uploads arrive
late, a few records have no usable time. A TimePolicy judges every record, a dead-letter
directory keeps the dropped ones, and a 3-minute tumbling count per booth runs on what is left.

Run:  .venv/bin/python examples/toll_booth.py [--records 2000]
It prints what each policy did and checks that records in = records counted + dead letters.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.dataset as ds
import structlog

import wmobs
from wmobs import TimePolicy
from wmobs.testing import local_spark

START = datetime(2026, 3, 1, 8, 0, tzinfo=timezone.utc)


def generate(directory: Path, records: int, seed: int = 3) -> int:
    """Write the records as uploads: one JSON-lines file per upload, in arrival order."""
    rnd = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(records):
        arrival = START + timedelta(seconds=i * 0.5)
        entry = arrival - timedelta(seconds=rnd.uniform(0, 5))
        roll = rnd.random()
        if roll < 0.03:
            entry = arrival + timedelta(minutes=rnd.uniform(6, 30))  # clock far ahead
        elif roll < 0.08:
            entry = arrival - timedelta(minutes=rnd.uniform(2, 20))  # uploaded late
        elif roll < 0.20:
            entry = arrival - timedelta(seconds=rnd.uniform(5, 40))  # out of order
        text: str | None = entry.isoformat()
        if 0.20 <= roll < 0.205:
            text = None  # the booth sent no time
        elif 0.205 <= roll < 0.21:
            text = "garbage"
        rows.append(
            {
                "TollId": rnd.randint(1, 5),
                "LicensePlate": f"{rnd.choice('ABCDEFGH')}{rnd.randint(100, 999)}",
                "EntryTime": text,
                "ArrivalTime": arrival.isoformat(),
            }
        )
    per_upload = 100
    for n, first in enumerate(range(0, len(rows), per_upload)):
        path = directory / f"upload-{n:04d}.json"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows[first : first + per_upload]))
        mtime = time.time() - 3600 + n  # the file source reads uploads in this order
        os.utime(path, (mtime, mtime))
    return len(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000)
    args = parser.parse_args(argv)

    from pyspark.sql import functions as F

    # An application configures logging; wmobs only logs. Show info and above.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    work = Path(tempfile.mkdtemp(prefix="wmobs-tolls-"))
    records = generate(work / "uploads", args.records)
    spark = local_spark("wmobs-toll-booth")
    monitor = wmobs.attach(spark)
    policy = TimePolicy(
        event_time="EntryTime",  # ISO strings: unparseable ones become invalid_time
        arrival_time="ArrivalTime",
        early_arrival="5 minutes",
        late_arrival="1 minute",
        out_of_order="10 seconds",
        name="tolls",
    )
    checkpoint = str(work / "checkpoint")
    uploads = (
        spark.readStream.schema(
            "TollId INT, LicensePlate STRING, EntryTime STRING, ArrivalTime TIMESTAMP"
        )
        .option("maxFilesPerTrigger", 1)
        .json(str(work / "uploads"))
    )
    judged = policy.apply(uploads, checkpoint_location=checkpoint, dead_letter=str(work / "dead"))
    counts = (
        judged.groupBy(F.window("system_timestamp", "3 minutes"), "TollId")
        .agg(F.count("*").alias("cars"))
        .writeStream.queryName("tolls")
        .outputMode("update")
        .format("memory")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    counts.awaitTermination()
    deadline = time.monotonic() + 60
    while (snap := monitor.snapshot("tolls")) is None or snap.active:
        if time.monotonic() > deadline:
            print("the listener never saw the query end", file=sys.stderr)
            return 1
        time.sleep(0.05)

    cars = spark.sql(
        "select sum(cars) from (select window, TollId, max(cars) as cars from tolls "
        "group by window, TollId)"
    ).collect()[0][0]
    dead = ds.dataset(str(work / "dead"), format="parquet", partitioning="hive").to_table()
    print(f"records uploaded:        {records}")
    print(f"cars counted in windows: {cars}")
    print(f"dead letters:            {dead.num_rows}")
    policy = snap.policy()
    events = policy.events if policy else {}
    for (rule, action), n in sorted(events.items()):
        if n:
            print(f"  {rule:<14} {action:<9} {n}")
    monitor.close()
    spark.stop()
    dead_letters = (policy.dead_letter_rows if policy else None) or 0
    ok = records == cars + dead.num_rows == cars + dead_letters
    print("conservation:", "ok" if ok else "VIOLATED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
