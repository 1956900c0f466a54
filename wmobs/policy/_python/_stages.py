"""The Python engine's stages: what a policy's plan asks of Python data sources, ``mapInArrow``
and Spark's own aggregates (:class:`~wmobs.policy._stages.Engine`), for sessions that cannot
load wmobs' Spark extension (a Spark Connect server without it, platforms that forbid JARs).
The batch's times are read once per micro-batch by a one-row data source broadcast into the
plan, substreams are judged in ``mapInArrow`` with their state in wmobs' files in the
checkpoint, and what wmobs reads beside Spark is reached through :class:`~wmobs.Storage`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wmobs._spark import working_directory
from wmobs.policy._context import Context
from wmobs.policy._deadletter import DeadLetter
from wmobs.policy._deadletter_handover import hand_over
from wmobs.policy._python._kept import keep_counts
from wmobs.policy._python._observe import observation
from wmobs.policy._python._rules import judge_global
from wmobs.policy._python._substreams import judge_substreams
from wmobs.policy._stages import Engine
from wmobs.policy._storage import Storage

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

__all__ = ["PythonEngine"]


@dataclass(frozen=True)
class PythonEngine(Engine):
    """Python data sources, ``mapInArrow`` and Spark's own aggregates (Spark 4.0 and later)."""

    name = "python"
    writes_parquet = False

    def check_apply(self, *, idle_global: bool, checkpoint_location: str | None) -> None:
        """The global idle timeout's heartbeat reads the query's offsets log on the driver,
        where no task tells it the checkpoint of a named query."""
        if idle_global and checkpoint_location is None:
            raise ValueError(
                "idle_timeout: without substream_by the Python engine's idle timeout reads the "
                "query's offsets log: pass TimePolicy.apply(df, checkpoint_location=...)"
            )

    def reach_checkpoint(
        self, spark: Any, storage: Storage, *, checkpoint: str | None, root: str | None
    ) -> str:
        """Python reads the checkpoint through ``storage`` (:class:`~wmobs.StorageError` where
        it cannot); without ``checkpoint``, a task resolves a relative session root against the
        driver's working directory, as Spark resolved it on the driver."""
        if root:
            storage.check(root, "checkpoint_location")
        return "" if checkpoint else working_directory(spark)

    def judge_global(self, ctx: Context, df: DataFrame) -> DataFrame:
        return judge_global(ctx, df)

    def judge_substreams(self, ctx: Context, keyed: DataFrame, appended: list[str]) -> DataFrame:
        return judge_substreams(ctx, keyed, appended)

    def heartbeat_source(self, ctx: Context, spark: Any) -> tuple[str, Mapping[str, str]]:
        """A Python data source (:mod:`wmobs.policy._python._idle_source`), which reads the
        checkpoint through the policy's storage and wakes every key bucket of substreams."""
        from wmobs.policy._python._idle_source import SOURCE_NAME, IdleHeartbeatSource
        from wmobs.policy._python._substream_state import BUCKETS

        spark.dataSource.register(IdleHeartbeatSource)
        options = {
            "relative_to": ctx.relative_to,
            "storage": ctx.storage.encode(),
            "buckets": str(BUCKETS),
        }
        return SOURCE_NAME, options

    def observation(
        self, ctx: Context, staged: DataFrame, dead_letters: bool
    ) -> tuple[DataFrame, list[Column]]:
        return observation(ctx, staged, dead_letters)

    def keep_counts(self, ctx: Context, observed: DataFrame, dead_letters: bool) -> DataFrame:
        """Each task's counts, counted again by a vectorised Python function and kept beside
        the checkpoint (:mod:`wmobs.policy._python._kept`)."""
        return keep_counts(ctx, observed, dead_letters)

    def dead_letters(
        self, ctx: Context, observed: DataFrame, sink: DeadLetter, schema: StructType
    ) -> DataFrame:
        """Every plan of the Python engine is written by Python
        (:func:`~wmobs.policy._deadletter_handover.hand_over`)."""
        return hand_over(ctx, observed, sink, schema)
