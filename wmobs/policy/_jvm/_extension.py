"""wmobs' Spark extension, the JVM engine: its JAR for the running Spark line, how a session
gets it, and its SQL functions, called by name.

The JAR (``wmobs/_jars/wmobs-spark-<line>_<scala>.jar``) is built with Maven from ``jvm/``
when the wheel is built, one per Spark line, and carried inside the wheel: nothing is compiled
on the user's machine. Its ``io.wmobs.spark.WmobsExtensions`` (``spark.sql.extensions``)
registers a fixed set of functions in every session; each takes the policy's spec as its first
argument, a string literal, so that Python calls them by name (``F.call_function``), over
Spark Connect too:

- ``wmobs_version()``: the extension's version (the package checks it is its own);
- ``wmobs_batch_watermark(checkpoint)``, ``wmobs_batch_timestamp(checkpoint)``: the running
  micro-batch's watermark and timestamp (ms), read in every task from the checkpoint;
- ``wmobs_judge(spec, event_us, arrival_us, watermark_ms, batch_ms)``: one field of a row's
  judgement by the policy's stateless rules (``PolicyRules.java``);
- ``wmobs_policy_observation(spec, ...)``: everything a policy observes, one aggregate;
- ``wmobs_dead_letters(spec, row, verdict)``: a dropped row written to its task's Parquet
  file by Spark's Parquet writer;
- ``wmobs_substreams(spec, c0, c1, ...)``: substreams' per-key judge in Spark's state store,
  called by name over Spark Connect (the extension's analyzer rule plans it; a classic
  session calls ``io.wmobs.spark.Substreams.judge`` through its JVM);
- ``wmobs_row_pack``, ``wmobs_row_unpack``, ``wmobs_row_place``: a row's columns as one
  value, and its place in its partition, for substreams' stateful operator.

Its streaming source ``io.wmobs.spark.IdleHeartbeat`` (:data:`HEARTBEAT_SOURCE`) is the
idle-timeout heartbeat.

A classic session started without the extension gets it from :func:`load` (the JAR added to
the driver's class loader and to the executors', the functions registered in the session):
what :mod:`wmobs.policy._engine` does when a policy is applied.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wmobs.policy._jvm._specs import (
        DeadLettersSpec,
        JudgeSpec,
        ObservationSpec,
        SubstreamsSpec,
    )

__all__ = [
    "EXTENSIONS",
    "HEARTBEAT_SOURCE",
    "LINES",
    "JarError",
    "batch_time",
    "call",
    "configure",
    "dead_letters",
    "extension_version",
    "jar",
    "judge",
    "load",
    "observation",
    "spark_defaults",
    "spark_line",
    "submit_args",
    "substreams",
]

EXTENSIONS = "io.wmobs.spark.WmobsExtensions"
"""The value of ``spark.sql.extensions`` that registers wmobs' functions."""
LINES: dict[str, str] = {"3.5": "2.12", "4.0": "2.13", "4.1": "2.13", "4.2": "2.13", "4.3": "2.13"}
"""The Spark lines wmobs' JAR is built for, and each one's Scala version."""
VERSION_FUNCTION = "wmobs_version"
ROW_PLACE = "wmobs_row_place"
"""A row's place in its partition (the partition's index, then a counter), unique in a
micro-batch (``RowBytes.java``)."""
HEARTBEAT_SOURCE = "io.wmobs.spark.IdleHeartbeat"
"""The format of the extension's idle-timeout heartbeat source (``IdleHeartbeat.java``)."""
_HOME = Path(__file__).resolve().parents[2] / "_jars"
_LOADED = threading.Lock()


class JarError(RuntimeError):
    """No wmobs JAR for this Spark (another line, or an installation without the JARs)."""


def spark_line(version: str) -> str:
    """``major.minor`` of a Spark version: ``"4.1.4"`` -> ``"4.1"``."""
    parts = version.split(".")
    if len(parts) < 2 or not parts[0].isdigit() or not parts[1].isdigit():
        raise JarError(f"wmobs: not a Spark version: {version!r}")
    return f"{parts[0]}.{parts[1]}"


def jar(spark_version: str | None = None) -> Path:
    """The path of wmobs' JAR for ``spark_version`` (default: the installed PySpark's).

    Put it on the classpath of the driver and the executors with the extension, when the
    session starts (:func:`configure` does both)::

        SparkSession.builder.config("spark.jars", str(wmobs.jar()))
            .config("spark.sql.extensions", "io.wmobs.spark.WmobsExtensions")

    or ``spark-submit $(wmobs spark-submit-args)``. :class:`JarError` names the supported
    lines when there is none for this one."""
    if spark_version is None:
        try:
            from pyspark import __version__ as installed
        except ImportError as exc:
            raise JarError("wmobs.jar(): PySpark is not installed; pass spark_version") from exc
        spark_version = str(installed)
    line = spark_line(spark_version)
    scala = LINES.get(line)
    if scala is None:
        supported = ", ".join(LINES)
        raise JarError(
            f"wmobs has no JAR for Spark {spark_version} (line {line}); it has one for Spark "
            f"{supported}"
        )
    path = _HOME / f"wmobs-spark-{line}_{scala}.jar"
    if not path.is_file():
        raise JarError(
            f"wmobs: {path.name} is missing from this installation ({_HOME}); a wheel carries "
            "it, a source checkout builds it with `python jvm/jars.py` (Maven)"
        )
    return path


def configure(builder: Any, spark_version: str | None = None) -> Any:
    """``builder`` (a ``SparkSession.Builder``) with wmobs' JAR and extension added to what it
    already has in ``spark.jars`` and ``spark.sql.extensions`` (or, where it sets neither,
    to what the installation's ``spark-defaults.conf`` has, which the builder's value would
    replace: Delta's or Iceberg's extension stays): the one line a session needs for the JVM
    engine, Spark Connect servers included::

        spark = wmobs.configure_spark(SparkSession.builder.master("local[2]")).getOrCreate()
    """
    path = str(jar(spark_version))
    options = getattr(builder, "_options", {})
    defaults = spark_defaults(_pyspark_home())
    for key, value in (("spark.jars", path), ("spark.sql.extensions", EXTENSIONS)):
        present = _listed(options.get(key, defaults.get(key, "")))
        if value not in present:
            builder = builder.config(key, ",".join([*present, value]))
    return builder


def submit_args(spark_version: str | None = None) -> list[str]:
    """The ``spark-submit`` arguments that give a cluster's sessions wmobs' extension. A value
    on the command line replaces the one in ``spark-defaults.conf``, so the JARs and extensions
    configured there (Delta's, Iceberg's) are listed before wmobs' own."""
    defaults = spark_defaults(_submit_home())
    jars = [*_listed(defaults.get("spark.jars", "")), str(jar(spark_version))]
    extensions = [*_listed(defaults.get("spark.sql.extensions", "")), EXTENSIONS]
    return [
        "--jars",
        ",".join(dict.fromkeys(jars)),
        "--conf",
        f"spark.sql.extensions={','.join(dict.fromkeys(extensions))}",
    ]


def spark_defaults(spark_home: str | None = None) -> dict[str, str]:
    """The properties of the ``spark-defaults.conf`` that Spark's launcher reads: in
    ``$SPARK_CONF_DIR``, else in ``conf/`` of ``$SPARK_HOME`` (else of ``spark_home``); empty
    where there is none. Java properties' ``key value``, ``key=value`` and ``key: value``."""
    home = os.environ.get("SPARK_HOME") or spark_home
    folder = os.environ.get("SPARK_CONF_DIR") or (os.path.join(home, "conf") if home else None)
    if not folder:
        return {}
    try:
        text = Path(folder, "spark-defaults.conf").read_text(encoding="utf-8")
    except OSError:
        return {}
    properties = {}
    for raw in text.splitlines():
        line = raw.strip()
        if line and line[0] not in "#!":
            match = re.match(r"([^\s=:]+)(?:\s*[=:]\s*|\s+)(.*)", line)
            if match:
                properties[match.group(1)] = match.group(2).strip()
    return properties


def _listed(value: str) -> list[str]:
    return [v.strip() for v in str(value).split(",") if v.strip()]


def _pyspark_home() -> str | None:
    """The Spark home PySpark launches its JVM from (``SPARK_HOME``, or PySpark's own)."""
    try:
        from pyspark.find_spark_home import _find_spark_home

        return str(_find_spark_home())
    except (Exception, SystemExit):  # it exits where it finds no Spark
        return None


def _submit_home() -> str | None:
    """The Spark home of the ``spark-submit`` on the PATH: a distribution's (the folder above
    its ``bin/``), or PySpark's for the script that ``pip install pyspark`` puts on it."""
    found = shutil.which("spark-submit")
    if found:
        home = Path(found).resolve().parent.parent
        if (home / "jars").is_dir():
            return str(home)
    return _pyspark_home()


def extension_version(spark: Any) -> str | None:
    """The version of wmobs' extension in ``spark`` (classic or Connect), None if it has none.
    A classic session answers through Py4J; a Connect server runs ``wmobs_version()``."""
    from wmobs._spark import is_connect

    try:
        if not spark.catalog.functionExists(VERSION_FUNCTION):
            return None
        if not is_connect(spark):
            release = spark._jvm.io.wmobs.spark.Functions.RELEASE
            if isinstance(release, str):
                return release
        return str(spark.sql(f"SELECT {VERSION_FUNCTION}()").first()[0])
    except Exception:  # a server that cannot answer: no extension to be had
        return None


def load(spark: Any) -> str:
    """Loads wmobs' JAR into ``spark``, a running classic session that did not start with it,
    and registers its functions; how it did so. Raises :class:`JarError` where it cannot.

    The JAR goes on the driver's class loader (the one every thread of a PySpark driver
    inherits, so the query's own threads compile code that names wmobs' classes) and, with
    ``SparkContext.addJar``, to the executors. Spark's ``ADD JAR`` is not enough: it sets the
    class loader of the calling thread only."""
    from py4j.java_gateway import JavaClass

    path = jar(spark.version)
    jvm = spark._jvm
    with _LOADED:
        functions = jvm.io.wmobs.spark.Functions
        how = "on the session's classpath"
        if not isinstance(functions, JavaClass):
            loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
            if loader is None or not _has_method(loader, "addURL"):
                raise JarError(
                    "wmobs: this driver's class loader cannot take wmobs' JAR at run time; start "
                    "the session with wmobs.configure_spark(builder), or spark.jars="
                    f"{path} and spark.sql.extensions={EXTENSIONS}"
                )
            loader.addURL(jvm.java.io.File(str(path)).toURI().toURL())
            spark.sparkContext._jsc.sc().addJar(str(path))
            functions = jvm.io.wmobs.spark.Functions
            if not isinstance(functions, JavaClass):
                raise JarError(f"wmobs: {path} did not load into this driver")
            how = "loaded into the running session"
        functions.register(spark._jsparkSession)
    return how


def _has_method(obj: Any, name: str) -> bool:
    try:
        return any(m.getName() == name for m in obj.getClass().getMethods())
    except Exception:
        return False


# ---- calls by name ------------------------------------------------------------------------


def call(function: str, spec: Any, *arguments: Any) -> Any:
    """A Column calling wmobs' ``function`` with ``spec`` first: its dataclass
    (:mod:`wmobs.policy._jvm._specs`) or a mapping as JSON, a string as it is."""
    from pyspark.sql import functions as F

    text = spec if isinstance(spec, str) else json.dumps(_specs_dict(spec), sort_keys=True)
    return F.call_function(function, F.lit(text), *arguments)


def batch_time(checkpoint: str, *, watermark: bool) -> Any:
    """The running micro-batch's watermark (or timestamp), ms, read from ``checkpoint`` ("" for
    a named query's)."""
    name = "wmobs_batch_watermark" if watermark else "wmobs_batch_timestamp"
    return call(name, checkpoint)


def _specs_dict(spec: Any) -> Mapping[str, Any]:
    from wmobs.policy._jvm._specs import to_dict

    return spec if isinstance(spec, Mapping) else to_dict(spec)


def judge(spec: JudgeSpec, *times: Any) -> Any:
    """``PolicyRules``: the field of a row's judgement that ``spec`` names, from its event and
    arrival times (µs) and the batch's watermark and timestamp (ms)."""
    return call("wmobs_judge", spec, *times)


def observation(spec: ObservationSpec, *arguments: Any) -> Any:
    """``ObservationAggregate``: everything a policy observes, one aggregate (JSON text)."""
    return call("wmobs_policy_observation", spec, *arguments)


def dead_letters(spec: DeadLettersSpec, row: Any, verdict: Any) -> Any:
    """``DeadLetterWriter``: writes the dropped ``row`` (a struct of its columns) with the rule
    its ``verdict`` gives to its task's Parquet file, by Spark's Parquet writer; false."""
    return call("wmobs_dead_letters", spec, row, verdict)


def substreams(df: Any, spec: SubstreamsSpec) -> Any:
    """``df`` judged per key by ``Substreams.java`` (``spec`` as it documents): a plan with
    Spark's ``flatMapGroupsWithState`` (``transformWithState`` on Spark 4 with RocksDB), whose
    state the query keeps in its state store. The
    output: ``df``'s columns without the key and the arrival time, then the three that
    ``spec["appended"]`` names. A classic session builds the plan through its JVM; a Spark
    Connect client calls ``wmobs_substreams`` by name, which the server's extension plans."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    from wmobs._spark import is_connect

    if is_connect(df.sparkSession):
        full = {**_specs_dict(spec), "columns": df.columns}
        return df.select(call("wmobs_substreams", full, *[F.col(f"`{c}`") for c in df.columns]))
    text = json.dumps(_specs_dict(spec), sort_keys=True)
    jdf = df.sparkSession._jvm.io.wmobs.spark.Substreams.judge(df._jdf, text)
    return DataFrame(jdf, df.sparkSession)
