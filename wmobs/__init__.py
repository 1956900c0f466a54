"""wmobs: watermark observability for Apache Spark Structured Streaming.

``monitor = wmobs.attach(spark, prometheus_port=9464)`` watches every streaming query of a
session and exports watermark delay, event-time lag, source idleness, drops and state as
OpenTelemetry metrics (see :mod:`wmobs.metrics`). Importing wmobs never imports Spark.
"""

from __future__ import annotations

from wmobs._monitor import Monitor, attach
from wmobs._tracker import BatchSummary, OperatorSnapshot, QuerySnapshot
from wmobs._version import __version__
from wmobs.deadletter import DeadLetter
from wmobs.policy import TimePolicy

__all__ = [
    "BatchSummary",
    "DeadLetter",
    "Monitor",
    "OperatorSnapshot",
    "QuerySnapshot",
    "TimePolicy",
    "__version__",
    "attach",
]
