"""A one-row batch data source: the watermark and timestamp of the running micro-batch.

Spark exposes the watermark to no SQL expression, but writes it into the query's checkpoint
before a micro-batch runs: the second line of ``<checkpoint>/offsets/<batchId>`` is JSON with
``batchWatermarkMs`` and ``batchTimestampMs``. Cross-joined (broadcast) into a streaming plan,
this source is read anew in every micro-batch, in one small Python task that sees the batch id
as a task-local property, so the global time policy judges rows against the exact batch
watermark with no Python per row.

The batch timestamp is the value ``current_timestamp()`` has in that micro-batch. Taking it from
here rather than from ``current_timestamp()`` keeps it out of the generated code: Spark inlines
the batch timestamp as a literal, so every micro-batch compiles its stage anew.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, NamedTuple

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from wmobs._fs import filesystem_for

__all__ = [
    "SOURCE_NAME",
    "BatchTimes",
    "TaskMicroBatch",
    "WatermarkSource",
    "read_batch_times",
    "task_batch_times",
    "task_micro_batch",
]

SOURCE_NAME = "wmobs_batch_watermark"
SCHEMA = "wmobs_batch_id LONG, wmobs_watermark_ms LONG, wmobs_batch_time_ms LONG"


class BatchTimes(NamedTuple):
    """What the offsets log says of one micro-batch."""

    batch_id: int
    watermark_ms: int | None  # None: no watermark yet
    timestamp_ms: int | None  # the batch's current_timestamp()


class CheckpointNotFoundError(RuntimeError):
    pass


def _read_text(path: str) -> str:
    """A small file from any filesystem pyarrow knows (local, HDFS, S3, GCS, ...)."""
    filesystem, inner = filesystem_for(path)
    with filesystem.open_input_stream(inner) as stream:
        return bytes(stream.read()).decode("utf-8")


def read_batch_times(checkpoint: str, batch_id: int, query_id: str | None) -> BatchTimes:
    """``batchWatermarkMs`` and ``batchTimestampMs`` of ``batch_id`` in ``checkpoint``.

    Checks that the checkpoint belongs to ``query_id``, so a wrong path fails loudly rather
    than judging rows against another query's watermark.
    """
    base = checkpoint.rstrip("/")
    try:
        if query_id is not None:
            meta = json.loads(_read_text(f"{base}/metadata"))
            if meta.get("id") != query_id:
                raise CheckpointNotFoundError(
                    f"{base} is the checkpoint of query {meta.get('id')}, not of {query_id}"
                )
        lines = _read_text(f"{base}/offsets/{batch_id}").splitlines()
    except (OSError, ValueError) as exc:
        raise CheckpointNotFoundError(
            f"wmobs TimePolicy could not read the watermark of batch {batch_id} from the "
            f"checkpoint {base!r} ({exc}). Pass the query's checkpointLocation to "
            "TimePolicy.apply(df, checkpoint_location=...), or name the query and set "
            "spark.sql.streaming.checkpointLocation."
        ) from exc
    metadata = json.loads(lines[1])
    watermark = int(metadata.get("batchWatermarkMs", 0))
    timestamp = metadata.get("batchTimestampMs")
    return BatchTimes(
        batch_id,
        watermark if watermark > 0 else None,
        None if timestamp is None else int(timestamp),
    )


def _resolve_checkpoint(configured: str, props: dict[str, Any]) -> str:
    if configured:
        return configured
    root = props.get("spark.sql.streaming.checkpointLocation")
    description = props.get("spark.job.description") or ""
    name = description.split("\n", 1)[0].strip()
    if root and name and not name.startswith("id = "):
        return f"{str(root).rstrip('/')}/{name}"
    raise CheckpointNotFoundError(
        "wmobs TimePolicy needs the query's checkpoint location to read the batch watermark: "
        "pass TimePolicy.apply(df, checkpoint_location=...) (the query's checkpointLocation), "
        "or name the query and set spark.sql.streaming.checkpointLocation."
    )


class TaskMicroBatch(NamedTuple):
    """Where a Spark task runs: its micro-batch, the query's checkpoint and id."""

    batch_id: int
    checkpoint: str
    query_id: str | None


def task_micro_batch(configured_checkpoint: str) -> TaskMicroBatch | None:
    """Inside a Spark task of a micro-batch: which one, and the query's checkpoint (the
    configured one, or found for a named query); ``None`` outside a streaming micro-batch
    (e.g. ``df.explain``)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    props: dict[str, Any] = dict(getattr(context, "_localProperties", None) or {})
    batch = props.get("streaming.sql.batchId")
    if batch is None:
        return None
    checkpoint = _resolve_checkpoint(configured_checkpoint, props)
    return TaskMicroBatch(int(batch), checkpoint, props.get("sql.streaming.queryId"))


def task_batch_times(configured_checkpoint: str) -> BatchTimes | None:
    """Inside a Spark task of a micro-batch: its times, read from the query's checkpoint;
    ``None`` outside a streaming micro-batch (e.g. ``df.explain``)."""
    task = task_micro_batch(configured_checkpoint)
    if task is None:
        return None
    return read_batch_times(task.checkpoint, task.batch_id, task.query_id)


class _Reader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.checkpoint = options.get("checkpoint", "")

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[tuple[int, int | None, int | None]]:
        found = task_batch_times(self.checkpoint)
        yield (-1, None, None) if found is None else found


class WatermarkSource(DataSource):
    """``spark.read.format("wmobs_batch_watermark").option("checkpoint", path).load()``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return _Reader(dict(self.options))
