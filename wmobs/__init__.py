"""wmobs: watermark observability for Apache Spark Structured Streaming.

``monitor = wmobs.attach(spark, prometheus_port=9464)`` watches every streaming query of a
session and exports watermark delay, event-time lag, source idleness, drops and state as
OpenTelemetry metrics (see :mod:`wmobs.listener.metrics`). ``wmobs.TimePolicy`` judges and counts
every row of a stream inside the query, on wmobs' Spark extension
(``wmobs.configure_spark(builder)``) or in Python. The two halves live in :mod:`wmobs.listener` and
:mod:`wmobs.policy` and meet only in :mod:`wmobs.observations`. Importing wmobs never imports
Spark.
"""

from __future__ import annotations

from wmobs._version import __version__
from wmobs.listener import BatchSummary, Monitor, OperatorSnapshot, QuerySnapshot, attach
from wmobs.policy import (
    DeadLetter,
    EngineError,
    JarBuildError,
    JarError,
    Storage,
    StorageError,
    TimePolicy,
    configure_spark,
    jar,
)

__all__ = [
    "BatchSummary",
    "DeadLetter",
    "EngineError",
    "JarBuildError",
    "JarError",
    "Monitor",
    "OperatorSnapshot",
    "QuerySnapshot",
    "Storage",
    "StorageError",
    "TimePolicy",
    "__version__",
    "attach",
    "configure_spark",
    "jar",
]
