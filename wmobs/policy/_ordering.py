"""Out of order, in the plan: against the micro-batch's watermark (global), or per key in
arrival order (substreams: rows shuffled by key bucket, each partition judged by wmobs' JVM
generator or by the Python engine's ``mapInArrow`` stage, with the keys' state in the
checkpoint)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wmobs.policy._arrival import judge_arrival, judge_jvm, replace
from wmobs.policy._context import Context
from wmobs.policy._heartbeat import refusing_available_now, with_heartbeat
from wmobs.policy._verdicts import (
    ARRIVAL,
    BATCH_TIME,
    DROPPED_BITS,
    FASTEST,
    IDLE,
    KEY,
    LATENESS,
    OOO_ADJUSTED,
    OOO_DROPPED,
    SLOWEST,
    TS,
    VERDICT,
    WATERMARK,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["global_out_of_order", "out_of_order_against_watermark", "substream_out_of_order"]


def global_out_of_order(ctx: Context, df: DataFrame) -> DataFrame:
    """The arrival policies, then out of order against the micro-batch's watermark (Spark's own
    semantics: the largest system timestamp of earlier batches minus the tolerance)."""
    if ctx.engine.jvm:
        judged = judge_jvm(ctx, df, out_of_order=True)
    else:
        judged = _python_global_out_of_order(ctx, df)
    if ctx.idle:
        judged = with_heartbeat(ctx, judged, ctx.checkpoint)
    return judged


def _python_global_out_of_order(ctx: Context, df: DataFrame) -> DataFrame:
    """The arrival policies, then out of order against the batch's watermark, as Column
    expressions (the Python engine; the JVM engine's are ``PolicyRules.java``)."""
    return out_of_order_against_watermark(ctx, judge_arrival(ctx, df)).drop(WATERMARK, BATCH_TIME)


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


def _spec(ctx: Context) -> dict[str, Any]:
    """The Python engine's per-key judge's settings (the JVM engine's are
    :func:`_jvm_substreams`')."""
    from wmobs.policy._python._substream_state import BUCKETS, state_directory

    drop = ctx.out_of_order_action == "drop"
    ttl_us, idle_us = ctx.tolerances.substream_ttl_us, ctx.tolerances.idle_timeout_us
    return {
        "checkpoint": ctx.checkpoint or "",
        "directory": state_directory(ctx.name),
        "buckets": BUCKETS,
        "tolerance_us": ctx.tolerances.out_of_order_us,
        "drop": drop,
        "ttl_ms": None if ttl_us is None else max(1, ttl_us // 1000),
        "idle_timeout_ms": None if idle_us is None else idle_us // 1000,
        "candidate_bits": DROPPED_BITS,
        "ooo_bit": OOO_DROPPED if drop else OOO_ADJUSTED,
    }


def _jvm_substreams(ctx: Context, keyed: DataFrame, appended: list[str]) -> DataFrame:
    """The JVM engine's per-key judge, in Spark's state store (``Substreams.java``)."""
    from pyspark.sql import functions as F

    from wmobs.policy._heartbeat import default_check_interval_ms
    from wmobs.policy._jvm import _extension
    from wmobs.policy._python._substream_state import state_directory
    from wmobs.policy._verdicts import REAL

    tolerances = ctx.tolerances
    ttl_us, idle_us = tolerances.substream_ttl_us, tolerances.idle_timeout_us
    if ctx.idle:  # real rows; Spark's timeouts make the synthetic ones
        keyed = keyed.withColumn(IDLE, F.lit(REAL).cast("long"))
    if idle_us is not None or ttl_us is not None:
        keyed = refusing_available_now(ctx, keyed)
    # Shuffled by key before the times and verdicts are computed, so that only the input
    # columns and the key go through the shuffle; the operator's partitioning is this one.
    partitioned = keyed.repartition(F.col(KEY))
    staged = judge_arrival(ctx, partitioned).drop(WATERMARK, BATCH_TIME)
    drop = ctx.out_of_order_action == "drop"
    interval_us = tolerances.idle_check_interval_us
    spec = {
        "tolerance_us": tolerances.out_of_order_us,
        "drop": drop,
        "ttl_ms": None if ttl_us is None else max(1, ttl_us // 1000),
        "idle_timeout_ms": None if idle_us is None else idle_us // 1000,
        "check_interval_ms": (
            None
            if idle_us is None
            else (
                default_check_interval_ms(idle_us // 1000)
                if interval_us is None
                else max(1, interval_us // 1000)
            )
        ),
        "candidate_bits": DROPPED_BITS,
        "ooo_bit": OOO_DROPPED if drop else OOO_ADJUSTED,
        "key": KEY,
        "ts": TS,
        "arrival": ARRIVAL,
        "verdict": VERDICT,
        "idle": IDLE if ctx.idle else None,
        "appended": appended,
        "checkpoint": ctx.checkpoint or "",
        "files": state_directory(ctx.name).rsplit("/", 1)[0],
    }
    judged: DataFrame = _extension.substreams(staged, spec)
    return judged


def substream_out_of_order(ctx: Context, df: DataFrame) -> DataFrame:
    """The arrival policies, then out of order per key, in arrival order. On the JVM engine in
    Spark's state store (``Substreams.java``: a ``flatMapGroupsWithState`` that the query
    checkpoints); on the Python engine rows partitioned by key bucket, each partition judged at
    once with its keys' state from wmobs' files in the checkpoint."""
    from pyspark.sql import functions as F

    keys = [F.col(f"`{ctx.column(c)}`") for c in ctx.substream_by or ()]
    keyed = df.withColumn(KEY, F.xxhash64(*keys))
    # What the judge adds: a row's lateness, and its key's largest system timestamp (twice, for
    # the batch's slowest and fastest key).
    appended = [LATENESS, SLOWEST, FASTEST]
    if ctx.engine.jvm:
        return _jvm_substreams(ctx, keyed, appended)
    from wmobs.policy._python._substream_state import BUCKETS, state_directory

    if not ctx.named:
        from wmobs._log import get_logger

        get_logger().warning(
            "wmobs.substream_policy_unnamed",
            state=state_directory(ctx.name),
            hint="pass TimePolicy(name=...) so that the per-key state is found again "
            "after a restart even if the code creates its policies in another order",
        )
    if ctx.idle:
        keyed = with_heartbeat(ctx, keyed, ctx.checkpoint)
    # Partitioned by key bucket before the times and verdicts are computed, so that only
    # the input columns and the key go through the shuffle.
    partitioned = keyed.repartition(F.pmod(F.col(KEY), F.lit(BUCKETS)))
    staged = judge_arrival(ctx, partitioned).drop(WATERMARK, BATCH_TIME)
    output = [c for c in staged.columns if c not in (KEY, ARRIVAL)] + appended
    spec = _spec(ctx)
    nothing = F.lit(None).cast("long")  # filled by the judge
    staged = staged.withColumns({c: nothing for c in appended})
    from wmobs.policy._python._substream_judge import SubstreamConfig
    from wmobs.policy._python._substream_stage import Columns, substream_stage

    config = SubstreamConfig(
        tolerance_us=spec["tolerance_us"],
        drop=spec["drop"],
        ttl_ms=spec["ttl_ms"],
        idle_timeout_ms=spec["idle_timeout_ms"],
        candidate_bits=spec["candidate_bits"],
        ooo_bit=spec["ooo_bit"],
    )
    output_schema = staged.select(*[F.col(f"`{c}`") for c in output]).schema
    stage = substream_stage(
        config,
        Columns(
            KEY,
            TS,
            ARRIVAL,
            VERDICT,
            IDLE if ctx.idle else None,
            tuple(output),
            lateness=LATENESS,
            slowest=SLOWEST,
            fastest=FASTEST,
        ),
        checkpoint=ctx.checkpoint or "",
        relative_to=ctx.relative_to,
        directory=spec["directory"],
        storage=ctx.storage,
    )
    return staged.mapInArrow(stage, output_schema)
