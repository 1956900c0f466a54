"""The events judged by a time policy from Python: one watermark for all, and one per device."""

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


@dp.table
def judged_per_device():  # type: ignore[no-untyped-def]
    policy = wmobs.TimePolicy(
        late_arrival="5 minutes",
        out_of_order="2 minutes",
        substream_by=["deviceId"],
        name="judged_per_device",
    )
    return policy.apply(spark.readStream.table("events"))
