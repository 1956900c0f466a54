"""Substreams: one watermark per key, exact per event in arrival order (a stateful operator).

The per-key rule, event at a time: a key's watermark is the largest system timestamp of its
earlier kept events minus the out-of-order tolerance; an event below it is out of order and is
adjusted up to it or dropped. Neither an adjusted nor a dropped event can raise the key's
maximum (both stay below it), so the maximum before event *i* is the running maximum of the
key's candidate events before *i*: :func:`judge_bucket` computes a whole batch of many keys at
once with NumPy, no per-row Python loop. :func:`judge_key_reference` is the event-at-a-time
definition the tests compare it with.

State: keys are hashed (64-bit xxhash of the substream columns) into ``BUCKETS`` groups; each
bucket keeps one state value with its keys' largest system timestamps and last-seen times. A key
not seen for ``substream_ttl`` is dropped from its bucket when the bucket next gets rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "BUCKETS",
    "BucketVerdicts",
    "judge_bucket",
    "judge_key_reference",
    "make_processor",
]

_NONE = np.iinfo(np.int64).min


@dataclass
class BucketVerdicts:
    system_us: npt.NDArray[np.int64]
    out_of_order: npt.NDArray[np.bool_]
    new_max: dict[int, int]
    """Largest candidate system timestamp per key seen in this batch (merged with the state)."""


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
    otherwise they are adjusted up to the watermark.

    One NumPy pass: sort by (key, arrival), a running maximum that restarts at every key, then
    back to input order. Results are returned in the input order.
    """
    n = len(keys)
    if n == 0:
        return BucketVerdicts(ts_us.astype(np.int64), np.zeros(0, bool), dict(state))
    order = np.lexsort((np.arange(n), arrival_us, keys))
    k, ts, cand = keys[order], ts_us[order], candidate[order]
    first = np.ones(n, dtype=bool)
    first[1:] = k[1:] != k[:-1]
    group = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    unique_keys = k[starts]
    initial = np.array([state.get(int(key), _NONE) for key in unique_keys], dtype=np.int64)
    masked = np.where(cand, ts, _NONE)
    # Running maximum restarting at each key: shift every key's values into its own band.
    known = masked[masked != _NONE]
    low = int(known.min()) if known.size else 0
    band = int(known.max()) - low + 2 if known.size else 1
    shifted = np.where(masked == _NONE, 0, masked - low + 1) + group * band
    inclusive = np.maximum.accumulate(shifted) - group * band  # 0 = nothing yet in this key
    before_rel = np.empty(n, dtype=np.int64)
    before_rel[0] = 0
    before_rel[1:] = inclusive[:-1]
    before_rel[first] = 0
    before = np.where(before_rel > 0, before_rel - 1 + low, _NONE)
    before = np.maximum(before, initial[group])
    has_mark = before != _NONE
    watermark = np.where(has_mark, before - tolerance_us, _NONE)
    ooo = cand & has_mark & (ts < watermark)
    system = ts if drop else np.where(ooo, watermark, ts)
    last = np.maximum(np.maximum.reduceat(masked, starts), initial)
    new_max = dict(state)
    for key, value in zip(unique_keys.tolist(), last.tolist(), strict=True):
        if value != _NONE:
            new_max[key] = value
    out_system = np.empty(n, dtype=np.int64)
    out_ooo = np.empty(n, dtype=bool)
    out_system[order] = system
    out_ooo[order] = ooo
    return BucketVerdicts(out_system, out_ooo, new_max)


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


BUCKETS = 64
"""Substream keys are spread over this many groups: one stateful call per bucket and batch."""


def make_processor(
    *,
    tolerance_us: int,
    drop: bool,
    ttl_ms: int | None,
    key_column: str,
    ts_column: str,
    arrival_column: str,
    verdict_column: str,
    candidate_bits: int,
    ooo_bit: int,
    idle_timeout_ms: int | None = None,
    idle_column: str | None = None,
    clock: Callable[[], float] | None = None,
) -> Any:
    """The ``StatefulProcessor`` for ``transformWithStateInPandas`` over key buckets.

    The state of a bucket is one value: the 64-bit hashes of its keys, each key's largest
    system timestamp and when it was last seen (processing time, for ``ttl_ms``): two state
    round trips per bucket and micro-batch, however many keys. ``clock`` (unix seconds,
    default ``time.time``) is for tests. Imports PySpark lazily.

    With ``idle_timeout_ms``, rows whose ``idle_column`` is ``HEARTBEAT`` wake the bucket:
    every key idle for the timeout has its clock moved on (:func:`wmobs._idle.advance_idle_keys`,
    the state then also keeps up to when), and the bucket emits one synthetic row (``ts_column``
    = the largest moved clock, ``idle_column`` = the firings) instead of the heartbeat rows.
    Real rows carry ``REAL`` in ``idle_column``.
    """
    import time

    now_s = clock or time.time

    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import (
        StatefulProcessor,
        StatefulProcessorHandle,
    )

    from wmobs._idle import HEARTBEAT, advance_idle_keys

    idle = idle_timeout_ms is not None and idle_column is not None
    arrays = ["keys", "maxima", "seen_ms"] + (["advanced_ms"] if idle else [])

    class SubstreamProcessor(StatefulProcessor):
        def init(self, handle: StatefulProcessorHandle) -> None:
            # A separate state name with idle timeout: its value has one more array.
            self.bucket = handle.getValueState(
                "substreams_idle" if idle else "substreams",
                ", ".join(f"{name} ARRAY<LONG>" for name in arrays),
            )

        def handleInputRows(
            self,
            key: Any,
            rows: Iterator[pd.DataFrame],
            timerValues: Any,  # noqa: N803
        ) -> Iterator[pd.DataFrame]:
            frames = list(rows)
            pdf = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
            now_ms = int(now_s() * 1000)
            stored = self.bucket.get()
            columns = [list(c) for c in stored] if stored is not None else [[] for _ in arrays]
            keys = columns[0]
            state = dict(zip(keys, columns[1], strict=True))
            seen = dict(zip(keys, columns[2], strict=True))
            advanced = (
                {k: v for k, v in zip(keys, columns[3], strict=True) if v >= 0} if idle else {}
            )
            wake = None
            if idle:
                beats = pdf[idle_column].to_numpy(dtype=np.int64) == HEARTBEAT
                if beats.any():
                    wake = pdf[beats].head(1).copy()
                    pdf = pdf[~beats]
            verdicts = pdf[verdict_column].to_numpy(dtype=np.int64)
            row_keys = pdf[key_column].to_numpy(dtype=np.int64)
            judged = judge_bucket(
                state,
                row_keys,
                pdf[arrival_column].to_numpy(dtype=np.int64),
                pdf[ts_column].to_numpy(dtype=np.int64),
                (verdicts & candidate_bits) == 0,
                tolerance_us=tolerance_us,
                drop=drop,
            )
            if len(pdf):
                pdf = pdf.copy() if wake is not None else pdf
                pdf[ts_column] = judged.system_us
                pdf[verdict_column] = np.where(judged.out_of_order, verdicts | ooo_bit, verdicts)
            maxima = judged.new_max
            for touched in np.unique(row_keys).tolist():
                seen[touched] = now_ms
                advanced.pop(touched, None)
            live = [k for k in maxima if ttl_ms is None or seen.get(k, now_ms) >= now_ms - ttl_ms]
            if wake is not None and idle_timeout_ms is not None:
                top, firings = advance_idle_keys(
                    maxima,
                    {k: seen.get(k, now_ms) for k in live},
                    advanced,
                    now_ms=now_ms,
                    timeout_ms=idle_timeout_ms,
                )
                if top is not None:  # every firing moves a clock, so firings imply a top
                    wake[ts_column] = top
                    wake[idle_column] = firings
                    pdf = pd.concat([pdf, wake], ignore_index=True)
            value = [live, [maxima[k] for k in live], [seen.get(k, now_ms) for k in live]]
            if idle:
                value.append([advanced.get(k, -1) for k in live])
            if live:
                self.bucket.update(tuple(value))
            elif stored is not None:
                self.bucket.clear()  # every key evicted: no state row left for the bucket
            if len(pdf):
                yield pdf

        def close(self) -> None:
            pass

    return SubstreamProcessor()
