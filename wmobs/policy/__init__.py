"""The policy half of wmobs: everything that runs inside the query.

:class:`TimePolicy` judges every row of a streaming DataFrame (invalid time, early and late
arrival, out of order against the batch watermark or per key, idle timeout) and counts every
verdict with ``DataFrame.observe`` (:mod:`wmobs.observations`); dropped rows can go to a
dead-letter destination (:mod:`wmobs.policy.deadletter`). Importing this package does not import
PySpark.

Two engines run a policy (:mod:`wmobs.policy._engine` chooses): wmobs' Spark extension
(``_jvm``; its JAR is in the wheel, :func:`jar`, :func:`configure_spark`) or Python data
sources and ``mapInArrow`` (``_watermark_source``, ``_substream_stage``).

Inside: validation (``_time_policy``), the plan's context (``_context``) and its stages
(``_plan``: ``_arrival``, ``_ordering``, ``_heartbeat``, ``_observe``); the batch's times read
from the checkpoint (``_checkpoint``); substreams as rules, state and stage
(``_substream_judge``, ``_substream_state``, ``_substream_stage``); the idle-timeout rule and
its heartbeat (``_idle``, ``_idle_source``); storage beside Spark (``_storage``).
"""

from __future__ import annotations

from wmobs.policy._deadletter import DeadLetter, DeadLetterFunction
from wmobs.policy._engine import EngineError
from wmobs.policy._histograms import histogram_counts
from wmobs.policy._jvm._extension import EXTENSIONS, JarError, jar, submit_args
from wmobs.policy._jvm._extension import configure as configure_spark
from wmobs.policy._plan import SYSTEM_TIMESTAMP
from wmobs.policy._storage import Storage, StorageError
from wmobs.policy._time_policy import TimePolicy

JarBuildError = JarError
"""The name :class:`JarError` had while the JAR was compiled at run time."""

__all__ = [
    "EXTENSIONS",
    "SYSTEM_TIMESTAMP",
    "DeadLetter",
    "DeadLetterFunction",
    "EngineError",
    "JarBuildError",
    "JarError",
    "Storage",
    "StorageError",
    "TimePolicy",
    "configure_spark",
    "histogram_counts",
    "jar",
    "submit_args",
]
