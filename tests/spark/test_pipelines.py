"""Time policies in Spark Declarative Pipelines: ``examples/pipeline`` run by
``spark-pipelines run --remote "local[2]" $(wmobs spark-submit-args)`` as its spec says,
over the worked example's events, one file per micro-batch: the global policy in a Python
``@dp.table`` and in a ``@dp.temporary_view`` that a table reads, one per device in an
``@dp.append_flow``, and SQL ``CREATE STREAMING TABLE``s with ``wmobs_time_policy`` and with
Azure Stream Analytics' ``TIMESTAMP BY ... OVER deviceId`` (tolerances from ``SET``s); every
flow's output is the reference cases', and a listener attached in a pipeline file counts each
flow's verdicts under the name SDP gives it (PySpark 4.1+)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ._streaming import user_env, write_rows
from .test_policy_spark import GLOBAL_EXPECTED, SUBSTREAM_EXPECTED, expected_seconds, worked_rows

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
FLOWS = ("judged", "judged_sql", "judged_per_device", "judged_from_view", "judged_asa")
# A pipeline file of the test's: the listener, attached at the file's top level, and what it
# saw of each flow written out when the pipeline's process ends.
LISTENER = f"""
import atexit, json, os, time
from pyspark.sql import SparkSession
import wmobs

monitor = wmobs.attach(SparkSession.active())


def _seen():
    # Each flow's events reach the listener after Spark posts them, its end last: wait for
    # the end (a while at most) so that its last micro-batch is in what is written out.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(
        (s := monitor.snapshot("spark_catalog.default." + flow)) is None or s.active
        for flow in {FLOWS!r}
    ):
        time.sleep(0.05)
    seen = {{}}
    for flow in {FLOWS!r}:
        snap = monitor.snapshot("spark_catalog.default." + flow)
        seen[flow] = None if snap is None else {{
            policy: {{f"{{r}}:{{a}}": n for (r, a), n in state.events.items() if n}}
            for policy, state in snap.policies.items()
        }}
    with open(os.environ["WMOBS_LISTENER_DUMP"], "w") as out:
        json.dump(seen, out)


atexit.register(_seen)
"""


def _project(tmp_path: Path) -> tuple[Path, str]:
    """The example pipeline in ``tmp_path``, over the worked example's events, its storage
    there too: (its directory, its spec's text)."""
    pytest.importorskip("pyspark.pipelines")
    if not (Path(sys.executable).parent / "spark-pipelines").exists():
        pytest.skip("this PySpark has no spark-pipelines")
    project = tmp_path / "pipeline"
    shutil.copytree(ROOT / "examples" / "pipeline", project)
    events = tmp_path / "events"
    for row in worked_rows():
        write_rows(events, f"event-{row['id']:02d}", [row])
    spec = (project / "spark-pipeline.yml").read_text()
    spec = spec.replace("file:///tmp/wmobs-pipeline/storage", (tmp_path / "storage").as_uri())
    spec = spec.replace("/tmp/wmobs-pipeline/events", str(events))
    (project / "spark-pipeline.yml").write_text(spec)
    return project, spec


def _spark_pipelines(project: Path, command: str, env: dict[str, str]) -> Any:
    return subprocess.run(
        ["bash", "-c", command],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_the_example_pipeline_judges_the_worked_example_exactly(spark: Any, tmp_path: Path) -> None:
    project, spec = _project(tmp_path)
    (project / "transformations" / "zz_listener.py").write_text(LISTENER)
    env = user_env(Path(sys.executable).parent)
    env["WMOBS_LISTENER_DUMP"] = str(tmp_path / "listener.json")
    # The command of the spec's comment, as written.
    command = next(
        line.split("#", 1)[1].strip() for line in spec.splitlines() if "spark-pipelines run" in line
    )
    assert command == 'spark-pipelines run --remote "local[2]" $(wmobs spark-submit-args)'
    done = _spark_pipelines(project, command, env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "Run is COMPLETED" in done.stdout + done.stderr
    warehouse = project / "spark-warehouse"
    for table, expected in (
        ("judged", GLOBAL_EXPECTED),
        ("judged_sql", GLOBAL_EXPECTED),
        ("judged_per_device", SUBSTREAM_EXPECTED),
        ("judged_from_view", GLOBAL_EXPECTED),
        ("judged_asa", SUBSTREAM_EXPECTED),
    ):
        rows = spark.read.parquet(str(warehouse / table)).collect()
        got = {r.id: int(r.system_timestamp.timestamp()) for r in rows}
        assert got == expected_seconds(expected), table
    seen = json.loads((tmp_path / "listener.json").read_text())
    worked = {"early_arrival:dropped": 1, "late_arrival:adjusted": 1}
    assert seen == {
        "judged": {"judged": {**worked, "out_of_order:adjusted": 2}},
        "judged_sql": {"judged_sql": {**worked, "out_of_order:adjusted": 2}},
        "judged_per_device": {"judged_per_device": worked},
        "judged_from_view": {"viewed": {**worked, "out_of_order:adjusted": 2}},
        "judged_asa": {"events": worked},
    }
    # Each flow's checkpoint, under the pipeline's storage, is where the policy found it.
    checkpoints = tmp_path / "storage" / "_checkpoints" / "spark_catalog" / "default"
    for table in FLOWS:
        offsets = checkpoints / table / table / "0" / "offsets"
        assert len([f for f in offsets.iterdir() if not f.name.startswith(".")]) == 12, table


# A flow whose policy has a bad argument (filled in by the test).
BAD_FLOW = """
from pyspark import pipelines as dp
from pyspark.sql import SparkSession

import wmobs

spark = SparkSession.active()


@dp.table
def bad():
    policy = wmobs.TimePolicy({arguments}, name="bad")
    return policy.apply(spark.readStream.table("events"))
"""


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        # Checked where SDP analyses the flow (in the JVM, as for the SQL function: its words).
        (
            'event_time="When"',
            "event_time: column 'When' is not in the input (columns: id, EventTime",
        ),
        # Refused as the flow's query function is called: the Python engine would analyse there.
        ('engine="python"', "engine: the Python engine cannot run in a pipeline's query function"),
    ],
    ids=["a missing column", "the Python engine"],
)
def test_a_bad_policy_fails_the_pipelines_dry_run_naming_the_argument(
    spark: Any, tmp_path: Path, arguments: str, error: str
) -> None:
    """``spark-pipelines dry-run`` (the graph analysed, nothing run) fails, naming the
    argument (and for a column, the input's columns)."""
    project, _ = _project(tmp_path)
    for flow in project.joinpath("transformations").iterdir():
        if flow.name != "events.py":
            flow.unlink()
    (project / "transformations" / "bad.py").write_text(BAD_FLOW.format(arguments=arguments))
    env = user_env(Path(sys.executable).parent)
    done = _spark_pipelines(
        project, 'spark-pipelines dry-run --remote "local[2]" $(wmobs spark-submit-args)', env
    )
    said = done.stdout + done.stderr
    assert done.returncode != 0, said[-3000:]
    assert error in said, said[-5000:]
