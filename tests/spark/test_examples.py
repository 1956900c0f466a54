"""The examples run as users would run them (each in its own process and Spark session)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _run(example: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``example`` run as a user runs it, in its own process; it must succeed."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / example), *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_toll_booth_example_conserves_every_record() -> None:
    done = _run("toll_booth.py", "--records", "1500")
    assert "conservation: ok" in done.stdout
    assert "records uploaded:        1500" in done.stdout
    for policy in ("invalid_time", "early_arrival", "late_arrival", "out_of_order"):
        assert policy in done.stdout, policy


def test_sql_policy_example_drops_early_readings_into_its_dead_letters() -> None:
    """``examples/sql_policy.py`` as its docstring says to run it (a short run): the SQL
    function's early-arrival drops counted by the listener, each one in the dead letters."""
    done = _run("sql_policy.py", "12")
    found = re.search(r"early arrivals dropped: (\d+); dead letters: (\d+) rows", done.stdout)
    assert found is not None, done.stdout[-3000:]
    dropped, kept = int(found[1]), int(found[2])
    assert dropped > 0 and kept == dropped
