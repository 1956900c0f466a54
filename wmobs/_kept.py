"""Counts kept beside a query's checkpoint, where the listener can recall them: the meeting
point of the Python engine, which keeps each task's counts of a micro-batch until Spark has
committed it (``wmobs.policy._python._kept``), and the listener, which recalls them for the
first micro-batch of a query run when a sink skipped it (a crash between the sink's commit and
Spark's). The JVM engine recalls its own, in the plan (``KeptCounts.java``).

A policy registers, when it is applied, how its counts are recalled; the listener calls that on
a thread of its own (it reads storage), never in a callback of Spark's."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Recall", "recall", "register_recall"]

Recall = Callable[[str, "str | None", int], "Mapping[str, Any] | None"]
"""``(query id, query name, batch id)`` -> the kept counts of that micro-batch, as the row
``observe`` would have reported (``None``: none kept)."""

_RECALLS: dict[str, dict[Any, Recall]] = {}
_LOCK = threading.Lock()


def register_recall(policy: str, where: Any, recall: Recall) -> None:
    """How the counts of ``policy`` (its ``policy`` label) are recalled; ``where`` tells apart
    policies of one name kept in different places (a policy applied twice registers once)."""
    with _LOCK:
        _RECALLS.setdefault(policy, {})[where] = recall


def recall(
    policy: str, query_id: str, query_name: str | None, batch: int
) -> Mapping[str, Any] | None:
    """The counts of ``policy`` kept for micro-batch ``batch`` of the query, from the first place
    registered that has them; ``None`` if none has (or none is registered in this process)."""
    with _LOCK:
        found = list(_RECALLS.get(policy, {}).values())
    for candidate in found:
        counts = candidate(query_id, query_name, batch)
        if counts is not None:
            return counts
    return None
