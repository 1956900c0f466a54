"""How a :class:`~wmobs.TimePolicy` becomes part of a query plan, stage by stage:

1. the arrival policies and the batch's times (:mod:`wmobs.policy._arrival`);
2. out of order, globally or per key, with the idle-timeout heartbeat
   (:mod:`wmobs.policy._ordering`, :mod:`wmobs.policy._heartbeat`);
3. the counts, one ``observe`` (:mod:`wmobs.policy._observe`);
4. the dropped rows filtered out, or handed to the dead-letter destination
   (:mod:`wmobs.policy.deadletter`);
5. the output: the input's columns, ``system_timestamp`` and the watermark on it.

Validation and the engine's choice happen before any of this, in ``TimePolicy.apply``:
:func:`build` takes a :class:`~wmobs.policy._context.Context`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wmobs.policy._context import Context
from wmobs.policy._observe import observations
from wmobs.policy._ordering import global_out_of_order, substream_out_of_order
from wmobs.policy._verdicts import DROP_POLICIES, DROPPED_BITS, IDLE, REAL, TS, VERDICT

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    from wmobs.policy.deadletter import DeadLetter

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
    observed = staged.observe(ctx.observation_name, *counted)
    if sink is None:
        kept = observed.filter((F.col(VERDICT).bitwiseAND(F.lit(DROPPED_BITS))) == 0)
    else:
        kept = _dead_letters(ctx, observed, sink, inside.schema)
    out = kept.select(
        *[F.col(f"`{ctx.column(c)}`").alias(c) for c in columns],
        F.timestamp_micros(F.col(TS)).alias(SYSTEM_TIMESTAMP),
        *([F.col(IDLE)] if ctx.idle else []),
    ).withWatermark(SYSTEM_TIMESTAMP, f"{ctx.tolerances.watermark_delay_us} microseconds")
    if not ctx.idle:
        return out
    # Synthetic rows have moved the watermark (above); none goes further. The filter names
    # system_timestamp so the optimizer cannot push it below withWatermark.
    real = (F.col(IDLE) == F.lit(REAL)) | F.col(SYSTEM_TIMESTAMP).isNull()
    return out.filter(real).drop(IDLE)


def _dead_letters(
    ctx: Context, observed: DataFrame, sink: DeadLetter, schema: StructType
) -> DataFrame:
    """The kept rows of ``observed``; the dropped ones, with the input columns of ``schema``,
    handed to ``sink`` in the same tasks, by the plan ``apply`` chose
    (:func:`wmobs.policy.deadletter.choose_plan`): ``jvm``, a Parquet directory written by
    Spark's Parquet writer in the JVM (``dead_letter_writer``); ``python_dropped``, the
    dropped rows handed to Python, kept rows staying in the JVM (``dead_letter_filter``);
    ``python_all``, every row through Python (``dead_letter_stage``)."""
    from pyspark.sql import functions as F

    from wmobs.policy.deadletter import dead_letter_filter, dead_letter_stage, dead_letter_writer

    original = {inside: name for name, inside in ctx.renamed.items()}
    plan = ctx.dead_letters.name
    if plan == "jvm":
        write = dead_letter_writer(
            sink, schema.names, VERDICT, DROP_POLICIES, policy=ctx.name, rename=original
        )
        is_dropped = F.col(VERDICT).bitwiseAND(F.lit(DROPPED_BITS)) != 0
        keep = F.when(is_dropped, write).otherwise(F.lit(True))
        return _checked_by_hadoop(lambda: observed.filter(keep))
    timezone = _session_conf(observed, "spark.sql.session.timeZone") or "UTC"
    large = _session_conf(observed, "spark.sql.execution.arrow.useLargeVarTypes") or ""
    large_types = large.lower() == "true"
    bits = (VERDICT, DROPPED_BITS, DROP_POLICIES)
    options: dict[str, Any] = {
        "policy": ctx.name,
        "timezone": timezone,
        "large_types": large_types,
        "rename": original,
    }
    if plan == "python_dropped":
        handed = dead_letter_filter(sink, schema, *bits, **options)
        assert handed is not None, "choose_plan chose python_dropped where it does not apply"
        return observed.filter(handed)
    columns = schema.names
    passed = [*columns, TS, VERDICT, *([IDLE] if ctx.idle else [])]  # only what is needed
    observed = observed.select(*[F.col(f"`{c}`") for c in passed])
    stage = dead_letter_stage(
        sink, columns, VERDICT, DROPPED_BITS, DROP_POLICIES, policy=ctx.name, rename=original
    )
    return observed.mapInArrow(stage, observed.schema)


def _checked_by_hadoop(plan: Callable[[], DataFrame]) -> DataFrame:
    """``plan()``, where wmobs' JVM checks on the driver that Hadoop reaches the dead letters'
    directory (``DeadLetterWriter.reachable``) and that Spark's Parquet writer takes every
    column: its errors as the Python engine's, a :class:`~wmobs.StorageError` naming
    ``dead_letter``, or a ``TypeError`` naming the columns (a classic session analyses the plan
    here; over Spark Connect the check's error comes when the query starts)."""
    from wmobs.policy._storage import StorageError

    try:
        return plan()
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        marker = "wmobs: "
        if marker not in first:
            raise
        said = first[first.index(marker) + len(marker) :]
        if "dead letters' directory" in said:
            raise StorageError(f"dead_letter: {said}") from exc
        if said.startswith("dead_letter: "):
            raise TypeError(said) from exc
        raise


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


def _session_conf(df: DataFrame, key: str) -> str | None:
    """The session's value of a SQL conf, its default if unset (a default passed to
    ``conf.get`` would replace Spark's); None if this Spark has no such conf."""
    try:
        value = df.sparkSession.conf.get(key)
    except Exception:  # unknown to this version of Spark
        return None
    return value
