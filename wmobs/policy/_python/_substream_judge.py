"""Substreams, the per-key judge: one watermark per key, exact per event in arrival order.

The per-key rule, event at a time: a key's watermark is the largest system timestamp of its
earlier kept events minus the out-of-order tolerance; an event below it is out of order and is
adjusted up to it or dropped. Neither an adjusted nor a dropped event can raise the key's
maximum (both stay below it), so the maximum before event *i* is the running maximum of the
key's candidate events before *i*: :func:`judge_rows` computes a whole batch of many keys at
once with NumPy, no per-row or per-key Python loop (the tests compare it with the
event-at-a-time definition). :func:`judge_partition` adds what one micro-batch does to the
state of its keys (TTL, last seen, idle clocks: :func:`advance_idle`).

The state these functions work on is :class:`~wmobs.policy._python._substream_state.KeyState`; the
``mapInArrow`` stage that feeds them is :mod:`wmobs.policy._python._substream_stage`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from wmobs.policy._python._idle import advance
from wmobs.policy._python._substream_state import KeyState

__all__ = [
    "NONE",
    "Judged",
    "PartitionVerdicts",
    "SubstreamConfig",
    "advance_idle",
    "judge_partition",
    "judge_rows",
]

NONE = np.iinfo(np.int64).min
"""No maximum yet."""


@dataclass
class Judged:
    system_us: npt.NDArray[np.int64]
    out_of_order: npt.NDArray[np.bool_]
    keys: npt.NDArray[np.int64]
    """The keys of the rows, sorted, each once."""
    last: npt.NDArray[np.int64]
    """Per key: the largest system timestamp after the rows (state included; ``NONE``: none)."""
    behind_us: npt.NDArray[np.int64]
    """How far each candidate row is behind its key's largest system timestamp before it (0
    if not behind or the key has none yet); -1 for rows not in play."""


def judge_rows(
    keys: npt.NDArray[np.int64],
    arrival_us: npt.NDArray[np.int64],
    ts_us: npt.NDArray[np.int64],
    candidate: npt.NDArray[np.bool_],
    initial: Callable[[npt.NDArray[np.int64]], npt.NDArray[np.int64]],
    *,
    tolerance_us: int,
    drop: bool,
    place: npt.NDArray[np.int64] | None = None,
) -> Judged:
    """Judge rows of many keys: per key in arrival order (ties by ``place``, then in input
    order) against the
    key's own watermark, each key starting from its maximum before the rows (``initial``, given
    the sorted unique keys; ``NONE`` for none). ``candidate`` marks rows still in play (not
    dropped by an earlier policy); others pass through and do not move the watermark. With
    ``drop`` out-of-order rows keep their timestamps (the caller drops them); otherwise they are
    adjusted up to the watermark. Results are in the input order.

    NumPy throughout: sort by (key, arrival, place, input position), a running maximum that
    restarts at every key, back to input order."""
    n = len(keys)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Judged(ts_us.astype(np.int64), np.zeros(0, bool), empty, empty, empty)
    ties = (np.arange(n),) if place is None else (np.arange(n), place)
    order = np.lexsort((*ties, arrival_us, keys))
    k, ts, cand = keys[order], ts_us[order], candidate[order]
    first = np.ones(n, dtype=bool)
    first[1:] = k[1:] != k[:-1]
    group = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    unique_keys = k[starts]
    start = initial(unique_keys)
    # Running maximum restarting at each key, on ranks (0 = nothing yet): each key's ranks are
    # shifted into a band of their own, small enough never to overflow.
    values, rank = np.unique(ts[cand], return_inverse=True)
    ranks = np.zeros(n, dtype=np.int64)
    ranks[cand] = rank.reshape(-1) + 1
    band = np.int64(len(values) + 1)
    inclusive = np.maximum.accumulate(ranks + group * band) - group * band
    before_rank = np.empty(n, dtype=np.int64)
    before_rank[0] = 0
    before_rank[1:] = inclusive[:-1]
    before_rank[first] = 0
    lookup = np.concatenate(([NONE], values.astype(np.int64)))
    before = np.maximum(lookup[before_rank], start[group])
    has_mark = before != NONE
    watermark = np.where(has_mark, before - tolerance_us, NONE)
    ooo = cand & has_mark & (ts < watermark)
    system = ts if drop else np.where(ooo, watermark, ts)
    last = np.maximum(lookup[np.maximum.reduceat(ranks, starts)], start)
    behind = np.where(cand, np.where(has_mark, np.maximum(before - ts, 0), 0), -1)
    out_system = np.empty(n, dtype=np.int64)
    out_ooo = np.empty(n, dtype=bool)
    out_behind = np.empty(n, dtype=np.int64)
    out_system[order] = system
    out_ooo[order] = ooo
    out_behind[order] = behind
    return Judged(out_system, out_ooo, unique_keys, last, out_behind)


@dataclass(frozen=True)
class SubstreamConfig:
    tolerance_us: int
    drop: bool
    ttl_ms: int | None = None
    idle_timeout_ms: int | None = None
    candidate_bits: int = 0
    """Verdict bits of rows no longer in play (dropped by an earlier policy)."""
    ooo_bit: int = 0
    """The verdict bit of an out-of-order row."""


@dataclass
class PartitionVerdicts:
    system_us: npt.NDArray[np.int64]
    verdicts: npt.NDArray[np.int64]
    synthetic: tuple[int, int] | None
    """With the idle timeout, when keys' clocks moved: (largest moved timestamp µs, firings)."""
    behind_us: npt.NDArray[np.int64]
    """As :attr:`Judged.behind_us`."""
    spread: tuple[int, int] | None = None
    """The smallest and the largest of the rows' keys' largest system timestamps after them
    (µs), ``None`` for no key with one: how far the slowest key seen runs behind the fastest."""


def judge_partition(
    state: KeyState,
    keys: npt.NDArray[np.int64],
    arrival_us: npt.NDArray[np.int64],
    ts_us: npt.NDArray[np.int64],
    verdicts: npt.NDArray[np.int64],
    *,
    heartbeat: bool,
    now_ms: int,
    config: SubstreamConfig,
    place: npt.NDArray[np.int64] | None = None,
) -> tuple[PartitionVerdicts, KeyState]:
    """One micro-batch of real rows (any keys) against ``state``: keys not seen for the TTL
    forgotten, out-of-order verdicts (as :func:`judge_rows`), last-seen times and, on a
    ``heartbeat``, the idle clocks moved (:func:`advance_idle`). Returns the new state."""
    if config.ttl_ms is not None:  # forgotten first: a key back after the TTL starts afresh
        state = state._take(state.seen_ms >= now_ms - config.ttl_ms)

    def initial(unique_keys: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        found, at = _find(state.keys, unique_keys)
        start = np.full(len(unique_keys), NONE, dtype=np.int64)
        start[found] = state.max_us[at[found]]
        return start

    judged = judge_rows(
        keys,
        arrival_us,
        ts_us,
        (verdicts & config.candidate_bits) == 0,
        initial,
        tolerance_us=config.tolerance_us,
        drop=config.drop,
        place=place,
    )
    found, at = _find(state.keys, judged.keys)
    # Keys with state: new maximum, seen now, no longer idle. New keys: kept if a row counted
    # (every row of a new key may have been dropped: then there is nothing to remember).
    state.max_us[at[found]] = judged.last[found]
    state.seen_ms[at[found]] = now_ms
    state.advanced_ms[at[found]] = -1
    new = ~found & (judged.last != NONE)
    if new.any():
        count = int(new.sum())
        added = KeyState(
            judged.keys[new],
            judged.last[new],
            np.full(count, now_ms, dtype=np.int64),
            np.full(count, -1, dtype=np.int64),
        )
        state = KeyState.concat([state, added])
    synthetic = None
    if heartbeat and config.idle_timeout_ms is not None:
        synthetic = advance_idle(state, now_ms=now_ms, timeout_ms=config.idle_timeout_ms)
    verdicts = np.where(judged.out_of_order, verdicts | config.ooo_bit, verdicts)
    largest = judged.last[judged.last != NONE]
    spread = (int(largest.min()), int(largest.max())) if len(largest) else None
    return PartitionVerdicts(judged.system_us, verdicts, synthetic, judged.behind_us, spread), state


def _find(
    sorted_keys: npt.NDArray[np.int64], wanted: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.intp]]:
    """Which of ``wanted`` are in ``sorted_keys``, and where (an index only where found)."""
    at = np.searchsorted(sorted_keys, wanted)
    found = at < len(sorted_keys)
    found[found] = sorted_keys[at[found]] == wanted[found]
    return found, np.where(found, at, 0)


def advance_idle(state: KeyState, *, now_ms: int, timeout_ms: int) -> tuple[int, int] | None:
    """The idle-timeout rule (:func:`wmobs.policy._python._idle.advance`) on every key, in place:
    every key idle for ``timeout_ms`` has its clock moved on. ``(largest moved timestamp µs,
    firings)``, or ``None`` when no clock moved."""
    clocks = advance(
        state.max_us, state.seen_ms, state.advanced_ms, now_ms=now_ms, timeout_ms=timeout_ms
    )
    if not clocks.moved.any():
        return None
    state.max_us = clocks.max_us
    state.advanced_ms = clocks.advanced_ms
    return int(state.max_us[clocks.moved].max()), int(clocks.fired.sum())
