"""Out of order, in the plan: against the micro-batch's watermark (global), or per key in
arrival order (substreams: rows shuffled by key, each partition judged by wmobs' JVM operator in
Spark's state store, or by the Python engine's ``mapInArrow`` stage with the keys' state in the
checkpoint). The engine judges (``Engine.judge_global``, ``Engine.judge_substreams``); here
the key, and the idle timeout's heartbeat of the global policy."""

from __future__ import annotations

from typing import TYPE_CHECKING

from wmobs.policy._context import Context
from wmobs.policy._heartbeat import with_heartbeat
from wmobs.policy._verdicts import FASTEST, KEY, LATENESS, SLOWEST

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["global_out_of_order", "substream_key", "substream_out_of_order"]


def global_out_of_order(ctx: Context, df: DataFrame) -> DataFrame:
    """The arrival policies, then out of order against the micro-batch's watermark (Spark's own
    semantics: the largest system timestamp of earlier batches minus the tolerance)."""
    judged = ctx.engine.judge_global(ctx, df)
    if ctx.idle:
        judged = with_heartbeat(ctx, judged, ctx.checkpoint)
    return judged


def substream_key(columns: list[str]) -> Column:
    """A row's key: the hash of its key columns and, where some are null, which ones (Spark's
    hash skips a null, so ``(7, null)`` and ``(null, 7)`` would share a key). A key without
    nulls hashes as its columns alone, as before that was added. As ``Substreams.key``."""
    from pyspark.sql import functions as F

    keys = [F.col(f"`{c}`") for c in columns]
    nulls = F.lit(0).cast("long")
    for i, key in enumerate(keys):
        nulls = nulls + F.when(key.isNull(), F.lit(1 << min(i, 62))).otherwise(F.lit(0))
    return F.xxhash64(*keys, F.when(nulls != 0, nulls))


def substream_out_of_order(ctx: Context, df: DataFrame) -> DataFrame:
    """The arrival policies, then out of order per key, in arrival order. On the JVM engine in
    Spark's state store (``Substreams.java``: a ``flatMapGroupsWithState`` that the query
    checkpoints, or ``transformWithState`` on Spark 4 with RocksDB); on the Python engine rows
    partitioned by key bucket, each partition judged at once with its keys' state from wmobs'
    files in the checkpoint."""
    keyed = df.withColumn(KEY, substream_key([ctx.column(c) for c in ctx.substream_by or ()]))
    # What the judge adds: a row's lateness, and its key's largest system timestamp (twice, for
    # the batch's slowest and fastest key).
    appended = [LATENESS, SLOWEST, FASTEST]
    return ctx.engine.judge_substreams(ctx, keyed, appended)
