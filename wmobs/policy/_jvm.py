"""wmobs' JVM part (``wmobs/_jvm/src/io/wmobs/spark/``): SQL functions evaluated in the tasks.
Wherever the JAR is not loaded (Spark Connect, or a session started without it), the time
policies fall back to Python and Spark's own functions.

- The micro-batch's watermark and timestamp (``BatchTimes.java``). Without the JAR, the
  global time policy reads them with a one-row Python data source broadcast into the plan
  (:mod:`wmobs.policy._watermark_source`): a Spark job of its own in every micro-batch, 23-42
  ms of a small one. With the JAR on the session's classpath (``spark.jars``), every task
  reads ``offsets/<batchId>`` itself, once per executor and micro-batch, with the session's
  Hadoop configuration: the plan has no job, no broadcast, no join for it.
- Everything a time policy observes, as one aggregate (``PolicyObservation.java``). Without
  the JAR each count is an aggregate of its own in ``observe``; Spark evaluates each one row
  by row outside generated code and plans it again in every micro-batch.
- Substreams' per-key judge (``SubstreamJudge.java``), a Catalyst generator over the rows
  shuffled by key bucket (they stay Spark's binary rows), with the same state files as the
  Python stage
  (:mod:`wmobs.policy._substream_stage`, a ``mapInArrow`` function), which is the fallback.
- Dead letters to a Parquet directory (``DeadLetterWriter.java``): a function called only for
  dropped rows, which writes each task's file with Hadoop. Without the JAR every row passes
  through a Python UDF's queue (:mod:`wmobs.policy.deadletter`).

README "Performance" has the measurements.

:func:`jar` builds the JAR with the JDK's ``javac`` against the installed PySpark's jars (a few
seconds, once, and again only when the source changes).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "JAR_NAME",
    "JarBuildError",
    "batch_time_functions",
    "dead_letter_function",
    "jar",
    "observation_function",
    "substream_stage",
]

JAR_NAME = "wmobs-spark.jar"
_BATCH_TIMES = "io.wmobs.spark.BatchTimes"
_OBSERVATION = "io.wmobs.spark.PolicyObservation"
_DEAD_LETTERS = "io.wmobs.spark.DeadLetterWriter"
_SUBSTREAMS = "io.wmobs.spark.SubstreamJudge"
_HOME = Path(__file__).resolve().parent.parent / "_jvm"
_SOURCES = _HOME / "src"


class JarBuildError(RuntimeError):
    """The JAR cannot be built here (no JDK, no PySpark jars, or javac failed)."""


def _sources() -> list[Path]:
    return sorted(_SOURCES.rglob("*.java"))


def _spark_jars() -> Path:
    try:
        import pyspark
    except ImportError as exc:
        raise JarBuildError(
            "wmobs: building the JAR needs PySpark (pip install 'wmobs[spark]')"
        ) from exc
    for candidate in (
        Path(pyspark.__file__).resolve().parent / "jars",
        Path(os.environ.get("SPARK_HOME", "/nonexistent")) / "jars",
    ):
        if any(candidate.glob("spark-sql_*.jar")):
            return candidate
    raise JarBuildError("wmobs: no Spark jars to compile against (PySpark's jars/ or SPARK_HOME)")


def _javac() -> tuple[str, str]:
    home = os.environ.get("JAVA_HOME")
    javac = str(Path(home) / "bin" / "javac") if home else shutil.which("javac")
    if not javac or not Path(javac).exists():
        raise JarBuildError("wmobs: building the JAR needs a JDK (javac, Java >= 17)")
    return javac, str(Path(javac).with_name("jar"))


def _target() -> Path:
    """Beside the source when the package directory is writable, else the user's cache."""
    if os.access(_HOME, os.W_OK):
        return _HOME / JAR_NAME
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "wmobs"
    return cache / JAR_NAME


def jar() -> Path:
    """The path of wmobs' JAR, built first if it is missing or older than its source.

    Put it on the classpath of the driver and the executors when the session starts::

        SparkSession.builder.config("spark.jars", str(wmobs.jar()))

    or ``spark-submit --jars "$(wmobs jar)"``. :class:`JarBuildError` when it cannot be built
    (no JDK here: build it where there is one, with ``wmobs jar``, and ship the file)."""
    target = _target()
    sources = _sources()
    if target.exists() and all(s.stat().st_mtime <= target.stat().st_mtime for s in sources):
        return target
    javac, jar_tool = _javac()
    classpath = str(_spark_jars() / "*")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="wmobs-jar-") as work:
        classes = Path(work) / "classes"
        built = Path(work) / JAR_NAME
        steps = [
            [javac, "--release", "17", "-nowarn", "-cp", classpath, "-d", str(classes)]
            + [str(s) for s in sources],
            [jar_tool, "--create", "--file", str(built), "-C", str(classes), "."],
        ]
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise JarBuildError(f"wmobs: {Path(step[0]).name} failed:\n{done.stderr}")
        # Another process may build at the same time: each replaces the file whole.
        staged = target.with_name(f".{JAR_NAME}.{uuid.uuid4().hex}")
        shutil.copyfile(built, staged)
        os.replace(staged, target)
    return target


def _classic_jvm(spark: Any) -> Any | None:
    """The session's JVM gateway; None for a Spark Connect session (no JVM in this process)."""
    from wmobs._session import is_connect

    if is_connect(spark):
        return None
    return getattr(spark, "_jvm", None)


def _java_class(spark: Any, name: str) -> Any | None:
    """wmobs' class ``name`` in ``spark``'s JVM; None for Spark Connect or where the session
    has not loaded the JAR."""
    jvm = _classic_jvm(spark)
    if jvm is None:
        return None
    from py4j.java_gateway import JavaClass

    cls = jvm
    for part in name.split("."):
        cls = getattr(cls, part)
    # A JavaPackage: the class is not on the classpath.
    return cls if isinstance(cls, JavaClass) else None


def _register(spark: Any, name: str, register: Callable[[Any], None]) -> bool:
    """Calls ``register`` with wmobs' class ``name``; False where it cannot be loaded (logged
    when the JAR is there but fails, e.g. built for another Spark version)."""
    try:
        cls = _java_class(spark, name)
        if cls is None:
            return False
        register(cls)
    except Exception as exc:
        import structlog

        structlog.get_logger("wmobs").warning(
            "wmobs.jvm_unavailable",
            error=str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
            fallback=f"Spark's own functions in place of {name.rsplit('.', 1)[-1]}",
        )
        return False
    return True


def batch_time_functions(spark: Any, checkpoint: str) -> tuple[str, str] | None:
    """Registers this policy's two functions in ``spark`` (the micro-batch's watermark and
    timestamp, ms, read from ``checkpoint``, or from a named query's if empty) and returns
    their names; None when the session cannot load wmobs' JAR (the caller falls back to the
    Python data source)."""
    suffix = uuid.uuid4().hex[:12]
    names = (f"wmobs_batch_watermark_{suffix}", f"wmobs_batch_timestamp_{suffix}")

    def register(cls: Any) -> None:
        cls.register(spark._jsparkSession, names[0], names[1], checkpoint)

    return names if _register(spark, _BATCH_TIMES, register) else None


def _spec_function(spark: Any, class_name: str, prefix: str, spec: Mapping[str, Any]) -> str | None:
    """Registers wmobs' function ``class_name`` for ``spec`` (JSON, as its ``register``
    documents) and returns its name, one per spec; None where it cannot be loaded."""
    text = json.dumps(spec, sort_keys=True)
    name = prefix + hashlib.sha1(text.encode()).hexdigest()[:12]

    def register(cls: Any) -> None:
        cls.register(spark._jsparkSession, name, text)

    return name if _register(spark, class_name, register) else None


def dead_letter_function(spark: Any, spec: Mapping[str, Any]) -> str | None:
    """Registers wmobs' dead-letter writer (``DeadLetterWriter``, ``spec`` as its ``register``
    documents) and returns its name; None where the session cannot load wmobs' JAR or Hadoop
    has no filesystem for the directory (the caller hands dropped rows to Python instead)."""
    return _spec_function(spark, _DEAD_LETTERS, "wmobs_dead_letters_", spec)


def observation_function(spark: Any, spec: Mapping[str, Any]) -> str | None:
    """Registers wmobs' aggregate of everything a time policy observes (``PolicyObservation``,
    ``spec`` as its ``register`` documents) and returns its name; None where the session
    cannot load wmobs' JAR (the caller observes one Spark aggregate per column instead)."""
    # One name per spec: the same function for every policy of the session that needs it.
    return _spec_function(spark, _OBSERVATION, "wmobs_observation_", spec)


def substream_stage(df: Any, spec: Mapping[str, Any]) -> Any | None:
    """``df`` judged per key by wmobs' ``SubstreamJudge`` (``spec`` as its ``register``
    documents, without ``columns``: ``df``'s, in order), a generator of all of ``df``'s columns
    that yields the judged rows with the same columns; None where the session cannot load
    wmobs' JAR (the caller uses the Python stage)."""
    from pyspark.sql import functions as F

    name = _spec_function(
        df.sparkSession, _SUBSTREAMS, "wmobs_substreams_", {**spec, "columns": df.columns}
    )
    if name is None:
        return None
    return df.select(F.call_function(name, *[F.col(f"`{c}`") for c in df.columns]))
