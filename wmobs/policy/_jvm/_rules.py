"""The JVM engine's stateless rules: wmobs' ``wmobs_judge`` (``PolicyRules.java``) judges each
row, one small expression per field of its judgement: the arrival policies (invalid time, early
and late arrival) and the global policy's out of order with them, the batch's times read in
every task. The Python engine's are Column expressions (:mod:`wmobs.policy._python._rules`);
both answer to the reference cases in ``tests/reference/``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from wmobs.policy._columns import arrival_micros, event_micros, replace
from wmobs.policy._context import Context
from wmobs.policy._jvm import _extension
from wmobs.policy._jvm._specs import JudgeSpec
from wmobs.policy._verdicts import (
    ARRIVAL,
    BATCH_TIME,
    DELAY,
    EVENT,
    LATENESS,
    QUEUE,
    TS,
    VERDICT,
    VERDICT_BITS,
    WATERMARK,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["judge"]


def judge(ctx: Context, df: DataFrame, *, out_of_order: bool) -> DataFrame:
    """``df`` judged by wmobs' ``PolicyRules`` (the JVM engine): the arrival policies, and with
    ``out_of_order`` the global policy's out of order against the batch's watermark. Adds the
    row's event time (:data:`EVENT`), system timestamp, verdict, arrival and queueing delays,
    and with ``out_of_order`` its lateness, else its arrival time (the batch's where it has
    none) for the per-key judge."""
    from pyspark.sql import functions as F

    checkpoint = ctx.checkpoint or ""
    no_time = F.lit(None).cast("long")
    staged = df.select(
        *[F.col(f"`{c}`") for c in df.columns],
        event_micros(ctx, df).alias(EVENT),
        arrival_micros(ctx).alias(ARRIVAL),
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
        column: _extension.judge(dataclasses.replace(spec, field=f), *times)
        for column, f in fields.items()
    }
    out = replace(staged, judged).drop(WATERMARK, BATCH_TIME)
    return out.drop(ARRIVAL) if out_of_order else out


def _rules_spec(ctx: Context, out_of_order: bool) -> JudgeSpec:
    """The settings of ``PolicyRules``: the tolerances (µs), actions and verdict bits."""
    tolerances = ctx.tolerances
    early = ctx.early_arrival_action
    return JudgeSpec(
        early_arrival_us=tolerances.early_arrival_us if early is not None else None,
        early_arrival_drop=early == "drop",
        late_arrival_us=tolerances.late_arrival_us,
        late_arrival_drop=ctx.late_arrival_action == "drop",
        out_of_order_us=tolerances.out_of_order_us if out_of_order else None,
        out_of_order_drop=ctx.out_of_order_action == "drop",
        bits=[[rule, action, bit] for (rule, action), bit in VERDICT_BITS.items()],
    )
