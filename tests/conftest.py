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
