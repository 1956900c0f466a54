"""The listener on a real local[2] Spark session: real queries, real HTTP scrapes."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import wmobs
from wmobs.testing import parse_metrics

from ._streaming import ProgressWaiter, wait_until, windowed_query, write_events

pytestmark = pytest.mark.spark


def _gauges(reader: InMemoryMetricReader) -> dict[tuple[str, tuple[tuple[str, Any], ...]], float]:
    """Every data point read from ``reader``, keyed by OTel name and sorted attributes."""
    out: dict[tuple[str, tuple[tuple[str, Any], ...]], float] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "value", None)
                    if value is None:
                        value = point.count  # type: ignore[union-attr]
                    out[(metric.name, tuple(sorted(point.attributes.items())))] = value
    return out


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return parse_metrics(response.read().decode())


def test_watermark_delay_rows_and_stop(spark: Any, tmp_path: Path) -> None:
    reader = InMemoryMetricReader()
    waiter = ProgressWaiter()
    name = "wm_basic"
    now = time.time()
    rows = 0
    for i, size in enumerate([5, 7, 9]):
        rows += write_events(tmp_path / "in", i, [now - 60 + i * 5 + k * 0.1 for k in range(size)])
    max_event_time = now - 60 + 2 * 5 + 8 * 0.1
    # JSON timestamps keep microseconds; Spark's watermark is in whole milliseconds.
    expected_watermark = int((max_event_time - 10) * 1000) / 1000

    with wmobs.attach(
        spark,
        meter_provider=MeterProvider(metric_readers=[reader]),
        prometheus_port=0,
        on_progress=waiter,
    ) as monitor:
        assert monitor.prometheus_port and monitor.prometheus_port > 0
        assert monitor.tracker.retention == 3600  # a terminated query's series: one hour
        query = windowed_query(spark, tmp_path / "in", tmp_path / "ckpt", name)
        query.processAllAvailable()
        wait_until(
            lambda: (
                (s := monitor.snapshot(name)) is not None
                and s.watermark is not None
                and s.watermark >= expected_watermark
            ),
            what="the watermark to reach max event time - 10 s",
        )
        snap = monitor.snapshot(name)
        assert snap is not None
        assert snap.watermark == pytest.approx(expected_watermark, abs=0.002)
        assert snap.input_rows == rows == 21

        key = ("query", name)
        first = _gauges(reader)
        delay = first[("wmobs.watermark.delay", (key,))]
        assert delay == pytest.approx(time.time() - expected_watermark, abs=2.0)
        assert first[("wmobs.input.rows", (key,))] == 21
        assert first[("wmobs.query.active", (key,))] == 1

        # Quiet query: no new input, the delay keeps growing with the wall clock.
        time.sleep(1.2)
        second = _gauges(reader)[("wmobs.watermark.delay", (key,))]
        assert second - delay >= 1.0

        scraped = _scrape(monitor.metrics_url or "")
        assert scraped[("wmobs_input_rows_total", (key,))] == 21
        assert scraped[("wmobs_query_active", (key,))] == 1
        assert scraped[("wmobs_watermark_delay_seconds", (key,))] >= second
        assert ("wmobs_batch_duration_seconds_count", (key,)) in scraped
        ops = {labels for (n, labels) in scraped if n == "wmobs_state_rows" and key in labels}
        assert ops, "the windowed aggregation's state operator is exported"
        assert monitor.listener.errors == 0

        query.stop()
        wait_until(lambda: not monitor.snapshot(name).active, what="termination event")  # type: ignore[union-attr]
        after = _gauges(reader)
        assert after[("wmobs.query.active", (key,))] == 0
        assert ("wmobs.watermark.delay", (key,)) not in after
        assert ("wmobs.event_time.lag", (key,)) not in after
        stopped = (key, ("outcome", "stopped"))
        assert after[("wmobs.query.terminations", tuple(sorted(stopped)))] == 1

        # A notebook's cell run twice: the port's holder is named, and keeps serving.
        with pytest.raises(OSError, match="in use by a wmobs Monitor attached earlier"):
            wmobs.attach(spark, prometheus_port=monitor.prometheus_port)
        assert _scrape(monitor.metrics_url or "")[("wmobs_query_active", (key,))] == 0

    assert monitor.closed
    with pytest.raises(OSError):
        _scrape(monitor.metrics_url or "")
    monitor.close()  # idempotent
    with wmobs.attach(spark, prometheus_port=monitor.prometheus_port) as again:  # released
        assert again.metrics_url == monitor.metrics_url


def test_failed_query_counts_failed_outcome(spark: Any, tmp_path: Path) -> None:
    reader = InMemoryMetricReader()
    name = "wm_failing"
    write_events(tmp_path / "in", 0, [time.time()])

    def explode(batch: Any, batch_id: int) -> None:
        raise RuntimeError("sink is broken")

    with wmobs.attach(spark, meter_provider=MeterProvider(metric_readers=[reader])) as monitor:
        query = (
            spark.readStream.schema("event_time TIMESTAMP, value LONG")
            .json(str(tmp_path / "in"))
            .writeStream.queryName(name)
            .foreachBatch(explode)
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .start()
        )
        with pytest.raises(Exception, match="sink is broken"):
            query.awaitTermination(120)
        wait_until(lambda: (s := monitor.snapshot(name)) is not None and not s.active)
        points = _gauges(reader)
        failed = tuple(sorted([("query", name), ("outcome", "failed")]))
        stopped = tuple(sorted([("query", name), ("outcome", "stopped")]))
        assert points[("wmobs.query.terminations", failed)] == 1
        assert points[("wmobs.query.terminations", stopped)] == 0
        assert points[("wmobs.query.active", (("query", name),))] == 0


def test_concurrent_queries_keep_separate_series(spark: Any, tmp_path: Path) -> None:
    reader = InMemoryMetricReader()
    now = time.time()
    write_events(tmp_path / "a", 0, [now - k for k in range(3)])
    write_events(tmp_path / "b", 0, [now - 100 - k for k in range(8)])
    # A query started before attach is picked up too.
    qa = windowed_query(spark, tmp_path / "a", tmp_path / "ca", "wm_a")
    waiter = ProgressWaiter()
    with wmobs.attach(
        spark, meter_provider=MeterProvider(metric_readers=[reader]), on_progress=waiter
    ) as monitor:
        assert monitor.snapshot("wm_a") is not None
        qb = windowed_query(spark, tmp_path / "b", tmp_path / "cb", "wm_b")
        try:
            for query in (qa, qb):
                query.processAllAvailable()
            write_events(tmp_path / "a", 1, [now])
            qa.processAllAvailable()
            for name, query in (("wm_a", qa), ("wm_b", qb)):
                waiter.wait_for_batch(name, query.lastProgress["batchId"])
            points = _gauges(reader)
            assert points[("wmobs.input.rows", (("query", "wm_b"),))] == 8
            # 4 if wm_a's first batch (3 rows) ran after attach, 1 if before it.
            assert points[("wmobs.input.rows", (("query", "wm_a"),))] in (1, 4)
            wm_a = monitor.snapshot("wm_a").watermark  # type: ignore[union-attr]
            wm_b = monitor.snapshot("wm_b").watermark  # type: ignore[union-attr]
            assert wm_a is None or wm_b is None or wm_a > wm_b + 50
        finally:
            qa.stop()
            qb.stop()


def test_listener_errors_never_stop_the_query(spark: Any, tmp_path: Path) -> None:
    name = "wm_resilient"
    waiter = ProgressWaiter()

    def broken(*_: Any) -> None:
        raise RuntimeError("bug in a progress hook")

    with wmobs.attach(spark, on_progress=broken) as monitor:
        # Break the tracker itself too: every progress now fails inside wmobs.
        monitor.tracker.on_progress = broken  # type: ignore[method-assign]
        with wmobs.attach(spark, on_progress=waiter):
            write_events(tmp_path / "in", 0, [time.time()])
            query = windowed_query(spark, tmp_path / "in", tmp_path / "ckpt", name)
            try:
                query.processAllAvailable()
                first = query.lastProgress["batchId"]
                write_events(tmp_path / "in", 1, [time.time()])
                query.processAllAvailable()
                assert query.isActive
                assert query.exception() is None
                assert query.lastProgress["batchId"] > first
                waiter.wait_for_batch(name, query.lastProgress["batchId"])
            finally:
                query.stop()
        assert monitor.listener.errors >= 2


def test_attach_over_connect_says_which_pyspark_it_needs() -> None:
    """PySpark 3.5 ships a Connect session's listeners to the server: attach says so at once,
    before it touches the session. (A 3.5 Connect session cannot be created here without a
    Connect server, whose jar only Maven has; tried by hand against a 4.3 server, 3.5's
    ``addListener`` fails to pickle the listener. The object stands in for the session.)"""
    import pyspark

    if int(pyspark.__version__.split(".")[0]) >= 4:
        pytest.skip("PySpark >= 4.0 runs Connect listeners on the client (tested in test_connect)")
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    remote = object.__new__(ConnectSession)
    with pytest.raises(RuntimeError, match=r"over Spark Connect needs PySpark >= 4\.0"):
        wmobs.attach(remote)
