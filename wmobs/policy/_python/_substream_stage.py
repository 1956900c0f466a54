"""Substreams, the stage: the ``mapInArrow`` function over rows partitioned by key bucket.

Spark shuffles the rows by key bucket (``pmod(key, BUCKETS)``); each task loads the state of
its buckets (:mod:`wmobs.policy._python._substream_state`), judges all its rows at once
(:func:`wmobs.policy._python._substream_judge.judge_partition`), stores the state back (one file)
and yields the rows with their system timestamps and verdicts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from wmobs.policy._python._checkpoint import task_micro_batch
from wmobs.policy._python._substream_judge import SubstreamConfig, judge_partition
from wmobs.policy._python._substream_state import BUCKETS, KeyState, StateStore
from wmobs.policy._storage import Storage
from wmobs.policy._verdicts import HEARTBEAT

__all__ = ["Columns", "substream_stage"]


@dataclass(frozen=True)
class Columns:
    """Where the operator finds its inputs (the policy's internal column names)."""

    key: str
    """64-bit hash of the substream columns; its bucket is ``key mod BUCKETS``. Heartbeat rows
    carry the bucket they wake."""
    ts: str
    arrival: str
    verdict: str
    idle: str | None = None
    output: tuple[str, ...] = ()
    """The columns to yield, in order (the key and arrival time are not needed after this)."""
    lateness: str | None = None
    """An output column (µs) to fill with each row's lateness behind its key (null for rows
    not in play)."""
    slowest: str | None = None
    fastest: str | None = None
    """Output columns (µs) for the partition's slowest and fastest key's largest system
    timestamp, on its first real row (null on the others)."""
    place: str | None = None
    """A row's input partition before the shuffle, which orders a key's rows of equal arrival
    before the order they come in (the shuffle keeps each input partition's rows in their
    order, not the partitions' order, from one attempt of a task to the next)."""
    batch_time: str | None = None
    """The micro-batch's time (ms, Spark's batch timestamp, the same in every attempt): the
    processing time the TTL and the idle clocks read, as Spark's ``GroupState`` gives the JVM
    engine. Without it, the stage's ``clock``."""


def substream_stage(
    config: SubstreamConfig,
    columns: Columns,
    *,
    checkpoint: str,
    directory: str,
    relative_to: str = "",
    storage: Storage | None = None,
    clock: Callable[[], float] | None = None,
    batch_id: Callable[[], int | None] | None = None,
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The ``mapInArrow`` function over rows partitioned by key bucket.

    Each task reads the state of its buckets from ``<checkpoint>/<directory>`` (a named
    query's: below the session's root, a relative one against ``relative_to``)
    (:class:`StateStore`), judges all its rows at once (:func:`judge_partition`), writes the
    state back and yields the rows' ``columns.output`` with ``columns.ts`` and
    ``columns.verdict`` replaced. With
    the idle timeout, heartbeat rows (``columns.idle == HEARTBEAT``) are consumed and one
    synthetic row (``columns.idle`` = firings) is yielded when clocks moved.

    ``clock`` (unix seconds; where ``columns.batch_time`` is not given) and ``batch_id`` stand
    in for the micro-batch's time and the task's micro-batch in tests (``checkpoint`` is then
    the state's root); outside a micro-batch the rows are judged against an empty state, and
    nothing is stored.
    """
    import time

    now_s = clock or time.time

    def stage(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc

        parts = [b for b in batches if b.num_rows]
        if not parts:
            return

        def column(name: str) -> Any:
            return pa.chunked_array([b.column(name) for b in parts])

        # The micro-batch's time, not the task's: a retried task judges as the first did.
        batch_ms = None if columns.batch_time is None else column(columns.batch_time)[0].as_py()
        now_ms = int(now_s() * 1000) if batch_ms is None else int(batch_ms)

        ts_column = column(columns.ts)
        null_ts = ts_column.is_null().to_numpy() if ts_column.null_count else None
        ts = pc.fill_null(ts_column, 0).to_numpy()
        keys = column(columns.key).to_numpy()
        arrival = column(columns.arrival).to_numpy()
        verdicts = column(columns.verdict).to_numpy()
        place = None if columns.place is None else column(columns.place).to_numpy()
        buckets = np.unique(np.mod(keys, BUCKETS)).tolist()
        beats = None
        if columns.idle is not None and config.idle_timeout_ms is not None:
            beats = column(columns.idle).to_numpy() == HEARTBEAT
            if not beats.any():
                beats = None
        real = slice(None) if beats is None else ~beats

        where = _micro_batch(checkpoint, relative_to, batch_id)
        store = (
            None if where is None else StateStore(f"{where[1].rstrip('/')}/{directory}", storage)
        )
        loaded: dict[int, KeyState] = {}
        if store is not None and where is not None:
            loaded = store.load(buckets, where[0])
        state = KeyState.concat(loaded.values())
        _warn_if_many(len(state.keys))
        judged, state = judge_partition(
            state,
            keys[real],
            arrival[real],
            ts[real],
            verdicts[real],
            heartbeat=beats is not None,
            now_ms=now_ms,
            config=config,
            place=None if place is None else place[real],
        )
        if store is not None and where is not None:
            # a bucket with nothing before or after is left out; none left: no file
            kept = {
                b: part for b, part in state.split(buckets).items() if len(part) or len(loaded[b])
            }
            store.save(where[0], kept)

        system, verdict = ts.copy(), verdicts.copy()
        system[real], verdict[real] = judged.system_us, judged.verdicts
        behind = np.full(len(ts), -1, dtype=np.int64)
        behind[real] = judged.behind_us
        spread_at = -1  # the first real row carries the partition's spread
        if judged.spread is not None:
            spread_at = 0 if beats is None else int(np.argmax(~beats))
        schema = pa.schema([parts[0].schema.field(name) for name in columns.output])
        offset = 0
        for part in parts:
            end = offset + part.num_rows
            mask = None if null_ts is None else null_ts[offset:end]
            replaced = {
                columns.ts: pa.array(system[offset:end], pa.int64(), mask=mask),
                columns.verdict: pa.array(verdict[offset:end], pa.int64()),
            }
            if columns.lateness is not None:
                late = behind[offset:end]
                replaced[columns.lateness] = pa.array(late, pa.int64(), mask=late < 0)
            replaced |= _spread_columns(columns, judged.spread, spread_at - offset, part.num_rows)
            arrays = [replaced[n] if n in replaced else part.column(n) for n in columns.output]
            out = pa.RecordBatch.from_arrays(arrays, schema=schema)
            if beats is not None:
                out = out.filter(pa.array(~beats[offset:end]))
            if out.num_rows:
                yield out
            offset = end
        if judged.synthetic is not None and beats is not None and columns.idle is not None:
            yield _synthetic_row(parts, beats, columns, judged.synthetic, schema)

    return stage


MANY_KEYS = 100_000
"""Keys held in one task's buckets past which the Python engine's substreams warn: each
micro-batch reads and rewrites every key its buckets hold."""
_WARNED: set[str] = set()


def _warn_if_many(held: int) -> None:
    """One warning per Python worker once a task's buckets hold more than :data:`MANY_KEYS`
    keys (on the executor's log; the driver's console in local mode)."""
    if held <= MANY_KEYS or _WARNED:
        return
    _WARNED.add("keys")
    from wmobs._log import get_logger

    get_logger().warning(
        "wmobs.substream_keys_many",
        keys_held=held,
        hint="the Python engine's substreams read and rewrite every key their buckets hold in "
        "each micro-batch, so a micro-batch costs time in proportion to the keys held; the JVM "
        "engine keeps them in Spark's state store, at the cost of the keys a micro-batch touches",
    )


def _spread_columns(
    columns: Columns, spread: tuple[int, int] | None, at: int, rows: int
) -> dict[str, Any]:
    """``columns.slowest`` and ``columns.fastest`` of a part of ``rows`` rows whose row ``at``
    carries ``spread``; none for the other parts, whose columns stay null as they came."""
    import pyarrow as pa

    if columns.slowest is None or columns.fastest is None or spread is None:
        return {}
    if not 0 <= at < rows:
        return {}
    absent = np.ones(rows, dtype=bool)
    absent[at] = False
    return {
        name: pa.array(np.full(rows, value, dtype=np.int64), pa.int64(), mask=absent)
        for name, value in zip((columns.slowest, columns.fastest), spread, strict=True)
    }


def _synthetic_row(
    parts: list[Any],
    beats: npt.NDArray[np.bool_],
    columns: Columns,
    synthetic: tuple[int, int],
    schema: Any,
) -> Any:
    """A heartbeat row (placeholders in every user column) carrying the moved clock."""
    import pyarrow as pa

    first = int(np.flatnonzero(beats)[0])
    for part in parts:
        if first < part.num_rows:
            row = part.slice(first, 1)
            break
        first -= part.num_rows
    top, firings = synthetic
    replaced = {
        columns.ts: pa.array([top], pa.int64()),
        columns.verdict: pa.array([0], pa.int64()),  # whatever the heartbeat row was judged
        columns.idle: pa.array([firings], pa.int64()),
    }
    arrays = [replaced[n] if n in replaced else row.column(n) for n in columns.output]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _micro_batch(
    checkpoint: str, relative_to: str, batch_id: Callable[[], int | None] | None
) -> tuple[int, str] | None:
    """``(micro-batch id, the query's checkpoint)`` of the running task, or as the tests say
    (``None``: no state read or written)."""
    if batch_id is not None:
        batch = batch_id()
        return None if batch is None else (batch, checkpoint)

    task = task_micro_batch(checkpoint, relative_to)
    return task.batch_id, task.checkpoint
