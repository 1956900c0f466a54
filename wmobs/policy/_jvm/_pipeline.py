"""A time policy in a pipeline's query function on the JVM engine: one call by name of the
extension's ``wmobs_policy`` over ``struct(*)``, which its analyzer rule plans on the server when
the pipeline analyses the flow (:mod:`wmobs.policy._pipeline`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wmobs.policy._deadletter import DeadLetter
from wmobs.policy._jvm import _extension
from wmobs.policy._stages import Engine

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["CALL", "planned_by_name"]

CALL = "wmobs_policy"


def planned_by_name(
    engine: Engine,
    df: DataFrame,
    options: Callable[[], dict[str, Any]],
    *,
    sink: DeadLetter | None,
) -> DataFrame:
    """``df`` judged by a policy without analysing it: its ``options()`` (as SQL's
    ``wmobs_time_policy`` takes them, its name under ``name``) planned by the extension on the
    server."""
    from pyspark.sql import functions as F

    from wmobs._log import get_logger

    if sink is not None and not (sink.directory is not None and sink.written_by_hadoop):
        raise ValueError(
            "dead_letter: in a pipeline, dead letters go to a Parquet directory that Spark's "
            "Hadoop configuration reaches (no function, JSON or storage= options)"
        )
    spec = options()
    get_logger().info(
        "wmobs.engine",
        policy=spec["name"],
        engine=engine.name,
        reason=engine.reason,
        dead_letters="none" if sink is None else "jvm",
    )
    return df.select(_extension.call(CALL, json.dumps(spec), F.struct(F.col("*"))))
