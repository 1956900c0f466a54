"""Substreams, the state: per key, what the judge needs from earlier micro-batches, kept in
the query's checkpoint.

Keys (64-bit hashes of the substream columns) are spread over ``BUCKETS`` buckets; each
bucket's state is one Arrow IPC file per micro-batch (:class:`StateStore`), so that a task
reads and writes only the buckets of its partition.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from wmobs.policy._storage import Location, Storage

__all__ = ["BUCKETS", "KeyState", "StateStore", "state_directory"]

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


_STATE_SCHEMA = ("key", "max_us", "seen_ms", "advanced_ms")


class StateStore:
    """The substreams' state in the query's checkpoint, one Arrow IPC file per key bucket and
    micro-batch: ``<root>/<bucket>/<batchId>.arrow`` (any filesystem of
    :mod:`wmobs.policy._storage`).

    Batch *N* reads, per bucket, the newest file of a batch before *N* and writes ``N.arrow``
    whole, at once (:meth:`Storage.write_once`: one PUT on an object store, a rename
    elsewhere): a retried or restarted batch *N* reads the same state again and replaces its own
    file, so the state is exactly once, like Spark's. A bucket with no rows in a batch writes
    nothing. Files older than the one read are deleted.
    """

    def __init__(self, root: str, storage: Storage | None = None) -> None:
        self.storage = storage or Storage()
        self.root = self.storage.resolve(root)

    def _versions(self, bucket: int) -> list[int]:
        """The bucket's versions; temporary files that a dead task left an hour or more ago
        are deleted on the way (a live one finishes its write in well under that)."""
        import datetime

        folder = self.root.child(str(bucket))
        entries = self.storage.files(folder)
        stale = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
        for entry in entries:
            if entry.name.endswith(".tmp") and entry.mtime is not None and entry.mtime < stale:
                with contextlib.suppress(OSError):
                    self.storage.delete(folder.child(entry.name))
        return sorted(int(e.name[: -len(".arrow")]) for e in entries if _is_version(e.name))

    def load(self, bucket: int, batch_id: int) -> KeyState:
        """The bucket's state as the newest batch before ``batch_id`` left it."""
        versions = [v for v in self._versions(bucket) if v < batch_id]
        for old in versions[:-1]:  # left over from an earlier run that stopped in between
            self._delete(bucket, old)
        return self._read(bucket, versions[-1]) if versions else KeyState()

    def _file(self, bucket: int, version: int) -> Location:
        return self.root.child(f"{bucket}/{version}.arrow")

    def _read(self, bucket: int, version: int) -> KeyState:
        import pyarrow as pa

        data = self.storage.read_bytes(self._file(bucket, version))
        table = pa.ipc.open_stream(pa.BufferReader(data)).read_all()
        return KeyState(*(table.column(c).to_numpy() for c in _STATE_SCHEMA))

    def save(self, bucket: int, batch_id: int, state: KeyState) -> None:
        """Write the bucket's state after ``batch_id`` (the version it was loaded from stays,
        for a retry of ``batch_id``; older ones went when it was loaded)."""
        import pyarrow as pa

        table = pa.table(dict(zip(_STATE_SCHEMA, state._arrays(), strict=True)))
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        self.storage.write_once(self._file(bucket, batch_id), sink.getvalue().to_pybytes())

    def stored_keys(self) -> int:
        """How many keys the newest state files hold (read only; for tests and diagnostics)."""
        total = 0
        for name in self.storage.dirs(self.root):
            if name.isdigit():
                versions = self._versions(int(name))
                if versions:
                    total += len(self._read(int(name), versions[-1]))
        return total

    def _delete(self, bucket: int, batch_id: int) -> None:
        with contextlib.suppress(OSError):  # already gone (a concurrent attempt of the task)
            self.storage.delete(self._file(bucket, batch_id))


def _is_version(name: str) -> bool:
    return name.endswith(".arrow") and name[: -len(".arrow")].isdigit()
