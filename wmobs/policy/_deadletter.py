"""A dead-letter destination: where a time policy's dropped rows go (a directory, as Parquet or
JSON lines, or a function), how its files are named and written. The plans that hand rows
over to it, and the documentation, are :mod:`wmobs.policy.deadletter`'s."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from wmobs.policy._storage import Storage

__all__ = [
    "BATCH_COLUMN",
    "DEAD_LETTER_COLUMNS",
    "POLICY_COLUMN",
    "RULE_COLUMN",
    "DeadLetter",
    "DeadLetterFunction",
    "check_input_columns",
    "file_name",
    "writer_name",
]

DeadLetterFunction = Callable[[Any, int, int], None]
"""``fn(table: pyarrow.Table, batch_id: int, partition_id: int) -> None``."""

POLICY_COLUMN = "wmobs_policy"
"""The dead letter's time policy: its name."""
RULE_COLUMN = "wmobs_rule"
"""The rule that dropped the row (one of :data:`wmobs.observations.RULES`)."""
BATCH_COLUMN = "wmobs_batch_id"
DEAD_LETTER_COLUMNS = (RULE_COLUMN, POLICY_COLUMN, BATCH_COLUMN)
"""The columns a dead letter has beside the input's (``DeadLetterWriter.java``'s too)."""
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


def check_input_columns(columns: Iterable[str]) -> None:
    """A policy's input may not have the columns its dead letters add (the ValueError names
    the first): its dead letters would hold it twice, and a directory of them could not be
    read back."""
    added = sorted(set(columns) & set(DEAD_LETTER_COLUMNS))
    if added:
        raise ValueError(
            f"dead_letter: column {added[0]!r} is one that dead letters add (the rule, policy "
            "and micro-batch of a dropped row): rename or drop it (rows read back from dead "
            "letters?), or the dead letters would hold it twice"
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
        data = json_lines(table)
    target = f"{directory.rstrip('/')}/batch_id={batch_id}/{name}"
    storage.write_once(target, data)


def json_lines(table: Any) -> bytes:
    """``table``'s rows as JSON lines, every value exact: longs as written (not through a
    double, as a column with a null would be in pandas), doubles to the last digit (NaN and
    infinities as Spark's JSON reader takes them), timestamps to the microsecond in ISO 8601,
    decimals as their digits in a string, binary in base64 (as Spark's ``to_json``)."""
    import base64
    import datetime
    import decimal
    import json

    def exact(value: Any) -> Any:
        if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
            return value.isoformat()
        if isinstance(value, datetime.timedelta):
            return str(value)
        if isinstance(value, decimal.Decimal):
            return str(value)
        if isinstance(value, (bytes, bytearray)):
            return base64.b64encode(value).decode("ascii")
        raise TypeError(f"dead letters: no JSON form for {type(value).__name__}")

    lines = (json.dumps(row, default=exact, ensure_ascii=False) for row in table.to_pylist())
    return "".join(line + "\n" for line in lines).encode("utf-8")
