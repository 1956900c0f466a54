"""Substreams: one watermark per key, exact per event in arrival order (a stateful operator).

The per-key rule, event at a time: a key's watermark is the largest system timestamp of its
earlier kept events minus the out-of-order tolerance; an event below it is out of order and is
adjusted up to it or dropped. Neither an adjusted nor a dropped event can raise the key's
maximum (both stay below it), so the maximum before event *i* is the running maximum of the
key's candidate events before *i*: :func:`judge_bucket` computes a whole batch of many keys at
once with NumPy, no per-row Python loop. :func:`judge_key_reference` is the event-at-a-time
definition the tests compare it with.

The operator: keys are hashed (64-bit xxhash of the substream columns) into ``BUCKETS``
buckets; Spark shuffles the rows by bucket, and :func:`make_stage` (``mapInArrow``) judges each
partition's rows at once (:func:`judge_partition`). Each bucket's state (per key: largest
system timestamp, last seen, idle clock) is one Arrow file per micro-batch in the query's
checkpoint (:class:`StateStore`). A key not seen for ``substream_ttl`` is forgotten when its
bucket next gets rows.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "BUCKETS",
    "BucketVerdicts",
    "Columns",
    "KeyState",
    "StateStore",
    "SubstreamConfig",
    "judge_bucket",
    "judge_key_reference",
    "judge_partition",
    "make_stage",
    "state_directory",
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
    otherwise they are adjusted up to the watermark. Results are in the input order.
    """

    def initial(unique_keys: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        return np.array([state.get(int(k), _NONE) for k in unique_keys.tolist()], dtype=np.int64)

    judged = _judge(
        keys, arrival_us, ts_us, candidate, initial, tolerance_us=tolerance_us, drop=drop
    )
    new_max = dict(state)
    for key, value in zip(judged.keys.tolist(), judged.last.tolist(), strict=True):
        if value != _NONE:
            new_max[key] = value
    return BucketVerdicts(judged.system_us, judged.out_of_order, new_max)


@dataclass
class _Judged:
    system_us: npt.NDArray[np.int64]
    out_of_order: npt.NDArray[np.bool_]
    keys: npt.NDArray[np.int64]
    """The keys of the rows, sorted, each once."""
    last: npt.NDArray[np.int64]
    """Per key: the largest system timestamp after the rows (state included; ``_NONE``: none)."""


def _judge(
    keys: npt.NDArray[np.int64],
    arrival_us: npt.NDArray[np.int64],
    ts_us: npt.NDArray[np.int64],
    candidate: npt.NDArray[np.bool_],
    initial: Callable[[npt.NDArray[np.int64]], npt.NDArray[np.int64]],
    *,
    tolerance_us: int,
    drop: bool,
) -> _Judged:
    """The NumPy core of :func:`judge_bucket`: sort by (key, arrival, input position), a
    running maximum that restarts at every key, back to input order. ``initial`` gives each
    key's maximum before the rows."""
    n = len(keys)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return _Judged(ts_us.astype(np.int64), np.zeros(0, bool), empty, empty)
    order = np.lexsort((np.arange(n), arrival_us, keys))
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
    lookup = np.concatenate(([_NONE], values.astype(np.int64)))
    before = np.maximum(lookup[before_rank], start[group])
    has_mark = before != _NONE
    watermark = np.where(has_mark, before - tolerance_us, _NONE)
    ooo = cand & has_mark & (ts < watermark)
    system = ts if drop else np.where(ooo, watermark, ts)
    last = np.maximum(lookup[np.maximum.reduceat(ranks, starts)], start)
    out_system = np.empty(n, dtype=np.int64)
    out_ooo = np.empty(n, dtype=bool)
    out_system[order] = system
    out_ooo[order] = ooo
    return _Judged(out_system, out_ooo, unique_keys, last)


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
"""Substream keys are spread over this many state files (one per bucket and micro-batch)."""


def state_directory(policy_name: str) -> str:
    """Where a policy's substream state lives, relative to the query's checkpoint."""
    return f"wmobs/substreams/{policy_name}/{BUCKETS}"


def _empty() -> npt.NDArray[np.int64]:
    return np.zeros(0, dtype=np.int64)


@dataclass
class KeyState:
    """What the operator remembers per key (64-bit hash of the substream columns), as arrays
    sorted by key."""

    keys: npt.NDArray[np.int64] = field(default_factory=_empty)
    max_us: npt.NDArray[np.int64] = field(default_factory=_empty)
    """Largest system timestamp."""
    seen_ms: npt.NDArray[np.int64] = field(default_factory=_empty)
    """When the key last had input (processing time): for the TTL and the idle timeout."""
    advanced_ms: npt.NDArray[np.int64] = field(default_factory=_empty)
    """Up to when the key's idle clock has run; -1: not idle since its last input."""

    def _arrays(self) -> tuple[npt.NDArray[np.int64], ...]:
        return (self.keys, self.max_us, self.seen_ms, self.advanced_ms)

    def _take(self, index: Any) -> KeyState:
        return KeyState(*(a[index] for a in self._arrays()))

    @staticmethod
    def concat(parts: Iterable[KeyState]) -> KeyState:
        """The states of disjoint key sets (different buckets) as one."""
        parts = list(parts)
        if not parts:
            return KeyState()
        columns = zip(*(p._arrays() for p in parts), strict=True)
        joined = KeyState(*(np.concatenate(column) for column in columns))
        return joined._take(np.argsort(joined.keys, kind="stable"))

    def split(self, buckets: Iterable[int]) -> dict[int, KeyState]:
        """The state of each of ``buckets`` (a key's bucket is ``key mod BUCKETS``, as Spark's
        ``pmod``); a bucket with no key left gets an empty state."""
        of = np.mod(self.keys, BUCKETS)
        return {b: self._take(of == b) for b in buckets}

    def __len__(self) -> int:
        return len(self.keys)


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
) -> tuple[PartitionVerdicts, KeyState]:
    """One micro-batch of real rows (any keys) against ``state``: keys not seen for the TTL
    forgotten, out-of-order verdicts (as :func:`judge_bucket`), last-seen times and, on a
    ``heartbeat``, the idle clocks moved (:func:`advance_idle`). Returns the new state."""
    if config.ttl_ms is not None:  # forgotten first: a key back after the TTL starts afresh
        state = state._take(state.seen_ms >= now_ms - config.ttl_ms)

    def initial(unique_keys: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        found, at = _find(state.keys, unique_keys)
        start = np.full(len(unique_keys), _NONE, dtype=np.int64)
        start[found] = state.max_us[at[found]]
        return start

    judged = _judge(
        keys,
        arrival_us,
        ts_us,
        (verdicts & config.candidate_bits) == 0,
        initial,
        tolerance_us=config.tolerance_us,
        drop=config.drop,
    )
    found, at = _find(state.keys, judged.keys)
    # Keys with state: new maximum, seen now, no longer idle. New keys: kept if a row counted
    # (every row of a new key may have been dropped: then there is nothing to remember).
    state.max_us[at[found]] = judged.last[found]
    state.seen_ms[at[found]] = now_ms
    state.advanced_ms[at[found]] = -1
    new = ~found & (judged.last != _NONE)
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
    return PartitionVerdicts(judged.system_us, verdicts, synthetic), state


def _find(
    sorted_keys: npt.NDArray[np.int64], wanted: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.intp]]:
    """Which of ``wanted`` are in ``sorted_keys``, and where (an index only where found)."""
    at = np.searchsorted(sorted_keys, wanted)
    found = at < len(sorted_keys)
    found[found] = sorted_keys[at[found]] == wanted[found]
    return found, np.where(found, at, 0)


def advance_idle(state: KeyState, *, now_ms: int, timeout_ms: int) -> tuple[int, int] | None:
    """:func:`wmobs._idle.advance_idle_keys` on arrays, in place: every key idle for
    ``timeout_ms`` has its clock moved on. ``(largest moved timestamp µs, firings)``, or
    ``None`` when no clock moved."""
    idle_since = state.seen_ms + timeout_ms
    idle = now_ms >= idle_since
    if not idle.any():
        return None
    previous = state.advanced_ms
    starting = previous < 0
    lag_ms = state.seen_ms - np.floor_divide(state.max_us, 1000)
    jump_ms = np.where(starting, np.clip(lag_ms, 0, timeout_ms), 0)  # idle_jump_ms
    begin = np.where(starting, idle_since, np.maximum(previous, idle_since))
    moved = state.max_us + (np.maximum(now_ms - begin, 0) + jump_ms) * 1000
    firings = int((idle & starting).sum())
    state.max_us = np.where(idle, moved, state.max_us)
    state.advanced_ms = np.where(idle, now_ms, previous)
    return int(state.max_us[idle].max()), firings


_STATE_SCHEMA = ("key", "max_us", "seen_ms", "advanced_ms")


class StateStore:
    """The substreams' state in the query's checkpoint, one Arrow IPC file per key bucket and
    micro-batch: ``<root>/<bucket>/<batchId>.arrow`` (any filesystem pyarrow knows).

    Batch *N* reads, per bucket, the newest file of a batch before *N* and writes ``N.arrow``
    atomically (temporary file, then rename): a retried or restarted batch *N* reads the same
    state again and overwrites its own file, so the state is exactly once, like Spark's. A
    bucket with no rows in a batch writes nothing. Files older than the one read are deleted.
    """

    def __init__(self, root: str) -> None:
        from wmobs._fs import filesystem_for

        self.fs, self.root = filesystem_for(root)
        self._listed: dict[int, bool] = {}
        """Per bucket loaded: whether its folder had versions (and so exists)."""

    def _versions(self, bucket: int) -> list[int]:
        """The bucket's versions; temporary files that a dead task left an hour or more ago
        are deleted on the way (a live one finishes its write in well under that)."""
        import datetime

        from pyarrow import fs

        selector = fs.FileSelector(f"{self.root}/{bucket}", allow_not_found=True)
        infos = self.fs.get_file_info(selector)
        stale = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
        for info in infos:
            mtime = info.mtime
            if info.base_name.endswith(".tmp") and mtime is not None and mtime < stale:
                with contextlib.suppress(OSError):
                    self.fs.delete_file(info.path)
        names = [info.base_name for info in infos]
        return sorted(int(n[: -len(".arrow")]) for n in names if _is_version(n))

    def load(self, bucket: int, batch_id: int) -> KeyState:
        """The bucket's state as the newest batch before ``batch_id`` left it."""
        listed = self._versions(bucket)
        self._listed[bucket] = bool(listed)
        versions = [v for v in listed if v < batch_id]
        for old in versions[:-1]:  # left over from an earlier run that stopped in between
            self._delete(bucket, old)
        return self._read(bucket, versions[-1]) if versions else KeyState()

    def _read(self, bucket: int, version: int) -> KeyState:
        import pyarrow as pa

        with self.fs.open_input_stream(f"{self.root}/{bucket}/{version}.arrow") as stream:
            table = pa.ipc.open_stream(stream).read_all()
        return KeyState(*(table.column(c).to_numpy() for c in _STATE_SCHEMA))

    def save(self, bucket: int, batch_id: int, state: KeyState) -> None:
        """Write the bucket's state after ``batch_id`` (the version it was loaded from stays,
        for a retry of ``batch_id``; older ones went when it was loaded)."""
        import uuid

        import pyarrow as pa

        table = pa.table(dict(zip(_STATE_SCHEMA, state._arrays(), strict=True)))
        folder = f"{self.root}/{bucket}"
        if not self._listed.get(bucket):
            self.fs.create_dir(folder, recursive=True)
        temp = f"{folder}/.{batch_id}.{uuid.uuid4().hex}.tmp"
        with (
            self.fs.open_output_stream(temp) as stream,
            pa.ipc.new_stream(stream, table.schema) as w,
        ):
            w.write_table(table)
        self.fs.move(temp, f"{folder}/{batch_id}.arrow")

    def stored_keys(self) -> int:
        """How many keys the newest state files hold (read only; for tests and diagnostics)."""
        from pyarrow import fs

        total = 0
        for info in self.fs.get_file_info(fs.FileSelector(self.root, allow_not_found=True)):
            if info.base_name.isdigit():
                bucket = int(info.base_name)
                versions = self._versions(bucket)
                if versions:
                    total += len(self._read(bucket, versions[-1]))
        return total

    def _delete(self, bucket: int, batch_id: int) -> None:
        with contextlib.suppress(OSError):  # already gone (a concurrent attempt of the task)
            self.fs.delete_file(f"{self.root}/{bucket}/{batch_id}.arrow")


def _is_version(name: str) -> bool:
    return name.endswith(".arrow") and name[: -len(".arrow")].isdigit()


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


def make_stage(
    config: SubstreamConfig,
    columns: Columns,
    *,
    checkpoint: str,
    directory: str,
    clock: Callable[[], float] | None = None,
    batch_id: Callable[[], int | None] | None = None,
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The ``mapInArrow`` function over rows partitioned by key bucket.

    Each task reads the state of its buckets from ``<checkpoint>/<directory>``
    (:class:`StateStore`), judges all its rows at once (:func:`judge_partition`), writes the
    state back and yields the rows' ``columns.output`` with ``columns.ts`` and
    ``columns.verdict`` replaced. With
    the idle timeout, heartbeat rows (``columns.idle == HEARTBEAT``) are consumed and one
    synthetic row (``columns.idle`` = firings) is yielded when clocks moved.

    ``clock`` (unix seconds) and ``batch_id`` stand in for the wall clock and the task's
    micro-batch in tests (``checkpoint`` is then the state's root); outside a micro-batch the
    rows are judged against an empty state, and nothing is stored.
    """
    import time

    now_s = clock or time.time

    def stage(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc

        from wmobs._idle import HEARTBEAT

        parts = [b for b in batches if b.num_rows]
        if not parts:
            return
        now_ms = int(now_s() * 1000)

        def column(name: str) -> Any:
            return pa.chunked_array([b.column(name) for b in parts])

        ts_column = column(columns.ts)
        null_ts = ts_column.is_null().to_numpy() if ts_column.null_count else None
        ts = pc.fill_null(ts_column, 0).to_numpy()
        keys = column(columns.key).to_numpy()
        arrival = column(columns.arrival).to_numpy()
        verdicts = column(columns.verdict).to_numpy()
        buckets = np.unique(np.mod(keys, BUCKETS)).tolist()
        beats = None
        if columns.idle is not None and config.idle_timeout_ms is not None:
            beats = column(columns.idle).to_numpy() == HEARTBEAT
            if not beats.any():
                beats = None
        real = slice(None) if beats is None else ~beats

        where = _micro_batch(checkpoint, batch_id)
        store = None if where is None else StateStore(f"{where[1].rstrip('/')}/{directory}")
        loaded: dict[int, KeyState] = {}
        if store is not None and where is not None:
            loaded = {bucket: store.load(bucket, where[0]) for bucket in buckets}
        state = KeyState.concat(loaded.values())
        judged, state = judge_partition(
            state,
            keys[real],
            arrival[real],
            ts[real],
            verdicts[real],
            heartbeat=beats is not None,
            now_ms=now_ms,
            config=config,
        )
        if store is not None and where is not None:
            for bucket, part in state.split(buckets).items():
                if len(part) or len(loaded[bucket]):  # nothing before or after: no file
                    store.save(bucket, where[0], part)

        system, verdict = ts.copy(), verdicts.copy()
        system[real], verdict[real] = judged.system_us, judged.verdicts
        schema = pa.schema([parts[0].schema.field(name) for name in columns.output])
        offset = 0
        for part in parts:
            end = offset + part.num_rows
            mask = None if null_ts is None else null_ts[offset:end]
            replaced = {
                columns.ts: pa.array(system[offset:end], pa.int64(), mask=mask),
                columns.verdict: pa.array(verdict[offset:end], pa.int64()),
            }
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
    checkpoint: str, batch_id: Callable[[], int | None] | None
) -> tuple[int, str] | None:
    """``(micro-batch id, the query's checkpoint)`` of the running task (or as the tests say);
    ``None`` outside a micro-batch."""
    if batch_id is not None:
        batch = batch_id()
        return None if batch is None else (batch, checkpoint)
    from wmobs._watermark_source import task_micro_batch

    task = task_micro_batch(checkpoint)
    return None if task is None else (task.batch_id, task.checkpoint)
