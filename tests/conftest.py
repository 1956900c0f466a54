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
    pytest.importorskip("pyspark")
    from wmobs.testing import local_spark

    # Parquet files of pyarrow's with dates before 1582 are read as they are (Spark 4's
    # default; Spark 3.5 asks which calendar they were written in).
    rebase = {
        f"spark.sql.parquet.{kind}RebaseModeInRead": "CORRECTED" for kind in ("datetime", "int96")
    }
    session = local_spark("wmobs-tests", conf=rebase)
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
