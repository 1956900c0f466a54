"""Reading metric names out of PromQL, dashboards and docs, to check them against the contract."""

from __future__ import annotations

import re

from wmobs.metrics import CONTRACT

_METRIC = re.compile(r"\bwmobs_[a-z_]+")
_SUFFIXES = ("_bucket", "_count", "_sum")


def metric_names(text: str) -> set[str]:
    """Contract names used in ``text``; histogram series map to their family."""
    names = set()
    for found in _METRIC.findall(text):
        name = found
        for suffix in _SUFFIXES:
            if found not in CONTRACT and found.endswith(suffix):
                name = found[: -len(suffix)]
        names.add(name)
    return names


def markdown_table(text: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """``| `name` | type | labels | ... |`` rows of a Markdown table."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and re.fullmatch(r"`wmobs_[a-z_]+`", cells[0]):
            labels = tuple(label.strip() for label in cells[2].split(","))
            rows[cells[0].strip("`")] = (cells[1], labels)
    return rows
