"""Idle timeout: the logic that decides a firing (pure Python, no Spark, injectable clocks).

Spark advances a watermark only when a row passes its ``withWatermark`` operator, and runs a
micro-batch only when a source has new data, so the last window of a quiet stream never
closes. wmobs' idle timeout adds a *heartbeat* source to the query. When the stream (or, with
``substream_by``, a key) has had no input for ``idle_timeout`` of processing time, the
heartbeat makes Spark run a micro-batch and carries one *synthetic* row whose system timestamp
moves the watermark on; a filter right after ``withWatermark`` removes it before any operator
of yours sees it.

The rule, one stream (or key) at a time. Let ``a`` be the processing time of its last input,
``M`` the largest system timestamp it has had, and ``lag = a - M`` how far its event time
trailed processing time then. From ``a + idle_timeout`` on, its clock runs on with processing
time::

    clock(now) = now - max(idle_timeout, lag)          while no new input arrives

(never below ``M``; a stream whose event time led processing time keeps that lead, at
``now - idle_timeout + (M - a)``). So for a
stream whose event time tracks processing time (``lag <= idle_timeout``) the watermark
``clock - out_of_order`` passes the end ``E`` of an open window once processing time passes
``E + idle_timeout + out_of_order``: Atlas Stream Processing's rule, plus Spark's own
tolerance. A stream that lags by more than the timeout keeps its lag: the clock runs at
``now - lag``, where the stream's own events would have taken it, so a stream that resumes
after a pause is not judged out of order. In steps: at ``a + idle_timeout`` the clock moves
from ``M`` by ``min(max(lag, 0), idle_timeout)``, then one for one with processing time. Each
idle period that moves a clock is one **firing**, counted once however long it lasts.

The global heartbeat learns ``a`` from the query's offsets log (a batch had input when any
source other than the heartbeat moved its offset); substreams keep ``a`` per key in their
state. The rule is :func:`advance`, once for Python (the global heartbeat and substreams'
keys both call it); the JVM engine's copy is ``IdleClock.java``, and both answer to
``tests/reference/idle_clock.json``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from wmobs.observations import IDLE_TICK
from wmobs.policy._python._checkpoint import parse_offsets

__all__ = [
    "TICK",
    "Clocks",
    "InputActivity",
    "advance",
    "global_synthetic",
    "idle_jump_ms",
    "next_tick",
    "quiet_only",
    "read_input",
]

TICK = IDLE_TICK
"""Key of the heartbeat's offset (processing time of the tick, ms): how it is recognised in the
offsets log and in ``progress.sources``."""
IDLE_SINCE = "idle_since"
AVAILABLE_NOW = "available_now"
"""In a tick made by a ``Trigger.AvailableNow`` run: it then moves no clock of substreams in a
micro-batch that read input, as a global tick never does (journaled in the offsets log, so a
batch run again decides the same)."""


def next_tick(
    start: dict[str, Any],
    *,
    now_ms: int,
    interval_ms: int,
    idle_since_ms: int | None,
    available_now: bool = False,
) -> dict[str, Any]:
    """The heartbeat's latest offset: a new tick when one is due, else ``start`` (no batch).

    ``idle_since_ms`` is when the stream became idle (last input + timeout); ``None`` means
    "do not wait for idleness" (substreams: every key decides for itself, so ticks run always).
    ``available_now``: a ``Trigger.AvailableNow`` run asks, with ``now_ms`` its start.
    """
    last = int(start.get(TICK, 0))
    if now_ms - last < interval_ms:
        return start
    tick: dict[str, Any] = {TICK: now_ms}
    if idle_since_ms is not None:
        if now_ms < idle_since_ms:
            return start
        tick[IDLE_SINCE] = idle_since_ms
    if available_now:
        tick[AVAILABLE_NOW] = True
    return tick


def read_input(now: Sequence[str], before: Sequence[str] | None) -> bool:
    """Whether a micro-batch had input: a source other than the heartbeat moved its offset
    from the batch before (``before``: its source lines; ``None`` for none, then any source
    with an offset counts). ``IdleClock.readInput`` is the JVM engine's."""
    if before is None:
        return any(line.strip() != "-" and TICK not in line for line in now)
    return any(
        line != was and TICK not in line and TICK not in was
        for line, was in zip(now, before, strict=False)
    )


def quiet_only(tick: dict[str, Any], *, global_mode: bool) -> bool:
    """Whether ``tick`` may move clocks only in a micro-batch that read no input: always
    globally, and with substreams when a ``Trigger.AvailableNow`` run made it."""
    return global_mode or bool(tick.get(AVAILABLE_NOW))


def idle_jump_ms(last_input_ms: int, largest_ms: int, timeout_ms: int) -> int:
    """How far a clock moves when its idle period starts: the stream's lag behind processing
    time at its last input, at most the timeout (see the module rule)."""
    return min(max(last_input_ms - largest_ms, 0), timeout_ms)


Int64s = npt.NDArray[np.int64]


class Clocks(NamedTuple):
    """Clocks after :func:`advance`."""

    max_us: Int64s
    """The largest system timestamp, moved on where idle."""
    advanced_ms: Int64s
    """Up to when each idle clock has run (-1: not idle since its last input)."""
    moved: npt.NDArray[np.bool_]
    """Idle: moved on (perhaps by 0)."""
    fired: npt.NDArray[np.bool_]
    """An idle period that starts moving now: one firing."""


def advance(
    max_us: Int64s, seen_ms: Int64s, advanced_ms: Int64s, *, now_ms: int, timeout_ms: int
) -> Clocks:
    """The rule (module documentation) for many clocks at once: each clock's largest system
    timestamp, when it last had input and up to when its idle clock has run (-1 if not idle
    since), moved to ``now_ms``."""
    idle_since = seen_ms + timeout_ms
    moved = now_ms >= idle_since
    starting = advanced_ms < 0
    lag_ms = seen_ms - np.floor_divide(max_us, 1000)
    jump_ms = np.where(starting, np.clip(lag_ms, 0, timeout_ms), 0)  # idle_jump_ms
    begin = np.where(starting, idle_since, np.maximum(advanced_ms, idle_since))
    forward = max_us + (np.maximum(now_ms - begin, 0) + jump_ms) * 1000
    return Clocks(
        np.where(moved, forward, max_us).astype(np.int64),
        np.where(moved, now_ms, advanced_ms).astype(np.int64),
        moved,
        moved & starting,
    )


def global_synthetic(
    start: dict[str, Any],
    end: dict[str, Any],
    *,
    watermark_ms: int | None,
    delay_ms: int,
    timeout_ms: int,
) -> tuple[int, int] | None:
    """``(system timestamp µs, firings)`` of the synthetic row for the tick ``start -> end``.

    ``watermark_ms`` is the micro-batch's watermark, so ``watermark_ms + delay_ms`` is the
    largest system timestamp so far (synthetic ones included): the first tick of an idle period
    moves it by :func:`idle_jump_ms`, and each tick moves it on by the processing time elapsed
    since the later of the previous tick and the start of idleness. ``None``: nothing to move
    (no watermark yet, or no tick in this range).
    """
    if watermark_ms is None or TICK not in end or IDLE_SINCE not in end:
        return None
    idle_since = int(end[IDLE_SINCE])
    previous = int(start.get(TICK, 0))
    largest_us = (watermark_ms + delay_ms) * 1000
    clocks = advance(
        np.array([largest_us], dtype=np.int64),
        np.array([idle_since - timeout_ms], dtype=np.int64),
        np.array([previous if previous >= idle_since else -1], dtype=np.int64),
        now_ms=int(end[TICK]),
        timeout_ms=timeout_ms,
    )
    moved_us = int(clocks.max_us[0])
    if not clocks.moved[0] or (moved_us == largest_us and not clocks.fired[0]):
        return None
    return moved_us, int(clocks.fired[0])


def _batch_ids(names: Iterable[str]) -> list[int]:
    return sorted(int(n) for n in names if n.isdigit())


@dataclass
class InputActivity:
    """When the query last had input, from its offsets log (``<checkpoint>/offsets/<id>``).

    Each file is parsed by :func:`wmobs.policy._python._checkpoint.parse_offsets`: a batch had input
    when a source other than the heartbeat moved its offset. Files are read once each, as they
    appear; the log is short (Spark keeps about 100 batches).
    """

    list_names: Callable[[], Iterable[str]]
    read_text: Callable[[int], str]
    """The text of ``offsets/<id>``."""
    last_input_ms: int | None = None
    _scanned: int = -1
    _previous: tuple[str, ...] | None = field(default=None, repr=False)

    def refresh(self) -> int | None:
        """Read batches written since the last call; the processing time of the latest one
        that had input (``batchTimestampMs``), or ``None`` if none is known."""
        for batch in _batch_ids(self.list_names()):
            if batch <= self._scanned:
                continue
            try:
                entry = parse_offsets(self.read_text(batch))
            except (OSError, ValueError):
                break  # being written: read it next time
            sources = entry.sources
            # The first batch read: an older log's first retained batch counts as input
            # (idleness is then measured from a later time than the truth, never an earlier).
            if (self._previous is None and batch != 0) or read_input(sources, self._previous):
                self.last_input_ms = entry.timestamp_ms or 0
            self._previous = sources
            self._scanned = batch
        return self.last_input_ms
