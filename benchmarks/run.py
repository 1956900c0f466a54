"""wmobs benchmarks: run with ``./dev bench`` (or ``python benchmarks/run.py --help``).

1. ``listener``: throughput of a watermarked windowed aggregation (file source, ``availableNow``,
   10 micro-batches, ``noop`` sink) without wmobs, with ``wmobs.attach`` (exporting to an
   in-memory reader and a Prometheus registry that are collected every batch), and with wmobs
   forced onto PySpark's stock field-by-field listener bridge. Runs are interleaved (a, b, c,
   a, b, c, ...) after one warm-up of each, and the median of each is reported as a ratio to
   the baseline of the same run.
2. ``event``: the cost of one progress event through the listener, pure Python: a progress
   JSON string with two state operators and a wmobs observation, parsed and folded, with
   structlog filtering at INFO as a production application would. ``scrape``: one scrape of
   ``/metrics`` with ``--queries`` active queries (default 100), wmobs' endpoint over HTTP
   against OpenTelemetry's Prometheus exporter on the same samples.
3. ``policy``: the same aggregation (append mode, ``processAllAvailable``) alone and behind a
   ``TimePolicy``: global, global with a dead-letter directory, and substreams over 10 and
   10,000 keys (Spark's default state store), each on the engine a user gets by default
   (``engine="auto"`` in a plain session: the JVM engine, loaded into the running session) and
   on the Python engine (``engine="python"``). Throughput is that of the running query (first
   micro-batch's start to last one's end); query start-up is reported apart. Run the Python
   engine's variants apart from the JVM ones (``--variant``): the Python workers they leave
   behind for a minute slow whatever runs next to them.
4. ``latency``: the time each micro-batch takes, 25 micro-batches of 1,000 rows (one file
   each) to a windowed count, alone and behind the global policy, the global policy with dead
   letters and substreams; p50 and p95 side by side, and with ``--plot FILE.png`` their
   distributions.
5. ``breakdown`` (only when asked for): where a micro-batch's time goes, policy variant by
   variant: its phases, the wall time of each Spark stage, task CPU and deserialization.
6. ``idle``: wall-clock time from a window's end to its emission on a quiet source with an
   idle timeout (``--trigger`` sets the trigger interval).

Speed is never asserted in tests; this script reports it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import structlog

from wmobs.listener import parse_timestamp
from wmobs.testing import MetricsRecorder, progress_json, state_operator


def _quiet_structlog() -> None:
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


# ---- 2. one progress event ---------------------------------------------------------------


def bench_event(iterations: int) -> dict[str, float]:
    rec = MetricsRecorder()
    now = time.time()
    warm = 100
    # One body per event, batch ids rising: a repeated id is a replayed batch, which the
    # listener logs at INFO; measuring that would measure logging, not the fold.
    phases = {"latestOffset": 5, "walCommit": 20, "getBatch": 1, "queryPlanning": 30,
              "addBatch": 180, "commitOffsets": 20, "triggerExecution": 260}  # fmt: skip
    bodies = [
        json.dumps(
            progress_json(
                batch_id=i,
                watermark=now - 30 + i,
                event_time_max=now + i,
                state_operators=[state_operator(rows_total=i), state_operator("dedupe")],
                observed={"wmobs.policy.p": {"rule:late_arrival:adjusted": 3}},
            )
            | {"durationMs": phases}
        )
        for i in range(warm + iterations)
    ]
    per_event_us = _fold_events(rec, bodies, warm)
    # The same events with a trace of every micro-batch (attach(traces=True)): the spans made
    # in the callback, handed to the SDK's batch processor, exported on its own thread.
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    traced = MetricsRecorder(tracer_provider=provider)
    per_traced_event_us = _fold_events(traced, bodies, warm)
    provider.shutdown()
    traced.shutdown()
    started = time.perf_counter()
    scrapes = 200
    for _ in range(scrapes):
        list(rec.registry.collect())
    per_scrape_us = (time.perf_counter() - started) / scrapes * 1e6
    rec.shutdown()
    return {
        "progress_event_us": per_event_us,
        "traced_event_us": per_traced_event_us,
        "scrape_us": per_scrape_us,
    }


def _fold_events(rec: MetricsRecorder, bodies: list[str], warm: int) -> float:
    """µs per progress event through the listener's callback, after ``warm`` events."""
    for body in bodies[:warm]:
        rec.progress(body)
    started = time.perf_counter()
    for body in bodies[warm:]:
        rec.progress(body)
    assert rec.errors == 0
    return (time.perf_counter() - started) / (len(bodies) - warm) * 1e6


def bench_scrape(queries: int, scrapes: int = 50) -> dict[str, float]:
    """One scrape of ``/metrics`` with ``queries`` active queries (each with two stateful
    operators, policy counts, dead letters and a batch-duration histogram): wmobs' endpoint over
    HTTP on 127.0.0.1, and the same samples through OpenTelemetry's Prometheus exporter (what
    the endpoint used before), in the same run. Median of ``scrapes`` each."""
    import urllib.request

    from prometheus_client import generate_latest

    rec = MetricsRecorder()
    now = time.time()
    for q in range(queries):
        for batch in range(3):
            body = progress_json(
                name=f"query_{q}",
                batch_id=batch,
                watermark=now - 30,
                event_time_max=now,
                state_operators=[state_operator(rows_total=batch), state_operator("dedupe")],
                observed={
                    "wmobs.policy.p": {
                        "rule:late_arrival:adjusted": 3,
                        "dead_letter_rows": 1,
                        "idle_timeout_firings": 0,
                    }
                },
            )
            rec.tracker.on_progress(body)
            rec.instruments.record_batch_duration(f"query_{q}", 0.25)

    def endpoint() -> None:
        with urllib.request.urlopen(url, timeout=10) as response:
            response.read()

    def timed(fn: Callable[[], Any]) -> float:
        for _ in range(5):  # warm-up
            fn()
        samples = []
        for _ in range(scrapes):
            started = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - started)
        return statistics.median(samples) * 1000

    try:
        with rec.serve() as url:
            return {
                "endpoint_ms": timed(endpoint),
                "sdk_exporter_ms": timed(lambda: generate_latest(rec.registry)),
            }
    finally:
        rec.shutdown()


# ---- 1. throughput -----------------------------------------------------------------------


def _interleaved(variants: dict[str, Callable[[], float]], runs: int, rows: int) -> dict[str, Any]:
    """One warm-up of each variant, then ``runs`` rounds of all of them in turn; medians and
    ratios to ``variants["baseline"]`` of the same run."""
    for fn in variants.values():  # warm-up: JIT, file listing caches, Python workers
        fn()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(runs):
        for name, fn in variants.items():
            times[name].append(fn())
    base = statistics.median(times["baseline"])
    return {
        name: {
            "median_s": statistics.median(ts),
            "rows_per_s": rows / statistics.median(ts),
            "ratio_to_baseline": base / statistics.median(ts),
            "runs_s": [round(t, 3) for t in ts],
        }
        for name, ts in times.items()
    }


def _report(title: str, result: dict[str, Any]) -> None:
    print(f"\n{title}")
    for name, r in result.items():
        startup = f"  start-up {r['startup_s']:.2f} s" if "startup_s" in r else ""
        print(
            f"  {name:<36} {r['rows_per_s']:>12,.0f} rows/s  "
            f"{r['ratio_to_baseline']:.3f}x  runs {r['runs_s']}{startup}"
        )


def _make_input(
    spark: Any, directory: Path, rows: int, files: int, columns: Callable[[Any, Any], list[Any]]
) -> None:
    """``rows`` events as Parquet in ``files`` files: ``columns(ms, id)`` of event ``id`` whose
    event time is ``ms`` (1 ms apart less 1 s for each place in a run of 97 rows: every row
    but each 97th is out of order, up to 96 s)."""
    from pyspark.sql import functions as F

    row = F.col("id")
    ms = F.lit(1_800_000_000_000) + row - (row % 97) * 1000
    spark.range(rows).select(*columns(ms, row)).repartition(files).write.parquet(str(directory))


def _run_query(spark: Any, source: Path, checkpoint: Path, files_per_batch: int) -> float:
    from pyspark.sql import functions as F

    shutil.rmtree(checkpoint, ignore_errors=True)
    started = time.perf_counter()
    query = (
        spark.readStream.schema("event_time TIMESTAMP, device LONG")
        .option("maxFilesPerTrigger", files_per_batch)
        .parquet(str(source))
        .withWatermark("event_time", "10 seconds")
        .groupBy(F.window("event_time", "10 seconds"), "device")
        .count()
        .writeStream.format("noop")
        .outputMode("append")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return time.perf_counter() - started


def bench_listener(rows: int, runs: int) -> dict[str, Any]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from pyspark.sql import functions as F

    import wmobs
    from wmobs.testing import local_spark

    spark = local_spark("wmobs-bench", conf=_session_conf())
    work = Path(tempfile.mkdtemp(prefix="wmobs-bench-"))
    files = 40
    _make_input(
        spark,
        work / "in",
        rows,
        files,
        lambda ms, row: [F.timestamp_millis(ms).alias("event_time"), (row % 64).alias("device")],
    )

    def baseline() -> float:
        return _run_query(spark, work / "in", work / "ckpt", files // 10)

    def attached() -> float:
        reader = InMemoryMetricReader()
        provider = MeterProvider(metric_readers=[reader])

        def collect(*_: Any) -> None:  # a scrape every batch: more than Prometheus would do
            reader.get_metrics_data()

        try:
            with wmobs.attach(
                spark, meter_provider=provider, prometheus_port=0, on_progress=collect
            ) as monitor:
                seconds = baseline()
                snap = monitor.snapshot(monitor.snapshots()[-1].label)
                assert snap is not None and monitor.listener.errors == 0
        finally:
            provider.shutdown()
        return seconds

    variants: dict[str, Callable[[], float]] = {
        "baseline": baseline,
        "wmobs.attach": attached,
    }
    try:
        return _interleaved(variants, runs, rows)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def _policy_input(spark: Any, directory: Path, rows: int, files: int) -> str:
    """The policy benchmarks' input (event and arrival times, 10 and 10,000 keys); its schema."""
    from pyspark.sql import functions as F

    _make_input(
        spark,
        directory,
        rows,
        files,
        lambda ms, row: [
            F.timestamp_millis(ms).alias("EventTime"),
            F.timestamp_millis(ms + 500).alias("ArrivalTime"),
            (row % 10).alias("device10"),
            (row % 10_000).alias("device10k"),
        ],
    )
    return "EventTime TIMESTAMP, ArrivalTime TIMESTAMP, device10 LONG, device10k LONG"


_PROGRESS_KEPT = {"spark.sql.streaming.numRecentProgressUpdates": "1000"}
"""Progress kept per query: a query with an idle timeout runs micro-batches without data too."""

_CONF: dict[str, str] = {}
"""Spark settings given with ``--conf KEY=VALUE``, for every session the benchmarks start."""


def _session_conf(conf: dict[str, str] | None = None) -> dict[str, str]:
    """``conf`` and the settings given on the command line (which win)."""
    return {**(conf or {}), **_CONF}


def _windowed_count(df: Any, time_column: str, checkpoint: str, rows: int) -> Any:
    """A 10-second windowed count of ``df`` to the ``noop`` sink, run until it has read its
    ``rows`` input rows; the stopped query (its progress). Not ``processAllAvailable``: a query
    with substreams' processing-time timeouts (idle timeout) always has a micro-batch to run,
    and Spark's wait for one without never ends."""
    from pyspark.sql import functions as F

    query = (
        df.groupBy(F.window(time_column, "10 seconds"))
        .count()
        .writeStream.format("noop")
        .outputMode("append")
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="0 seconds")
        .start()
    )
    _await_rows(query, rows, 600)
    query.stop()
    return query


def _await_rows(query: Any, rows: int, timeout_s: float) -> None:
    """Wait until ``query`` has read ``rows`` input rows (its progress); stopped, an error, if
    it fails or takes longer than ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while sum(p["numInputRows"] for p in query.recentProgress) < rows:
        if query.exception() is not None or time.monotonic() > deadline:
            query.stop()
            raise RuntimeError(f"the benchmark's query did not read its {rows:,} rows")
        time.sleep(0.02)


def _policy_makers(work: Path) -> dict[str, tuple[Callable[[Any, str], Any], str]]:
    """The policy benchmark's variants: ``name -> (make(stream, checkpoint), time column)``
    (dead letters go to ``work / "dead"``)."""
    from wmobs import TimePolicy

    def policy(dead_letters: bool = False, **kw: Any) -> Callable[[Any, str], Any]:
        """``dead_letters``: dropped rows to ``work / "dead"``."""
        p = TimePolicy(out_of_order="10 seconds", late_arrival="1 minute", **kw)
        dead = str(work / "dead") if dead_letters else None
        return lambda df, ck: p.apply(df, checkpoint_location=ck, dead_letter=dead)

    def shuffled(df: Any, ck: str) -> Any:
        """The baseline with a shuffle by key bucket as substreams have, and nothing else."""
        from pyspark.sql import functions as F

        bucket = F.pmod(F.xxhash64("device10"), F.lit(64))
        return df.withWatermark("EventTime", "10 seconds").repartition(bucket)

    def shuffled_whole(df: Any, ck: str) -> Any:
        """The baseline with a shuffle by key bucket of whole rows, as substreams shuffle them
        (each column read after the shuffle, by a filter that keeps every row)."""
        from pyspark.sql import functions as F

        kept = F.lit(True)
        for column in ("ArrivalTime", "device10", "device10k"):
            kept = kept & F.col(column).isNotNull()
        return shuffled(df, ck).filter(kept)

    def observed(df: Any, ck: str) -> Any:
        """The baseline with one ``observe`` (a row count), as a policy's counts have."""
        from pyspark.sql import functions as F

        return df.withWatermark("EventTime", "10 seconds").observe("bench", F.count(F.lit(1)))

    def one_row_source(df: Any, ck: str) -> Any:
        """The baseline cross-joined with a one-row Python data source, broadcast, as the
        Python engine joins in the batch's times (Spark 4.0 and later), reading nothing."""
        from pyspark.sql import functions as F
        from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

        class Reader(DataSourceReader):
            def partitions(self) -> list[InputPartition]:
                return [InputPartition(0)]

            def read(self, partition: InputPartition) -> Any:
                yield (0,)

        class OneRow(DataSource):
            @classmethod
            def name(cls) -> str:
                return "wmobs_bench_one_row"

            def schema(self) -> str:
                return "wmobs_bench_one LONG"

            def reader(self, schema: Any) -> DataSourceReader:
                return Reader()

        spark = df.sparkSession
        spark.dataSource.register(OneRow)
        one = F.broadcast(spark.read.format(OneRow.name()).load())
        return df.withWatermark("EventTime", "10 seconds").crossJoin(one).drop("wmobs_bench_one")

    def reading(*columns: str) -> Callable[[Any, str], Any]:
        """The baseline reading ``columns`` too, as a policy does (its arrival time; dead letters:
        every column), with a filter that keeps every row of the benchmark's input."""
        from pyspark.sql import functions as F

        def make(df: Any, ck: str) -> Any:
            kept = F.lit(True)
            for column in columns:
                kept = kept & F.col(column).isNotNull()
            return df.withWatermark("EventTime", "10 seconds").filter(kept)

        return make

    python: dict[str, Any] = {"engine": "python"}
    makers: dict[str, tuple[Callable[[Any, str], Any], str]] = {
        "baseline": (lambda df, ck: df.withWatermark("EventTime", "10 seconds"), "EventTime"),
        "baseline + a shuffle by key bucket, no policy (diagnostic)": (shuffled, "EventTime"),
        "baseline + a shuffle of whole rows by key bucket, no policy (diagnostic)": (
            shuffled_whole,
            "EventTime",
        ),
        "baseline + one observed count, no policy (diagnostic)": (observed, "EventTime"),
        "baseline + a one-row Python data source, no policy (diagnostic)": (
            one_row_source,
            "EventTime",
        ),
        "baseline reading the arrival time too, no policy (diagnostic)": (
            reading("ArrivalTime"),
            "EventTime",
        ),
        "baseline reading every column, no policy (diagnostic)": (
            reading("ArrivalTime", "device10", "device10k"),
            "EventTime",
        ),
        "global policy": (policy(), "system_timestamp"),
        "global policy, Python engine": (policy(**python), "system_timestamp"),
        "global policy without distributions": (
            policy(distributions=False),
            "system_timestamp",
        ),
        "global policy + dead letters": (policy(dead_letters=True), "system_timestamp"),
        "global policy + dead letters, Python engine": (
            policy(dead_letters=True, **python),
            "system_timestamp",
        ),
        "global policy + idle timeout": (policy(idle_timeout="1 minute"), "system_timestamp"),
        "substreams, 10 keys": (
            policy(substream_by=["device10"], name="keys10"),
            "system_timestamp",
        ),
        "substreams, 10 keys, Python engine": (
            policy(substream_by=["device10"], name="keys10_python", **python),
            "system_timestamp",
        ),
        "substreams, 10,000 keys": (
            policy(substream_by=["device10k"], name="keys10k"),
            "system_timestamp",
        ),
        "substreams, 10,000 keys, Python engine": (
            policy(substream_by=["device10k"], name="keys10k_python", **python),
            "system_timestamp",
        ),
        "substreams, 10 keys + idle timeout": (
            policy(substream_by=["device10"], idle_timeout="1 minute", name="keys10_idle"),
            "system_timestamp",
        ),
    }
    return makers


def bench_policy(
    rows: int, runs: int, only: list[str] | None = None, configured: bool = False
) -> dict[str, Any]:
    """A windowed aggregation alone vs behind a TimePolicy (global, substreams, dead letters);
    ``configured``: the session started with wmobs' extension, not given it by ``apply``."""

    from wmobs.testing import local_spark

    spark = local_spark(  # extension=False: as a user gets it
        "wmobs-bench-policy", conf=_session_conf(_PROGRESS_KEPT), extension=configured
    )
    work = Path(tempfile.mkdtemp(prefix="wmobs-bench-policy-"))
    files = 40
    schema = _policy_input(spark, work / "in", rows, files)

    startups: dict[str, list[float]] = {}

    def run(make: Callable[[Any, str], Any], time_column: str, name: str) -> float:
        """Seconds from the first micro-batch's start to the last one's end (throughput of a
        running query); the time before the first micro-batch is recorded apart."""
        checkpoint = str(work / "ckpt")
        shutil.rmtree(checkpoint, ignore_errors=True)
        shutil.rmtree(work / "dead", ignore_errors=True)
        started = time.time()
        stream = (
            spark.readStream.schema(schema).option("maxFilesPerTrigger", files // 10)
        ).parquet(str(work / "in"))
        query = _windowed_count(make(stream, checkpoint), time_column, checkpoint, rows)
        first, last = query.recentProgress[0], query.recentProgress[-1]
        begin = parse_timestamp(first["timestamp"])
        end = parse_timestamp(last["timestamp"])
        assert begin is not None and end is not None
        startups.setdefault(name, []).append(begin - started)
        return end + float(last["durationMs"]["triggerExecution"]) / 1000 - begin

    def bound(make: Callable[[Any, str], Any], column: str, name: str) -> Callable[[], float]:
        return lambda: run(make, column, name)

    makers = _policy_makers(work)
    variants: dict[str, Callable[[], float]] = {
        name: bound(make, column, name)
        for name, (make, column) in makers.items()
        if not only or name == "baseline" or name in only
    }
    try:
        result = _interleaved(variants, runs, rows)
        for name, seconds in startups.items():
            result[name]["startup_s"] = statistics.median(seconds[1:] or seconds)  # no warm-up
        return result
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def _spark_time(text: str) -> float:
    """A time of Spark's status REST API (``2026-11-23T19:46:53.024GMT``) in seconds."""
    seconds = parse_timestamp(text.removesuffix("GMT") + "Z")
    assert seconds is not None, text
    return seconds


BREAKDOWN_PARTS = (
    "micro-batch",
    "queryPlanning",
    "addBatch",
    "watermark read job",
    "map stage",
    "reduce stage",
    "outside stages",
    "map task CPU",
    "map task deserialization",
    "reduce task CPU",
    "reduce task run time",
    "JVM GC (all tasks)",
)


def bench_breakdown(rows: int, runs: int, only: list[str] | None = None) -> dict[str, Any]:
    """Where each micro-batch's time goes, per variant of the policy benchmark: the query's
    own phases (``durationMs``) and, from Spark's status REST API, the wall time of each
    stage (the one-task job without input is the watermark read), its tasks' CPU and
    deserialization, and the driver's time outside any stage. Medians over every micro-batch
    of ``runs`` runs after a warm-up, each run's first micro-batch left out (ms)."""
    import re
    from urllib.request import urlopen

    from wmobs.testing import local_spark

    retained = str(100_000)
    spark = local_spark(
        "wmobs-bench-breakdown",
        conf=_session_conf(
            {
                "spark.ui.enabled": "true",
                "spark.ui.port": "0",
                "spark.ui.retainedJobs": retained,
                "spark.ui.retainedStages": retained,
            }
        ),
    )
    api = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{spark.sparkContext.applicationId}"

    def get(path: str) -> Any:
        with urlopen(f"{api}/{path}") as response:
            return json.load(response)

    work = Path(tempfile.mkdtemp(prefix="wmobs-bench-breakdown-"))
    files = 40
    schema = _policy_input(spark, work / "in", rows, files)
    makers = _policy_makers(work)
    names = [n for n in makers if not only or n == "baseline" or n in only]
    seen: set[int] = set()

    def run(name: str) -> list[dict[str, float]]:
        checkpoint = str(work / "ckpt")
        shutil.rmtree(checkpoint, ignore_errors=True)
        shutil.rmtree(work / "dead", ignore_errors=True)
        make, column = makers[name]
        reader = spark.readStream.schema(schema).option("maxFilesPerTrigger", files // 10)
        stream = make(reader.parquet(str(work / "in")), checkpoint)
        query = _windowed_count(stream, column, checkpoint, rows)
        stages = {s["stageId"]: s for s in get("stages?status=complete")}
        batches: dict[int, dict[str, float]] = {}
        for job in get("jobs"):
            if job["jobId"] in seen:
                continue
            seen.add(job["jobId"])
            found = re.search(r"batch = (\d+)", job.get("description") or "")
            if found is None or str(query.runId) not in (job.get("description") or ""):
                continue
            parts = batches.setdefault(int(found.group(1)), dict.fromkeys(BREAKDOWN_PARTS, 0.0))
            for stage in (stages[i] for i in job["stageIds"] if i in stages):
                wall = _spark_time(stage["completionTime"]) - _spark_time(stage["submissionTime"])
                if stage["inputBytes"] > 0:
                    part = "map stage"
                    parts["map task CPU"] += stage["executorCpuTime"] / 1e6
                    parts["map task deserialization"] += stage["executorDeserializeTime"]
                elif stage["shuffleReadBytes"] > 0:
                    part = "reduce stage"
                    parts["reduce task CPU"] += stage["executorCpuTime"] / 1e6
                    parts["reduce task run time"] += stage["executorRunTime"]
                else:
                    part = "watermark read job"
                parts[part] += wall * 1000
                parts["JVM GC (all tasks)"] += stage.get("jvmGcTime", 0)
        for progress in query.recentProgress:
            batch_parts = batches.get(progress["batchId"])
            if batch_parts is not None:
                took = progress["durationMs"]
                batch_parts["micro-batch"] = took["triggerExecution"]
                batch_parts["queryPlanning"] = took.get("queryPlanning", 0)
                batch_parts["addBatch"] = took.get("addBatch", 0)
                stages_ms = sum(batch_parts[p] for p in BREAKDOWN_PARTS[3:6])
                batch_parts["outside stages"] = batch_parts["micro-batch"] - stages_ms
        return [parts for batch, parts in sorted(batches.items()) if batch > 0]

    try:
        for name in names:  # warm-up
            run(name)
        measured: dict[str, list[dict[str, float]]] = {name: [] for name in names}
        for _ in range(runs):
            for name in names:
                measured[name].extend(run(name))
        return {
            name: {part: statistics.median(b[part] for b in batches) for part in BREAKDOWN_PARTS}
            for name, batches in measured.items()
        }
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def report_breakdown(result: dict[str, dict[str, float]]) -> None:
    names = list(result)
    print("\nper micro-batch, median (ms):")
    print("  " + " | ".join(["part", *names]))
    for part in BREAKDOWN_PARTS:
        print("  " + " | ".join([part, *[f"{result[n][part]:.0f}" for n in names]]))


LATENCY_VARIANTS = (
    "baseline",
    "global policy",
    "global policy + dead letters",
    "substreams, 10 keys",
)


def bench_latency(
    runs: int,
    batches: int = 25,
    rows_per_batch: int = 1000,
    extra: list[str] | None = None,
    configured: bool = False,
) -> dict[str, Any]:
    """Added latency per micro-batch: ``batches`` micro-batches of ``rows_per_batch`` rows (one
    file each), a 10-second windowed count to the ``noop`` sink, alone and behind each policy
    variant, interleaved ``runs`` times. The trigger execution times of every micro-batch but
    each run's first (which compiles and starts Python workers) make the distributions.
    ``extra``: more variants of the policy benchmark, after the standard ones; ``configured``:
    as :func:`bench_policy`."""

    from wmobs.testing import local_spark

    spark = local_spark(  # extension=False: as a user gets it
        "wmobs-bench-latency", conf=_session_conf(_PROGRESS_KEPT), extension=configured
    )
    work = Path(tempfile.mkdtemp(prefix="wmobs-bench-latency-"))
    schema = _policy_input(spark, work / "in", batches * rows_per_batch, batches)
    makers = _policy_makers(work)
    variants = [*LATENCY_VARIANTS, *[v for v in extra or () if v not in LATENCY_VARIANTS]]

    def run(name: str) -> list[float]:
        make, column = makers[name]
        checkpoint = str(work / "ckpt")
        shutil.rmtree(checkpoint, ignore_errors=True)
        shutil.rmtree(work / "dead", ignore_errors=True)
        stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1)
        query = _windowed_count(
            make(stream.parquet(str(work / "in")), checkpoint),
            column,
            checkpoint,
            batches * rows_per_batch,
        )
        data = [p for p in query.recentProgress if p["numInputRows"]]
        return [p["durationMs"]["triggerExecution"] / 1000 for p in data[1:]]

    try:
        for name in variants:  # warm-up
            run(name)
        durations: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(runs):
            for name in variants:
                durations[name] += run(name)
        return durations
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def _directory_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def bench_keys(
    held: list[int],
    batches: int = 12,
    rows_per_batch: int = 1000,
    rocksdb: bool = False,
    ttl: str | None = None,
) -> dict[int, dict[str, float]]:
    """Substreams against the keys they hold: a first micro-batch brings ``n`` keys into state
    (one row each), then ``batches`` micro-batches of ``rows_per_batch`` rows, of keys drawn
    from those held, go through a policy with ``substream_by`` to the ``noop`` sink (one file
    per micro-batch). Per ``n``: the median trigger execution time of those micro-batches
    (each run's first three left out, and a run without and one with the policy before all,
    not reported: they compile), the state's rows and memory as Spark reports
    them, and the bytes of the checkpoint's state folder. The same query without the policy is
    the baseline (``n`` = 0). ``rocksdb``: Spark's RocksDB state store provider, with
    changelog checkpointing. ``ttl``: the policy's ``substream_ttl`` (keys expire through
    Spark's processing-time timeouts)."""
    from pyspark.sql import functions as F

    from wmobs import TimePolicy
    from wmobs.testing import local_spark

    conf = {"spark.driver.memory": "2g", **_PROGRESS_KEPT}
    if rocksdb:
        conf |= {
            "spark.sql.streaming.stateStore.providerClass": "org.apache.spark.sql.execution."
            "streaming.state.RocksDBStateStoreProvider",
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        }
    spark = local_spark("wmobs-bench-keys", conf=_session_conf(conf), extension=False)
    work = Path(tempfile.mkdtemp(prefix="wmobs-bench-keys-"))
    schema = "EventTime TIMESTAMP, ArrivalTime TIMESTAMP, device LONG"

    def times(keys: Any) -> list[Any]:
        ms = F.lit(1_800_000_000_000) + F.col("id")
        return [
            F.timestamp_millis(ms).alias("EventTime"),
            F.timestamp_millis(ms + 500).alias("ArrivalTime"),
            keys.alias("device"),
        ]

    def run(n: int) -> dict[str, float]:
        source, checkpoint = work / f"in-{n}", work / f"ckpt-{n}"
        first = max(n, 1)
        spark.range(first).select(*times(F.col("id"))).coalesce(1).write.parquet(str(source / "0"))
        for batch in range(1, batches + 1):
            rows = spark.range(first + batch * rows_per_batch, first + (batch + 1) * rows_per_batch)
            drawn = (F.xxhash64(F.col("id")) % first + first) % first  # keys held, at random
            rows.select(*times(drawn)).coalesce(1).write.parquet(str(source / str(batch)))
        stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1)
        df = stream.parquet(str(source / "*"))
        if n:
            policy = TimePolicy(
                out_of_order="10 seconds",
                late_arrival="1 minute",
                substream_by=["device"],
                substream_ttl=ttl,
                name=f"keys{n}",
            )
            df = policy.apply(df, checkpoint_location=str(checkpoint))
        else:
            df = df.withWatermark("EventTime", "10 seconds")
        query = (
            df.writeStream.format("noop")
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="0 seconds")
            .start()
        )
        if ttl is None or not n:
            query.processAllAvailable()
        else:  # with timeouts, Spark always has a micro-batch to run: wait for the rows
            _await_rows(query, first + batches * rows_per_batch, 1800)
        query.stop()
        data = [p for p in query.recentProgress if p["numInputRows"]]
        durations = [p["durationMs"]["triggerExecution"] / 1000 for p in data[3:]]
        operators = data[-1]["stateOperators"]
        result = {
            "batch_median_s": statistics.median(durations),
            "first_batch_s": data[0]["durationMs"]["triggerExecution"] / 1000,
            "state_rows": sum(o["numRowsTotal"] for o in operators),
            "state_memory_bytes": sum(o["memoryUsedBytes"] for o in operators),
            "state_folder_bytes": _directory_bytes(checkpoint / "state")
            if (checkpoint / "state").is_dir()
            else 0,
        }
        shutil.rmtree(source, ignore_errors=True)
        shutil.rmtree(checkpoint, ignore_errors=True)
        return result

    try:
        # One run of each kind first, not reported: the first query of a session, and the
        # first with a policy (which loads the extension), compile their code, and ran about
        # 1.6x slower than the same query after them.
        run(0)
        run(min(held))
        return {n: run(n) for n in [0, *held]}
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def report_keys(result: dict[int, dict[str, float]], rocksdb: bool, ttl: str | None = None) -> None:
    store = "RocksDB, changelog checkpointing" if rocksdb else "HDFS-backed (Spark's default)"
    expiry = f", substream_ttl={ttl!r}" if ttl else ""
    print(f"\nsubstreams against keys held, 1,000-row micro-batches, state store: {store}{expiry}")
    smallest = min((n for n in result if n), default=0)
    for n, r in result.items():
        name = f"{n:,} keys held" if n else "no policy"
        ratio = f"{r['batch_median_s'] / result[smallest]['batch_median_s']:.2f}x" if n else ""
        print(
            f"  {name:<20} median micro-batch {r['batch_median_s'] * 1000:6.0f} ms {ratio:>6}  "
            f"first {r['first_batch_s']:6.1f} s  state rows {r['state_rows']:>11,}  "
            f"memory {r['state_memory_bytes'] / 2**20:8.1f} MiB  "
            f"on disk {r['state_folder_bytes'] / 2**20:8.1f} MiB"
        )


def _percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def report_latency(durations: dict[str, list[float]], plot: Path | None) -> None:
    base = _percentile(durations["baseline"], 50)
    print(f"\nmicro-batch duration, {len(durations['baseline'])} micro-batches of each:")
    width = max(len(name) for name in durations)
    print(f"  {'variant':<{width}} {'p50':>8} {'p95':>8} {'added p50':>10}")
    for name, values in durations.items():
        p50, p95 = _percentile(values, 50), _percentile(values, 95)
        added = (p50 - base) * 1000
        print(f"  {name:<{width}} {p50 * 1000:6.0f}ms {p95 * 1000:6.0f}ms {added:+8.0f}ms")
    if plot is None:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    for name, values in durations.items():
        if name not in LATENCY_VARIANTS:  # the plot shows the standard variants
            continue
        ordered = sorted(v * 1000 for v in values)
        fractions = [(i + 1) / len(ordered) for i in range(len(ordered))]
        ax.step(ordered, fractions, where="post", label=name)
    ax.set_xlabel("micro-batch trigger execution time (ms)")
    ax.set_ylabel("fraction of micro-batches")
    ax.set_title("Latency per micro-batch, 1,000-row batches, local[2]")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(plot)
    print(f"  plot: {plot}")


def bench_idle_latency(windows: int, trigger_s: float = 0.5) -> dict[str, Any]:
    """Wall-clock time from a window's end to its emission on a quiet source: 3-second
    windows, idle timeout 1 s, trigger ``trigger_s``; one event per window, then silence."""
    from pyspark.sql import functions as F

    from wmobs import TimePolicy
    from wmobs.testing import local_spark

    timeout_s, window_s = 1.0, 3
    spark = local_spark("wmobs-bench-idle", conf=_session_conf())
    work = Path(tempfile.mkdtemp(prefix="wmobs-bench-idle-"))
    (work / "in").mkdir()
    policy = TimePolicy(event_time="t", arrival_time=None, idle_timeout=f"{timeout_s} seconds")
    out = policy.apply(
        spark.readStream.schema("t TIMESTAMP").json(str(work / "in")),
        checkpoint_location=str(work / "ckpt"),
    )
    query = (
        out.groupBy(F.window("system_timestamp", f"{window_s} seconds"))
        .count()
        .writeStream.format("memory")
        .queryName("idle_latency")
        .outputMode("append")
        .option("checkpointLocation", str(work / "ckpt"))
        .trigger(processingTime=f"{trigger_s} seconds")
        .start()
    )

    def write(index: int, t: float) -> None:
        tmp = work / "in" / f".{index}.tmp"
        tmp.write_text(json.dumps({"t": datetime.fromtimestamp(t, tz=timezone.utc).isoformat()}))
        os.replace(tmp, work / "in" / f"{index}.json")

    def emitted() -> int:
        return int(spark.sql("SELECT count(*) FROM idle_latency").first()[0])

    latencies = []
    try:
        for index in range(windows + 1):  # the first window warms the query up
            now = time.time()
            write(index, now)
            end = (int(now) // window_s + 1) * window_s
            while emitted() <= index:
                time.sleep(0.02)
            if index:
                latencies.append(time.time() - end)
        # The micro-batch time sets the floor: the synthetic row's batch, then Spark's eviction.
        batch_s = statistics.median(
            p["durationMs"]["triggerExecution"] / 1000 for p in query.recentProgress[5:]
        )
    finally:
        query.stop()
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return {
        "median_s": statistics.median(latencies),
        "max_s": max(latencies),
        "target_s": timeout_s + 2 * trigger_s,
        "trigger_s": trigger_s,
        "batch_median_s": batch_s,
        "runs_s": [round(x, 2) for x in latencies],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=3_000_000)
    parser.add_argument("--runs", type=int, default=5, help="interleaved runs per variant (>=3)")
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument(
        "--only",
        choices=["listener", "event", "scrape", "policy", "breakdown", "latency", "idle", "keys"],
        default=None,
    )
    parser.add_argument(
        "--plot", type=Path, default=None, help="latency: write the distributions as a PNG"
    )
    parser.add_argument("--queries", type=int, default=100, help="scrape: active queries")
    variants = list(_policy_makers(Path("unused")))  # their names: nothing runs yet
    parser.add_argument(
        "--variant",
        action="append",
        default=None,
        choices=variants,
        metavar="VARIANT",
        help="policy, breakdown: the variants to run; latency: variants to add (repeatable); "
        "one of: " + "; ".join(variants),
    )
    parser.add_argument(
        "--trigger", type=float, default=0.5, help="idle latency: trigger interval, seconds"
    )
    parser.add_argument(
        "--configured",
        action="store_true",
        help="policy, latency: start the session with the extension (wmobs.configure_spark) "
        "instead of a plain one",
    )
    parser.add_argument(
        "--keys",
        type=int,
        action="append",
        default=None,
        help="keys: the numbers of keys held to run (repeatable; default 1,000, 100,000 and "
        "1,000,000)",
    )
    parser.add_argument(
        "--rocksdb", action="store_true", help="keys: Spark's RocksDB state store provider"
    )
    parser.add_argument(
        "--ttl", default=None, help="keys: the policy's substream_ttl (e.g. '1 hour')"
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for the session of every benchmark that starts one (repeatable)",
    )
    args = parser.parse_args()
    for setting in args.conf:
        key, sep, value = setting.partition("=")
        if not sep:
            parser.error(f"--conf takes KEY=VALUE, not {setting!r}")
        _CONF[key] = value
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    _quiet_structlog()

    if args.only in (None, "event"):
        event = bench_event(args.events)
        print(f"one progress event through the listener: {event['progress_event_us']:.1f} µs")
        print(f"... with a trace of every micro-batch:   {event['traced_event_us']:.1f} µs")
        print(f"one scrape of one query's metrics:       {event['scrape_us']:.1f} µs")
    if args.only in (None, "scrape"):
        scrape = bench_scrape(args.queries)
        print(
            f"one scrape of /metrics, {args.queries} active queries: wmobs' endpoint "
            f"{scrape['endpoint_ms']:.1f} ms (over HTTP), OpenTelemetry's Prometheus exporter "
            f"{scrape['sdk_exporter_ms']:.1f} ms (median of 50)"
        )
    if args.only in (None, "listener"):
        result = bench_listener(args.rows, max(3, args.runs))
        _report(f"windowed aggregation, {args.rows:,} rows, 10 batches, median of runs:", result)
    if args.only in (None, "policy"):
        result = bench_policy(args.rows, max(3, args.runs), args.variant, args.configured)
        _report(f"time policies before a windowed aggregation, {args.rows:,} rows:", result)
        for on, off in [
            ("global policy + idle timeout", "global policy"),
            ("substreams, 10 keys + idle timeout", "substreams, 10 keys"),
        ]:
            if on in result and off in result:
                ratio = result[off]["median_s"] / result[on]["median_s"]
                print(f"  idle timeout on vs off ({off}): {ratio:.3f}x")
    if args.only == "breakdown":  # a diagnosis, not part of the full run
        report_breakdown(bench_breakdown(args.rows, max(3, args.runs), args.variant))
    if args.only in (None, "latency"):
        latency = bench_latency(max(3, args.runs), extra=args.variant, configured=args.configured)
        report_latency(latency, args.plot)
    if args.only == "keys":  # minutes per million keys: only when asked for
        keys = args.keys or [1_000, 100_000, 1_000_000]
        report_keys(bench_keys(keys, rocksdb=args.rocksdb, ttl=args.ttl), args.rocksdb, args.ttl)
    if args.only in (None, "idle"):
        idle = bench_idle_latency(max(3, args.runs), args.trigger)
        print(
            f"\nwindow end -> emission on a quiet source (idle timeout 1 s, "
            f"trigger {idle['trigger_s']} s): "
            f"median {idle['median_s']:.2f} s, max {idle['max_s']:.2f} s, "
            f"target {idle['target_s']:.1f} s; runs {idle['runs_s']}; "
            f"median micro-batch {idle['batch_median_s']:.2f} s"
        )


if __name__ == "__main__":
    main()
