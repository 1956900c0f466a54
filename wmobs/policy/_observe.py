"""What a time policy counts, in the plan: the ``observe`` columns of :mod:`wmobs.observations`
(verdict counts, dead letters, idle-timeout firings, the input's watermark and largest event
time, the two distributions) and the engine that counted them. On the JVM engine one aggregate
of wmobs' extension counts everything; on the Python engine each column is a Spark aggregate
of its own."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wmobs.observations import (
    DEAD_LETTER_COLUMN,
    DEAD_LETTER_PLAN_COLUMN,
    ENGINE_COLUMN,
    IDLE_TIMEOUT_COLUMN,
    INPUT_EVENT_TIME_COLUMN,
    INPUT_WATERMARK_COLUMN,
    STRUCT_COLUMN,
    SUBSTREAM_SPREAD_COLUMN,
    bounds_us,
    histogram_buckets_column,
    histogram_sum_column,
    joint_histogram_column,
    rule_column,
)
from wmobs.policy._arrival import event_micros
from wmobs.policy._context import Context
from wmobs.policy._histograms import (
    histogram_counts,
    histogram_index,
    joint_histogram_counts,
    joint_histogram_index,
)
from wmobs.policy._verdicts import (
    ARRIVAL,
    BUCKETS,
    DELAY,
    DELAY_BUCKET,
    DROPPED_BITS,
    EVENT,
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
    VERDICT_BITS,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["observations", "real_rows"]

_HISTOGRAMS = ("arrival_delay", "lateness")


def observations(
    ctx: Context, staged: DataFrame, dead_letters: bool
) -> tuple[DataFrame, list[Any]]:
    """What ``observe`` counts, and ``staged`` with the columns it reads."""
    from pyspark.sql import functions as F

    said = [
        F.lit(ctx.engine.name).alias(ENGINE_COLUMN),
        F.lit(ctx.dead_letters.name).alias(DEAD_LETTER_PLAN_COLUMN),
    ]
    if ctx.engine.jvm:
        staged, column = _jvm_observation(ctx, staged, dead_letters)
        return staged, [column, *said]
    counts = _counts(ctx, staged, dead_letters)
    if not ctx.distributions:
        return staged, [*counts, *said]
    staged, distributions = _distributions(staged, ctx.idle, _queueing(ctx))
    return staged, [*counts, *distributions, *said]


def _queueing(ctx: Context) -> bool:
    """Whether the policy counts how long rows waited in the broker: with its distributions,
    where it has arrival times."""
    return ctx.distributions and ctx.arrival_time is not None


def _counted(ctx: Context) -> list[tuple[str, int]]:
    """``(column, verdict bit)`` of every verdict this policy can give."""
    return [
        (rule_column(rule, action), bit)
        for (rule, action), bit in VERDICT_BITS.items()
        if ctx.can_happen(rule, action)
    ]


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
        for column, bit in _counted(ctx)
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


def kept_directory(policy: str) -> str:
    """Where the JVM engine keeps each task's counts of the running micro-batch, relative to
    the query's checkpoint, until Spark has committed it (``KeptCounts.java``)."""
    return f"wmobs/observations/{policy}"


def _jvm_observation(
    ctx: Context, staged: DataFrame, dead_letters: bool
) -> tuple[DataFrame, Column]:
    """The columns of :func:`_counts` and :func:`_distributions` as members of one JSON object
    (:data:`~wmobs.observations.STRUCT_COLUMN`), counted by one aggregate of wmobs' extension,
    and ``staged`` with what it reads.

    Its arguments are plain columns, the event time too (:data:`EVENT`, which the JVM engine's
    rules stage adds): the aggregate reads those in place, and would evaluate anything else row
    by row."""
    from pyspark.sql import functions as F

    from wmobs.policy._jvm import _extension

    spec = {
        "counts": _counted(ctx),
        "dropped_bits": DROPPED_BITS,
        "dead_letters": DEAD_LETTER_COLUMN if dead_letters else None,
        "firings": IDLE_TIMEOUT_COLUMN if ctx.idle else None,
        "watermark": INPUT_WATERMARK_COLUMN,
        "event_time": INPUT_EVENT_TIME_COLUMN,
        "tolerance_us": ctx.tolerances.watermark_delay_us,
        "histogram": {
            "buckets": joint_histogram_column(_HISTOGRAMS),
            "sums": [histogram_sum_column(h) for h in _HISTOGRAMS],
            "bounds": [bounds_us(h) for h in _HISTOGRAMS],
        }
        if ctx.distributions
        else None,
        "queueing": {
            "buckets": histogram_buckets_column("queueing_delay"),
            "sum": histogram_sum_column("queueing_delay"),
            "bounds": bounds_us("queueing_delay"),
        }
        if _queueing(ctx)
        else None,
        "spread": SUBSTREAM_SPREAD_COLUMN if ctx.substream_by is not None else None,
        # Each task's counts, kept until Spark commits the micro-batch (KeptCounts.java).
        "kept": {"checkpoint": ctx.checkpoint or "", "directory": kept_directory(ctx.name)},
    }
    arguments = [
        F.col(VERDICT),
        F.col(TS),
        F.col(EVENT),
        F.col(IDLE) if ctx.idle else F.lit(REAL).cast("long"),
        *([F.col(DELAY), F.col(LATENESS)] if ctx.distributions else []),
        *([F.col(QUEUE)] if _queueing(ctx) else []),
        *([F.col(SLOWEST), F.col(FASTEST)] if ctx.substream_by is not None else []),
    ]
    return staged, _extension.observation(spec, *arguments).alias(STRUCT_COLUMN)


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
        joint_histogram_index(_HISTOGRAMS, [F.col(DELAY_BUCKET), F.col(LATENESS_BUCKET)]),
    )
    counts = joint_histogram_counts(_HISTOGRAMS, [delay, lateness], real, index=BUCKETS)
    if queueing:
        counts += histogram_counts("queueing_delay", queue, real, index=QUEUE_BUCKET)
    return staged, counts
