"""A time policy from SQL: wmobs' table-valued function over a streaming view.

Run: .venv/bin/python examples/sql_policy.py [SECONDS]
Then: curl -s 127.0.0.1:9464/metrics | grep wmobs_policy_events_total

Sensors' readings arrive a little late, and one sensor in ten sends a reading stamped a minute
ahead of its arrival: the early-arrival rule drops those (counted, and kept in the dead-letter
directory), the others are counted per minute.
"""

from __future__ import annotations

import sys
import tempfile
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import wmobs

QUERY = """
SELECT window(system_timestamp, '10 seconds') AS window, deviceId, count(*) AS readings
FROM wmobs_time_policy(
  TABLE(readings),
  event_time => 'EventTime',
  arrival_time => 'timestamp',
  early_arrival => '30 seconds',
  late_arrival => '5 seconds',
  out_of_order => '5 seconds',
  substream_by => 'deviceId',
  name => 'sensors',
  dead_letter => '{work}/dead',
  checkpoint_location => '{work}/checkpoint'
)
GROUP BY 1, 2
"""


def main(seconds: float = 30.0) -> None:
    spark = wmobs.configure_spark(
        SparkSession.builder.master("local[2]")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
    ).getOrCreate()
    monitor = wmobs.attach(spark, prometheus_port=9464)
    work = tempfile.mkdtemp(prefix="wmobs-sql-")
    (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 20)
        .load()
        .withColumn("deviceId", F.concat(F.lit("sensor-"), (F.col("value") % 10).cast("string")))
        .withColumn(
            "EventTime",
            F.when(
                F.col("value") % 10 == 0, F.col("timestamp") + F.expr("INTERVAL 1 MINUTE")
            ).otherwise(F.col("timestamp") - F.expr("INTERVAL 2 SECONDS")),
        )
        .createOrReplaceTempView("readings")
    )
    judged = spark.sql(QUERY.format(work=work))
    query = (
        judged.writeStream.queryName("sensors")
        .format("console")
        .option("truncate", "false")
        .option("checkpointLocation", f"{work}/checkpoint")
        .trigger(processingTime="2 seconds")
        .start()
    )
    query.awaitTermination(seconds)
    while query.status["isTriggerActive"]:  # stop between micro-batches
        time.sleep(0.05)
    query.stop()
    # The listener hears a query's events shortly after Spark posts them, the last micro-batch's
    # and then the query's end: read its counts once it has heard the end.
    deadline = time.monotonic() + 60
    while (snap := monitor.snapshot("sensors")) is None or snap.active:
        if time.monotonic() > deadline:
            sys.exit("the listener never heard the query end")
        time.sleep(0.05)
    policy = snap.policy("sensors")
    assert policy is not None
    print(policy)
    dropped = policy.events[("early_arrival", "dropped")]
    # The dead letters of the micro-batches Spark committed (one stopped as it began may have
    # written some: a restart would run it again).
    last = query.lastProgress["batchId"]
    dead = spark.read.parquet(f"{work}/dead") if dropped else None
    kept = 0 if dead is None else dead.where(F.col("wmobs_batch_id") <= last).count()
    print(f"early arrivals dropped: {dropped}; dead letters: {kept} rows in {work}/dead")
    monitor.close()
    spark.stop()


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 30.0)
