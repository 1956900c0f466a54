"""What kind of session a user passed: the one fact both halves ask of a session."""

from __future__ import annotations

from typing import Any

__all__ = ["is_connect"]


def is_connect(spark: Any) -> bool:
    """True for a Spark Connect session: no JVM in this process."""
    return type(spark).__module__.startswith("pyspark.sql.connect")
