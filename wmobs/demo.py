"""``wmobs demo``: a real local streaming job with wmobs attached, serving ``/metrics``.

A generator thread writes one JSON-lines file per second of sensor readings with realistic
disorder into a temporary directory: most events a little behind the wall clock, some out of
order by up to 20 s, some late by one to two minutes, a few from devices whose clocks run ahead,
and regular idle gaps with no files at all. Each reading carries the time the generator
received it (``arrival_time``). A :class:`wmobs.TimePolicy` judges every reading (early ones
dropped, late ones dropped, out-of-order ones adjusted up to the watermark; dropped ones go to a
dead-letter directory), and a windowed aggregation runs on its ``system_timestamp``. During
each idle gap the policy's idle timeout closes the last windows, which Spark alone would leave
open until the next reading.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import structlog

from wmobs._session import local_spark
from wmobs._spark import jvm_exited, jvm_process
from wmobs.listener import BatchSummary, QuerySnapshot, format_timestamp
from wmobs.policy import DeadLetter, TimePolicy

__all__ = ["DisorderedSource", "main"]

QUERY_NAME = "wmobs_demo"
WINDOW = "10 seconds"


@dataclass
class Disorder:
    """Shares of events that are out of order, late and early, in [0, 1]."""

    out_of_order: float = 0.10
    late: float = 0.02
    early: float = 0.01


@dataclass
class DisorderedSource:
    """Writes ``rate`` readings a second as JSON-lines files into ``directory``.

    Every ``idle_every`` seconds it stops writing for ``idle_for`` seconds (an idle source).
    Files appear atomically (written under a dot-name, then renamed), as Spark's file source
    needs. ``seed`` makes the disorder reproducible.
    """

    directory: Path
    rate: int = 200
    devices: int = 8
    idle_every: float = 60.0
    idle_for: float = 15.0
    disorder: Disorder = field(default_factory=Disorder)
    seed: int = 7
    files: int = field(default=0, init=False)
    rows: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wmobs-demo-source", daemon=True)
        self._started = time.time()

    def events(self, now: float, count: int) -> list[dict[str, Any]]:
        rnd, d = self._random, self.disorder
        out = []
        for _ in range(count):
            roll = rnd.random()
            event_time = now - rnd.uniform(0.0, 2.0)  # network and buffering delay
            if roll < d.late:
                event_time -= rnd.uniform(60.0, 120.0)
            elif roll < d.late + d.early:
                event_time += rnd.uniform(5.0, 20.0)  # a device clock running ahead
            elif roll < d.late + d.early + d.out_of_order:
                event_time -= rnd.uniform(2.0, 20.0)
            out.append(
                {
                    "device": f"device-{rnd.randrange(self.devices)}",
                    "event_time": format_timestamp(event_time),
                    "arrival_time": format_timestamp(now),
                    "value": round(rnd.gauss(20.0, 5.0), 2),
                }
            )
        return out

    def write(self, now: float) -> None:
        lines = "\n".join(json.dumps(e) for e in self.events(now, self.rate)) + "\n"
        name = f"events-{self.files:08d}.json"
        tmp = self.directory / f".{name}.tmp"
        tmp.write_text(lines)
        os.replace(tmp, self.directory / name)
        self.files += 1
        self.rows += self.rate

    def idle_at(self, elapsed: float) -> bool:
        return self.idle_every > 0 and elapsed % self.idle_every >= self.idle_every - self.idle_for

    @property
    def idle(self) -> bool:
        """Whether the source is in one of its idle gaps now."""
        return self.idle_at(time.time() - self._started)

    def _run(self) -> None:
        started = self._started = time.time()
        while not self._stop.is_set():
            now = time.time()
            if not self.idle_at(now - started):
                self.write(now)
            self._stop.wait(1.0)

    def start(self) -> DisorderedSource:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


POLICY = TimePolicy(
    event_time="event_time",
    arrival_time="arrival_time",
    early_arrival="10 seconds",  # clocks more than 10 s fast: dropped (dead-lettered)
    late_arrival="1 minute",  # more than a minute behind arrival: dropped (dead-lettered)
    late_arrival_action="drop",
    out_of_order="10 seconds",  # watermark = newest reading - 10 s; below it: adjusted up
    idle_timeout="3 seconds",  # quiet for 3 s: the clock runs on, the last windows close
    name="demo",
)


def build_query(
    spark: Any,
    source_dir: Path,
    checkpoint: Path,
    dead_letters: Path,
    trigger: str = "2 seconds",
    *,
    engine: str = "auto",
) -> Any:
    """The demo's streaming query: time policy, then a windowed count and mean per device."""
    from pyspark.sql import functions as F

    events = (
        spark.readStream.schema(
            "device STRING, event_time TIMESTAMP, arrival_time TIMESTAMP, value DOUBLE"
        )
        .option("maxFilesPerTrigger", 10)
        .json(str(source_dir))
    )
    judged = replace(POLICY, engine=engine).apply(
        events,
        checkpoint_location=str(checkpoint),
        # Parquet, which the JVM engine writes itself: the demo's query runs no Python worker.
        dead_letter=DeadLetter(str(dead_letters)),
    )
    windows = judged.groupBy(F.window("system_timestamp", WINDOW), "device").agg(
        F.count("*").alias("readings"), F.avg("value").alias("mean_value")
    )
    return (
        windows.writeStream.queryName(QUERY_NAME)
        .outputMode("append")
        .format("memory")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=trigger)
        .start()
    )


def _await_jvm_exit(spark: Any, timeout: float = 3.0) -> None:
    """Wait a little for Spark's JVM to exit: a SIGTERM to the whole process group (``timeout``,
    systemd, a closed terminal) stops it as well as the demo, and calls into a JVM on its way
    out fail with tracebacks (it exits about 0.5 s after the signal on 2 cores). Ctrl-C does
    not stop it (PySpark starts the JVM ignoring SIGINT), nor does a SIGTERM to the demo's
    process alone, after which the demo waits the whole ``timeout`` and stops the query."""
    proc = jvm_process(spark)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout)


def stop_between_batches(query: Any, timeout: float = 30.0) -> None:
    """Stop ``query`` while no micro-batch runs.

    ``query.stop()`` during a micro-batch cancels its tasks: the JVM closes the sockets of
    their Python workers (the policy's watermark read, the dead-letter stage), whose last
    flush then fails, and PySpark's worker daemon prints a ``BrokenPipeError`` traceback for
    each. Between micro-batches there is nothing to cancel.
    """
    deadline = time.monotonic() + timeout
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.02)
    query.stop()


def _summary_line(snap: QuerySnapshot, batch: BatchSummary, now: float) -> str:
    def age(value: float | None) -> str:
        return "-" if value is None else f"{now - value:6.1f}s"

    watermark = "-" if snap.watermark is None else format_timestamp(snap.watermark)[11:19]
    policy = snap.policy()
    events = policy.events if policy else {}
    firings = (policy.idle_timeout_firings if policy else None) or 0
    return (
        f"batch {batch.batch_id:4d}  rows {batch.input_rows:5d}  watermark {watermark:>8}  "
        f"delay {age(snap.watermark)}  lag {age(snap.max_event_time)}  "
        f"early-dropped {events.get(('early_arrival', 'dropped'), 0)}  "
        f"late-dropped {events.get(('late_arrival', 'dropped'), 0)}  "
        f"out-of-order-adjusted {events.get(('out_of_order', 'adjusted'), 0)}  "
        f"idle-firings {firings}"
    )


def _configure_logging() -> None:
    # The demo is an application: it may configure structlog (the library never does).
    import logging

    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


def _check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What the demo cannot run with, as usage errors (exit 2) before anything starts."""
    from wmobs.policy._durations import to_micros

    if args.rate < 1:
        parser.error(f"--rate: at least 1 event per second, got {args.rate}")
    if args.duration is not None and args.duration <= 0:
        parser.error(f"--duration: a number of seconds above 0, got {args.duration:g}")
    if args.idle_every < 0:
        parser.error(f"--idle-every: seconds (0: no idle gaps), got {args.idle_every:g}")
    if args.idle_every > 0 and not 0 <= args.idle_for < args.idle_every:
        parser.error(
            f"--idle-for: from 0 to less than --idle-every ({args.idle_every:g} s), "
            f"got {args.idle_for:g}"
        )
    try:
        to_micros(args.trigger, "--trigger")
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    if not 0 <= args.port <= 65535:
        parser.error(f"--port: from 0 to 65535, got {args.port}")


def _port_taken(addr: str, port: int) -> str | None:
    """Why ``addr:port`` cannot serve /metrics (in use, or no such address), or None."""
    try:
        with socket.create_server((addr, port)):
            return None
    except OSError as exc:
        return f"cannot serve /metrics on {addr}:{port}: {exc.strerror or exc}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="wmobs demo",
        description="Run a real local streaming job with wmobs attached, serving /metrics.",
    )
    parser.add_argument("--port", type=int, default=9464, help="metrics port (default 9464)")
    parser.add_argument("--addr", default="127.0.0.1", help="metrics address (127.0.0.1)")
    parser.add_argument("--duration", type=float, default=None, help="stop after N seconds")
    parser.add_argument("--rate", type=int, default=200, help="events per second (200)")
    parser.add_argument(
        "--idle-every", type=float, default=60.0, help="idle gap period (60 s; 0: none)"
    )
    parser.add_argument("--idle-for", type=float, default=25.0, help="idle gap length (25 s)")
    parser.add_argument("--trigger", default="2 seconds", help="trigger interval (2 seconds)")
    parser.add_argument(
        "--engine", default="auto", choices=("auto", "jvm", "python"), help="time policy engine"
    )
    args = parser.parse_args(argv)
    _check_arguments(parser, args)
    taken = _port_taken(args.addr, args.port)
    if taken is not None:  # said before Spark takes seconds to start
        print(f"wmobs demo: {taken}; choose another with --port", file=sys.stderr)
        return 1

    import wmobs

    _configure_logging()
    workdir = Path(tempfile.mkdtemp(prefix="wmobs-demo-"))
    source = DisorderedSource(
        workdir / "in", rate=args.rate, idle_every=args.idle_every, idle_for=args.idle_for
    ).start()
    spark = local_spark("wmobs-demo")
    stop = threading.Event()
    signals: list[int] = []

    def on_signal(signum: int, _frame: Any) -> None:
        signals.append(signum)
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    def print_batch(snap: QuerySnapshot, batch: BatchSummary) -> None:
        print(_summary_line(snap, batch, time.time()), flush=True)
        if batch.output_rows and source.idle:
            closed = batch.output_rows
            print(f"windows closed while the source is idle (idle timeout): {closed}", flush=True)

    try:
        monitor = wmobs.attach(
            spark, prometheus_port=args.port, prometheus_addr=args.addr, on_progress=print_batch
        )
    except OSError as exc:  # taken since it was checked
        source.stop()
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        print(f"wmobs demo: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"wmobs demo: metrics at {monitor.metrics_url}  (Ctrl-C to stop)", flush=True)
    query = build_query(
        spark,
        workdir / "in",
        workdir / "checkpoint",
        workdir / "dead-letters",
        args.trigger,
        engine=args.engine,
    )
    print(f"wmobs demo: dead letters in {workdir / 'dead-letters'}", flush=True)
    deadline = None if args.duration is None else time.monotonic() + args.duration
    try:
        # No call into Spark's JVM while the demo runs (the listener tells it what happens): a
        # SIGTERM to the process group stops the JVM too, and a call it interrupted would fail.
        while not stop.wait(0.5):
            if deadline is not None and time.monotonic() >= deadline:
                break
            snap = monitor.snapshot(QUERY_NAME)
            if snap is not None and not snap.active:
                break
        if not stop.is_set() and query.exception() is not None:
            print(f"query failed: {query.exception()}", file=sys.stderr)
            return 1
    finally:
        source.stop()
        if signal.SIGTERM in signals:
            _await_jvm_exit(spark)
        if jvm_exited(spark):
            why = "on the signal too" if signals else "on its own"
            print(f"wmobs demo: Spark's JVM stopped {why}", file=sys.stderr)
        else:
            stop_between_batches(query)
        monitor.close()  # without calling into an exited JVM
        if not jvm_exited(spark):
            spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"wmobs demo: wrote {source.rows} events in {source.files} files; stopped.")
    return 0
