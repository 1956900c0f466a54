"""Where a Spark task runs, from its local properties: the micro-batch it belongs to and its
query's id (Python tasks of a micro-batch see both, and for a named query its name, as local
properties of the task). Read by every stage of wmobs that runs Python in the tasks: the Python
engine's, and dead letters written by Python on either engine. Importing this module does not
import PySpark."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["RUN_ID", "task_batch_id", "task_properties", "task_query_id", "task_run_id"]

RUN_ID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
"""A query run's id as Spark writes it (a UUID), as a regular expression."""


def task_properties() -> dict[str, Any]:
    """The local properties of the running Spark task (empty outside a task)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return dict(getattr(context, "_localProperties", None) or {})


def task_batch_id() -> int | None:
    """The micro-batch the running task belongs to; ``None`` outside a streaming batch."""
    batch = task_properties().get("streaming.sql.batchId")
    return None if batch is None else int(batch)


def task_query_id() -> str | None:
    """The id of the query the running task belongs to (kept in its checkpoint, the same
    across restarts from it); ``None`` outside a streaming query."""
    found = task_properties().get("sql.streaming.queryId")
    return None if found is None else str(found)


def task_run_id() -> str | None:
    """The id of the query run the running task belongs to: Spark's job group of a micro-batch
    (``None`` outside one, or where the user's code set a job group of its own)."""
    found = task_properties().get("spark.jobGroup.id")
    return str(found) if found is not None and re.fullmatch(RUN_ID, str(found)) else None
