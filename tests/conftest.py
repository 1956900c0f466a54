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

    session = local_spark("wmobs-tests")
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
