"""The dashboards shipped in the wheel (``wmobs/_dashboards``), or the repo's ``dashboards/``."""

from __future__ import annotations

from pathlib import Path

__all__ = ["DASHBOARD_FILES", "dashboards_dir"]

DASHBOARD_FILES: tuple[str, ...] = ("wmobs-overview.json", "wmobs-alerts.yaml")


def dashboards_dir() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here / "_dashboards", here.parent / "dashboards"):
        if all((candidate / name).is_file() for name in DASHBOARD_FILES):
            return candidate
    raise FileNotFoundError("wmobs' dashboards are missing from this installation")
