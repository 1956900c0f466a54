"""How a :class:`~wmobs.TimePolicy` becomes part of a query plan, stage by stage:

1. the arrival policies and the batch's times, then out of order, globally or per key, with
   the idle-timeout heartbeat (:mod:`wmobs.policy._ordering`, :mod:`wmobs.policy._heartbeat`);
2. the counts, one ``observe`` (:mod:`wmobs.policy._observe`), each task's kept until Spark
   commits the micro-batch (``ctx.engine.keep_counts``);
3. the dropped rows filtered out, or handed to the dead-letter destination by the plan
   ``apply`` chose (:mod:`wmobs.policy.deadletter`);
4. the output: the input's columns, ``system_timestamp`` and the watermark on it.

Each stage asks the policy's engine for its part by name (``ctx.engine.<stage>``, the interface
of :mod:`wmobs.policy._stages`), and never which engine it is. Validation and the engine's
choice happen before any of this, in ``TimePolicy.apply``: :func:`build` takes a
:class:`~wmobs.policy._context.Context`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wmobs.policy._context import Context
from wmobs.policy._observe import observations
from wmobs.policy._ordering import global_out_of_order, substream_out_of_order
from wmobs.policy._verdicts import DROPPED_BITS, IDLE, REAL, TS, VERDICT

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from wmobs.policy._deadletter import DeadLetter

__all__ = ["SYSTEM_TIMESTAMP", "build", "dotted_names"]

SYSTEM_TIMESTAMP = "system_timestamp"


def build(ctx: Context, df: DataFrame, sink: DeadLetter | None) -> DataFrame:
    """``df`` judged by the policy of ``ctx`` (its ``renamed`` columns: see
    :func:`dotted_names`): its columns, ``system_timestamp`` and the watermark."""
    from pyspark.sql import functions as F

    columns = df.columns
    inside = df.withColumnsRenamed(ctx.renamed) if ctx.renamed else df
    if ctx.substream_by is None:
        staged = global_out_of_order(ctx, inside)
    else:
        staged = substream_out_of_order(ctx, inside)
    staged, counted = observations(ctx, staged, sink is not None)
    # Above observe, so that the optimizer keeps the function on the columns observe reads
    # (pushed below them, it would be handed the expressions that compute them, again).
    observed = ctx.engine.keep_counts(
        ctx, staged.observe(ctx.observation_name, *counted), sink is not None
    )
    if sink is None:
        kept = observed.filter((F.col(VERDICT).bitwiseAND(F.lit(DROPPED_BITS))) == 0)
    else:
        kept = ctx.engine.dead_letters(ctx, observed, sink, inside.schema)
    out = kept.select(
        *[F.col(f"`{ctx.column(c)}`").alias(c) for c in columns],
        F.timestamp_micros(F.col(TS)).alias(SYSTEM_TIMESTAMP),
        *([F.col(IDLE)] if ctx.idle else []),
    ).withWatermark(SYSTEM_TIMESTAMP, f"{ctx.tolerances.watermark_delay_us} microseconds")
    if not ctx.idle:
        return out
    # Synthetic rows have moved the watermark (above); none goes further. The filter names
    # system_timestamp so the optimizer cannot push it below withWatermark. And it is not
    # deterministic (a partition id, never negative, always true): Spark's optimizer would
    # merge a user's filter after the policy with a deterministic one, and push the conditions
    # that do not read the event time below withWatermark, where they would see the
    # synthetic rows' placeholders (dropping them before they move the watermark, or failing
    # on them under ANSI); a filter above one that is not deterministic stays above it.
    real = ((F.col(IDLE) == F.lit(REAL)) | F.col(SYSTEM_TIMESTAMP).isNull()) & (
        F.spark_partition_id() >= 0
    )
    return out.filter(real).drop(IDLE)


def dotted_names(columns: list[str]) -> dict[str, str]:
    """A name without a ``.`` for each of ``columns`` that has one, unused among ``columns``:
    PySpark's ``mapInArrow`` (substreams, and dead letters of columns without an exact text
    form) cannot resolve such a column in its output, so the plan renames them inside, and
    back in its output and in the dead letters."""
    taken = set(columns)
    renamed = {}
    for index, column in enumerate(columns):
        if "." in column:
            inside = f"wmobs__column_{index}"
            while inside in taken:
                inside += "_"
            taken.add(inside)
            renamed[column] = inside
    return renamed
