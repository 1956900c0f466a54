"""What a policy counts on the JVM engine: one aggregate of wmobs' extension
(``ObservationAggregate``) counts everything :mod:`wmobs.policy._observe` names, as members of
one JSON object."""

from __future__ import annotations

from typing import TYPE_CHECKING

from wmobs.observations import (
    DEAD_LETTER_COLUMN,
    IDLE_TIMEOUT_COLUMN,
    INPUT_EVENT_TIME_COLUMN,
    INPUT_WATERMARK_COLUMN,
    STRUCT_COLUMN,
    SUBSTREAM_SPREAD_COLUMN,
    bounds_us,
    histogram_buckets_column,
    histogram_sum_column,
    joint_histogram_column,
)
from wmobs.policy._context import Context
from wmobs.policy._jvm import _extension
from wmobs.policy._jvm._specs import HistogramSpec, KeptSpec, ObservationSpec, QueueingSpec
from wmobs.policy._observe import JOINT_HISTOGRAMS, counted, queueing
from wmobs.policy._verdicts import (
    DELAY,
    DROPPED_BITS,
    EVENT,
    FASTEST,
    IDLE,
    LATENESS,
    QUEUE,
    REAL,
    SLOWEST,
    TS,
    VERDICT,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["kept_directory", "observation"]


def kept_directory(policy: str) -> str:
    """Where the JVM engine keeps each task's counts of the running micro-batch, relative to
    the query's checkpoint, until Spark has committed it (``KeptCounts.java``)."""
    return f"wmobs/observations/{policy}"


def observation(ctx: Context, staged: DataFrame, dead_letters: bool) -> tuple[DataFrame, Column]:
    """The columns the Python engine counts with an aggregate each
    (:mod:`wmobs.policy._python._observe`) as members of one JSON object
    (:data:`~wmobs.observations.STRUCT_COLUMN`), counted by one aggregate of wmobs' extension,
    and ``staged`` with what it reads.

    Its arguments are plain columns, the event time too (:data:`EVENT`, which the JVM engine's
    rules stage adds): the aggregate reads those in place, and would evaluate anything else row
    by row."""
    from pyspark.sql import functions as F

    spec = ObservationSpec(
        counts=[list(c) for c in counted(ctx)],
        dropped_bits=DROPPED_BITS,
        dead_letters=DEAD_LETTER_COLUMN if dead_letters else None,
        firings=IDLE_TIMEOUT_COLUMN if ctx.idle else None,
        watermark=INPUT_WATERMARK_COLUMN,
        event_time=INPUT_EVENT_TIME_COLUMN,
        tolerance_us=ctx.tolerances.watermark_delay_us,
        histogram=HistogramSpec(
            buckets=joint_histogram_column(JOINT_HISTOGRAMS),
            sums=[histogram_sum_column(h) for h in JOINT_HISTOGRAMS],
            bounds=[bounds_us(h) for h in JOINT_HISTOGRAMS],
        )
        if ctx.distributions
        else None,
        queueing=QueueingSpec(
            buckets=histogram_buckets_column("queueing_delay"),
            sum=histogram_sum_column("queueing_delay"),
            bounds=bounds_us("queueing_delay"),
        )
        if queueing(ctx)
        else None,
        spread=SUBSTREAM_SPREAD_COLUMN if ctx.substream_by is not None else None,
        # Each task's counts, kept until Spark commits the micro-batch (KeptCounts.java).
        kept=KeptSpec(checkpoint=ctx.checkpoint or "", directory=kept_directory(ctx.name)),
    )
    arguments = [
        F.col(VERDICT),
        F.col(TS),
        F.col(EVENT),
        F.col(IDLE) if ctx.idle else F.lit(REAL).cast("long"),
        *([F.col(DELAY), F.col(LATENESS)] if ctx.distributions else []),
        *([F.col(QUEUE)] if queueing(ctx) else []),
        *([F.col(SLOWEST), F.col(FASTEST)] if ctx.substream_by is not None else []),
    ]
    return staged, _extension.observation(spec, *arguments).alias(STRUCT_COLUMN)
