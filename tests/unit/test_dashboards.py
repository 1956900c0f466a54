"""The Grafana dashboard: valid, provisionable, units everywhere, contract metrics only."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from wmobs.metrics import CONTRACT

from .contract import metric_names

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def exprs(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p["targets"]]


def test_dashboards_are_valid_with_unique_uids() -> None:
    assert DASHBOARDS
    uids = [load(p)["uid"] for p in DASHBOARDS]
    assert len(uids) == len(set(uids))
    for path in DASHBOARDS:
        text = path.read_text()
        assert "${DS_" not in text and "__inputs" not in text, "breaks file provisioning"


def test_overview_variables() -> None:
    variables = {
        v["name"]: v for v in load(ROOT / "dashboards/wmobs-overview.json")["templating"]["list"]
    }
    assert list(variables) == ["datasource", "job", "query"]
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("job", "query"):
        assert variables[name]["type"] == "query"
        assert variables[name]["definition"].startswith("label_values(")


def test_every_panel_has_unit_description_and_rate_interval() -> None:
    for path in DASHBOARDS:
        dashboard = load(path)
        ids = [p["id"] for p in dashboard["panels"]]
        assert len(ids) == len(set(ids))
        for panel in dashboard["panels"]:
            assert panel["fieldConfig"]["defaults"].get("unit"), panel["title"]
            assert panel.get("description"), panel["title"]
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            for target in panel["targets"]:
                for window in re.findall(r"\brate\([^\[]*\[([^\]]+)\]", target["expr"]):
                    assert window == "$__rate_interval", (panel["title"], target["expr"])


def test_dashboard_metrics_are_exactly_the_contract() -> None:
    used: set[str] = set()
    for path in DASHBOARDS:
        used |= metric_names("\n".join(exprs(load(path))))
    assert used == set(CONTRACT)


def test_delay_panel_draws_the_alert_threshold() -> None:
    from wmobs.rules import RulesConfig, parse_duration

    panel = next(
        p for p in load(ROOT / "dashboards/wmobs-overview.json")["panels"]
        if p["title"] == "Watermark delay"
    )  # fmt: skip
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps[-1]["value"] == parse_duration(RulesConfig().delay_threshold)


def test_committed_json_is_what_the_builder_writes() -> None:
    spec = importlib.util.spec_from_file_location(
        "build_overview", ROOT / "dashboards/build_overview.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert load(ROOT / "dashboards/wmobs-overview.json") == module.build()


def test_dashboards_export(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "wmobs", "dashboards", "export", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out/wmobs-overview.json").read_text() == (
        ROOT / "dashboards/wmobs-overview.json"
    ).read_text()
    assert (tmp_path / "out/wmobs-alerts.yaml").read_text() == (
        ROOT / "dashboards/wmobs-alerts.yaml"
    ).read_text()
    # A directory that cannot be made: one line naming it, no traceback.
    (tmp_path / "file").write_text("")
    failed = subprocess.run(
        [sys.executable, "-m", "wmobs", "dashboards", "export", str(tmp_path / "file" / "out")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert failed.returncode == 1
    assert (
        failed.stderr
        == f"wmobs dashboards: cannot write into {tmp_path}/file/out: Not a directory\n"
    )


def test_wheel_ships_dashboards_rules_and_jars(tmp_path: Path) -> None:
    """The wheel carries the dashboard, the rules and wmobs' JAR for every Spark line (built
    by the build hook with Maven; never a Java source: nothing is compiled at run time)."""
    import zipfile

    from wmobs.policy._jvm._extension import LINES

    done = subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(tmp_path)],
        capture_output=True, text=True, timeout=900, check=False, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = tmp_path.glob("wmobs-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"wmobs/_dashboards/wmobs-overview.json", "wmobs/_dashboards/wmobs-alerts.yaml"} <= names
    assert "wmobs/py.typed" in names
    jars = {f"wmobs/_jars/wmobs-spark-{line}_{scala}.jar" for line, scala in LINES.items()}
    assert jars <= names
    assert not [n for n in names if n.endswith(".java")]
    # `pip install wmobs` beside a platform's PySpark runs the policies: fsspec is no extra.
    (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    requires = [
        line for line in zipfile.ZipFile(wheel).read(metadata).decode().splitlines()
        if line.startswith("Requires-Dist: ")
    ]  # fmt: skip
    assert any(r.startswith("Requires-Dist: fsspec") and "extra" not in r for r in requires)
