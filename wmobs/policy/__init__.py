"""The policy half of wmobs: everything that runs inside the query.

:class:`TimePolicy` judges every row of a streaming DataFrame (invalid time, early and late
arrival, out of order against the batch watermark or per key, idle timeout) and counts every
verdict with ``DataFrame.observe`` (:mod:`wmobs.observations`); dropped rows can go to a
dead-letter destination (:mod:`wmobs.policy.deadletter`). Importing this package does not import
PySpark.

Two engines run a policy, each in a room of its own behind one interface of stages
(``_stages.Engine``), and ``_engine`` chooses one per ``apply``: wmobs' Spark extension
(``_jvm``; its JAR is in the wheel, :func:`jar`, :func:`configure_spark`) or Python data
sources, ``mapInArrow`` and Spark's own aggregates (``_python``).

Inside, engine-neutral: validation (``_time_policy``), the plan's context (``_context``,
``_verdicts``, ``_columns``) and its stages, which ask the engine for their parts by name
(``_plan``: ``_ordering``, ``_heartbeat``, ``_observe``); dead letters (``_deadletter``,
``_deadletter_plan``, ``_deadletter_handover``); histograms as aggregates (``_histograms``);
storage beside Spark (``_storage``); where a task runs (``_task``); a policy in a pipeline's
query function (``_pipeline``). A room imports these; none of them imports a room.
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
