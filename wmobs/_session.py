"""A small local SparkSession for the demo, the tests, the examples and the benchmarks
(public as :func:`wmobs.testing.local_spark`)."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from pathlib import Path
from typing import Any

__all__ = ["local_spark"]


def local_spark(
    app_name: str = "wmobs",
    master: str = "local[2]",
    conf: dict[str, str] | None = None,
    *,
    extension: bool = True,
) -> Any:
    """A ``local[2]`` session bound to 127.0.0.1, with Python workers on this interpreter,
    no UI, no console progress bars, JVM logs at ERROR and two shuffle partitions; with
    ``extension``, wmobs' Spark extension (:func:`wmobs.configure_spark`), where this
    installation has a JAR for the installed Spark. ``conf`` adds or overrides Spark
    settings."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    log4j = Path(__file__).with_name("_log4j2.properties").as_uri()

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log4j}")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        # Python workers over Unix domain sockets (Spark >= 4.1): each Python task, such as the
        # global policy's per-batch watermark read without wmobs' JAR, costs tens of ms less
        # than over TCP.
        .config("spark.python.unix.domain.socket.enabled", str(hasattr(socket, "AF_UNIX")).lower())
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    if extension:
        from wmobs.policy import JarError, configure_spark

        with contextlib.suppress(JarError):  # no JAR for this Spark: the Python engine
            builder = configure_spark(builder)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
