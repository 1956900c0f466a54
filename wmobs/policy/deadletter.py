"""Dead letters: every row a time policy drops, kept somewhere instead of vanishing.

``TimePolicy.apply(df, dead_letter=...)`` adds one stage to the query: every dropped row, with
every input column plus ``wmobs_rule`` (the rule that dropped it: ``invalid_time``,
``early_arrival``, ``late_arrival`` or ``out_of_order``), ``wmobs_policy`` (the time policy's
name, its ``policy`` label) and ``wmobs_batch_id`` (the micro-batch), goes to the destination;
kept rows continue to the query's sink. Destinations:

- a directory (a local path or any URI of :mod:`wmobs.policy._storage`: ``s3a://``,
  ``abfss://``, ``gs://``, ``dbfs:/``, ...), as Parquet (default) or JSON lines:
  ``<dir>/batch_id=<N>/part-<partition>-<policy>-<query id>.parquet``;
- a function ``fn(table: pyarrow.Table, batch_id: int, partition_id: int) -> None``, called in
  the executor once per task that dropped rows (it must be picklable and idempotent).

Exactly once, as far as the destination is concerned: a file is named by batch, partition,
policy and query id, and written whole at once (one PUT of the final object on an object store,
which has no atomic rename; a rename on a local path), so a retried task or a batch re-run after
a restart from the checkpoint writes the same file again, while another policy or query, or the
same one started afresh on a new checkpoint, writes files of its own beside it. The stage runs
in the same tasks as the policy's ``observe``: the rows counted as
``wmobs_dead_letter_rows_total`` are exactly the rows handed to the destination (a task that
fails to write fails, and its counts are discarded with it).

The plan, decided once when the policy is applied
(:func:`wmobs.policy._deadletter_plan.choose_plan`), logged with the engine (``wmobs.engine``)
and exported as the ``dead_letters`` label of ``wmobs_policy_info``;
cheapest first (the benchmarks page has each):

- ``jvm``: on the JVM engine, a Parquet directory reached with the default :class:`Storage`
  (credentials from the environment, as Spark's): nothing crosses into Python. A JVM
  function, called only for dropped rows, writes each task's file with Spark's own Parquet
  writer, the session's Parquet settings and its Hadoop configuration
  (:func:`dead_letter_writer`): every type Spark writes to Parquet, nested ones included.
- ``python_dropped``: elsewhere, kept rows stay in the JVM; each dropped row crosses into
  Python as one JSON string of exact text forms of its columns, each kept row as one null
  (:func:`dead_letter_filter`).
- ``python_all``: columns without such a form (nested, maps, intervals, ``TIMESTAMP_NTZ``),
  and PySpark before 4.1, take the plan where every row crosses (:func:`dead_letter_stage`,
  ``mapInArrow``).

Without ``dead_letter`` no Python runs per row and dropped rows are only counted.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from wmobs.policy._deadletter_plan import text_kind
from wmobs.policy._storage import Storage
from wmobs.policy._task import task_batch_id, task_query_id

__all__ = [
    "BATCH_COLUMN",
    "POLICY_COLUMN",
    "RULE_COLUMN",
    "DeadLetter",
    "DeadLetterFunction",
    "dead_letter_filter",
    "dead_letter_stage",
    "dead_letter_writer",
]

DeadLetterFunction = Callable[[Any, int, int], None]
"""``fn(table: pyarrow.Table, batch_id: int, partition_id: int) -> None``."""

POLICY_COLUMN = "wmobs_policy"
"""The dead letter's time policy: its name."""
RULE_COLUMN = "wmobs_rule"
"""The rule that dropped the row (one of :data:`wmobs.observations.RULES`)."""
BATCH_COLUMN = "wmobs_batch_id"
_FORMATS = ("parquet", "json")


@dataclass(frozen=True)
class DeadLetter:
    """Where dropped rows go: ``directory`` (with ``format``) or ``function``."""

    directory: str | None = None
    format: str = "parquet"
    function: DeadLetterFunction | None = None
    storage: Storage | None = None
    """How to reach ``directory`` (endpoint, credentials): default the storage passed to
    ``TimePolicy.apply``, else the environment's."""

    def __post_init__(self) -> None:
        if (self.directory is None) == (self.function is None):
            raise ValueError("dead_letter: give a directory or a function (exactly one)")
        if self.directory is not None and not str(self.directory).strip():
            raise ValueError("dead_letter: the directory is empty; give a path or a URI")
        if self.format not in _FORMATS:
            raise ValueError(f"dead_letter: format must be one of {_FORMATS}, got {self.format!r}")
        if self.function is not None and not callable(self.function):
            raise TypeError("dead_letter: function must be callable")

    @classmethod
    def of(cls, value: DeadLetter | str | os.PathLike[str] | DeadLetterFunction) -> DeadLetter:
        """``dead_letter=`` as users pass it: a DeadLetter, a directory, or a function."""
        if isinstance(value, DeadLetter):
            return value
        if isinstance(value, (str, os.PathLike)):
            return cls(directory=os.fspath(value))
        if callable(value):
            return cls(function=value)
        raise TypeError(
            "dead_letter: expected a directory, a function or wmobs.DeadLetter, "
            f"got {type(value).__name__}"
        )

    def with_storage(self, storage: Storage) -> DeadLetter:
        """This destination, reached through ``storage`` unless it has its own."""
        return self if self.storage is not None else replace(self, storage=storage)

    @property
    def written_by_hadoop(self) -> bool:
        """On the JVM engine: a Parquet directory reached with the default storage, which the
        JVM writes through Hadoop with the session's configuration."""
        default = self.storage is None or self.storage == Storage()
        return self.directory is not None and self.format == "parquet" and default

    def check(self) -> None:
        """On the driver, before the query runs: the directory can be created and written to
        (:meth:`Storage.check_writable`)."""
        if self.directory is not None:
            (self.storage or Storage()).check_writable(self.directory, "dead_letter")

    def write(self, table: Any, batch_id: int, partition_id: int, *, writer: str = "") -> None:
        """``table`` of micro-batch ``batch_id``'s partition ``partition_id``; ``writer`` (the
        policy and its query) names the file with them."""
        if self.function is not None:
            self.function(table, batch_id, partition_id)
            return
        assert self.directory is not None
        storage = self.storage or Storage()
        _write_file(
            table,
            self.directory,
            self.format,
            batch_id=batch_id,
            name=file_name(partition_id, writer, self.format),
            storage=storage,
        )


def file_name(partition_id: int, writer: str, fmt: str) -> str:
    """A dead-letter file's name in its batch's folder: ``part-<partition>-<writer>.<fmt>``,
    ``writer`` being ``<policy>-<query id>``. Two policies, or two queries, writing to one
    directory (or one query started again on a new checkpoint, a new id) write files of their
    own; a task that runs again writes its own file again. ``DeadLetterWriter.java`` names the
    same."""
    return f"part-{partition_id:05d}-{writer}.{fmt}" if writer else f"part-{partition_id:05d}.{fmt}"


def writer_name(policy: str, query_id: str | None) -> str:
    """The ``writer`` of :func:`file_name`: ``<policy>-<query id>`` (``<policy>`` outside a
    streaming query)."""
    return policy if query_id is None else f"{policy}-{query_id}"


def _write_file(
    table: Any, directory: str, fmt: str, *, batch_id: int, name: str, storage: Storage
) -> None:
    """One file of a batch, written whole at once (one PUT on an object store)."""
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        data = sink.getvalue().to_pybytes()
    else:
        text = table.to_pandas().to_json(orient="records", lines=True, date_format="iso")
        data = text.encode("utf-8")
    target = f"{directory.rstrip('/')}/batch_id={batch_id}/{name}"
    storage.write_once(target, data)


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
    found = task_batch_id()
    batch_id = -1 if found is None else found
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


# ---- the plan where nothing crosses into Python ------------------------------------------


def dead_letter_writer(
    sink: DeadLetter,
    columns: list[str],
    verdict_column: str,
    rule_bits: list[tuple[str, int]],
    *,
    policy: str,
    rename: Mapping[str, str] | None = None,
) -> Any:
    """On the JVM engine, for a Parquet directory (plan ``jvm``): the Column that calls wmobs'
    ``wmobs_dead_letters`` on a dropped row (the ``CASE`` branch of the policy's filter): each
    task writes its dropped rows' ``columns`` (``rename`` applied to their names) to one
    Parquet file with Spark's own Parquet writer and the session's Parquet settings, every
    Spark type that Parquet takes, nested ones included. No row crosses into Python."""
    from pyspark.sql import functions as F

    from wmobs.policy._jvm import _extension

    assert sink.directory is not None
    rename = rename or {}
    spec = {"directory": sink.directory, "rules": [list(p) for p in rule_bits], "policy": policy}
    row = F.struct(*[F.col(f"`{c}`").alias(rename.get(c, c)) for c in columns])
    return _extension.dead_letters(spec, row, F.col(verdict_column).cast("long"))


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
