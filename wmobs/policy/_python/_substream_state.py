"""Substreams on the Python engine, the state: per key, what the judge needs from earlier
micro-batches, kept in the query's checkpoint. (The JVM engine keeps it in Spark's state
store: ``Substreams.java``; a JVM-engine query refuses a checkpoint with these files.)

Keys (64-bit hashes of the substream columns) are spread over ``BUCKETS`` buckets, and Spark
shuffles the rows by bucket; each task reads the state of its buckets and writes it back as
one Arrow IPC file per micro-batch (:class:`StateStore`).
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from wmobs.policy._context import substream_files
from wmobs.policy._storage import Location, Storage

__all__ = ["BUCKETS", "KeyState", "StateStore", "file_name", "state_directory"]

BUCKETS = 64
"""Substream keys are spread over this many buckets (the shuffle's key; at most 64: a state
file names its buckets as the bits of a 64-bit number)."""


def state_directory(policy_name: str) -> str:
    """Where a policy's substream state lives, relative to the query's checkpoint."""
    return f"{substream_files(policy_name)}/{BUCKETS}"


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


_STATE_SCHEMA = ("key", "max_us", "seen_ms", "advanced_ms")
_TASK_FILE = re.compile(r"([0-9]+)-([0-9a-f]{16})\.arrow")


class _File(NamedTuple):
    """A state file of one task: ``<batchId>-<buckets>.arrow``, the buckets as 16 hex digits
    (bit b: bucket b)."""

    version: int
    buckets: int
    name: str

    @staticmethod
    def parse(name: str) -> _File | None:
        match = _TASK_FILE.fullmatch(name)
        return None if match is None else _File(int(match[1]), int(match[2], 16), name)

    def bits(self) -> Iterator[int]:
        """The buckets the file holds."""
        mask = self.buckets
        while mask:
            low = mask & -mask
            yield low.bit_length() - 1
            mask ^= low


def file_name(batch_id: int, buckets: Iterable[int]) -> str:
    """The name of the state file that holds ``buckets`` after ``batch_id``."""
    mask = 0
    for bucket in buckets:
        mask |= 1 << bucket
    return f"{batch_id}-{mask:016x}.arrow"


class StateStore:
    """The substreams' state in the query's checkpoint (any filesystem of
    :mod:`wmobs.policy._storage`): each task writes one Arrow IPC file per micro-batch with
    the state of the key buckets it judged, ``<root>/<batchId>-<buckets>.arrow``
    (:func:`file_name`).

    Batch *N* reads, per bucket, the newest file of a batch before *N* that holds the bucket
    (one listing of ``<root>``), and writes ``N-<its buckets>.arrow`` whole, at once
    (:meth:`Storage.write_once`: one PUT on an object store, a rename elsewhere): a retried or
    restarted batch *N* reads the same state again and replaces its own file, so the state is
    exactly once, like Spark's. A task whose buckets hold no key, before or after, writes
    nothing. A file none of whose buckets it is the newest for (before *N*) is deleted.

    With the number of shuffle partitions that Spark keeps in the checkpoint, a task gets the
    same buckets in every micro-batch, so it reads the file it wrote; nothing depends on it:
    the layout holds whichever buckets a task gets.

    State of earlier versions of wmobs, one file per bucket (``<root>/<bucket>/<batchId>
    .arrow``), is read where it is newer and deleted once a task file replaces it.
    """

    def __init__(self, root: str, storage: Storage | None = None) -> None:
        self.storage = storage or Storage()
        self.root = self.storage.resolve(root)

    def load(
        self, buckets: Iterable[int], batch_id: int, *, prune: bool = True
    ) -> dict[int, KeyState]:
        """Each bucket's state as the newest batch before ``batch_id`` left it; with
        ``prune``, files no longer needed go on the way."""
        wanted = sorted(set(buckets))
        files, legacy = self._listing(batch_id, prune)
        newest: dict[int, _File] = {}
        for file in files:  # by version, ties by name: the last holding a bucket is its newest
            for bucket in file.bits():
                newest[bucket] = file
        chosen: dict[str, list[int]] = {}  # the file to read -> the buckets to take from it
        for bucket in wanted:
            found = newest.get(bucket)
            old = self._legacy(bucket, batch_id, found, prune) if bucket in legacy else None
            name = old if old is not None else None if found is None else found.name
            if name is not None:
                chosen.setdefault(name, []).append(bucket)
        if prune:
            mine = sum(1 << b for b in wanted)
            for file in files:
                done = all(newest[b].version > file.version for b in file.bits())
                if done and file.buckets & mine:
                    self._delete(self.root.child(file.name))
        states = {bucket: KeyState() for bucket in wanted}
        for name, taken in chosen.items():
            states.update(self._read(name).split(taken))
        return states

    def _listing(self, batch_id: int, prune: bool) -> tuple[list[_File], set[int]]:
        """The task files before ``batch_id``, in order, and the buckets that have a folder of
        the per-bucket layout; with ``prune``, temporary files that a dead task left an hour or
        more ago are deleted (a live one finishes its write in well under that)."""
        import datetime

        stale = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
        files: list[_File] = []
        legacy: set[int] = set()
        for entry in self.storage.entries(self.root):
            parsed = _File.parse(entry.name)
            if entry.folder:
                if entry.name.isdigit() and int(entry.name) < BUCKETS:
                    legacy.add(int(entry.name))
            elif parsed is not None and parsed.version < batch_id:
                files.append(parsed)
            elif prune and entry.name.endswith(".tmp") and entry.mtime and entry.mtime < stale:
                self._delete(self.root.child(entry.name))
        return sorted(files), legacy

    def _legacy(self, bucket: int, batch_id: int, newer: _File | None, prune: bool) -> str | None:
        """The bucket's file of the per-bucket layout to read (relative to the root), if it
        is newer than ``newer``; with ``prune``, its other versions before ``batch_id`` go."""
        folder = self.root.child(str(bucket))
        entries = self.storage.files(folder)
        versions = sorted(int(e.name[: -len(".arrow")]) for e in entries if _is_version(e.name))
        versions = [v for v in versions if v < batch_id]
        keep = (
            versions[-1] if versions and (newer is None or versions[-1] > newer.version) else None
        )
        if prune:  # (its writers were an earlier version of wmobs: a temporary file is dead)
            for entry in entries:
                if entry.name.endswith(".tmp"):
                    self._delete(folder.child(entry.name))
            for version in versions:
                if version != keep:
                    self._delete(folder.child(f"{version}.arrow"))
            if keep is None:
                self.storage.remove_empty_folder(folder)
        return None if keep is None else f"{bucket}/{keep}.arrow"

    def _read(self, name: str) -> KeyState:
        import pyarrow as pa

        data = self.storage.read_bytes(self.root.child(name))
        table = pa.ipc.open_stream(pa.BufferReader(data)).read_all()
        return KeyState(*(table.column(c).to_numpy() for c in _STATE_SCHEMA))

    def save(self, batch_id: int, states: Mapping[int, KeyState]) -> None:
        """Write the state of ``states``' buckets after ``batch_id``, one file (the versions
        they were loaded from stay, for a retry of ``batch_id``)."""
        import pyarrow as pa

        if not states:
            return
        state = KeyState.concat(states.values())
        table = pa.table(dict(zip(_STATE_SCHEMA, state._arrays(), strict=True)))
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        name = file_name(batch_id, states)
        self.storage.write_once(self.root.child(name), sink.getvalue().to_pybytes())

    def stored_keys(self) -> int:
        """How many keys the newest state files hold (read only; for tests and diagnostics)."""
        loaded = self.load(range(BUCKETS), sys.maxsize, prune=False)
        return sum(len(state) for state in loaded.values())

    def _delete(self, where: Location) -> None:
        with contextlib.suppress(OSError):  # already gone (another task, or attempt)
            self.storage.delete(where)


def _is_version(name: str) -> bool:
    return name.endswith(".arrow") and name[: -len(".arrow")].isdigit()
