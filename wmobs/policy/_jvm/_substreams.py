"""The JVM engine's substreams: the per-key judge in Spark's state store (``Substreams.java``: a
``flatMapGroupsWithState`` that the query checkpoints, or Spark 4's ``transformWithState`` where
the state store is RocksDB), its idle clocks and TTL kept with Spark's processing-time timeouts
(or timers)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from wmobs.policy._context import Context, substream_files
from wmobs.policy._heartbeat import default_check_interval_ms, heartbeat
from wmobs.policy._jvm import _extension
from wmobs.policy._jvm._rules import judge
from wmobs.policy._jvm._specs import SubstreamsSpec
from wmobs.policy._verdicts import (
    ARRIVAL,
    BATCH_TIME,
    DROPPED_BITS,
    IDLE,
    KEY,
    OOO_ADJUSTED,
    OOO_DROPPED,
    PLACE,
    REAL,
    TS,
    VERDICT,
    WATERMARK,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["judge_substreams", "refusing_available_now"]


def judge_substreams(ctx: Context, keyed: DataFrame, appended: list[str]) -> DataFrame:
    """The JVM engine's per-key judge, in Spark's state store (``Substreams.java``)."""
    from pyspark.sql import functions as F

    tolerances = ctx.tolerances
    ttl_us, idle_us = tolerances.substream_ttl_us, tolerances.idle_timeout_us
    if ctx.idle:  # real rows; Spark's timeouts make the synthetic ones
        keyed = keyed.withColumn(IDLE, F.lit(REAL).cast("long"))
    if idle_us is not None or ttl_us is not None:
        keyed = refusing_available_now(ctx, keyed)
    # Each row's place before the shuffle, which hands a partition's rows over in an order that
    # changes between attempts: a key's rows of equal arrival are judged in the same order in
    # every attempt. Shuffled by key before the times and verdicts are computed, so that only
    # the input columns, the key and the place go through the shuffle; the operator's
    # partitioning is this one.
    keyed = keyed.withColumn(PLACE, F.call_function(_extension.ROW_PLACE))
    partitioned = keyed.repartition(F.col(KEY))
    staged = judge(ctx, partitioned, out_of_order=False).drop(WATERMARK, BATCH_TIME)
    drop = ctx.out_of_order_action == "drop"
    interval_us = tolerances.idle_check_interval_us
    spec = SubstreamsSpec(
        tolerance_us=tolerances.out_of_order_us,
        drop=drop,
        ttl_ms=None if ttl_us is None else max(1, ttl_us // 1000),
        idle_timeout_ms=None if idle_us is None else idle_us // 1000,
        check_interval_ms=(
            None
            if idle_us is None
            else (
                default_check_interval_ms(idle_us // 1000)
                if interval_us is None
                else max(1, interval_us // 1000)
            )
        ),
        candidate_bits=DROPPED_BITS,
        ooo_bit=OOO_DROPPED if drop else OOO_ADJUSTED,
        key=KEY,
        ts=TS,
        arrival=ARRIVAL,
        verdict=VERDICT,
        place=PLACE,
        idle=IDLE if ctx.idle else None,
        appended=list(appended),
        checkpoint=ctx.checkpoint or "",
        files=substream_files(ctx.name),
    )
    judged: DataFrame = _extension.substreams(staged, spec)
    return judged


def refusing_available_now(ctx: Context, df: DataFrame) -> DataFrame:
    """``df`` with the JVM heartbeat in its substreams mode, which yields no rows and refuses
    ``Trigger.AvailableNow`` when the query starts: the JVM engine's substreams keep their idle
    clocks and TTL with Spark's processing-time timeouts (or timers), and Spark runs a
    micro-batch for those after every micro-batch, so such a query would never end."""
    return df.unionByName(heartbeat(ctx, df, ctx.checkpoint))
