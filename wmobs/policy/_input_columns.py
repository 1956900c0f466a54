"""The input's columns as a policy names them: spelled as the input spells them (Spark
resolves names without case unless ``spark.sql.caseSensitive`` is set, and so does ``apply``,
and the SQL function: ``PolicyInput.spellAsTheInput`` in the JVM), with a hint where a name is
a nested field's path, and the keys a substream cannot have."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["as_spelled", "has_map", "nested_hint", "spelled"]


def spelled(df: DataFrame, column: str, names: list[str]) -> str | None:
    """``column`` as ``names`` spell it where Spark resolves names without case; None where
    they have no such column, or two (Spark would call it ambiguous), or case counts."""
    found = [n for n in names if n.lower() == column.lower()]
    if len(found) != 1:
        return None
    sensitive = df.sparkSession.conf.get("spark.sql.caseSensitive", "false")
    return None if str(sensitive).lower() == "true" else found[0]


def as_spelled(df: DataFrame, column: str, names: list[str]) -> str:
    """``column`` itself where ``names`` have it, else as they spell it (:func:`spelled`), else
    as given (an error names it then)."""
    if column in names:
        return column
    return spelled(df, column, names) or column


def nested_hint(column: str, fields: Mapping[str, Any]) -> str:
    """A hint for a nested field's path (``payload.ts`` of a struct ``payload``): a policy
    reads top-level columns."""
    from pyspark.sql.types import StructType

    head = column.split(".", 1)[0]
    if "." not in column or not isinstance(fields.get(head), StructType):
        return ""
    name = column.rsplit(".", 1)[1]
    return (
        f"; a policy reads top-level columns: "
        f"df.withColumn({name!r}, F.col({column!r})) and pass {name!r}"
    )


def has_map(data_type: Any) -> bool:
    """Whether ``data_type`` is or holds a map (Spark hashes no map: a substream key cannot)."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(data_type, MapType):
        return True
    if isinstance(data_type, ArrayType):
        return has_map(data_type.elementType)
    if isinstance(data_type, StructType):
        return any(has_map(f.dataType) for f in data_type.fields)
    return False
