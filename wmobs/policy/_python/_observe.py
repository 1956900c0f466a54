"""What a policy counts on the Python engine: each ``observe`` column that
:mod:`wmobs.policy._observe` names is a Spark aggregate of its own (the distributions:
:mod:`wmobs.policy._histograms`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from wmobs.observations import (
    DEAD_LETTER_COLUMN,
    IDLE_TIMEOUT_COLUMN,
    INPUT_EVENT_TIME_COLUMN,
    INPUT_WATERMARK_COLUMN,
    SUBSTREAM_SPREAD_COLUMN,
)
from wmobs.policy._columns import event_micros
from wmobs.policy._context import Context
from wmobs.policy._histograms import (
    histogram_counts,
    histogram_index,
    joint_histogram_counts,
    joint_histogram_index,
)
from wmobs.policy._observe import JOINT_HISTOGRAMS, counted, queueing
from wmobs.policy._verdicts import (
    ARRIVAL,
    BUCKETS,
    DELAY,
    DELAY_BUCKET,
    DROPPED_BITS,
    FASTEST,
    IDLE,
    LATENESS,
    LATENESS_BUCKET,
    QUEUE,
    QUEUE_BUCKET,
    REAL,
    SLOWEST,
    TS,
    VERDICT,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["observation", "real_rows"]


def observation(
    ctx: Context, staged: DataFrame, dead_letters: bool
) -> tuple[DataFrame, list[Column]]:
    """The counts, and with the policy's distributions their aggregates; ``staged`` with the
    columns they read."""
    counts = _counts(ctx, staged, dead_letters)
    if ctx.distributions:
        staged, distributions = _distributions(staged, ctx.idle, queueing(ctx))
        counts += distributions
    return staged, counts


def _event_time(ctx: Context, staged: DataFrame) -> Column:
    """Each row's event time (µs): parsed again only where there is no arrival column."""
    from pyspark.sql import functions as F

    event = event_micros(ctx, staged)
    if ARRIVAL in staged.columns:
        event = F.coalesce(F.col(ARRIVAL) - F.col(DELAY), event)
    return event


def real_rows(idle: bool) -> Column:
    """True for the rows of the input, false for the idle timeout's synthetic rows."""
    from pyspark.sql import functions as F

    return F.col(IDLE) == F.lit(REAL) if idle else F.lit(True)


def _counts(ctx: Context, staged: DataFrame, dead_letters: bool) -> list[Column]:
    """The verdict counts, and this input's watermark and largest event time (µs)."""
    from pyspark.sql import functions as F

    verdict = F.col(VERDICT)
    counts = [
        F.count_if(verdict.bitwiseAND(F.lit(bit)) != 0).alias(column)
        for column, bit in counted(ctx)
    ]
    if dead_letters:  # the stage after this one hands every dropped row over, or fails
        dropped = verdict.bitwiseAND(F.lit(DROPPED_BITS)) != 0
        counts.append(F.count_if(dropped).alias(DEAD_LETTER_COLUMN))
    if ctx.idle:  # synthetic rows carry their firings; real rows -1
        firings = F.when(F.col(IDLE) > 0, F.col(IDLE)).otherwise(F.lit(0))
        counts.append(F.sum(firings).alias(IDLE_TIMEOUT_COLUMN))
    # Synthetic rows move the input's clock (its watermark), but are no events.
    kept = verdict.bitwiseAND(F.lit(DROPPED_BITS)) == 0
    real = real_rows(ctx.idle)
    # The watermark this input puts on its output (out of order, plus substreams' skew).
    tolerance = F.lit(ctx.tolerances.watermark_delay_us)
    counts.append((F.max(F.when(kept, F.col(TS))) - tolerance).alias(INPUT_WATERMARK_COLUMN))
    event = _event_time(ctx, staged)
    counts.append(F.max(F.when(kept & real, event)).alias(INPUT_EVENT_TIME_COLUMN))
    if ctx.substream_by is not None:  # each partition's, on one of its rows
        spread = F.max(F.col(FASTEST)) - F.min(F.col(SLOWEST))
        counts.append(spread.alias(SUBSTREAM_SPREAD_COLUMN))
    return counts


def _distributions(staged: DataFrame, idle: bool, queueing: bool) -> tuple[DataFrame, list[Column]]:
    """``staged`` with the joint bucket of each row's arrival delay and lateness, and with
    ``queueing`` its queueing delay's bucket (computed in generated code, before ``observe``),
    and the aggregates that count them."""
    from pyspark.sql import functions as F

    real = real_rows(idle)
    delay, lateness, queue = F.col(DELAY), F.col(LATENESS), F.col(QUEUE)
    buckets = {
        DELAY_BUCKET: histogram_index("arrival_delay", delay, real),
        LATENESS_BUCKET: histogram_index("lateness", lateness, real),
    }
    if queueing:
        buckets[QUEUE_BUCKET] = histogram_index("queueing_delay", queue, real)
    staged = staged.withColumns(buckets).withColumn(
        BUCKETS,
        joint_histogram_index(JOINT_HISTOGRAMS, [F.col(DELAY_BUCKET), F.col(LATENESS_BUCKET)]),
    )
    counts = joint_histogram_counts(JOINT_HISTOGRAMS, [delay, lateness], real, index=BUCKETS)
    if queueing:
        counts += histogram_counts("queueing_delay", queue, real, index=QUEUE_BUCKET)
    return staged, counts
