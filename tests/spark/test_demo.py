"""The README's main job: ``wmobs demo`` serves /metrics with a growing watermark delay."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from wmobs.testing import parse_metrics

pytestmark = pytest.mark.spark


class Demo:
    """``wmobs demo`` with ``args`` in a process group of its own, its output read as it comes."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "wmobs", "demo", "--port", "0", "--rate", "100",
             "--trigger", "1 second", "--duration", "300", *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout or []:
            self.seen.append(line)
            self.lines.put(line)

    def output(self) -> str:
        return "".join(self.seen)[-5000:]

    def next_line(self, pattern: str, timeout: float = 180) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                assert self.proc.poll() is None, "the demo exited early:\n" + self.output()
                continue
            if match := re.search(pattern, line):
                return match
        raise AssertionError(f"no line matching {pattern!r}:\n" + self.output())

    def check_metrics(self) -> None:
        """/metrics, once a micro-batch had a watermark: the query's delay, rows and policy."""
        url = self.next_line(r"metrics at (http://127\.0\.0\.1:\d+/metrics)").group(1)
        self.next_line(r"batch +\d+ .*watermark \d\d:\d\d:\d\d")  # a batch with a watermark
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        samples = parse_metrics(text)
        query = ("query", "wmobs_demo")
        assert samples[("wmobs_watermark_delay_seconds", (query,))] > 0
        assert samples[("wmobs_input_rows_total", (query,))] > 0
        assert samples[("wmobs_query_active", (query,))] == 1
        policy = {k for k in samples if k[0] == "wmobs_policy_events_total"}
        assert len(policy) == 8  # every known rule/action pair, from the first batch on
        info = [k for k in samples if k[0] == "wmobs_policy_info"]
        assert [dict(labels)["engine"] for _, labels in info] == ["jvm"]

    def stop(self, signum: int) -> str:
        """The signal to the whole process group, as a terminal or ``timeout`` sends it: the
        demo stops with its last line and no traceback. Its whole output."""
        os.killpg(self.proc.pid, signum)
        self.next_line(r"wmobs demo: wrote \d+ events .* stopped\.", timeout=120)
        assert self.proc.wait(timeout=120) == 0
        assert not [line for line in self.seen if "Traceback" in line], self.output()
        return "".join(self.seen)

    def __enter__(self) -> Demo:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def python_workers(ancestor: int) -> list[str]:
    """The command lines of PySpark's Python workers (``pyspark.daemon``, ``pyspark.worker``)
    that descend from process ``ancestor``, read from ``/proc`` (PySpark's daemon puts itself
    in a process group of its own)."""
    parents, commands = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                commands[int(entry)] = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # (gone since it was listed)

    def descends(pid: int) -> bool:
        while pid > 1:
            if pid == ancestor:
                return True
            pid = parents.get(pid, 0)
        return False

    return [
        command
        for pid, command in commands.items()
        if re.search(r"pyspark\.(daemon|worker)", command) and descends(pid)
    ]


def test_the_demo_serves_metrics_closes_windows_while_idle_and_stops_on_ctrl_c() -> None:
    """Ctrl-C (SIGINT, which Spark's JVM ignores) stops the demo with its last line. The demo's
    query starts no Python worker (on the JVM engine the batch's times, the counts, the idle
    heartbeat and the Parquet dead letters are the extension's): tracebacks of PySpark's worker
    daemon (``BrokenPipeError``) once appeared a minute in, when PySpark stopped a worker idle
    for that long and its daemon failed to flush into the closed socket. Its idle gaps are long
    enough for the idle timeout to close windows while no data comes."""
    with Demo("--idle-every", "20", "--idle-for", "12") as demo:
        demo.check_metrics()
        demo.next_line(r"windows closed while the source is idle \(idle timeout\): [1-9]")
        for _ in range(3):  # micro-batches after the firing, data flowing again or not
            demo.next_line(r"batch +\d+ ")
        assert python_workers(demo.proc.pid) == []
        output = demo.stop(signal.SIGINT)
    assert "Error" not in output, output[-5000:]
    assert re.search(r"idle-firings [1-9]", output), output[-2000:]
    assert "engine=jvm" in output


def test_the_demo_stops_on_sigterm() -> None:
    """SIGTERM to the process group, as ``timeout`` or systemd send it, stops Spark's JVM too:
    the demo still stops with its last line and no traceback. (The demo makes no call into
    Spark's JVM while it runs: one that the SIGTERM interrupted failed with a traceback.)"""
    with Demo("--idle-every", "0") as demo:
        demo.check_metrics()
        demo.stop(signal.SIGTERM)
