"""What a time policy counts, in the plan: the ``observe`` columns of :mod:`wmobs.observations`
(verdict counts, dead letters, idle-timeout firings, the input's watermark and largest event
time, the two distributions) and the engine that counted them. The engine counts
(``Engine.observation``): on the JVM engine one aggregate of wmobs' extension counts everything
(:mod:`wmobs.policy._jvm._observe`); on the Python engine each column is a Spark aggregate of its
own (:mod:`wmobs.policy._python._observe`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wmobs.observations import DEAD_LETTER_PLAN_COLUMN, ENGINE_COLUMN, rule_column
from wmobs.policy._context import Context
from wmobs.policy._verdicts import VERDICT_BITS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["JOINT_HISTOGRAMS", "counted", "observations", "queueing"]

JOINT_HISTOGRAMS = ("arrival_delay", "lateness")
"""The distributions a policy counts together, in one index (each row's arrival delay and
lateness)."""


def observations(
    ctx: Context, staged: DataFrame, dead_letters: bool
) -> tuple[DataFrame, list[Any]]:
    """What ``observe`` counts, and ``staged`` with the columns it reads."""
    from pyspark.sql import functions as F

    said = [
        F.lit(ctx.engine.name).alias(ENGINE_COLUMN),
        F.lit(ctx.dead_letters.name).alias(DEAD_LETTER_PLAN_COLUMN),
    ]
    staged, counts = ctx.engine.observation(ctx, staged, dead_letters)
    return staged, [*counts, *said]


def queueing(ctx: Context) -> bool:
    """Whether the policy counts how long rows waited in the broker: with its distributions,
    where it has arrival times."""
    return ctx.distributions and ctx.arrival_time is not None


def counted(ctx: Context) -> list[tuple[str, int]]:
    """``(column, verdict bit)`` of every verdict this policy can give."""
    return [
        (rule_column(rule, action), bit)
        for (rule, action), bit in VERDICT_BITS.items()
        if ctx.can_happen(rule, action)
    ]
