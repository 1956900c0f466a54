"""The arrival policies (invalid time, early and late arrival), and the batch's times they
need. On the JVM engine, wmobs' ``wmobs_judge`` (``PolicyRules.java``) judges each row, one
small expression per field of its judgement, the global policy's out of order with it, and the
batch's times are read in every task; on the Python engine the rules are Column expressions and
the batch's times are read once per micro-batch by a Python data source broadcast into the plan.
Both answer to the reference cases in ``tests/reference/``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wmobs.policy._context import Context
from wmobs.policy._verdicts import (
    ARRIVAL,
    BATCH_TIME,
    DELAY,
    DROPPED_BITS,
    EARLY_ADJUSTED,
    EARLY_DROPPED,
    EVENT,
    INVALID_DROPPED,
    LATE_ADJUSTED,
    LATE_DROPPED,
    LATENESS,
    QUEUE,
    TS,
    VERDICT,
    VERDICT_BITS,
    WATERMARK,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["arrival_policies", "event_micros", "judge_arrival", "judge_jvm", "replace"]


def event_micros(ctx: Context, df: DataFrame) -> Column:
    """Each row's event time (µs); null where it is missing or unparseable."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    name = ctx.column(ctx.event_time)
    column = F.col(f"`{name}`")
    if isinstance(df.schema[name].dataType, StringType):
        column = F.try_to_timestamp(column)  # unparseable -> null -> invalid_time
    return F.unix_micros(column.cast("timestamp"))


def _arrival_micros(ctx: Context) -> Column:
    """The arrival time column; null where the micro-batch's time stands in for it."""
    from pyspark.sql import functions as F

    if ctx.arrival_time is None:
        return F.lit(None).cast("long")
    arrival = ctx.column(ctx.arrival_time)
    return F.unix_micros(F.col(f"`{arrival}`").cast("timestamp"))


def judge_arrival(ctx: Context, df: DataFrame) -> DataFrame:
    """``df`` with its event and arrival times (µs) and the batch's times joined in, judged
    by the arrival policies (out of order comes after, per key)."""
    from pyspark.sql import functions as F

    if ctx.engine.jvm:
        return judge_jvm(ctx, df, out_of_order=False)
    staged = df.select(
        *[F.col(f"`{c}`") for c in df.columns],
        event_micros(ctx, df).alias(TS),
        _arrival_micros(ctx).alias(ARRIVAL),
    )
    staged = _join_batch_times(ctx, staged)
    return arrival_policies(ctx, staged, F.col(BATCH_TIME) * F.lit(1000))


def judge_jvm(ctx: Context, df: DataFrame, *, out_of_order: bool) -> DataFrame:
    """``df`` judged by wmobs' ``PolicyRules`` (the JVM engine): the arrival policies, and with
    ``out_of_order`` the global policy's out of order against the batch's watermark. Adds the
    row's event time (:data:`EVENT`), system timestamp, verdict, arrival and queueing delays,
    and with ``out_of_order`` its lateness, else its arrival time (the batch's where it has
    none) for the per-key judge."""
    from pyspark.sql import functions as F

    from wmobs.policy._jvm import _extension

    checkpoint = ctx.checkpoint or ""
    no_time = F.lit(None).cast("long")
    staged = df.select(
        *[F.col(f"`{c}`") for c in df.columns],
        event_micros(ctx, df).alias(EVENT),
        _arrival_micros(ctx).alias(ARRIVAL),
        (_extension.batch_time(checkpoint, watermark=True) if out_of_order else no_time).alias(
            WATERMARK
        ),
        _extension.batch_time(checkpoint, watermark=False).alias(BATCH_TIME),
    )
    times = [F.col(EVENT), F.col(ARRIVAL), F.col(WATERMARK), F.col(BATCH_TIME)]
    spec = _rules_spec(ctx, out_of_order)
    fields = {TS: "system", VERDICT: "verdict", DELAY: "delay", QUEUE: "queue"}
    fields |= {LATENESS: "lateness"} if out_of_order else {ARRIVAL: "arrival"}
    judged = {
        column: _extension.judge({**spec, "field": f}, *times) for column, f in fields.items()
    }
    out = replace(staged, judged).drop(WATERMARK, BATCH_TIME)
    return out.drop(ARRIVAL) if out_of_order else out


def _rules_spec(ctx: Context, out_of_order: bool) -> dict[str, Any]:
    """The settings of ``PolicyRules``: the tolerances (µs), actions and verdict bits."""
    tolerances = ctx.tolerances
    early = ctx.early_arrival_action
    return {
        "early_arrival_us": tolerances.early_arrival_us if early is not None else None,
        "early_arrival_drop": early == "drop",
        "late_arrival_us": tolerances.late_arrival_us,
        "late_arrival_drop": ctx.late_arrival_action == "drop",
        "out_of_order_us": tolerances.out_of_order_us if out_of_order else None,
        "out_of_order_drop": ctx.out_of_order_action == "drop",
        "bits": [[rule, action, bit] for (rule, action), bit in VERDICT_BITS.items()],
    }


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


def replace(df: DataFrame, columns: dict[str, Column]) -> DataFrame:
    """Replace ``columns`` at once: every new value is computed from the old ones."""
    from pyspark.sql import functions as F

    kept = [F.col(f"`{c}`") for c in df.columns if c not in columns]
    return df.select(*kept, *[value.alias(name) for name, value in columns.items()])
