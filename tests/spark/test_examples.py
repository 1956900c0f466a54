"""The examples run as users would run them (each in its own process and Spark session)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_toll_booth_example_conserves_every_record() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "toll_booth.py"), "--records", "1500"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "conservation: ok" in done.stdout
    assert "records uploaded:        1500" in done.stdout
    for policy in ("invalid_time", "early_arrival", "late_arrival", "out_of_order"):
        assert policy in done.stdout, policy
