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


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_demo_serves_metrics_and_stops_on_a_signal(stop: str) -> None:
    """The signal goes to the demo's whole process group, as a terminal's Ctrl-C (SIGINT,
    which Spark's JVM ignores) and ``timeout`` or systemd (SIGTERM, which stops the JVM too)
    send it: either way the demo stops with its last line and no traceback. (The demo makes no
    call into Spark's JVM while it runs: one that the SIGTERM interrupted failed with a
    traceback.)"""
    proc = subprocess.Popen(
        [sys.executable, "-m", "wmobs", "demo", "--port", "0", "--idle-every", "0",
         "--rate", "100", "--trigger", "1 second", "--duration", "300"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    seen: list[str] = []

    def read() -> None:
        for line in proc.stdout or []:
            seen.append(line)
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()

    def next_line(pattern: str, timeout: float = 180) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                assert proc.poll() is None, "the demo exited early:\n" + "".join(seen)[-5000:]
                continue
            if match := re.search(pattern, line):
                return match
        raise AssertionError(f"no line matching {pattern!r}:\n" + "".join(seen)[-5000:])

    try:
        url = next_line(r"metrics at (http://127\.0\.0\.1:\d+/metrics)").group(1)
        next_line(r"batch +\d+ .*watermark \d\d:\d\d:\d\d")  # a batch with a watermark
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
        os.killpg(proc.pid, getattr(signal, stop))
        next_line(r"wmobs demo: wrote \d+ events .* stopped\.", timeout=120)
        assert proc.wait(timeout=120) == 0
        assert not [line for line in seen if "Traceback" in line], "".join(seen)[-5000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_the_demo_runs_past_a_minute_without_a_traceback() -> None:
    """Tracebacks of PySpark's worker daemon (``BrokenPipeError``) appeared a minute into the
    demo: PySpark stops a Python worker that has been idle for a minute, and the worker's
    daemon then fails to flush into the closed socket. On the JVM engine the demo's query runs
    no Python worker at all (the batch's times, the counts, the idle heartbeat and the Parquet
    dead letters are the extension's), so there is none to stop. Its idle gaps are long enough
    for the idle timeout to close windows while no data comes."""
    done = subprocess.run(
        [sys.executable, "-m", "wmobs", "demo", "--port", "0", "--idle-every", "30",
         "--idle-for", "20", "--rate", "100", "--trigger", "1 second", "--duration", "80"],
        capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-5000:]
    assert "Traceback" not in output and "Error" not in output, output[-5000:]
    assert re.search(r"idle-firings [1-9]", done.stdout), done.stdout[-2000:]
    closed = re.findall(
        r"windows closed while the source is idle \(idle timeout\): (\d+)", done.stdout
    )
    assert closed and all(int(n) > 0 for n in closed), done.stdout[-2000:]
    assert "engine=jvm" in done.stderr
