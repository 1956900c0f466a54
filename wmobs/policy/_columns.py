"""The Column expressions every engine's stages share: a row's event and arrival times (µs) as
the policy reads them, and columns replaced at once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from wmobs.policy._context import Context

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["arrival_micros", "event_micros", "replace"]


def event_micros(ctx: Context, df: DataFrame) -> Column:
    """Each row's event time (µs); null where it is missing or unparseable."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, TimestampType

    name = ctx.column(ctx.event_time)
    column = F.col(f"`{name}`")
    if isinstance(df.schema[name].dataType, StringType):
        # As Spark casts a string to a timestamp with a time zone, its offset kept
        # (try_to_timestamp and the name TIMESTAMP give a TIMESTAMP_NTZ, which drops it, where
        # spark.sql.timestampType says so); unparseable -> null -> invalid_time.
        column = F.expr(f"try_cast(`{name.replace('`', '``')}` AS TIMESTAMP_LTZ)")
    return F.unix_micros(column.cast(TimestampType()))


def arrival_micros(ctx: Context) -> Column:
    """The arrival time column; null where the micro-batch's time stands in for it."""
    from pyspark.sql import functions as F

    if ctx.arrival_time is None:
        return F.lit(None).cast("long")
    arrival = ctx.column(ctx.arrival_time)
    from pyspark.sql.types import TimestampType

    return F.unix_micros(F.col(f"`{arrival}`").cast(TimestampType()))


def replace(df: DataFrame, columns: dict[str, Column]) -> DataFrame:
    """Replace ``columns`` at once: every new value is computed from the old ones."""
    from pyspark.sql import functions as F

    kept = [F.col(f"`{c}`") for c in df.columns if c not in columns]
    return df.select(*kept, *[value.alias(name) for name, value in columns.items()])
