"""The advisor on a real stream with known lateness: the tolerance it suggests for 99 % (and
99.9 %), run on the same stream, drops at most 1 % (0.1 %) of the rows."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import pytest

import wmobs
from wmobs import TimePolicy
from wmobs.advise import advise

from ._streaming import wait_until, write_rows
from .test_policy_spark import epoch

pytestmark = pytest.mark.spark

FILES, ROWS = 12, 200


def _stream(directory: Path) -> int:
    """In-order rows, 0.5 s apart, 100 s per file (one file per micro-batch); every 25th row
    30 to 270 s behind, arriving 2 s after its event time."""
    from wmobs.testing import iso

    start = epoch("12:00")
    for f in range(FILES):
        rows = []
        for i in range(ROWS):
            event = start + f * 100 + i * 0.5
            if i % 25 == 0:
                event -= 30 + (i % 7) * 40
            rows.append({"id": f * ROWS + i, "t": iso(event), "arrival": iso(event + 2)})
        write_rows(directory, f"part-{f:03d}", rows)
    return FILES * ROWS


def _run(spark: Any, source: Path, work: Path, tolerance: float, name: str) -> tuple[str, int]:
    """The stream behind a policy dropping rows more than ``tolerance`` seconds out of order:
    the scrape of /metrics after the last batch, and the rows dropped."""
    policy = TimePolicy(
        event_time="t",
        arrival_time="arrival",
        early_arrival=None,
        late_arrival="1 day",
        out_of_order=f"{tolerance} seconds",
        out_of_order_action="drop",
        name=name,
    )
    checkpoint = str(work / f"ckpt-{name}")
    with wmobs.attach(spark, prometheus_port=0) as monitor:
        stream = spark.readStream.schema("id INT, t TIMESTAMP, arrival TIMESTAMP")
        out = policy.apply(
            stream.option("maxFilesPerTrigger", 1).json(str(source)),
            checkpoint_location=checkpoint,
        )
        query = (
            out.writeStream.queryName(name)
            .format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="100 milliseconds")
            .start()
        )
        query.processAllAvailable()
        wait_until(
            lambda: (s := monitor.snapshot(name)) is not None and s.input_rows == FILES * ROWS,
            what="every batch seen by the listener",
        )
        assert monitor.metrics_url is not None
        with urllib.request.urlopen(monitor.metrics_url, timeout=10) as response:
            scrape = response.read().decode()
        query.stop()
        snap = monitor.snapshot(name)
    assert snap is not None
    policy = snap.policy()
    assert policy is not None
    return scrape, policy.events[("out_of_order", "dropped")]


def test_the_suggested_tolerance_keeps_the_stated_fraction(spark: Any, tmp_path: Path) -> None:
    rows = _stream(tmp_path / "in")
    scrape, dropped_at_zero = _run(spark, tmp_path / "in", tmp_path, 0, "advise_zero")
    (advice,) = [a for a in advise(scrape) if a.query == "advise_zero"]
    assert advice.rows == rows
    suggested = {t.tolerance: t for t in advice.tolerances}["out_of_order"].suggested_s
    assert dropped_at_zero > 0.01 * rows  # with no tolerance, more than 1 % is out of order
    for fraction in (0.99, 0.999):
        tolerance = suggested[fraction]
        assert tolerance is not None and tolerance > 0
        _, dropped = _run(spark, tmp_path / "in", tmp_path, tolerance, f"advise_{fraction}")
        assert dropped <= (1 - fraction) * rows, (fraction, tolerance, dropped)
