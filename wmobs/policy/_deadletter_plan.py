"""How a time policy keeps the rows it drops, decided once when it is applied (beside its
engine): the plans of :mod:`wmobs.policy.deadletter`, and which one a destination, an engine and
the input's column types get."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wmobs.policy._deadletter import DeadLetter

__all__ = ["NOT_KEPT", "DeadLetterPlan", "choose_plan", "text_kind"]


@dataclass(frozen=True)
class DeadLetterPlan:
    """How a policy keeps the rows it drops, decided once when it is applied (beside its
    engine, logged with it, and exported as the ``dead_letters`` label of
    ``wmobs_policy_info``): ``name`` is one of
    :data:`~wmobs.observations.DEAD_LETTER_PLANS`, ``reason`` says why."""

    name: str
    reason: str


NOT_KEPT = DeadLetterPlan("none", "no dead_letter: dropped rows are counted, not kept")


def choose_plan(sink: DeadLetter | None, *, jvm: bool, schema: Any) -> DeadLetterPlan:
    """The plan for ``sink`` on the JVM engine (``jvm``) or the Python engine, over input
    columns ``schema`` (a ``StructType``): the cheapest that keeps every column exactly."""
    from pyspark.sql import functions as F

    if sink is None:
        return NOT_KEPT
    if jvm and sink.written_by_hadoop:
        return DeadLetterPlan(
            "jvm",
            "a Parquet directory on the JVM engine: Spark's Parquet writer writes it in the "
            "tasks, through Hadoop with the session's configuration; no row crosses into Python",
        )
    if sink.function is not None:
        why = "a function destination"
    elif sink.format != "parquet":
        why = f"format={sink.format!r}, written by Python"
    elif jvm:
        why = "a directory with a Storage of its own (fsspec's credentials, not Hadoop's)"
    else:
        why = "the Python engine"
    if not hasattr(F, "arrow_udf"):
        return DeadLetterPlan(
            "python_all",
            f"{why}; PySpark before 4.1 has no Arrow-iterator UDF: every row crosses into Python",
        )
    untextual = [f.name for f in schema.fields if text_kind(f.dataType) is None]
    if untextual:
        return DeadLetterPlan(
            "python_all",
            f"{why}; column(s) {', '.join(untextual)} have no exact text form: every row "
            "crosses into Python",
        )
    return DeadLetterPlan(
        "python_dropped", f"{why}: dropped rows cross into Python, kept rows stay in the JVM"
    )


def text_kind(data_type: Any) -> str | None:
    """How ``_deadletter_handover._decode`` reads back a column of ``data_type`` from its exact
    text form (see :func:`wmobs.policy.deadletter.dead_letter_filter`), or None where it has
    none."""
    from pyspark.sql import types as T

    if isinstance(data_type, T.BinaryType):
        return "base64"
    if isinstance(data_type, T.DateType):
        return "days"
    if isinstance(data_type, T.TimestampType):
        return "micros"
    if isinstance(data_type, (T.NumericType, T.BooleanType, T.StringType)):
        return "cast"
    return None
