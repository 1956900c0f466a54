"""The JVM engine's stages: what a policy's plan asks of wmobs' Spark extension
(:class:`~wmobs.policy._stages.Engine`). The batch's times are read in the tasks, substreams
are judged in Spark's state store, everything observed is one aggregate, dead letters to a
Parquet directory are written by Spark's Parquet writer: no row crosses into Python (but where
dead letters go to Python, :mod:`wmobs.policy._deadletter_handover`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wmobs.policy._context import Context
from wmobs.policy._deadletter import DeadLetter
from wmobs.policy._deadletter_handover import hand_over
from wmobs.policy._jvm import _extension
from wmobs.policy._jvm._deadletters import write_dead_letters
from wmobs.policy._jvm._observe import observation
from wmobs.policy._jvm._rules import judge
from wmobs.policy._jvm._substreams import judge_substreams
from wmobs.policy._stages import Engine
from wmobs.policy._storage import Storage

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

__all__ = ["JvmEngine"]


@dataclass(frozen=True)
class JvmEngine(Engine):
    """wmobs' Spark extension (:mod:`wmobs.policy._jvm._extension`)."""

    name = "jvm"
    writes_parquet = True

    def check_apply(self, *, idle_global: bool, checkpoint_location: str | None) -> None:
        """Nothing to refuse: the extension finds the running query's checkpoint itself."""

    def reach_checkpoint(
        self, spark: Any, storage: Storage, *, checkpoint: str | None, root: str | None
    ) -> str:
        """Nothing to check here: the JVM reads the checkpoint through Hadoop with the
        session's configuration, as Spark writes it (a checkpoint Hadoop cannot reach fails
        the query, naming the cause), and resolves it as Spark does."""
        return ""

    def judge_global(self, ctx: Context, df: DataFrame) -> DataFrame:
        return judge(ctx, df, out_of_order=True)

    def judge_substreams(self, ctx: Context, keyed: DataFrame, appended: list[str]) -> DataFrame:
        return judge_substreams(ctx, keyed, appended)

    def heartbeat_source(self, ctx: Context, spark: Any) -> tuple[str, Mapping[str, str]]:
        return _extension.HEARTBEAT_SOURCE, {}

    def observation(
        self, ctx: Context, staged: DataFrame, dead_letters: bool
    ) -> tuple[DataFrame, list[Column]]:
        staged, column = observation(ctx, staged, dead_letters)
        return staged, [column]

    def keep_counts(self, ctx: Context, observed: DataFrame, dead_letters: bool) -> DataFrame:
        """Nothing to add: the observation's own aggregate keeps each task's counts
        (``KeptCounts.java``)."""
        return observed

    def dead_letters(
        self, ctx: Context, observed: DataFrame, sink: DeadLetter, schema: StructType
    ) -> DataFrame:
        """Plan ``jvm``: Spark's Parquet writer in the JVM (:mod:`wmobs.policy._jvm._deadletters`);
        the others, Python (:func:`~wmobs.policy._deadletter_handover.hand_over`)."""
        if ctx.dead_letters.name == "jvm":
            return write_dead_letters(ctx, observed, sink, schema)
        return hand_over(ctx, observed, sink, schema)
