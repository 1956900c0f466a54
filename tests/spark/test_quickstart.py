"""The README's quick start, as written, in a plain ``SparkSession`` (no ``spark.jars``, no
extension): it runs on the JVM engine, which ``apply`` loads into the running session, and no
Java compiler is ever called (a ``javac`` first on the ``PATH`` fails loudly if it is)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ._streaming import user_env

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
CHECK = """
import json as _json
_policy = monitor.snapshot(query.id).policy("rates")
print("RESULT " + _json.dumps({
    "engine": _policy.engine,
    "rows": sum(p["numInputRows"] for p in query.recentProgress),
    "dropped": sum(n for (_, action), n in _policy.events.items() if action == "dropped"),
    "info": "wmobs_policy_info{" in _text,
    "wmobs": wmobs.__file__,
    "spark": spark.version,
}))
"""
SCRAPE = """
import urllib.request as _request
_text = _request.urlopen("http://127.0.0.1:9464/metrics", timeout=10).read().decode()
"""


def quickstart() -> str:
    """The Python block that the README marks as the quick start."""
    text = (ROOT / "README.md").read_text()
    found = re.search(r"<!-- quickstart:[^>]*-->\s*```python\n(.*?)```", text, re.S)
    assert found, "README.md has no marked quick start"
    return found.group(1)


def test_the_readme_quick_start_runs_on_the_jvm_engine(tmp_path: Path) -> None:
    """In a fresh directory, with a ``javac`` that records any call first on the ``PATH``.
    With ``WMOBS_FROM_WHEEL=1`` (``./dev`` sets it where it installed the built wheel), wmobs
    must be the installed package, not the source tree."""
    block = quickstart()
    # What the endpoint serves, scraped at the end of the quick start's own wait.
    before, stop = block.split("while query.status", 1)
    (tmp_path / "quickstart.py").write_text(before + SCRAPE + "while query.status" + stop + CHECK)
    fake = tmp_path / "bin"
    fake.mkdir()
    called = tmp_path / "javac-was-called"
    (fake / "javac").write_text(f"#!/bin/sh\ntouch {called}\nexit 1\n")
    (fake / "javac").chmod(0o755)
    env = user_env(fake)
    done = subprocess.run(
        [sys.executable, "quickstart.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-5000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    assert result["engine"] == "jvm"
    assert result["rows"] > 0
    assert result["dropped"] == 0  # two seconds behind, five of tolerance: all kept
    assert result["info"], "no wmobs_policy_info within the quick start's wait"
    # Judged output within its wait: the console sink printed a window with its count.
    assert re.search(r"^\|\{\d{4}-\d\d-\d\d [^|]*\|\s*\d+\|$", done.stdout, re.M), done.stdout
    # It stops its query between micro-batches: no error lines, none as the JVM shuts down.
    assert not [line for line in done.stderr.splitlines() if " ERROR " in line], done.stderr
    assert not called.exists(), "a Java compiler was called"
    if os.environ.get("WMOBS_FROM_WHEEL") == "1":
        assert "site-packages" in result["wmobs"], result["wmobs"]
    # Quiet by default: the application configured no logging, so no wmobs line per batch.
    assert "wmobs.progress" not in done.stdout + done.stderr
