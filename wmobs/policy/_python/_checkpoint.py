"""The Python engine's one reader of what Spark writes into a query's checkpoint (the JVM
engine's is ``BatchTimes.java``).

Spark writes ``<checkpoint>/offsets/<batchId>`` before micro-batch ``batchId`` runs: a version
line, a JSON line with ``batchWatermarkMs`` and ``batchTimestampMs``, then one line per source
with the offset that batch reads up to (``-`` for none). ``<checkpoint>/metadata`` holds the
query's id. Python tasks of a micro-batch see its id, the query's id and (for a named query)
its name as local properties of the task (:mod:`wmobs.policy._task`).

Everything wmobs reads beside Spark goes through :mod:`wmobs.policy._storage`, so the
checkpoint may be on any filesystem it knows. Importing this module does not import PySpark.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple

from wmobs._spark import is_relative
from wmobs.policy._storage import Storage
from wmobs.policy._task import NotInMicroBatchError, task_properties

__all__ = [
    "BatchTimes",
    "CheckpointNotFoundError",
    "NotInMicroBatchError",
    "OffsetsEntry",
    "TaskMicroBatch",
    "parse_offsets",
    "read_batch_times",
    "resolve_checkpoint",
    "task_batch_times",
    "task_micro_batch",
]

_HINT = (
    "Pass the query's checkpointLocation to TimePolicy.apply(df, checkpoint_location=...), "
    "or name the query and set spark.sql.streaming.checkpointLocation."
)


class CheckpointNotFoundError(RuntimeError):
    """The query's checkpoint cannot be found or read."""


@dataclass(frozen=True)
class OffsetsEntry:
    """One ``offsets/<batchId>`` file."""

    watermark_ms: int | None
    """``batchWatermarkMs``; ``None`` while the query has no watermark yet (Spark writes 0)."""
    timestamp_ms: int | None
    """``batchTimestampMs``: the batch's ``current_timestamp()``."""
    sources: tuple[str, ...]
    """One line per source: the offset the batch reads up to, ``-`` for none."""


def parse_offsets(text: str) -> OffsetsEntry:
    """An ``offsets/<batchId>`` file's text; ``ValueError`` when it is incomplete."""
    lines = text.splitlines()
    if len(lines) < 2:
        raise ValueError("incomplete offsets file (being written?)")
    metadata = json.loads(lines[1])
    watermark = int(metadata.get("batchWatermarkMs", 0))
    timestamp = metadata.get("batchTimestampMs")
    return OffsetsEntry(
        watermark if watermark > 0 else None,
        None if timestamp is None else int(timestamp),
        tuple(lines[2:]),
    )


class BatchTimes(NamedTuple):
    """What the offsets log says of one micro-batch's times."""

    batch_id: int
    watermark_ms: int | None  # None: no watermark yet
    timestamp_ms: int | None  # the batch's current_timestamp()


def read_batch_times(
    checkpoint: str, batch_id: int, query_id: str | None, storage: Storage | None = None
) -> BatchTimes:
    """``batchWatermarkMs`` and ``batchTimestampMs`` of ``batch_id`` in ``checkpoint``.

    Checks that the checkpoint belongs to ``query_id``, so a wrong path fails loudly rather
    than judging rows against another query's watermark.
    """
    base = checkpoint.rstrip("/")
    storage = storage or Storage()
    try:
        if query_id is not None:
            meta = json.loads(storage.read_text(f"{base}/metadata"))
            if meta.get("id") != query_id:
                raise CheckpointNotFoundError(
                    f"{base} is the checkpoint of query {meta.get('id')}, not of {query_id}"
                )
        try:
            text = storage.read_text(f"{base}/offsets/{batch_id}")
        except FileNotFoundError as exc:
            if query_id is None:  # perhaps not the query's checkpoint: the hint below
                raise
            raise CheckpointNotFoundError(no_offsets_entry(base, batch_id, query_id)) from exc
        entry = parse_offsets(text)
    except (OSError, ValueError) as exc:
        raise CheckpointNotFoundError(
            f"wmobs TimePolicy could not read the watermark of batch {batch_id} from the "
            f"checkpoint {base!r} ({exc}). {_HINT}"
        ) from exc
    return BatchTimes(batch_id, entry.watermark_ms, entry.timestamp_ms)


def no_offsets_entry(base: str, batch_id: int, query_id: str) -> str:
    """Why the offsets log of the query's own checkpoint lacks a micro-batch (the JVM engine
    says the same, ``BatchTimes.java``)."""
    return (
        f"wmobs TimePolicy: the offsets log of query {query_id} in {base!r} has no entry for "
        f"batch {batch_id}. Spark writes it before each micro-batch runs, unless the query "
        "tracks its progress asynchronously (the writeStream option "
        "asyncProgressTrackingEnabled), which writes it late or not at all; time policies read "
        "each micro-batch's watermark and time from it: turn asynchronous progress tracking "
        "off for this query"
    )


def resolve_checkpoint(configured: str, props: dict[str, Any], relative_to: str) -> str:
    """``configured``, or a named query's below the session's root; a relative root against
    ``relative_to``, the driver's working directory (where Spark resolved it), not the task's.
    """
    if configured:
        return configured
    root = str(props.get("spark.sql.streaming.checkpointLocation") or "").rstrip("/")
    description = props.get("spark.job.description") or ""
    name = description.split("\n", 1)[0].strip()
    if root and name and not name.startswith("id = "):
        if relative_to and is_relative(root):
            root = f"{relative_to.rstrip('/')}/{root}"
        return f"{root}/{name}"
    raise CheckpointNotFoundError(
        f"wmobs TimePolicy needs the query's checkpoint location to read the batch watermark. "
        f"{_HINT}"
    )


class TaskMicroBatch(NamedTuple):
    """Where a Spark task runs: its micro-batch, the query's checkpoint and id."""

    batch_id: int
    checkpoint: str
    query_id: str | None


def task_micro_batch(configured_checkpoint: str, relative_to: str = "") -> TaskMicroBatch:
    """Inside a Spark task of a micro-batch: which one, and the query's checkpoint (the
    configured one, or found for a named query, a relative session root against
    ``relative_to``). A task that Spark ran without its micro-batch's id is
    :class:`NotInMicroBatchError`: a policy's plan runs only in its query's micro-batches
    (``df.explain`` runs no task), and judging without the micro-batch would judge without
    its watermark and state."""
    props = task_properties()
    batch = props.get("streaming.sql.batchId")
    if batch is None:
        raise NotInMicroBatchError(
            "wmobs: a time policy's task ran without its streaming micro-batch (Spark gave the"
            " task no micro-batch id), so it cannot know the micro-batch's watermark or the"
            " keys' state: a foreachBatch function's action over Spark Connect (the Python"
            " engine needs a sink there; the JVM engine runs it) or on a thread of its own"
            " (start it as pyspark.InheritableThread, or use the JVM engine)"
        )
    checkpoint = resolve_checkpoint(configured_checkpoint, props, relative_to)
    return TaskMicroBatch(int(batch), checkpoint, props.get("sql.streaming.queryId"))


def task_batch_times(
    configured_checkpoint: str, storage: Storage | None = None, relative_to: str = ""
) -> BatchTimes:
    """Inside a Spark task of a micro-batch: its times, read from the query's checkpoint
    (:func:`task_micro_batch`)."""
    task = task_micro_batch(configured_checkpoint, relative_to)
    return read_batch_times(task.checkpoint, task.batch_id, task.query_id, storage)
