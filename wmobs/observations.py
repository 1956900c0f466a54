"""Where the two halves of wmobs meet: the naming convention that links operator-side counters
(:mod:`wmobs.policy`, or code of yours) to the listener (:mod:`wmobs.listener`).

Operator-side producers (wmobs' own time policies, or any code of yours) count rows with
:meth:`pyspark.sql.DataFrame.observe`. The listener reads every observation of a query's
``progress.observedMetrics`` whose **name** is ``wmobs`` or starts with ``wmobs.`` (for
example ``wmobs.policy.sensors``), adds up its **columns** across observations and batches, and
exports them:

=================================  ===================================================
column                             exported as
=================================  ===================================================
``policy:<policy>:<action>``       ``wmobs_policy_events_total{policy, action}``
``dead_letter_rows``               ``wmobs_dead_letter_rows_total``
``idle_timeout_firings``           ``wmobs_idle_timeout_firings_total``
``input_watermark_us``             ``wmobs_input_watermark_delay_seconds{policy}``
``input_event_time_us``            ``wmobs_input_event_time_lag_seconds{policy}``
``hist:<h>:buckets``               ``wmobs_event_<h>_seconds_bucket{policy, le}``, ``_count``
``hist:<h1>*<h2>:buckets``         the same, for both histograms from one column
``hist:<h>:sum_us``                ``wmobs_event_<h>_seconds_sum``
``columns`` (JSON text or struct)  each of its members, as if it were a column
=================================  ===================================================

Histograms ``<h>`` (:data:`HISTOGRAMS`) are ``arrival_delay`` (arrival time - event time of
every valid row; negative: early) and ``lateness`` (how far each row is behind the largest
system timestamp seen before it; 0 when not behind). ``buckets`` is the batch's count per
bucket, as ``histogram_numeric`` of the bucket index gives it (``[{x: index, y: count}, ...]``,
an index may repeat: its counts add up; ``x`` may be a rounding error off the index: read it
rounded; index ``i`` counts the values above bound ``i - 1`` and
at most bound ``i`` of :data:`HISTOGRAMS` ``[h]``, in seconds; the last one, above every
bound); ``sum_us`` their sum in microseconds. :func:`histogram_counts` builds both.
``hist:<h1>*<h2>:buckets`` counts two histograms' buckets in one column (one aggregate per row
instead of two; :func:`joint_histogram_counts` builds it): index ``i1 * (n2 + 1) + i2``, where
``n2`` is the bucket count of ``<h2>`` and ``i1 = n1``, ``i2 = n2`` stand for a row that has no
value in that histogram.

The two ``input_*`` columns describe one input of the query (one time policy): its watermark
and its largest event time in the micro-batch, unix **microseconds** (``observe`` cuts
timestamps to seconds: observe ``unix_micros(...)``). The listener keeps the largest of each
per input, labelled ``policy`` with the observation's name after ``wmobs.policy.`` (or after
``wmobs.``), so a query that joins two policed inputs shows which one holds its watermark back.

``<policy>`` is one of :data:`POLICIES` and ``<action>`` one of :data:`ACTIONS`; other columns
of a ``wmobs`` observation are ignored (and logged once), so the label values stay bounded.
Every value is the count **for that micro-batch** (``observe`` resets per batch); ``null``
counts as 0. Example::

    from pyspark.sql import functions as F
    from wmobs.observations import policy_column

    df = df.observe(
        "wmobs.policy.sensors",
        F.count_if(F.col("late")).alias(policy_column("late_arrival", "dropped")),
    )
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

__all__ = [
    "ACTIONS",
    "DEAD_LETTER_COLUMN",
    "HISTOGRAMS",
    "IDLE_TICK",
    "IDLE_TIMEOUT_COLUMN",
    "INPUT_EVENT_TIME_COLUMN",
    "INPUT_WATERMARK_COLUMN",
    "OBSERVATION_PREFIX",
    "POLICIES",
    "STRUCT_COLUMN",
    "HistogramCounts",
    "ObservedCounts",
    "bounds_us",
    "histogram_counts",
    "histogram_index",
    "histogram_sum_column",
    "input_label",
    "is_wmobs_observation",
    "joint_histogram_column",
    "joint_histogram_counts",
    "joint_histogram_index",
    "observation_columns",
    "parse_observed_metrics",
    "policy_column",
]

OBSERVATION_PREFIX = "wmobs"
POLICIES: tuple[str, ...] = ("early_arrival", "late_arrival", "out_of_order", "invalid_time")
ACTIONS: tuple[str, ...] = ("adjusted", "dropped")
DEAD_LETTER_COLUMN = "dead_letter_rows"
IDLE_TIMEOUT_COLUMN = "idle_timeout_firings"
STRUCT_COLUMN = "columns"
"""A JSON object (text) or a struct whose members are columns of the observation (how wmobs'
JAR observes them all at once, :mod:`wmobs.policy._jvm`): read as if they were its own."""
_POSITIVE = (
    0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
    21600.0, 86400.0,
)  # fmt: skip
HISTOGRAMS: dict[str, tuple[float, ...]] = {
    "arrival_delay": (-86400.0, -3600.0, -600.0, -60.0, -10.0, -1.0, 0.0, *_POSITIVE),
    "lateness": (0.0, *_POSITIVE),
}
"""Bucket upper bounds (seconds) of the two distributions: 10 ms to 1 day, about a factor of
2-5 apart; arrival delay also below 0 (early events), down to a day early."""
INPUT_WATERMARK_COLUMN = "input_watermark_us"
INPUT_EVENT_TIME_COLUMN = "input_event_time_us"
IDLE_TICK = "wmobs_idle_tick"
"""The key of the offset of an idle-timeout heartbeat source (its tick's processing time, ms).

The policy half's heartbeat (:mod:`wmobs.policy`) writes it into every offset it reports; the
listener recognises the heartbeat by it in ``progress.sources`` and does not count its rows as
input."""

_POLICY_COLUMNS: dict[str, tuple[str, str]] = {
    f"policy:{p}:{a}": (p, a) for p in POLICIES for a in ACTIONS
}


def policy_column(policy: str, action: str) -> str:
    """The observed column name that counts rows of ``policy`` given ``action``."""
    column = f"policy:{policy}:{action}"
    if column not in _POLICY_COLUMNS:
        raise ValueError(
            f"unknown policy/action {policy!r}/{action!r}: policy must be one of {POLICIES}, "
            f"action one of {ACTIONS}"
        )
    return column


def is_wmobs_observation(name: str) -> bool:
    """True for observation names the listener reads: ``wmobs`` or ``wmobs.<anything>``."""
    return name == OBSERVATION_PREFIX or name.startswith(OBSERVATION_PREFIX + ".")


def input_label(name: str) -> str:
    """The ``policy`` label of an observation's inputs: ``wmobs.policy.sensors`` -> ``sensors``."""
    for prefix in (OBSERVATION_PREFIX + ".policy.", OBSERVATION_PREFIX + "."):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def _histogram_column(histogram: str, part: str) -> str:
    return f"hist:{histogram}:{part}"


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


def bounds_us(histogram: str) -> list[int]:
    """The bucket upper bounds of ``histogram`` (:data:`HISTOGRAMS`) in µs."""
    return [round(bound * 1e6) for bound in HISTOGRAMS[histogram]]


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
    generated code (a batch query of 4 M rows, README "Time policies"). One ``count_if`` per
    bucket cost ~25 ns per row and bucket."""
    from pyspark.sql import functions as F

    bucket = histogram_index(histogram, micros, valid) if index is None else F.col(index)
    return [
        _exact_histogram_numeric(bucket, _BINS).alias(_histogram_column(histogram, "buckets")),
        F.sum(F.when(valid & micros.isNotNull(), micros)).alias(histogram_sum_column(histogram)),
    ]


def _exact_histogram_numeric(index: Any, bins: int) -> Any:
    """``histogram_numeric`` of an integer ``index`` with at most ``bins`` distinct values,
    exact once its points' ``x`` are rounded (as :func:`parse_observed_metrics` does).

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


def joint_histogram_column(histograms: Sequence[str]) -> str:
    """The name of the column that counts ``histograms``' joint buckets."""
    return _histogram_column("*".join(histograms), "buckets")


def histogram_sum_column(histogram: str) -> str:
    """The name of the column that sums ``histogram``'s values (µs)."""
    return _histogram_column(histogram, "sum_us")


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
    outside generated code) instead of one per histogram: ~30 ms less task CPU per million
    rows in the policy benchmark. Exact as well (:func:`_exact_histogram_numeric`): the bin
    budget is the number of possible joint indexes."""
    from pyspark.sql import functions as F

    bins = 1
    for histogram in histograms:
        bins *= _bucket_count(histogram) + 1
    return [
        _exact_histogram_numeric(F.col(index), bins).alias(joint_histogram_column(histograms)),
        *[
            F.sum(F.when(valid & micros.isNotNull(), micros)).alias(histogram_sum_column(histogram))
            for histogram, micros in zip(histograms, values, strict=True)
        ],
    ]


@dataclass
class HistogramCounts:
    """One histogram of one input: the count per bucket (the last one above every bound) and
    the sum (µs)."""

    buckets: list[int]
    sum_us: int = 0

    @property
    def cumulative(self) -> list[int]:
        """Counts at or below each bound."""
        return list(accumulate(self.buckets[:-1]))

    @property
    def count(self) -> int:
        return sum(self.buckets)

    def add(self, other: HistogramCounts) -> None:
        self.buckets = [a + b for a, b in zip(self.buckets, other.buckets, strict=True)]
        self.sum_us += other.sum_us


@dataclass
class ObservedCounts:
    """Counts that one progress event's wmobs observations carry (one micro-batch)."""

    policy_events: dict[tuple[str, str], int] = field(default_factory=dict)
    dead_letter_rows: int | None = None
    idle_timeout_firings: int | None = None
    inputs: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)
    """Per input (``policy`` label): ``(watermark µs, largest event time µs)`` of the batch."""
    histograms: dict[tuple[str, str], HistogramCounts] = field(default_factory=dict)
    """Per (input, histogram): the batch's counts."""
    unknown_columns: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return (
            not self.policy_events
            and self.dead_letter_rows is None
            and self.idle_timeout_firings is None
            and not self.inputs
            and not self.histograms
        )


def _count(value: Any) -> int:
    if value is None:
        return 0
    return int(value)


def observation_columns(row: Any) -> dict[str, Any]:
    """An observation's columns (a Row of ``progress.observedMetrics``, or a dict), with those
    of its :data:`STRUCT_COLUMN` among them."""
    items = dict(row.asDict() if hasattr(row, "asDict") else row)
    struct = items.pop(STRUCT_COLUMN, None)  # the columns, as wmobs' JAR observes them
    if isinstance(struct, str):
        struct = json.loads(struct)
    if struct is not None:
        items.update(struct.asDict() if hasattr(struct, "asDict") else struct)
    return items


def parse_observed_metrics(observed: Mapping[str, Any] | None) -> ObservedCounts:
    """Sum the wmobs columns of ``progress.observedMetrics`` (observation name -> row).

    Rows may be plain dicts (progress JSON) or :class:`pyspark.sql.Row` objects.
    """
    counts = ObservedCounts()
    if not observed:
        return counts
    for name, row in observed.items():
        if not is_wmobs_observation(name):
            continue
        for column, value in observation_columns(row).items():
            key = _POLICY_COLUMNS.get(column)
            if key is not None:
                counts.policy_events[key] = counts.policy_events.get(key, 0) + _count(value)
            elif column == DEAD_LETTER_COLUMN:
                counts.dead_letter_rows = (counts.dead_letter_rows or 0) + _count(value)
            elif column == IDLE_TIMEOUT_COLUMN:
                counts.idle_timeout_firings = (counts.idle_timeout_firings or 0) + _count(value)
            elif column.startswith("hist:") and _fold_histogram(counts, name, column, value):
                pass
            elif column in (INPUT_WATERMARK_COLUMN, INPUT_EVENT_TIME_COLUMN):
                label = input_label(name)
                watermark, event_time = counts.inputs.get(label, (None, None))
                micros = None if value is None else int(value)
                if column == INPUT_WATERMARK_COLUMN:
                    counts.inputs[label] = (micros, event_time)
                else:
                    counts.inputs[label] = (watermark, micros)
            else:
                counts.unknown_columns.append(f"{name}.{column}")
    return counts


def _fold_histogram(counts: ObservedCounts, name: str, column: str, value: Any) -> bool:
    """One ``hist:<h>:buckets``, ``hist:<h1>*<h2>:buckets`` or ``hist:<h>:sum_us`` column into
    ``counts``; False if it is not one."""
    parts = column.split(":", 2)
    if len(parts) != 3 or parts[2] not in ("buckets", "sum_us"):
        return False
    histograms = parts[1].split("*")
    if (
        any(h not in HISTOGRAMS for h in histograms)
        or len(set(histograms)) != len(histograms)
        or (parts[2] == "sum_us" and len(histograms) > 1)
    ):
        return False
    targets = []
    for histogram in histograms:
        key = (input_label(name), histogram)
        target = counts.histograms.get(key)
        if target is None:
            target = counts.histograms[key] = HistogramCounts([0] * _bucket_count(histogram))
        targets.append(target)
    if parts[2] == "sum_us":
        targets[0].sum_us += _count(value)
        return True
    for point in value or ():
        items = point.asDict() if hasattr(point, "asDict") else point
        index, count = (items["x"], items["y"]) if isinstance(items, Mapping) else items
        if index is None:
            continue
        rest, n = round(float(index)), round(float(count))  # see _exact_histogram_numeric
        for target in reversed(targets):  # the last histogram's digit varies fastest
            rest, digit = divmod(rest, len(target.buckets) + 1) if len(targets) > 1 else (0, rest)
            if 0 <= digit < len(target.buckets):
                target.buckets[digit] += n
    return True
