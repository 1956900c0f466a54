"""The events: JSON files of (id, EventTime, ArrivalTime, deviceId), one micro-batch each."""

from pyspark import pipelines as dp
from pyspark.sql import SparkSession

spark = SparkSession.active()
SCHEMA = "id INT, EventTime TIMESTAMP, ArrivalTime TIMESTAMP, deviceId STRING"


@dp.temporary_view
def events():  # type: ignore[no-untyped-def]
    source = spark.conf.get("wmobs.example.events")
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(source)
