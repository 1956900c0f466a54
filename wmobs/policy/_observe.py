"""What a time policy counts, in the plan: the ``observe`` columns of :mod:`wmobs.observations`
(verdict counts, dead letters, idle-timeout firings, the input's watermark and largest event
time, the two distributions) and the engine that counted them. On the JVM engine one aggregate
of wmobs' extension counts everything; on the Python engine each column is a Spark aggregate
of its own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from wmobs.observations import (
    DEAD_LETTER_COLUMN,
    DEAD_LETTER_PLAN_COLUMN,
    ENGINE_COLUMN,
    HISTOGRAMS,
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

__all__ = [
    "histogram_counts",
    "histogram_index",
    "joint_histogram_counts",
    "joint_histogram_index",
    "observations",
    "real_rows",
]

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


# ---- histograms as Spark aggregates (the Python engine) ----------------------------------------


def _bucket_index(micros: Any, bounds: Sequence[int], low: int = 0, high: int | None = None) -> Any:
    """How many of ``bounds`` (µs, sorted) are below ``micros``: a balanced tree of
    comparisons (a handful per row, in generated code)."""
    from pyspark.sql import functions as F

    high = len(bounds) if high is None else high
    if low == high:
        return F.lit(low)
    middle = (low + high) // 2
    return F.when(
        micros > F.lit(bounds[middle]), _bucket_index(micros, bounds, middle + 1, high)
    ).otherwise(_bucket_index(micros, bounds, low, middle))


def histogram_index(histogram: str, micros: Any, valid: Any) -> Any:
    """The bucket index of ``micros`` (a Column of µs) in ``histogram``, null where ``valid``
    (a boolean Column) is false or ``micros`` is null: a Column for :func:`histogram_counts`'s
    ``index``."""
    from pyspark.sql import functions as F

    return F.when(valid & micros.isNotNull(), _bucket_index(micros, bounds_us(histogram)))


def histogram_counts(
    histogram: str, micros: Any, valid: Any, *, index: str | None = None
) -> list[Any]:
    """The ``observe`` columns of one histogram: ``micros`` (a Column of µs) of the rows where
    ``valid`` (a boolean Column).

    Two aggregates, whatever the number of buckets: ``histogram_numeric`` of the bucket index
    (exact, see :func:`_exact_histogram_numeric`: the bin budget :data:`_BINS` is above the
    number of buckets) and the sum.

    ``index``: the name of a column of the observed DataFrame that holds
    :func:`histogram_index` of the same arguments. Pass it: ``histogram_numeric`` evaluates
    its argument row by row outside generated code, where the comparisons that find the bucket
    cost ~30 ns per row, against ~6 ns when a projection before ``observe`` computes them in
    generated code. One ``count_if`` per bucket cost ~25 ns per row and bucket."""
    from pyspark.sql import functions as F

    from wmobs.observations import histogram_buckets_column

    bucket = histogram_index(histogram, micros, valid) if index is None else F.col(index)
    return [
        _exact_histogram_numeric(bucket, _BINS).alias(histogram_buckets_column(histogram)),
        _sum_us(micros, valid).alias(histogram_sum_column(histogram)),
    ]


def _sum_us(micros: Any, valid: Any) -> Any:
    """The sum of ``micros`` where ``valid``, as a double: a sum of longs overflows (failing
    the query under ANSI, wrapping without) where a batch holds rows stamped decades off (an
    epoch-0 producer, a replayed year-old topic); a double is exact to 2^53 µs (285 years)."""
    from pyspark.sql import functions as F

    return F.sum(F.when(valid & micros.isNotNull(), micros.cast("double")))


def _exact_histogram_numeric(index: Any, bins: int) -> Any:
    """``histogram_numeric`` of an integer ``index`` with at most ``bins`` distinct values,
    exact once its points' ``x`` are rounded (as the listener does).

    ``histogram_numeric`` keeps the same value of different partitions in separate bins until
    their number exceeds its budget, then merges the closest bins into their weighted mean.
    Two bins of the same value are the closest, but their mean can come out a rounding error
    below it; for an integer argument Spark truncates it to the integer below. So the index
    goes in as a double: the budget then only ever merges bins of the same value, and the
    rounding error stays below 0.5."""
    from pyspark.sql import functions as F

    return F.histogram_numeric(index.cast("double"), F.lit(bins))


_BINS = 64
"""The bin budget of ``histogram_numeric``: above the bucket count of every histogram."""


def _bucket_count(histogram: str) -> int:
    return len(HISTOGRAMS[histogram]) + 1


def joint_histogram_index(histograms: Sequence[str], indexes: Sequence[Any]) -> Any:
    """One index for the buckets of several histograms (``indexes``: a Column of
    :func:`histogram_index` for each of ``histograms``), null where every one is null: the
    argument of :func:`joint_histogram_counts`. In mixed radix, the last histogram fastest;
    the digit of a null index is the histogram's bucket count."""
    from pyspark.sql import functions as F

    if not histograms or len(set(histograms)) != len(histograms):
        raise ValueError(f"histograms must be distinct and at least one: {histograms!r}")
    joint = F.lit(0)
    for histogram, index in zip(histograms, indexes, strict=True):
        absent = _bucket_count(histogram)
        joint = joint * F.lit(absent + 1) + F.coalesce(index, F.lit(absent))
    return F.when(F.coalesce(*indexes).isNotNull(), joint)


def joint_histogram_counts(
    histograms: Sequence[str], values: Sequence[Any], valid: Any, *, index: str
) -> list[Any]:
    """The ``observe`` columns of several histograms at once (``values``: a Column of µs for
    each of ``histograms``, counted where ``valid``): one ``histogram_numeric`` of ``index``
    (the name of a column that holds :func:`joint_histogram_index`) and each histogram's sum.

    Every row then costs one update of ``histogram_numeric`` (which Spark runs row by row
    outside generated code) instead of one per histogram. Exact as well
    (:func:`_exact_histogram_numeric`): the bin budget is the number of possible joint
    indexes."""
    from pyspark.sql import functions as F

    bins = 1
    for histogram in histograms:
        bins *= _bucket_count(histogram) + 1
    return [
        _exact_histogram_numeric(F.col(index), bins).alias(joint_histogram_column(histograms)),
        *[
            _sum_us(micros, valid).alias(histogram_sum_column(histogram))
            for histogram, micros in zip(histograms, values, strict=True)
        ],
    ]
