"""The alerting rules: promtool check and unit tests, and the rules CLI."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wmobs.metrics import CONTRACT
from wmobs.rules import ALERTS, RulesConfig, parse_duration, render

from .contract import metric_names

ROOT = Path(__file__).resolve().parents[2]
RULE_FILES = sorted((ROOT / "dashboards").glob("*.yaml"))
RULE_TESTS = sorted((ROOT / "tests" / "rules").glob("*-test.yaml"))


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:  # fail, never skip: ./dev test installs Debian's prometheus package
        pytest.fail("promtool not found: apt-get install prometheus (./dev test does)")
    return path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)


def test_rule_files_pass_promtool_check() -> None:
    assert RULE_FILES
    done = run(promtool(), "check", "rules", *map(str, RULE_FILES))
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_unit_tests_pass() -> None:
    assert RULE_TESTS
    done = run(promtool(), "test", "rules", *map(str, RULE_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_promtool_case_and_a_runbook_section() -> None:
    tests = "\n".join(p.read_text() for p in RULE_TESTS)
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    for alert in ALERTS:
        assert f"alertname: {alert}" in tests, alert
        assert f"## {alert}\n" in runbook, alert


def test_shipped_rules_are_the_rendered_defaults() -> None:
    assert (ROOT / "dashboards" / "wmobs-alerts.yaml").read_text() == render(RulesConfig())


def test_rules_only_use_contract_metrics() -> None:
    assert metric_names(render()) <= set(CONTRACT)


def test_rules_cli_renders_other_thresholds(tmp_path: Path) -> None:
    done = run(
        sys.executable, "-m", "wmobs", "rules",
        "--delay-threshold", "10m", "--selector", 'job="etl"',
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert 'wmobs_watermark_delay_seconds{job="etl"} > 600' in done.stdout
    out = tmp_path / "rules.yaml"
    out.write_text(done.stdout)
    checked = run(promtool(), "check", "rules", str(out))
    assert checked.returncode == 0, checked.stdout + checked.stderr

    bad = run(sys.executable, "-m", "wmobs", "rules", "--idle-for", "soon")
    assert bad.returncode == 2
    assert "not a Prometheus duration" in bad.stderr


@pytest.mark.parametrize(
    "selector", ["job=etl", 'job="etl" env="prod"', '{job="etl"', 'job="a"b"', '9job="x"']
)
def test_a_selector_that_is_not_promql_matchers_is_refused(selector: str) -> None:
    """Rendered, each of these was an expression Prometheus refuses to load."""
    with pytest.raises(ValueError, match="selector: PromQL label matchers"):
        RulesConfig(selector=selector)
    bad = run(sys.executable, "-m", "wmobs", "rules", "--selector", selector)
    assert bad.returncode == 2 and "selector: PromQL label matchers" in bad.stderr


def test_a_whole_selector_in_braces_is_taken_for_its_matchers(tmp_path: Path) -> None:
    config = RulesConfig(selector=" {job=\"etl\", env=~'prod|stage', team!=`a,b`} ")
    assert config.sel('x="y"') == '{job="etl", env=~\'prod|stage\', team!=`a,b`, x="y"}'
    out = tmp_path / "rules.yaml"
    out.write_text(render(config))
    checked = run(promtool(), "check", "rules", str(out))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_parse_duration() -> None:
    assert parse_duration("1h30m") == 5400
    assert parse_duration("45s") == 45
    with pytest.raises(ValueError, match="duration"):
        parse_duration("")
