"""Attach wmobs to a streaming job you already have: two lines.

Run: .venv/bin/python examples/attach_existing_query.py [SECONDS]
Then: curl -s 127.0.0.1:9464/metrics | grep wmobs_
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import wmobs


def main(seconds: float = 20.0) -> None:
    spark = (
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    )
    monitor = wmobs.attach(spark, prometheus_port=9464)  # 1. attach (any time)

    readings = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 100)
        .load()
        .withColumn("event_time", F.col("timestamp") - F.expr("INTERVAL 3 SECONDS"))
    )
    query = (
        readings.withWatermark("event_time", "5 seconds")
        .groupBy(F.window("event_time", "10 seconds"))
        .count()
        .writeStream.queryName("rate_windows")
        .outputMode("append")
        .format("noop")
        .start()
    )
    query.awaitTermination(seconds)
    snap = monitor.snapshot("rate_windows")
    print(snap)
    query.stop()
    monitor.close()  # 2. detach
    spark.stop()


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 20.0)
