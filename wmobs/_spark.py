"""What kind of session a user passed: the one fact both halves ask of a session."""

from __future__ import annotations

import subprocess
from typing import Any

__all__ = ["is_connect", "jvm_exited", "jvm_process"]


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
