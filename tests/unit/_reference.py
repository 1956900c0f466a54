"""Event-at-a-time definitions that the vectorised policy code is tested against."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from wmobs.policy._python._idle import idle_jump_ms
from wmobs.policy._python._substream_judge import NONE, judge_rows


def judge_key_reference(
    state_max_us: int | None,
    events: list[tuple[int, bool]],
    tolerance_us: int,
    drop: bool,
) -> tuple[list[int], list[bool], int | None]:
    """The definition, one event at a time: ``events`` are ``(system_us, candidate)``."""
    current = state_max_us
    system, flags = [], []
    for ts, candidate in events:
        if not candidate:
            system.append(ts)
            flags.append(False)
            continue
        late = current is not None and ts < current - tolerance_us
        flags.append(late)
        if late and drop:
            system.append(ts)
            continue  # dropped: does not move the watermark
        value = current - tolerance_us if late and current is not None else ts
        system.append(value)
        current = value if current is None else max(current, value)
    return system, flags, current


def lateness_reference(state_max_us: int | None, events: list[tuple[int, bool]]) -> list[int]:
    """How far each candidate is behind the key's largest system timestamp before it (0 if not
    behind or none yet; -1 for rows not in play), event at a time. The largest system
    timestamp is the same whether out-of-order rows are adjusted or dropped (neither raises
    it), so the tolerance plays no part."""
    current = state_max_us
    behind = []
    for ts, candidate in events:
        if not candidate:
            behind.append(-1)
            continue
        behind.append(0 if current is None else max(current - ts, 0))
        current = ts if current is None else max(current, ts)
    return behind


@dataclass
class BucketVerdicts:
    system_us: npt.NDArray[np.int64]
    out_of_order: npt.NDArray[np.bool_]
    new_max: dict[int, int]
    """Largest candidate system timestamp per key seen in this batch (merged with the state)."""
    behind_us: npt.NDArray[np.int64]


def judge_bucket(
    state: dict[int, int],
    keys: npt.NDArray[np.int64],
    arrival_us: npt.NDArray[np.int64],
    ts_us: npt.NDArray[np.int64],
    candidate: npt.NDArray[np.bool_],
    *,
    tolerance_us: int,
    drop: bool,
) -> BucketVerdicts:
    """Judge rows of many keys: per key in arrival order (ties keep input order) against the
    key's own watermark, each key starting from ``state[key]``. ``candidate`` marks rows still
    in play (not dropped by an earlier policy); others pass through and do not move the
    watermark. With ``drop`` out-of-order rows keep their timestamps (the caller drops them);
    otherwise they are adjusted up to the watermark. Results are in the input order.
    """

    def initial(unique_keys: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        return np.array([state.get(int(k), NONE) for k in unique_keys.tolist()], dtype=np.int64)

    judged = judge_rows(
        keys, arrival_us, ts_us, candidate, initial, tolerance_us=tolerance_us, drop=drop
    )
    new_max = dict(state)
    for key, value in zip(judged.keys.tolist(), judged.last.tolist(), strict=True):
        if value != NONE:
            new_max[key] = value
    return BucketVerdicts(judged.system_us, judged.out_of_order, new_max, judged.behind_us)


def advance_idle_keys(
    maxima: dict[int, int],
    seen_ms: dict[int, int],
    advanced_ms: dict[int, int],
    *,
    now_ms: int,
    timeout_ms: int,
) -> tuple[int | None, int]:
    """Move the clock of every key idle for ``timeout_ms`` (see the module rule).

    ``maxima``: each key's largest system timestamp (µs), moved in place; ``seen_ms``: when each
    key last had input; ``advanced_ms``: up to when each key's idle clock has run, in place
    (absent = not idle since its last input). Returns the largest moved timestamp (µs; the
    synthetic row that moves Spark's watermark) and the number of firings (keys whose idle
    period starts moving now).
    """
    top: int | None = None
    firings = 0
    for key, seen in seen_ms.items():
        current = maxima.get(key)
        idle_since = seen + timeout_ms
        if current is None or now_ms < idle_since:
            continue
        previous = advanced_ms.get(key)
        if previous is None:
            firings += 1
            current += idle_jump_ms(seen, current // 1000, timeout_ms) * 1000
        begin = idle_since if previous is None else max(previous, idle_since)
        current += max(now_ms - begin, 0) * 1000
        maxima[key] = current
        advanced_ms[key] = now_ms
        top = current if top is None else max(top, current)
    return top, firings
