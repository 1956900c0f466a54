"""The Spark Connect page's steps, as written: a server started with ``start-connect-server.sh``
and ``$(wmobs spark-submit-args)``, a client's query with a time policy on the JVM engine and
the listener in the client, and the server stopped."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ._streaming import user_env

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "guide" / "spark-connect.md"
CHECK = """
import json as _json
import urllib.request as _request
_text = _request.urlopen("http://127.0.0.1:9464/metrics", timeout=10).read().decode()
_policy = monitor.snapshot(query.id).policy("rates")
print("RESULT " + _json.dumps({
    "engine": _policy.engine,
    "rows": sum(p.numInputRows for p in query.recentProgress),
    "info": [l for l in _text.splitlines() if l.startswith("wmobs_policy_info{")],
    "windows": spark.sql("SELECT count(*) FROM rate_windows").collect()[0][0],
}))
"""


def block(step: str) -> str:
    """The page's code block marked ``# tested: <step>``."""
    found = re.search(rf"```(?:bash|python)\n# tested: {step}\n(.*?)```", PAGE.read_text(), re.S)
    assert found, f"{PAGE.name} has no block marked '# tested: {step}'"
    return found.group(1)


def test_the_spark_connect_page_runs_as_written(tmp_path: Path) -> None:
    pyspark = pytest.importorskip("pyspark")
    if pyspark.__version__.startswith("3."):
        pytest.skip("the page is for PySpark 4's Connect server")
    client = block("client")
    before, stop = client.split("while query.status", 1)
    (tmp_path / "client.py").write_text(before + CHECK + "while query.status" + stop)
    env = user_env(Path(sys.executable).parent)
    steps = "set -e\n" + block("start")
    stop = block("stop")

    def bash(script: str, timeout: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", script],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    # The stop step needs the start step's variables: each runs after the start's exports.
    exports = "\n".join(line for line in steps.splitlines() if line.startswith("export "))
    started = bash(steps, 300)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        logs = list((tmp_path / "spark-logs").glob("*.out"))
        assert logs and "Spark Connect server started at: 127.0.0.1:15002" in logs[0].read_text()
        done = subprocess.run(
            [sys.executable, "client.py"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    finally:
        stopped = bash(exports + "\n" + stop, 120)
    assert stopped.returncode == 0 and "stopping" in stopped.stdout, stopped.stdout + stopped.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-5000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    assert result["engine"] == "jvm"  # the server's extension
    assert result["rows"] > 0
    assert result["windows"] > 0, "no window emitted within the page's wait"
    assert result["info"] and 'engine="jvm"' in result["info"][0], result["info"]
    # The client printed the windows it read back from the server.
    assert re.search(r"^\|\d{4}-\d\d-\d\d [^|]*\|\s*\d+\s*\|$", done.stdout, re.M), done.stdout
    assert not [line for line in done.stderr.splitlines() if " ERROR " in line], done.stderr
    assert (tmp_path / "checkpoints" / "rates" / "commits").is_dir()  # the server's cwd
    assert not list((tmp_path / "spark-pids").glob("*.pid"))
