"""The Python engine's substreams in the plan: rows shuffled by key bucket, each partition judged
by a ``mapInArrow`` stage (:mod:`wmobs.policy._python._substream_stage`) with its keys' state
in wmobs' files in the checkpoint (:mod:`wmobs.policy._python._substream_state`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wmobs.policy._context import Context
from wmobs.policy._heartbeat import with_heartbeat
from wmobs.policy._python._rules import judge_arrival
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
    PLACE,
    SLOWEST,
    TS,
    VERDICT,
    WATERMARK,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["judge_substreams"]


def judge_substreams(ctx: Context, keyed: DataFrame, appended: list[str]) -> DataFrame:
    """The arrival policies, then out of order per key, in arrival order: rows partitioned by
    key bucket, each partition judged at once with its keys' state from wmobs' files in the
    checkpoint."""
    from pyspark.sql import functions as F

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
    # Each row's input partition: the shuffle hands a task the rows of each input partition in
    # their order, but the partitions in an order that changes between attempts, so a key's rows
    # of equal arrival are judged by input partition, then in the order they came, alike in every
    # attempt (Spark refuses monotonically_increasing_id in a streaming query). Partitioned by key
    # bucket before the times and verdicts are computed, so that only the input columns, the key
    # and the place go through the shuffle.
    keyed = keyed.withColumn(PLACE, F.spark_partition_id().cast("long"))
    partitioned = keyed.repartition(F.pmod(F.col(KEY), F.lit(BUCKETS)))
    staged = judge_arrival(ctx, partitioned).drop(WATERMARK)
    output = [c for c in staged.columns if c not in (KEY, ARRIVAL, PLACE, BATCH_TIME)] + appended
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
            place=PLACE,
            batch_time=BATCH_TIME,
        ),
        checkpoint=ctx.checkpoint or "",
        relative_to=ctx.relative_to,
        directory=spec["directory"],
        storage=ctx.storage,
    )
    return staged.mapInArrow(stage, output_schema)


def _spec(ctx: Context) -> dict[str, Any]:
    """The per-key judge's settings (the JVM engine's are those of
    :func:`wmobs.policy._jvm._substreams.judge_substreams`)."""
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
