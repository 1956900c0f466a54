"""Histograms as Spark aggregates: the ``observe`` columns of a distribution of
:data:`wmobs.observations.HISTOGRAMS`, exact, in two aggregates whatever the number of buckets.
The Python engine counts its distributions with them; so can any code of yours that follows the
convention of :mod:`wmobs.observations` (:func:`histogram_counts` is public as
``wmobs.policy.histogram_counts``). The JVM engine counts them in its one aggregate."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wmobs.observations import (
    HISTOGRAMS,
    bounds_us,
    histogram_buckets_column,
    histogram_sum_column,
    joint_histogram_column,
)

__all__ = [
    "histogram_counts",
    "histogram_index",
    "joint_histogram_counts",
    "joint_histogram_index",
]


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
