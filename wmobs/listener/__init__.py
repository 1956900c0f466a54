"""The listener half of wmobs: progress events in, metrics out (on the driver or the Connect
client).

:func:`attach` wires a :class:`~pyspark.sql.streaming.StreamingQueryListener` to a
:class:`Tracker` (per-query snapshots, pure Python) and to OpenTelemetry instruments
(:mod:`wmobs.listener.metrics`) exported over OTLP or to your meter provider; the Prometheus
endpoint renders the same instruments straight from the tracker (``_exposition``). It reads
what the policy half counted only through ``progress.observedMetrics``
(:mod:`wmobs.observations`), and needs nothing from PySpark beyond the listener API (Spark 3.5
and 4.x). Importing this package does not import PySpark.
"""

from __future__ import annotations

from wmobs.listener._exposition import parse_metrics
from wmobs.listener._monitor import Monitor, attach
from wmobs.listener._snapshots import (
    BatchSummary,
    OperatorSnapshot,
    QuerySnapshot,
    format_timestamp,
    parse_timestamp,
)
from wmobs.listener._tracker import Tracker
from wmobs.listener.metrics import BATCH_DURATION_BUCKETS, CONTRACT, Instruments

__all__ = [
    "BATCH_DURATION_BUCKETS",
    "CONTRACT",
    "BatchSummary",
    "Instruments",
    "Monitor",
    "OperatorSnapshot",
    "QuerySnapshot",
    "Tracker",
    "attach",
    "format_timestamp",
    "parse_metrics",
    "parse_timestamp",
]
