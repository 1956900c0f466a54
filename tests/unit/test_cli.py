"""The ``wmobs`` command's own part: its usage, as the CLI reference prints it, and its version.
Each subcommand is tested with what it does (rules, advise, dashboards, demo)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from wmobs import __version__
from wmobs._cli import USAGE

CLI_PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "cli.md"


def wmobs(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "wmobs", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_the_cli_reference_shows_the_usage_the_command_prints() -> None:
    shown = re.search(r"```\n(usage: wmobs COMMAND.*?)```", CLI_PAGE.read_text(), re.S)
    assert shown is not None, "docs/reference/cli.md has no usage block"
    assert shown.group(1) == USAGE
    done = wmobs("--help")
    assert (done.returncode, done.stdout) == (0, USAGE)


def test_version_and_what_it_does_not_know() -> None:
    for flag in ("--version", "-V"):
        done = wmobs(flag)
        assert (done.returncode, done.stdout) == (0, f"wmobs {__version__}\n")
    unknown = wmobs("--verbose")
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("wmobs: unknown command '--verbose'")
    assert wmobs().returncode == 2  # no command: the usage, on stdout, exit 2
