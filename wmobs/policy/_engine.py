"""Which engine runs a time policy: decided here, once per ``TimePolicy.apply``, logged once at
info with its reason, and exported as ``wmobs_policy_info{query, policy, engine, dead_letters}``.
This is the switch, the one module of the plan's side that knows the engines' rooms; each room
implements the stages the plan asks for by name (:mod:`wmobs.policy._stages`).

- ``jvm``: wmobs' Spark extension (:mod:`wmobs.policy._jvm`). The batch's times are read in
  the tasks, substreams are judged in Spark's state store, everything observed is one
  aggregate, dead letters are written by the JVM: no row crosses into Python.
- ``python``: Python data sources, ``mapInArrow`` and Spark's own aggregates
  (:mod:`wmobs.policy._python`), for sessions that cannot load the extension (a Spark Connect
  server without it, platforms that forbid JARs).

``engine="auto"`` (the default) is the JVM engine wherever the session has the extension or
can be given it (a classic session gets the JAR loaded into it), else the Python engine, said
at info with the one setting that would give the JVM engine. ``engine="jvm"`` that cannot be
had is an error, never a fallback; so is ``engine="python"`` where the Python engine cannot
run (Spark before 4.0 has no Python data sources).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wmobs._version import __version__
from wmobs.policy._jvm._pipeline import planned_by_name
from wmobs.policy._jvm._stages import JvmEngine
from wmobs.policy._python._stages import PythonEngine
from wmobs.policy._stages import Engine

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from wmobs.policy._deadletter import DeadLetter

__all__ = ["ENGINES", "EngineError", "check_requested", "choose", "planned_in_pipeline"]

ENGINES = ("auto", "jvm", "python")
JVM = JvmEngine.name
PYTHON = PythonEngine.name


class EngineError(RuntimeError):
    """The engine asked for cannot run in this session."""


def check_requested(requested: str) -> str:
    """``requested`` (``TimePolicy(engine=...)``) if it is one of :data:`ENGINES`; else
    ``ValueError``."""
    if requested not in ENGINES:
        raise ValueError(f"engine: must be one of {', '.join(ENGINES)}, got {requested!r}")
    return requested


def _spark_major(spark: Any) -> int:
    try:
        return int(str(spark.version).split(".", 1)[0])
    except Exception:  # pragma: no cover - every session has a version
        return 4


def _setting(spark: Any) -> str:
    """The one setting that gives a session the JVM engine."""
    from wmobs.policy._jvm._extension import EXTENSIONS, JarError, jar

    try:
        path = str(jar(spark.version))
    except JarError:
        path = "<wmobs jar>"
    return (
        f"start the session (or the Spark Connect server) with spark.jars={path} and "
        f"spark.sql.extensions={EXTENSIONS}: wmobs.configure_spark(builder) sets both"
    )


def _jvm(spark: Any) -> tuple[JvmEngine | None, str]:
    """The JVM engine if ``spark`` has it or can be given it; else None and why not."""
    from wmobs._spark import is_connect
    from wmobs.policy._jvm._extension import JarError, extension_version, load

    found = extension_version(spark)
    if found is None and not is_connect(spark):
        try:
            how = load(spark)
        except JarError as exc:
            return None, str(exc)
        except Exception as exc:  # the JVM refused: say what it said
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return None, f"wmobs' JAR could not be loaded into this session: {first}"
        found = extension_version(spark)
        if found is not None:
            return JvmEngine(f"wmobs' Spark extension {how}"), ""
    if found is None:
        where = "the Spark Connect server" if is_connect(spark) else "this session"
        return None, f"{where} has no wmobs extension"
    if found != __version__:
        raise EngineError(
            f"wmobs: the session's wmobs extension is version {found}, this package is "
            f"{__version__}; give the session the JAR of this package ({_setting(spark)})"
        )
    return JvmEngine("the session has wmobs' Spark extension"), ""


def choose(spark: Any, requested: str) -> Engine:
    """The engine for a policy applied in ``spark``; ``requested``: one of :data:`ENGINES`."""
    check_requested(requested)
    python_ok = _spark_major(spark) >= 4
    if requested == PYTHON:
        if not python_ok:
            raise EngineError(
                f"wmobs: engine='python' needs Spark >= 4.0 (Python data sources); this is "
                f"Spark {spark.version}: use the JVM engine ({_setting(spark)})"
            )
        return PythonEngine("engine='python' was asked for")
    engine, why_not = _jvm(spark)
    if engine is not None:
        return engine
    if requested == JVM:
        raise EngineError(f"wmobs: engine='jvm' is not to be had: {why_not}; {_setting(spark)}")
    if not python_ok:
        raise EngineError(
            f"wmobs: time policies on Spark {spark.version} need the JVM engine, and {why_not}; "
            f"{_setting(spark)}"
        )
    return PythonEngine(f"{why_not}; for the faster JVM engine, {_setting(spark)}")


def planned_in_pipeline(
    requested: str,
    flow: str,
    df: DataFrame,
    options: Callable[[], dict[str, Any]],
    *,
    sink: DeadLetter | None,
) -> DataFrame:
    """``df`` judged in the query function of pipeline flow ``flow``, where nothing may analyse
    it: always on the JVM engine, planned by name (``options()`` as SQL's ``wmobs_time_policy``
    takes them) by the extension when the pipeline analyses the flow
    (:func:`wmobs.policy._jvm._pipeline.planned_by_name`). ``engine='python'`` is an error there:
    the Python engine analyses its input."""
    if check_requested(requested) == PYTHON:
        raise ValueError(
            "engine: the Python engine cannot run in a pipeline's query function (it analyses "
            "its input there); leave engine='auto' and run the pipeline with the extension: "
            "spark-pipelines run $(wmobs spark-submit-args)"
        )
    engine = JvmEngine(
        f"in the query function of pipeline flow {flow}: planned by wmobs' extension when the "
        "pipeline analyses the flow"
    )
    return planned_by_name(engine, df, options, sink=sink)
