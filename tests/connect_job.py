"""Runs wmobs over Spark Connect (``remote("local[2]")``) and prints what it measured as JSON.

A child process of ``test_connect.py``: a Connect session cannot share a process with the
classic session the other tests use.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import wmobs
from tests._streaming import ProgressWaiter, wait_until, windowed_query, write_events


def main() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.remote("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    work = Path(tempfile.mkdtemp(prefix="wmobs-connect-"))
    now = time.time()
    rows = write_events(work / "in", 0, [now - 30 + k for k in range(6)])
    waiter = ProgressWaiter()
    reader = InMemoryMetricReader()
    monitor = wmobs.attach(
        spark,
        meter_provider=MeterProvider(metric_readers=[reader]),
        prometheus_port=0,
        on_progress=waiter,
    )
    query = windowed_query(spark, work / "in", work / "ckpt", "wm_connect")
    query.processAllAvailable()
    waiter.wait_for_batch("wm_connect", query.lastProgress["batchId"])
    wait_until(lambda: monitor.snapshot("wm_connect").watermark is not None)  # type: ignore[union-attr]
    snap = monitor.snapshot("wm_connect")
    assert snap is not None
    with urllib.request.urlopen(monitor.metrics_url or "", timeout=10) as response:
        scraped = response.read().decode()
    measured_delay = time.time() - (snap.watermark or 0.0)
    query.stop()
    wait_until(lambda: not monitor.snapshot("wm_connect").active)  # type: ignore[union-attr]
    result = {
        "session": type(spark).__module__,
        "rows_written": rows,
        "input_rows": snap.input_rows,
        "watermark": snap.watermark,
        "expected_watermark": now - 30 + 5 - 10,
        "delay": measured_delay,
        "scraped": scraped,
        "active_after_stop": monitor.snapshot("wm_connect").active,  # type: ignore[union-attr]
        "errors": monitor.listener.errors,
    }
    monitor.close()
    spark.stop()
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
