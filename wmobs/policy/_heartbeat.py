"""The idle timeout in the plan: the heartbeat stream unioned with the policy's rows, with the
columns of the rows it joins. Globally the heartbeat yields the synthetic row of each tick; with
substreams on the Python engine one wake-up row per key bucket, and the per-key judge decides
(on the JVM engine Spark's timeouts do, and the heartbeat only guards the trigger:
:func:`wmobs.policy._jvm._substreams.refusing_available_now`). Each engine names its heartbeat
source (``Engine.heartbeat_source``): the JVM engine's is a streaming source of wmobs'
extension (``IdleHeartbeat.java``), the Python engine's a Python data source
(:mod:`wmobs.policy._python._idle_source`): the same offsets and rows."""

from __future__ import annotations

from typing import TYPE_CHECKING

from wmobs.policy._context import Context
from wmobs.policy._verdicts import HEARTBEAT, IDLE, KEY, REAL, TS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType

__all__ = ["default_check_interval_ms", "heartbeat", "with_heartbeat"]


def default_check_interval_ms(timeout_ms: int) -> int:
    """How often the heartbeat looks: a quarter of the timeout, within [100 ms, 5 s]."""
    return int(min(max(timeout_ms // 4, 100), 5_000))


def with_heartbeat(ctx: Context, df: DataFrame, checkpoint: str | None) -> DataFrame:
    """``df`` with the idle column (real rows: :data:`REAL`) and the heartbeat's rows."""
    from pyspark.sql import functions as F

    marked = df.withColumn(IDLE, F.lit(REAL).cast("long"))
    return marked.unionByName(heartbeat(ctx, marked, checkpoint))


def heartbeat(ctx: Context, like: DataFrame, checkpoint: str | None) -> DataFrame:
    """The heartbeat's rows, with the columns of ``like``: on each of them the synthetic time
    and the firings of a tick (globally), or the key bucket a tick wakes (substreams), and a
    placeholder elsewhere."""
    from pyspark.sql import functions as F

    tolerances = ctx.tolerances
    spark = like.sparkSession
    source, options = ctx.engine.heartbeat_source(ctx, spark)
    timeout_ms = (tolerances.idle_timeout_us or 0) // 1000
    interval_us = tolerances.idle_check_interval_us
    interval_ms = (
        default_check_interval_ms(timeout_ms) if interval_us is None else interval_us // 1000
    )
    substreams = ctx.substream_by is not None
    beats = (
        spark.readStream.format(source)
        .option("mode", "substreams" if substreams else "global")
        .option("checkpoint", checkpoint or "")
        .option("timeout_ms", str(timeout_ms))
        .option("interval_ms", str(interval_ms))
        .option("delay_ms", str(tolerances.out_of_order_us // 1000))
        .options(**options)
        .load()
    )
    special = {
        TS: F.lit(0) if substreams else F.col("wmobs_idle_ts_us"),
        IDLE: F.lit(HEARTBEAT) if substreams else F.col("wmobs_idle_firings"),
        KEY: F.col("wmobs_idle_bucket"),
    }
    return beats.select(
        *[
            special.get(f.name, _placeholder(f.dataType)).cast(f.dataType).alias(f.name)
            for f in like.schema.fields
        ]
    )


def _placeholder(data_type: DataType) -> Column:
    """A non-null value of ``data_type`` for the columns of a synthetic row (never seen by the
    user: a null would turn a whole integer column into floats on its way through pandas)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if isinstance(data_type, T.StructType):
        return F.struct(*[_placeholder(f.dataType).alias(f.name) for f in data_type.fields])
    if isinstance(data_type, T.ArrayType):
        return F.array().cast(data_type)
    if isinstance(data_type, T.MapType):
        return F.create_map().cast(data_type)
    literals = (
        ((T.DateType, T.TimestampType, T.TimestampNTZType), "1970-01-01"),
        ((T.StringType, T.BinaryType), ""),  # (ANSI casts no number to binary)
        ((T.NumericType, T.BooleanType), 0),
    )
    for types, literal in literals:
        if isinstance(data_type, types):
            return F.lit(literal).cast(data_type)
    return F.lit(None).cast(data_type)
