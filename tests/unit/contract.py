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


def markdown_table(text: str, planned: bool = False) -> dict[str, tuple[str, tuple[str, ...]]]:
    """``| `name` | type | labels | ... |`` rows of a Markdown table; with ``planned``, the
    rows marked ``| `name` (planned) | ...`` instead."""
    name = r"`(wmobs_[a-z_]+)` \(planned\)" if planned else r"`(wmobs_[a-z_]+)`"
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        found = re.fullmatch(name, cells[0]) if len(cells) >= 3 else None
        if found:
            labels = tuple(label.strip() for label in cells[2].split(","))
            rows[found.group(1)] = (cells[1], labels)
    return rows
