"""The policy half of wmobs: everything that runs inside the query.

:class:`TimePolicy` judges every row of a streaming DataFrame (invalid time, early and late
arrival, out of order against the batch watermark or per key, idle timeout) and counts every
verdict with ``DataFrame.observe`` (:mod:`wmobs.observations`); dropped rows can go to a
dead-letter destination (:mod:`wmobs.policy.deadletter`). Importing this package does not import
PySpark; ``TimePolicy.apply`` needs Spark >= 4.0 (Python data sources).

Inside: validation (``_time_policy``) and the plan it builds (``_plan``); the batch's times read
from the checkpoint (``_checkpoint``; in the tasks by wmobs' JAR, ``_jvm``, else by the Python
source ``_watermark_source``); substreams as judge, state and
stage (``_substream_judge``, ``_substream_state``, ``_substream_stage``); the idle-timeout rule
and its heartbeat (``_idle``, ``_idle_source``); storage beside Spark (``_storage``).
"""

from __future__ import annotations

from wmobs.policy._jvm import JarBuildError, jar
from wmobs.policy._plan import SYSTEM_TIMESTAMP
from wmobs.policy._storage import Storage, StorageError
from wmobs.policy._time_policy import TimePolicy
from wmobs.policy.deadletter import DeadLetter, DeadLetterFunction

__all__ = [
    "SYSTEM_TIMESTAMP",
    "DeadLetter",
    "DeadLetterFunction",
    "JarBuildError",
    "Storage",
    "StorageError",
    "TimePolicy",
    "jar",
]
