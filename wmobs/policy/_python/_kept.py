"""The Python engine's counts kept beside the checkpoint until Spark has committed their
micro-batch: what the JVM engine does in ``KeptCounts.java``, for sessions without it.

The window: a crash (or a ``stop()``) after the sink has committed micro-batch N and before
Spark has. Spark reports what ``observe`` counted only after its own commit; on restart it runs
N again, and a sink that has N already (the file sink, Delta's, a ``foreachBatch`` that skips
batches it has seen) skips it without running the plan, which then counts nothing. So in every
task of a micro-batch, beside ``observe``'s own aggregates, a vectorised Python function
(:func:`keep_counts`: the verdict and the distributions' bucket indexes cross into Python in
one packed column, their sums and the idle timeout's firings in one each) counts the same rows
and, once
the task's input is exhausted, writes its counts as one small JSON file,
``<checkpoint>/wmobs/observations/<policy>/counts-<batch>-<partition>.json`` (one PUT on an object
store; replaced by a retried task's, which counts the same rows; the task of partition 0 removes
those of micro-batches :data:`KEPT_BATCHES` before its own, every :data:`FORGET_EVERY`
micro-batches). The listener, on the first
micro-batch of a query run that counted nothing though its sources moved, reads the files of
that micro-batch back on a thread of its own (the ``recall`` that :func:`keep_counts` registers
under the policy's name, :mod:`wmobs._kept`): the counts of the attempt the sink committed. The
gauges (the input's watermark, largest event time, substream spread) are not kept: the next
micro-batch sets them.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from wmobs._kept import register_recall
from wmobs.observations import (
    DEAD_LETTER_COLUMN,
    IDLE_TIMEOUT_COLUMN,
    histogram_buckets_column,
    histogram_sum_column,
    joint_histogram_column,
)
from wmobs.policy._context import Context
from wmobs.policy._observe import JOINT_HISTOGRAMS, counted, queueing
from wmobs.policy._python._checkpoint import (
    CheckpointNotFoundError,
    resolve_checkpoint,
    task_micro_batch,
)
from wmobs.policy._storage import Storage
from wmobs.policy._verdicts import (
    BUCKETS,
    DELAY,
    DROPPED_BITS,
    IDLE,
    LATENESS,
    QUEUE,
    QUEUE_BUCKET,
    VERDICT,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "Tally",
    "forget_kept",
    "keep_counts",
    "kept_file",
    "kept_folder",
    "merge_kept",
    "read_kept",
]

KEPT_PREFIX = "counts-"


KEPT_BATCHES = 100
"""Micro-batches whose kept counts stay: the listener recalls a micro-batch's when it hears of
it, which Spark's listener bus may tell it some micro-batches late; older ones go (the task of
partition 0 removes them every :data:`FORGET_EVERY` micro-batches)."""

FORGET_EVERY = 10
"""How often the kept counts are pruned: one listing of the folder (a LIST on an object store)
every so many micro-batches, not one each (by partition 0's task, where that micro-batch has
one), so some ``KEPT_BATCHES + FORGET_EVERY`` micro-batches' files stay."""


def kept_folder(checkpoint: str, policy: str) -> str:
    """Where the tasks of ``policy`` keep their counts (the JVM engine's ``part-<n>`` files
    beside them are binary, and each engine reads only its own)."""
    return f"{checkpoint.rstrip('/')}/wmobs/observations/{policy}"


def kept_file(checkpoint: str, policy: str, batch: int, partition: int) -> str:
    """One task's: a name per micro-batch, so that the next micro-batches' tasks do not replace
    it before the listener has read it; a retried task's replaces it."""
    return f"{kept_folder(checkpoint, policy)}/{KEPT_PREFIX}{batch}-{partition}.json"


def _batch_of(name: str) -> int | None:
    """The micro-batch of a kept file's name (``counts-<batch>-<partition>.json``)."""
    if not (name.startswith(KEPT_PREFIX) and name.endswith(".json")):
        return None
    batch, _, partition = name[len(KEPT_PREFIX) : -len(".json")].partition("-")
    return int(batch) if batch.isdigit() and partition.isdigit() else None


VERDICT_WIDTH = 8
"""Bits of the verdict at the bottom of the packed column (its bits are all below 128)."""


class Tally:
    """One task's counts of the ``observe`` columns that add up, from columns of its rows in the
    order :func:`keep_counts` passes them: one packed column (the verdict in its lowest
    :data:`VERDICT_WIDTH` bits, above it each of ``buckets``' ``(column, shift, width)``: its
    bucket index plus one, 0 for none), then ``columns``' ``(kind, column)`` each (firings, or
    a sum: NaN where the row has no value). Fewer columns cross into Python so: each one costs
    its rows' copy and conversion."""

    def __init__(
        self,
        bits: list[tuple[str, int]],
        buckets: list[tuple[str, int, int]],
        columns: list[tuple[str, str]],
    ) -> None:
        self.bits, self.buckets, self.columns = bits, buckets, columns
        self.rows = 0
        self.counts: dict[str, Any] = {column: 0 for column, _ in bits}
        self.counts.update({column: {} for column, _, _ in buckets})
        self.counts.update({column: 0.0 if kind == "sum" else 0 for kind, column in columns})

    def add(self, packed: Any, *values: Any) -> None:
        """One Arrow batch's columns, as numpy arrays."""
        import numpy as np

        self.rows += len(packed)
        for column, bit in self.bits:
            self.counts[column] += int(np.count_nonzero(packed & bit))
        for column, shift, width in self.buckets:
            index = (packed >> shift) & ((1 << width) - 1)
            found, n = np.unique(index[index > 0] - 1, return_counts=True)
            into = self.counts[column]
            for i, count in zip(found.tolist(), n.tolist(), strict=True):
                into[str(i)] = into.get(str(i), 0) + count
        for (kind, column), value in zip(self.columns, values, strict=True):
            if kind == "firings":
                self.counts[column] += int(value[value > 0].sum())
            else:
                self.counts[column] += float(np.nansum(value))

    def to_json(self, query: str | None, batch: int) -> bytes:
        kept = {"query": query, "batch": batch, "counts": self.counts}
        return json.dumps(kept).encode("utf-8")


def keep_counts(ctx: Context, staged: DataFrame, dead_letters: bool) -> DataFrame:
    """``staged`` (the policy's rows after ``observe``), every row of it, through the function
    that keeps its tasks' counts (a filter that keeps every row); how the listener recalls them
    registered under the policy's name (:func:`wmobs._kept.register_recall`)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T
    from pyspark.sql.pandas.functions import pandas_udf
    from pyspark.util import PythonEvalType

    bits = list(counted(ctx))
    if dead_letters:
        bits.append((DEAD_LETTER_COLUMN, DROPPED_BITS))
    packed = F.col(VERDICT).cast("long")
    buckets: list[tuple[str, int, int]] = []
    columns: list[tuple[str, str]] = []
    values = []
    if ctx.idle:
        columns.append(("firings", IDLE_TIMEOUT_COLUMN))
        values.append(F.col(IDLE))
    if ctx.distributions:
        # (buckets column, index column, its bits, {histogram: its µs}): the joint one (its
        # indexes below 2^16), and queueing's (below 2^8)
        histograms = [
            (
                joint_histogram_column(JOINT_HISTOGRAMS),
                BUCKETS,
                16,
                {"arrival_delay": DELAY, "lateness": LATENESS},
            )
        ]
        if queueing(ctx):
            queue = histogram_buckets_column("queueing_delay")
            histograms.append((queue, QUEUE_BUCKET, 8, {"queueing_delay": QUEUE}))
        shift = VERDICT_WIDTH
        for column, index, width, sums in histograms:
            buckets.append((column, shift, width))
            plus_one = F.coalesce(F.col(index).cast("long") + F.lit(1), F.lit(0))
            packed = packed.bitwiseOR(F.shiftleft(plus_one, shift))
            shift += width
            for histogram, micros in sums.items():  # where the histogram counts the row
                columns.append(("sum", histogram_sum_column(histogram)))
                values.append(F.when(F.col(index).isNotNull(), F.col(micros)).cast("double"))
    checkpoint, relative_to, storage, policy = (
        ctx.checkpoint or "",
        ctx.relative_to,
        ctx.storage,
        ctx.name,
    )

    def keep(batches: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd
        from pyspark import TaskContext

        tally = Tally(bits, buckets, columns)
        for batch in batches:
            series = batch if isinstance(batch, tuple) else (batch,)
            tally.add(*(s.to_numpy() for s in series))
            yield pd.Series(True, index=series[0].index)
        try:
            task = task_micro_batch(checkpoint, relative_to)
        except CheckpointNotFoundError:
            return  # (the batch's times could not be read either: the query has failed)
        context = TaskContext.get()
        if context is None:
            return  # not a task
        partition = context.partitionId()
        if tally.rows:
            target = kept_file(task.checkpoint, policy, task.batch_id, partition)
            try:
                storage.write_once(target, tally.to_json(task.query_id, task.batch_id))
            except OSError as exc:
                raise OSError(
                    f"wmobs: could not keep the counts of batch {task.batch_id} in {target}: {exc}"
                ) from exc
        if partition == 0 and task.batch_id % FORGET_EVERY == 0:
            forget_kept(storage, kept_folder(task.checkpoint, policy), task.batch_id - KEPT_BATCHES)

    with warnings.catch_warnings():  # "prefer type hints": pandas is imported lazily here
        warnings.filterwarnings("ignore", ".*preferred to specify type hints")
        udf = pandas_udf(
            keep, T.BooleanType(), functionType=PythonEvalType.SQL_SCALAR_PANDAS_ITER_UDF
        ).asNondeterministic()
    root = ctx.checkpoint_root

    def recall(query_id: str, query_name: str | None, batch: int) -> dict[str, Any] | None:
        where = _driver_checkpoint(checkpoint, root, query_name, relative_to)
        return read_kept(storage, where, policy, query_id, batch)

    register_recall(policy, (checkpoint, root, relative_to, storage.encode()), recall)
    return staged.filter(udf(packed, *values))


def _driver_checkpoint(
    configured: str, root: str | None, query: str | None, relative_to: str
) -> str | None:
    """The checkpoint the tasks of ``query`` resolved (:func:`task_micro_batch`)."""
    props = {"spark.sql.streaming.checkpointLocation": root, "spark.job.description": query or ""}
    try:
        return resolve_checkpoint(configured, props, relative_to)
    except CheckpointNotFoundError:
        return None


def forget_kept(storage: Storage, folder: str, before: int) -> None:
    """Removes the kept counts of the micro-batches before ``before`` from ``folder``."""
    for entry in storage.files(folder):
        batch = _batch_of(entry.name)
        if batch is not None and batch < before:
            storage.delete(f"{folder}/{entry.name}")


def read_kept(
    storage: Storage, checkpoint: str | None, policy: str, query: str, batch: int
) -> dict[str, Any] | None:
    """On the driver (a thread of the listener's): the counts the tasks of micro-batch ``batch``
    kept, merged, as the row ``observe`` would have reported; ``None`` where they kept none."""
    if checkpoint is None:
        return None
    folder = kept_folder(checkpoint, policy)
    found = []
    for entry in storage.files(folder):
        if _batch_of(entry.name) == batch:
            kept = json.loads(storage.read_text(f"{folder}/{entry.name}"))
            if kept.get("query") in (query, None):  # (a checkpoint's query id never changes)
                found.append(kept["counts"])
    return merge_kept(found) if found else None


def merge_kept(parts: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The tasks' counts added up, histograms as ``histogram_numeric``'s points."""
    merged: dict[str, Any] = {}
    for part in parts:
        for column, value in part.items():
            if isinstance(value, Mapping):
                into = merged.setdefault(column, {})
                for index, n in value.items():
                    into[index] = into.get(index, 0) + n
            else:
                merged[column] = merged.get(column, 0) + value
    return {
        column: [
            {"x": float(i), "y": float(n)}
            for i, n in sorted(value.items(), key=lambda p: int(p[0]))
        ]
        if isinstance(value, dict)
        else value
        for column, value in merged.items()
    }
