"""The idle timeout in the plan: the heartbeat stream unioned with the policy's rows, with the
columns of the rows it joins. Globally the heartbeat yields the synthetic row of each tick; with
substreams on the Python engine one wake-up row per key bucket, and the per-key judge decides
(on the JVM engine Spark's timeouts do, and the heartbeat only guards the trigger:
:func:`refusing_available_now`). The JVM engine's heartbeat is a streaming source of wmobs'
extension (``IdleHeartbeat.java``), the Python engine's a Python data source
(:mod:`wmobs.policy._python._idle_source`): the same offsets and rows."""

from __future__ import annotations

from typing import TYPE_CHECKING

from wmobs.policy._context import Context
from wmobs.policy._verdicts import HEARTBEAT, IDLE, KEY, REAL, TS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType

__all__ = ["JVM_SOURCE", "default_check_interval_ms", "refusing_available_now", "with_heartbeat"]

JVM_SOURCE = "io.wmobs.spark.IdleHeartbeat"


def default_check_interval_ms(timeout_ms: int) -> int:
    """How often the heartbeat looks: a quarter of the timeout, within [100 ms, 5 s]."""
    return int(min(max(timeout_ms // 4, 100), 5_000))


def with_heartbeat(ctx: Context, df: DataFrame, checkpoint: str | None) -> DataFrame:
    """``df`` with the idle column (real rows: :data:`REAL`) and the heartbeat's rows."""
    from pyspark.sql import functions as F

    marked = df.withColumn(IDLE, F.lit(REAL).cast("long"))
    return marked.unionByName(_heartbeat(ctx, marked, checkpoint))


def refusing_available_now(ctx: Context, df: DataFrame) -> DataFrame:
    """``df`` with the JVM heartbeat in its substreams mode, which yields no rows and refuses
    ``Trigger.AvailableNow`` when the query starts: the JVM engine's substreams keep their idle
    clocks and TTL with Spark's processing-time timeouts, and Spark runs a micro-batch for
    those after every micro-batch, so such a query would never end."""
    return df.unionByName(_heartbeat(ctx, df, ctx.checkpoint))


def _heartbeat(ctx: Context, like: DataFrame, checkpoint: str | None) -> DataFrame:
    from pyspark.sql import functions as F

    from wmobs.policy._python._substream_state import BUCKETS

    tolerances = ctx.tolerances
    spark = like.sparkSession
    if ctx.engine.jvm:
        source = JVM_SOURCE
    else:
        from wmobs.policy._python._idle_source import SOURCE_NAME, IdleHeartbeatSource

        spark.dataSource.register(IdleHeartbeatSource)
        source = SOURCE_NAME
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
        .option("relative_to", ctx.relative_to)
        .option("storage", ctx.storage.encode())
        .option("timeout_ms", str(timeout_ms))
        .option("interval_ms", str(interval_ms))
        .option("delay_ms", str(tolerances.out_of_order_us // 1000))
        .option("buckets", str(BUCKETS))
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
    if isinstance(data_type, (T.DateType, T.TimestampType, T.TimestampNTZType)):
        return F.lit("1970-01-01").cast(data_type)
    if isinstance(data_type, (T.NumericType, T.BooleanType, T.StringType, T.BinaryType)):
        return F.lit(0).cast(data_type)
    return F.lit(None).cast(data_type)
