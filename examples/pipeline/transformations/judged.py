"""The events judged by a time policy from Python, in each kind of query function: a table
(one watermark for all), an append flow into a streaming table (one per device), and a
temporary view that a table reads."""

from pyspark import pipelines as dp
from pyspark.sql import SparkSession

import wmobs

spark = SparkSession.active()


@dp.table
def judged():  # type: ignore[no-untyped-def]
    policy = wmobs.TimePolicy(
        early_arrival="5 minutes", late_arrival="5 minutes", out_of_order="2 minutes", name="judged"
    )
    return policy.apply(spark.readStream.table("events"))


dp.create_streaming_table("judged_per_device")


@dp.append_flow(target="judged_per_device")
def judged_per_device():  # type: ignore[no-untyped-def]
    policy = wmobs.TimePolicy(
        late_arrival="5 minutes",
        out_of_order="2 minutes",
        substream_by=["deviceId"],
    )  # unnamed: in a pipeline, a policy takes its flow's name (here judged_per_device)
    return policy.apply(spark.readStream.table("events"))


@dp.temporary_view
def events_judged():  # type: ignore[no-untyped-def]
    policy = wmobs.TimePolicy(
        early_arrival="5 minutes", late_arrival="5 minutes", out_of_order="2 minutes", name="viewed"
    )
    return policy.apply(spark.readStream.table("events"))


@dp.table
def judged_from_view():  # type: ignore[no-untyped-def]
    return spark.readStream.table("events_judged")
