"""Dead letters on the JVM engine, the plan ``jvm``: a Parquet directory written in the tasks by
Spark's own Parquet writer, through Hadoop with the session's configuration; no row crosses
into Python (:mod:`wmobs.policy.deadletter` has the plans and how each is chosen)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from wmobs.policy._context import Context
from wmobs.policy._deadletter import DeadLetter
from wmobs.policy._jvm import _extension
from wmobs.policy._jvm._specs import DeadLettersSpec
from wmobs.policy._verdicts import DROP_POLICIES, DROPPED_BITS, VERDICT

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

__all__ = ["dead_letter_writer", "write_dead_letters"]


def write_dead_letters(
    ctx: Context, observed: DataFrame, sink: DeadLetter, schema: StructType
) -> DataFrame:
    """The kept rows of ``observed``; the dropped ones, with the input columns of ``schema``,
    written to ``sink``'s Parquet directory in the same tasks by Spark's Parquet writer in the
    JVM (:func:`dead_letter_writer`)."""
    from pyspark.sql import functions as F

    original = ctx.original
    write = dead_letter_writer(
        sink, schema.names, VERDICT, DROP_POLICIES, policy=ctx.name, rename=original
    )
    is_dropped = F.col(VERDICT).bitwiseAND(F.lit(DROPPED_BITS)) != 0
    keep = F.when(is_dropped, write).otherwise(F.lit(True))
    return _checked_by_hadoop(lambda: observed.filter(keep))


def dead_letter_writer(
    sink: DeadLetter,
    columns: list[str],
    verdict_column: str,
    rule_bits: list[tuple[str, int]],
    *,
    policy: str,
    rename: Mapping[str, str] | None = None,
) -> Any:
    """On the JVM engine, for a Parquet directory (plan ``jvm``): the Column that calls wmobs'
    ``wmobs_dead_letters`` on a dropped row (the ``CASE`` branch of the policy's filter): each
    task writes its dropped rows' ``columns`` (``rename`` applied to their names) to one
    Parquet file with Spark's own Parquet writer and the session's Parquet settings, every
    Spark type that Parquet takes, nested ones included. No row crosses into Python."""
    from pyspark.sql import functions as F

    assert sink.directory is not None
    rename = rename or {}
    spec = DeadLettersSpec(
        directory=sink.directory, rules=[list(p) for p in rule_bits], policy=policy
    )
    row = F.struct(*[F.col(f"`{c}`").alias(rename.get(c, c)) for c in columns])
    return _extension.dead_letters(spec, row, F.col(verdict_column).cast("long"))


def _checked_by_hadoop(plan: Callable[[], DataFrame]) -> DataFrame:
    """``plan()``, where wmobs' JVM checks on the driver that Hadoop reaches the dead letters'
    directory (``DeadLetterWriter.reachable``) and that Spark's Parquet writer takes every
    column: its errors as the Python engine's, a :class:`~wmobs.StorageError` naming
    ``dead_letter``, or a ``TypeError`` naming the columns (a classic session analyses the plan
    here; over Spark Connect it is analysed here too, one request, for the same errors at the
    same place)."""
    from wmobs._spark import is_connect
    from wmobs.policy._storage import StorageError

    try:
        planned = plan()
        if is_connect(planned.sparkSession):
            planned.schema  # noqa: B018 - the server analyses the plan, its checks with it
        return planned
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        marker = "wmobs: "
        if marker not in first:
            raise
        said = first[first.index(marker) + len(marker) :]
        if "dead letters' directory" in said:
            raise StorageError(f"dead_letter: {said}") from exc
        if said.startswith("dead_letter: "):
            raise TypeError(said) from exc
        raise
