"""Shared fixtures: one real ``local[2]`` SparkSession per test run, for tests marked spark."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pyspark = pytest.importorskip("pyspark")
    from tests.kafka import spark_kafka_jars
    from tests.object_store import hadoop_aws_jars
    from wmobs.testing import local_spark

    # Parquet files of pyarrow's with dates before 1582 are read as they are (Spark 4's
    # default; Spark 3.5 asks which calendar they were written in).
    rebase = {
        f"spark.sql.parquet.{kind}RebaseModeInRead": "CORRECTED" for kind in ("datetime", "int96")
    }
    conf = dict(rebase)
    # Spark's Kafka source and Hadoop's S3A connector, where ./dev fetched them.
    jars = [*spark_kafka_jars(pyspark.__version__), *hadoop_aws_jars()]
    if jars:
        conf["spark.jars"] = ",".join(str(jar) for jar in jars)
    session = local_spark("wmobs-tests", conf=conf)
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[Any]:
    """A real S3-compatible server on 127.0.0.1 for this test run (moto's standalone server)."""
    pytest.importorskip("moto")
    from tests.object_store import start_s3_server

    server = start_s3_server()
    yield server
    server.process.terminate()
    server.process.wait(timeout=30)


@pytest.fixture(scope="session")
def read_only_bucket() -> Iterator[Any]:
    """A bucket on a second moto server, one that checks credentials and policies, with the
    keys of a user who may read it but not write to it."""
    pytest.importorskip("moto")
    from tests.object_store import start_read_only_bucket

    bucket = start_read_only_bucket()
    yield bucket
    bucket.process.terminate()
    bucket.process.wait(timeout=30)


@pytest.fixture(scope="session")
def azure_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Azure's blob service on 127.0.0.1 for this test run (Azurite, from npm: ``./dev test``
    installs it into ``.tools/``)."""
    pytest.importorskip("adlfs")
    from tests.object_store import AZURITE, start_azurite

    if not AZURITE.exists():
        pytest.skip(f"Azurite is not installed at {AZURITE} (./dev test installs it with npm)")
    server = start_azurite(tmp_path_factory.mktemp("azurite"))
    yield server
    server.process.terminate()
    server.process.wait(timeout=30)


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real one-node Kafka broker on 127.0.0.1 for this test run (``tests/kafka.py``)."""
    from tests.kafka import BROKER, start_kafka

    if not BROKER.is_dir():  # fail, never skip: ./dev test fetches the broker's jars
        pytest.fail(f"the Kafka broker's jars are missing from {BROKER} (./dev test fetches them)")
    broker = start_kafka(tmp_path_factory.mktemp("kafka"))
    yield broker
    broker.stop()
