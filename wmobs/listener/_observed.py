"""The listener's reading of ``progress.observedMetrics`` (the convention of
:mod:`wmobs.observations`): one micro-batch's counts, per policy."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from wmobs.observations import (
    ACTIONS,
    DEAD_LETTER_COLUMN,
    DEAD_LETTER_PLAN_COLUMN,
    DEAD_LETTER_PLANS,
    ENGINE_COLUMN,
    ENGINES,
    HISTOGRAMS,
    IDLE_TIMEOUT_COLUMN,
    INPUT_EVENT_TIME_COLUMN,
    INPUT_WATERMARK_COLUMN,
    RULES,
    STRUCT_COLUMN,
    SUBSTREAM_SPREAD_COLUMN,
    is_wmobs_observation,
    policy_label,
)

__all__ = [
    "HistogramCounts",
    "ObservedCounts",
    "PolicyCounts",
    "observation_columns",
    "parse_observed_metrics",
]

_RULE_COLUMNS: dict[str, tuple[str, str]] = {
    f"{prefix}:{r}:{a}": (r, a) for prefix in ("rule", "policy") for r in RULES for a in ACTIONS
}


@dataclass
class HistogramCounts:
    """One histogram of one policy: the count per bucket (the last one above every bound) and
    the sum (µs)."""

    buckets: list[int]
    sum_us: int = 0

    @property
    def cumulative(self) -> list[int]:
        """Counts at or below each bound."""
        return list(accumulate(self.buckets[:-1]))

    @property
    def count(self) -> int:
        return sum(self.buckets)

    def add(self, other: HistogramCounts) -> None:
        self.buckets = [a + b for a, b in zip(self.buckets, other.buckets, strict=True)]
        self.sum_us += other.sum_us


def bucket_count(histogram: str) -> int:
    """How many buckets ``histogram`` has: one per bound, and one above them all."""
    return len(HISTOGRAMS[histogram]) + 1


@dataclass
class PolicyCounts:
    """What one policy's observation carried in one micro-batch."""

    events: dict[tuple[str, str], int] = field(default_factory=dict)
    """(rule, action) -> rows."""
    dead_letter_rows: int | None = None
    idle_timeout_firings: int | None = None
    engine: str | None = None
    dead_letter_plan: str | None = None
    """How it keeps the rows it drops (one of :data:`~wmobs.observations.DEAD_LETTER_PLANS`)."""
    watermark_us: int | None = None
    event_time_us: int | None = None
    spread_us: int | None = None
    """Substreams: how far the slowest key seen runs behind the fastest (µs)."""
    histograms: dict[str, HistogramCounts] = field(default_factory=dict)

    def histogram(self, name: str) -> HistogramCounts:
        found = self.histograms.get(name)
        if found is None:
            found = self.histograms[name] = HistogramCounts([0] * bucket_count(name))
        return found


@dataclass
class ObservedCounts:
    """Counts that one progress event's wmobs observations carry (one micro-batch)."""

    policies: dict[str, PolicyCounts] = field(default_factory=dict)
    """Per policy (``policy`` label)."""
    unknown_columns: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.policies


def _count(value: Any) -> int:
    if value is None:
        return 0
    return int(value)


def observation_columns(row: Any) -> dict[str, Any]:
    """An observation's columns (a Row of ``progress.observedMetrics``, or a dict), with those
    of its :data:`~wmobs.observations.STRUCT_COLUMN` among them."""
    items = dict(row.asDict() if hasattr(row, "asDict") else row)
    struct = items.pop(STRUCT_COLUMN, None)  # the columns, as the JVM engine observes them
    if isinstance(struct, str):
        struct = json.loads(struct)
    if struct is not None:
        items.update(struct.asDict() if hasattr(struct, "asDict") else struct)
    return items


def parse_observed_metrics(observed: Mapping[str, Any] | None) -> ObservedCounts:
    """The wmobs columns of ``progress.observedMetrics`` (observation name -> row), per policy.

    Rows may be plain dicts (progress JSON) or :class:`pyspark.sql.Row` objects.
    """
    counts = ObservedCounts()
    if not observed:
        return counts
    for name, row in observed.items():
        if not is_wmobs_observation(name):
            continue
        label = policy_label(name)
        policy = counts.policies.get(label)
        if policy is None:
            policy = counts.policies[label] = PolicyCounts()
        for column, value in observation_columns(row).items():
            if not _fold_column(policy, column, value):
                counts.unknown_columns.append(f"{name}.{column}")
    return counts


def _fold_column(policy: PolicyCounts, column: str, value: Any) -> bool:
    """One column into ``policy``; False if it is not one of the convention's."""
    key = _RULE_COLUMNS.get(column)
    if key is not None:
        policy.events[key] = policy.events.get(key, 0) + _count(value)
    elif column == DEAD_LETTER_COLUMN:
        policy.dead_letter_rows = (policy.dead_letter_rows or 0) + _count(value)
    elif column == IDLE_TIMEOUT_COLUMN:
        policy.idle_timeout_firings = (policy.idle_timeout_firings or 0) + _count(value)
    elif column == ENGINE_COLUMN:
        if value not in ENGINES:
            return False
        policy.engine = str(value)
    elif column == DEAD_LETTER_PLAN_COLUMN:
        if value not in DEAD_LETTER_PLANS:
            return False
        policy.dead_letter_plan = str(value)
    elif column == INPUT_WATERMARK_COLUMN:
        policy.watermark_us = None if value is None else int(value)
    elif column == INPUT_EVENT_TIME_COLUMN:
        policy.event_time_us = None if value is None else int(value)
    elif column == SUBSTREAM_SPREAD_COLUMN:
        policy.spread_us = None if value is None else int(value)
    elif column.startswith("hist:"):
        return _fold_histogram(policy, column, value)
    else:
        return False
    return True


def _fold_histogram(policy: PolicyCounts, column: str, value: Any) -> bool:
    """One ``hist:<h>:buckets``, ``hist:<h1>*<h2>:buckets`` or ``hist:<h>:sum_us`` column into
    ``policy``; False if it is not one."""
    parts = column.split(":", 2)
    if len(parts) != 3 or parts[2] not in ("buckets", "sum_us"):
        return False
    histograms = parts[1].split("*")
    if (
        any(h not in HISTOGRAMS for h in histograms)
        or len(set(histograms)) != len(histograms)
        or (parts[2] == "sum_us" and len(histograms) > 1)
    ):
        return False
    targets = [policy.histogram(h) for h in histograms]
    if parts[2] == "sum_us":
        targets[0].sum_us += _count(value)
        return True
    for point in value or ():
        items = point.asDict() if hasattr(point, "asDict") else point
        index, count = (items["x"], items["y"]) if isinstance(items, Mapping) else items
        if index is None:
            continue
        rest, n = round(float(index)), round(float(count))  # x may be a rounding error off
        for target in reversed(targets):  # the last histogram's digit varies fastest
            rest, digit = divmod(rest, len(target.buckets) + 1) if len(targets) > 1 else (0, rest)
            if 0 <= digit < len(target.buckets):
                target.buckets[digit] += n
    return True
