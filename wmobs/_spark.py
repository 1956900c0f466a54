"""What kind of session a user passed, and where its driver resolves a relative path."""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

__all__ = [
    "is_connect",
    "is_relative",
    "jvm_exited",
    "jvm_process",
    "qualified_path",
    "working_directory",
]

_SCHEME = r"[A-Za-z][A-Za-z0-9+.-]*:"
"""How a URI begins (``s3a:``, ``file:``, ``dbfs:``)."""


def is_connect(spark: Any) -> bool:
    """True for a Spark Connect session: no JVM in this process."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def jvm_exited(spark: Any) -> bool:
    """True when the JVM that PySpark started for a classic session has exited: a SIGTERM to
    the whole process group (``timeout``, systemd, a closed terminal) stops it as well as
    Python. A call into it then only fails, and py4j logs the failure with a traceback on the
    root logger. False where this process did not start the JVM (Connect, ``spark-submit``)."""
    proc = jvm_process(spark)
    return proc is not None and proc.poll() is not None


def jvm_process(spark: Any) -> subprocess.Popen[bytes] | None:
    """The JVM process that PySpark started for a classic session, if this process started
    it."""
    if is_connect(spark):
        return None
    return getattr(getattr(getattr(spark, "_sc", None), "_gateway", None), "proc", None)


def qualified_path(spark: Any, path: str) -> str:
    """``path`` as Spark qualifies a ``checkpointLocation`` on the driver (Hadoop's default
    filesystem and working directory: the driver JVM's for a local one), so that a task on an
    executor, whose working directory is another, finds the same files, and so that an
    absolute path without a scheme is on the cluster's default filesystem (``hdfs://``,
    ``dbfs:/``), as Spark and the JVM engine read it, not on each executor's own disk. A URI
    is returned as it is, and so is an absolute path where the default filesystem is the
    local one; so is every path of a Spark Connect client, whose server qualifies what it runs
    (wmobs' extension does the same there)."""
    if not path or re.match(_SCHEME, path) or is_connect(spark):
        return path
    jvm = spark.sparkContext._jvm
    hadoop = jvm.org.apache.hadoop.fs.Path(path)
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    fs = hadoop.getFileSystem(conf)
    if not is_relative(path) and str(fs.getUri().getScheme()) == "file":
        return path
    return str(fs.makeQualified(hadoop).toString())


def is_relative(path: str) -> bool:
    """True for a relative path: not "", not absolute, not a URI (``s3a://``, ``dbfs:/``)."""
    return bool(path) and not os.path.isabs(path) and not re.match(_SCHEME, path)


def working_directory(spark: Any) -> str:
    """Where the driver resolves a relative path (Hadoop's default filesystem's working
    directory: the driver JVM's for a local one), qualified; "" for a Spark Connect client.
    A task resolves a named query's relative session checkpoint root against it, as Spark
    resolves that root on the driver."""
    if is_connect(spark):
        return ""
    jvm = spark.sparkContext._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    fs = jvm.org.apache.hadoop.fs.FileSystem.get(conf)
    return str(fs.makeQualified(fs.getWorkingDirectory()).toString())
