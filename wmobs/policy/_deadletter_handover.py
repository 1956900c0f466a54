"""Dead letters written by Python: the plans ``python_dropped`` (kept rows stay in the JVM, each
dropped row crosses into Python as one JSON string of exact text forms,
:func:`dead_letter_filter`) and ``python_all`` (every row crosses, ``mapInArrow``,
:func:`dead_letter_stage`), on either engine: a function destination, JSON lines or a
directory with a :class:`~wmobs.Storage` of its own, and every destination on the Python
engine (:mod:`wmobs.policy.deadletter` has the plans and how each is chosen)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from wmobs.policy._context import Context
from wmobs.policy._deadletter import (
    BATCH_COLUMN,
    POLICY_COLUMN,
    RULE_COLUMN,
    DeadLetter,
    writer_name,
)
from wmobs.policy._deadletter_plan import text_kind
from wmobs.policy._task import NotInMicroBatchError, task_batch_id, task_query_id
from wmobs.policy._verdicts import DROP_POLICIES, DROPPED_BITS, IDLE, TS, VERDICT

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

__all__ = ["dead_letter_filter", "dead_letter_stage", "hand_over"]


def hand_over(ctx: Context, observed: DataFrame, sink: DeadLetter, schema: StructType) -> DataFrame:
    """The kept rows of ``observed``; the dropped ones, with the input columns of ``schema``,
    handed to ``sink`` by Python in the same tasks, by the plan ``apply`` chose
    (:func:`wmobs.policy._deadletter_plan.choose_plan`): ``python_dropped``, the dropped rows
    handed to Python, kept rows staying in the JVM (:func:`dead_letter_filter`);
    ``python_all``, every row through Python (:func:`dead_letter_stage`)."""
    from pyspark.sql import functions as F

    original = ctx.original
    plan = ctx.dead_letters.name
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


def _session_conf(df: DataFrame, key: str) -> str | None:
    """The session's value of a SQL conf, its default if unset (a default passed to
    ``conf.get`` would replace Spark's); None if this Spark has no such conf."""
    try:
        value = df.sparkSession.conf.get(key)
    except Exception:  # unknown to this version of Spark
        return None
    return value


def dead_letter_stage(
    sink: DeadLetter,
    columns: list[str],
    verdict_column: str,
    dropped_bits: int,
    rule_bits: list[tuple[str, int]],
    *,
    policy: str,
    rename: Mapping[str, str] | None = None,
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The ``mapInArrow`` function: hands dropped rows to ``sink``, yields the kept ones (every
    row crosses into Python; :func:`dead_letter_filter` is the cheaper plan where it applies).
    ``rename``: columns to hand over under another name (their name in the input)."""

    def stage(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc

        dropped_parts = []
        for batch in batches:
            verdict = batch.column(verdict_column)
            dropped = pc.not_equal(pc.bit_wise_and(verdict, dropped_bits), 0)
            if pc.any(dropped).as_py():
                dropped_parts.append(batch.filter(dropped))
                yield batch.filter(pc.invert(dropped))
            else:
                yield batch
        if dropped_parts:
            rows = pa.Table.from_batches(dropped_parts)
            table = rows.select(columns)
            verdicts = rows.column(verdict_column)
            _hand_over(sink, table, verdicts, rule_bits, policy=policy, rename=rename)

    return stage


def _hand_over(
    sink: DeadLetter,
    table: Any,
    verdict: Any,
    rule_bits: list[tuple[str, int]],
    *,
    policy: str,
    rename: Mapping[str, str] | None = None,
) -> None:
    """In the task: ``table`` (the dropped rows' input columns, ``rename`` applied) with the
    rule that dropped each row (from ``verdict``, its verdict bits), the ``policy`` and the
    batch id, to ``sink``."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark import TaskContext

    context = TaskContext.get()
    assert context is not None, "dead letters are written inside Spark tasks"
    batch_id = task_batch_id()
    if batch_id is None:  # its file would be another's, under batch_id=-1
        raise NotInMicroBatchError(
            "wmobs: a policy's dead letters were handed to Python (a function, JSON lines or a"
            " Storage of the policy's) in a task that Spark ran without its streaming"
            " micro-batch (no micro-batch id), so where they belong is not known: a"
            " foreachBatch function's action over Spark Connect or on a thread of its own."
            " Write them as Parquet to a directory of the session's Hadoop filesystems on the"
            " JVM engine (written by the JVM, which knows the micro-batch), write the"
            " micro-batch with a sink, or start such threads as pyspark.InheritableThread"
        )
    rule = pa.nulls(table.num_rows, pa.string())
    for name, bit in reversed(rule_bits):
        hit = pc.not_equal(pc.bit_wise_and(verdict, bit), 0)
        rule = pc.if_else(hit, pa.scalar(name), rule)
    if rename:
        table = table.rename_columns([rename.get(n, n) for n in table.column_names])
    table = table.append_column(RULE_COLUMN, rule)
    table = table.append_column(POLICY_COLUMN, pa.array([policy] * table.num_rows, pa.string()))
    table = table.append_column(BATCH_COLUMN, pa.array([batch_id] * table.num_rows, pa.int64()))
    sink.write(table, batch_id, context.partitionId(), writer=writer_name(policy, task_query_id()))


# ---- the plan where kept rows stay in the JVM ---------------------------------------------


def _arrow_type(data_type: Any, timezone: str, large_types: bool) -> Any:
    """The Arrow type ``mapInArrow`` gives the flat scalar ``data_type`` in this session
    (timestamps in the session's time zone)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_type

    try:
        return to_arrow_type(data_type, timezone=timezone, prefers_large_types=large_types)
    except TypeError:  # before PySpark 4.2 no timezone argument; its Arrow batches have one
        pass
    try:
        found = to_arrow_type(data_type, prefers_large_types=large_types)
    except TypeError:  # PySpark 3.5: large types are not to be had
        found = to_arrow_type(data_type)
    if pa.types.is_timestamp(found) and found.tz is not None:
        return pa.timestamp(found.unit, tz=timezone)
    return found


def dead_letter_filter(
    sink: DeadLetter,
    schema: Any,
    verdict_column: str,
    dropped_bits: int,
    rule_bits: list[tuple[str, int]],
    *,
    policy: str,
    timezone: str,
    large_types: bool,
    rename: Mapping[str, str] | None = None,
) -> Any | None:
    """A boolean Column, true for the rows to keep, that hands the dropped ones to ``sink``;
    ``None`` where a column of ``schema`` (the input's ``StructType``) has no exact text form
    here (nested, map, interval, variant and timestamp-without-zone columns), and
    :func:`dead_letter_stage` is the plan.

    Only dropped rows carry data into Python: each is encoded in the JVM as one JSON string,
    one exact text form per column (integers, booleans, decimals and floating point as Spark
    casts them to text, which round-trips; binary as base64; dates and timestamps as days and
    microseconds since the epoch), and every kept row as a single null. (One string, because
    Spark's Arrow writer pays for every field of a null array or struct: an array of text
    forms measured slower than passing every row whole.) An Arrow-iterator UDF, evaluated in
    the same task as the policy's ``observe``, decodes the dropped rows into the Arrow types
    ``mapInArrow`` would have given them (``timezone``, ``large_types``: the session's) and
    hands them over once the task's input is exhausted, ``rename`` applied to their names."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if not hasattr(F, "arrow_udf"):  # PySpark < 4.1
        return None
    from pyspark.util import PythonEvalType

    encoders, targets = [], []
    for field in schema.fields:
        form = _text_form(F.col(f"`{field.name}`"), field.dataType)
        if form is None:
            return None
        arrow = _arrow_type(field.dataType, timezone, large_types)
        encoders.append(form[0])
        targets.append((field.name, form[1], arrow))
    fields = [f"c{i}" for i in range(len(targets) + 1)]  # and the verdict, last

    def hand_over(arrays: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.json as pj

        dropped = []
        for array in arrays:
            present = array.is_valid()
            if pc.any(present).as_py():
                dropped.append(array.filter(present))
            yield pc.invert(present)
        if not dropped:
            return
        # One JSON object per line (Spark escapes line breaks inside strings).
        data = "\n".join(pa.concat_arrays(dropped).to_pylist()).encode("utf-8")
        text = pj.read_json(
            pa.py_buffer(data),
            read_options=pj.ReadOptions(block_size=max(len(data), 1 << 20)),
            parse_options=pj.ParseOptions(
                explicit_schema=pa.schema([(f, pa.string()) for f in fields]),
                unexpected_field_behavior="error",
            ),
        )
        decoded = [
            _decode(text.column(i).combine_chunks(), how, arrow)
            for i, (_, how, arrow) in enumerate(targets)
        ]
        table = pa.table(decoded, names=[name for name, _, _ in targets])
        verdicts = pc.cast(text.column(fields[-1]), pa.int64())
        _hand_over(sink, table, verdicts, rule_bits, policy=policy, rename=rename)

    with warnings.catch_warnings():  # "prefer type hints": pyarrow is imported lazily here
        warnings.filterwarnings("ignore", "It is preferred to specify type hints")
        udf = F.arrow_udf(
            hand_over, T.BooleanType(), functionType=PythonEvalType.SQL_SCALAR_ARROW_ITER_UDF
        ).asNondeterministic()
    verdict = F.col(verdict_column)
    is_dropped = verdict.bitwiseAND(F.lit(dropped_bits)) != 0
    row = F.struct(
        *[e.alias(f) for e, f in zip([*encoders, verdict.cast("string")], fields, strict=True)]
    )
    return udf(F.when(is_dropped, F.to_json(row)))


def _text_form(column: Any, data_type: Any) -> tuple[Any, str] | None:
    """``column`` as exact text (see :func:`dead_letter_filter`) and how :func:`_decode` reads
    it back, or None."""
    from pyspark.sql import functions as F

    kind = text_kind(data_type)
    encode: dict[str, Callable[[Any], Any]] = {
        "base64": F.base64,
        "days": lambda c: F.unix_date(c).cast("string"),
        "micros": lambda c: F.unix_micros(c).cast("string"),
        "cast": lambda c: c.cast("string"),
    }
    return None if kind is None else (encode[kind](column), kind)


def _decode(text: Any, how: str, arrow_type: Any) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    if how == "base64":
        import base64

        return pa.array(
            [None if v is None else base64.b64decode(v) for v in text.to_pylist()], arrow_type
        )
    if how == "days":
        return pc.cast(pc.cast(text, pa.int32()), arrow_type)
    if how == "micros":
        return pc.cast(pc.cast(text, pa.int64()), arrow_type)
    return pc.cast(text, arrow_type)
