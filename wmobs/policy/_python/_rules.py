"""The Python engine's stateless rules, as Column expressions: the arrival policies (invalid
time, early and late arrival), and out of order against the batch's watermark, which a Python
data source reads from the checkpoint once per micro-batch and the plan broadcasts. The JVM
engine's are ``PolicyRules.java`` (:mod:`wmobs.policy._jvm._rules`); both answer to the
reference cases in ``tests/reference/``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wmobs.policy._columns import arrival_micros, event_micros, replace
from wmobs.policy._context import Context
from wmobs.policy._verdicts import (
    ARRIVAL,
    BATCH_TIME,
    DELAY,
    DROPPED_BITS,
    EARLY_ADJUSTED,
    EARLY_DROPPED,
    INVALID_DROPPED,
    LATE_ADJUSTED,
    LATE_DROPPED,
    LATENESS,
    OOO_ADJUSTED,
    OOO_DROPPED,
    QUEUE,
    TS,
    VERDICT,
    WATERMARK,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["arrival_policies", "judge_arrival", "judge_global", "out_of_order_against_watermark"]


def judge_global(ctx: Context, df: DataFrame) -> DataFrame:
    """The arrival policies, then out of order against the batch's watermark, as Column
    expressions (the Python engine; the JVM engine's are ``PolicyRules.java``)."""
    return out_of_order_against_watermark(ctx, judge_arrival(ctx, df)).drop(WATERMARK, BATCH_TIME)


def judge_arrival(ctx: Context, df: DataFrame) -> DataFrame:
    """``df`` with its event and arrival times (µs) and the batch's times joined in, judged
    by the arrival policies (out of order comes after, per key)."""
    from pyspark.sql import functions as F

    staged = df.select(
        *[F.col(f"`{c}`") for c in df.columns],
        event_micros(ctx, df).alias(TS),
        arrival_micros(ctx).alias(ARRIVAL),
    )
    staged = _join_batch_times(ctx, staged)
    return arrival_policies(ctx, staged, F.col(BATCH_TIME) * F.lit(1000))


def arrival_policies(ctx: Context, df: DataFrame, batch_time: Column) -> DataFrame:
    """Invalid time, early and late arrival: stateless Column expressions (the Python engine;
    the JVM engine's are ``PolicyRules.java``).
    ``batch_time``: the micro-batch's timestamp (µs), for rows without an arrival time."""
    from pyspark.sql import functions as F

    tolerances = ctx.tolerances
    # How long each row waited in the broker: only where the policy has arrival times.
    queue = batch_time - F.col(ARRIVAL) if ctx.arrival_time is not None else F.lit(None)
    df = replace(df, {ARRIVAL: F.coalesce(F.col(ARRIVAL), batch_time), QUEUE: queue.cast("long")})
    ts, arrival = F.col(TS), F.col(ARRIVAL)
    verdict = F.when(ts.isNull(), F.lit(INVALID_DROPPED)).otherwise(F.lit(0))
    system = ts
    if ctx.early_arrival_action is not None and tolerances.early_arrival_us is not None:
        early = ts.isNotNull() & (ts > arrival + F.lit(tolerances.early_arrival_us))
        drop = ctx.early_arrival_action == "drop"
        verdict = F.when(early, F.lit(EARLY_DROPPED if drop else EARLY_ADJUSTED)).otherwise(verdict)
        if not drop:
            system = F.when(early, arrival).otherwise(system)
    late_floor = arrival - F.lit(tolerances.late_arrival_us)
    late = (verdict.bitwiseAND(F.lit(DROPPED_BITS)) == 0) & (system < late_floor)
    if ctx.late_arrival_action == "drop":
        verdict = F.when(late, verdict.bitwiseOR(F.lit(LATE_DROPPED))).otherwise(verdict)
    else:
        verdict = F.when(late, verdict.bitwiseOR(F.lit(LATE_ADJUSTED))).otherwise(verdict)
        system = F.when(late, late_floor).otherwise(system)
    return replace(df, {TS: system, VERDICT: verdict, DELAY: arrival - ts})


def out_of_order_against_watermark(ctx: Context, df: DataFrame) -> DataFrame:
    """Out of order of ``df``'s rows, judged by the arrival policies, against its
    :data:`WATERMARK` column (ms): the Python engine's rule, Column expressions."""
    from pyspark.sql import functions as F

    mark = F.col(WATERMARK) * F.lit(1000)
    candidate = F.col(VERDICT).bitwiseAND(F.lit(DROPPED_BITS)) == 0
    behind = candidate & mark.isNotNull() & (F.col(TS) < mark)
    drop = ctx.out_of_order_action == "drop"
    bit = F.lit(OOO_DROPPED if drop else OOO_ADJUSTED)
    largest = mark + F.lit(ctx.tolerances.out_of_order_us)  # before this batch
    behind_by = F.when(mark.isNotNull(), F.greatest(largest - F.col(TS), F.lit(0)))
    replaced = {
        VERDICT: F.when(behind, F.col(VERDICT).bitwiseOR(bit)).otherwise(F.col(VERDICT)),
        LATENESS: F.when(candidate, F.coalesce(behind_by, F.lit(0))),
    }
    if not drop:
        replaced[TS] = F.when(behind, mark).otherwise(F.col(TS))
    return replace(df, replaced)


def _join_batch_times(ctx: Context, df: DataFrame) -> DataFrame:
    """The micro-batch's watermark and timestamp on every row, read from the checkpoint once
    per batch by a Python data source, broadcast (the Python engine: a Spark job of its own in
    every micro-batch, 23-42 ms of a small one; the JVM engine reads them in every task)."""
    from pyspark.sql import functions as F

    from wmobs.policy._python._watermark_source import SOURCE_NAME, WatermarkSource

    spark = df.sparkSession
    spark.dataSource.register(WatermarkSource)
    source = (
        spark.read.format(SOURCE_NAME)
        .option("checkpoint", ctx.checkpoint or "")
        .option("relative_to", ctx.relative_to)
        .option("storage", ctx.storage.encode())
        .load()
    )
    # Broadcast, the one-row source is read once per micro-batch. (A scalar subquery
    # measured slower: Spark re-plans the Python data source for it in every batch.)
    return df.crossJoin(F.broadcast(source.select(WATERMARK, BATCH_TIME)))
