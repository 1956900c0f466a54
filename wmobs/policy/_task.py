"""Where a Spark task runs, from its local properties: the micro-batch it belongs to and its
query's id (Python tasks of a micro-batch see both, and for a named query its name, as local
properties of the task). Read by every stage of wmobs that runs Python in the tasks: the Python
engine's, and dead letters written by Python on either engine. Importing this module does not
import PySpark."""

from __future__ import annotations

from typing import Any

__all__ = ["NotInMicroBatchError", "task_batch_id", "task_properties", "task_query_id"]


class NotInMicroBatchError(RuntimeError):
    """A policy's task that Spark ran outside its query's micro-batch."""


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
