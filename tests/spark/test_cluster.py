"""The policies where executors are separate processes (``local-cluster[2,1,1024]``), and one of
them dies mid-stream; in a child process (see ``cluster_job.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark


def test_policies_on_separate_executors_and_an_executor_killed_mid_stream() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.spark.cluster_job"],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-5000:]
    result = json.loads(lines[-1][len("RESULT ") :])

    assert result["master"] == "local-cluster[2,1,1024]"
    assert result["executors"] == 2  # two executor JVMs, each with its own Python workers
    # The worked example, exactly: globally (one event per micro-batch) and with substreams.
    assert result["global_exact"] is True
    assert result["global_counts"] == {
        "early_arrival:dropped": 1,
        "late_arrival:adjusted": 1,
        "out_of_order:adjusted": 2,
    }
    assert result["substreams_exact"] is True
    # One executor killed (SIGKILL) mid-stream: the query goes on, nothing lost or doubled.
    kill = result["kill"]
    assert len(kill["killed"]) == 1 and kill["executors_before"] == 2
    assert kill["rows_in"] == kill["input_rows_counter"] == 320
    assert kill["kept"] + kill["dead"] == kill["rows_in"]
    assert kill["kept_unique"] == kill["kept"] and kill["dead_unique"] == kill["dead"]
    assert kill["overlap"] == 0
    assert kill["dead"] == kill["dead_letter_counter"] == kill["dropped_counters"] == 96
