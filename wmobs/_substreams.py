"""Substreams: one watermark per key, exact per event in arrival order (a stateful operator).

The per-key rule, event at a time: a key's watermark is the largest system timestamp of its
earlier kept events minus the out-of-order tolerance; an event below it is out of order and is
adjusted up to it or dropped. Neither an adjusted nor a dropped event can raise the key's
maximum (both stay below it), so the maximum before event *i* is the running maximum of the
key's candidate events before *i*: :func:`judge_key` computes a whole batch of a key at once with
NumPy, no per-row Python loop. :func:`judge_key_reference` is the event-at-a-time definition the
tests compare it with.

State per key: one value (the largest system timestamp, microseconds), evicted after
``substream_ttl`` of processing time without input when one is set (Spark's state TTL); a key
that returns after eviction starts afresh. Without a TTL, state is one value per key ever seen.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["KeyVerdicts", "judge_key", "judge_key_reference"]

_NONE = np.iinfo(np.int64).min


@dataclass
class KeyVerdicts:
    system_us: npt.NDArray[np.int64]
    out_of_order: npt.NDArray[np.bool_]
    new_max_us: int | None


def judge_key(
    state_max_us: int | None,
    ts_us: npt.NDArray[np.int64],
    candidate: npt.NDArray[np.bool_],
    tolerance_us: int,
    drop: bool,
) -> KeyVerdicts:
    """Judge one key's events (already in arrival order) against the key's own watermark.

    ``candidate`` marks events still in play (not dropped by an earlier policy); others pass
    through untouched and do not move the watermark. With ``drop`` the out-of-order events keep
    their timestamps (the caller drops them); otherwise they are adjusted to the watermark.
    """
    start = _NONE if state_max_us is None else state_max_us
    masked = np.where(candidate, ts_us, _NONE)
    running = np.maximum.accumulate(np.concatenate(([start], masked)))
    before = running[:-1]
    has_mark = before != _NONE
    watermark = np.where(has_mark, before - tolerance_us, _NONE)
    out_of_order = candidate & has_mark & (ts_us < watermark)
    system = ts_us if drop else np.where(out_of_order, watermark, ts_us)
    last = int(running[-1])
    return KeyVerdicts(system.astype(np.int64), out_of_order, None if last == _NONE else last)


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


def make_processor(
    *,
    tolerance_us: int,
    drop: bool,
    ttl_ms: int | None,
    ts_column: str,
    arrival_column: str,
    verdict_column: str,
    candidate_bits: int,
    ooo_bit: int,
) -> Any:
    """The ``StatefulProcessor`` for ``transformWithStateInPandas`` (imports PySpark lazily)."""
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import (
        StatefulProcessor,
        StatefulProcessorHandle,
    )

    class SubstreamProcessor(StatefulProcessor):
        def init(self, handle: StatefulProcessorHandle) -> None:
            self.max_state = handle.getValueState("max_system_us", "max_system_us LONG", ttl_ms)

        def handleInputRows(
            self,
            key: Any,
            rows: Iterator[pd.DataFrame],
            timerValues: Any,  # noqa: N803
        ) -> Iterator[pd.DataFrame]:
            frames = list(rows)
            pdf = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
            pdf = pdf.sort_values(arrival_column, kind="stable", ignore_index=True)
            stored = self.max_state.get() if self.max_state.exists() else None
            state_max = None if stored is None else int(stored[0])
            verdicts = pdf[verdict_column].to_numpy(dtype=np.int64)
            candidate = (verdicts & candidate_bits) == 0
            judged = judge_key(
                state_max,
                pdf[ts_column].to_numpy(dtype=np.int64),
                candidate,
                tolerance_us,
                drop,
            )
            pdf[ts_column] = judged.system_us
            pdf[verdict_column] = np.where(judged.out_of_order, verdicts | ooo_bit, verdicts)
            if judged.new_max_us is not None:  # also refreshes the key's TTL
                self.max_state.update((judged.new_max_us,))
            yield pdf

        def close(self) -> None:
            pass

    return SubstreamProcessor()
