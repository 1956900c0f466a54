"""A one-row batch data source: the watermark and timestamp of the running micro-batch.

Spark exposes the watermark to no SQL expression, but writes it into the query's checkpoint
before a micro-batch runs (:mod:`wmobs.policy._python._checkpoint`). Cross-joined (broadcast) into a
streaming plan, this source is read anew in every micro-batch, in one small Python task that
sees the batch id as a task-local property, so the global time policy judges rows against the
exact batch watermark with no Python per row.

The batch timestamp is the value ``current_timestamp()`` has in that micro-batch. Taking it from
here rather than from ``current_timestamp()`` keeps it out of the generated code: Spark inlines
the batch timestamp as a literal, so every micro-batch compiles its stage anew.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from wmobs.policy._python._checkpoint import task_batch_times
from wmobs.policy._storage import Storage

__all__ = ["SCHEMA", "SOURCE_NAME", "NamedSource", "WatermarkSource"]

SOURCE_NAME = "wmobs_batch_watermark"
SCHEMA = "wmobs_batch_id LONG, wmobs_watermark_ms LONG, wmobs_batch_time_ms LONG"


class _Reader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.checkpoint = options.get("checkpoint", "")
        self.relative_to = options.get("relative_to", "")
        self.storage = Storage.decode(options.get("storage", ""))

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[tuple[int, int | None, int | None]]:
        yield task_batch_times(self.checkpoint, self.storage, self.relative_to)


class NamedSource(DataSource):
    """A wmobs data source: its format name and schema as class attributes."""

    NAME: ClassVar[str]
    SCHEMA: ClassVar[str]

    @classmethod
    def name(cls) -> str:
        return cls.NAME

    def schema(self) -> str:
        return self.SCHEMA


class WatermarkSource(NamedSource):
    """``spark.read.format("wmobs_batch_watermark").option("checkpoint", path)`` (and
    ``.option("storage", Storage.encode())``) ``.load()``."""

    NAME = SOURCE_NAME
    SCHEMA = SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return _Reader(dict(self.options))
