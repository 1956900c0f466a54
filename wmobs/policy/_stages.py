"""The one interface between a policy's plan and the engine that runs it: :class:`Engine`, the
stages the plan asks of an engine, by name.

Each engine has a room of its own that implements it: :mod:`wmobs.policy._jvm` (wmobs' Spark
extension) and :mod:`wmobs.policy._python` (Python data sources, ``mapInArrow`` and Spark's own
aggregates). The switch, :mod:`wmobs.policy._engine`, gives ``TimePolicy.apply`` one of them;
from there on the plan (:mod:`wmobs.policy._plan` and the modules of its stages) calls
``ctx.engine.<stage>(...)`` and never asks which engine it has. A room imports the
engine-neutral modules of ``wmobs.policy``, and none of those imports a room: only the switch
does (and the public faces, ``wmobs.policy`` and ``wmobs.policy.deadletter``, for the names
they export). ``tests/unit/test_layout.py`` checks it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

    from wmobs.policy._context import Context
    from wmobs.policy._deadletter import DeadLetter
    from wmobs.policy._storage import Storage

__all__ = ["Engine"]


@dataclass(frozen=True)
class Engine(ABC):
    """The engine a policy runs on, and why; and the stages its plan asks of it."""

    name: ClassVar[str]
    """``jvm`` or ``python``: the ``engine`` that ``wmobs.engine`` logs and
    ``wmobs_policy_info`` exports."""
    writes_parquet: ClassVar[bool]
    """Whether the engine writes a Parquet directory of dead letters itself (the plan ``jvm``
    of :func:`~wmobs.policy._deadletter_plan.choose_plan`), through Hadoop with the session's
    configuration."""
    reason: str
    """Why this engine: logged once with the choice."""

    # ---- when the policy is applied ---------------------------------------------------------

    @abstractmethod
    def check_apply(self, *, idle_global: bool, checkpoint_location: str | None) -> None:
        """Raises ``ValueError`` where the engine cannot run the policy with ``apply``'s
        arguments (``idle_global``: an idle timeout without substreams)."""

    @abstractmethod
    def reach_checkpoint(
        self, spark: Any, storage: Storage, *, checkpoint: str | None, root: str | None
    ) -> str:
        """Checks on the driver that the engine's tasks can read the query's checkpoint
        (``checkpoint``, qualified, else under ``root``, the session's root for named queries);
        what a task resolves a relative root against (:attr:`Context.relative_to`)."""

    # ---- the plan's stages ------------------------------------------------------------------

    @abstractmethod
    def judge_global(self, ctx: Context, df: DataFrame) -> DataFrame:
        """The arrival policies, then out of order against the micro-batch's watermark (Spark's
        own semantics: the largest system timestamp of earlier batches minus the tolerance).
        Adds the internal columns :mod:`wmobs.policy._observe` reads."""

    @abstractmethod
    def judge_substreams(self, ctx: Context, keyed: DataFrame, appended: list[str]) -> DataFrame:
        """The arrival policies, then out of order per key (``keyed``'s ``KEY``), in arrival
        order, with the keys' state kept across micro-batches. The output: ``keyed``'s columns
        without the key and the arrival time, the verdict's, then the columns ``appended``
        names (a row's lateness, and its key's largest system timestamp twice, for the batch's
        slowest and fastest key)."""

    @abstractmethod
    def heartbeat_source(self, ctx: Context, spark: Any) -> tuple[str, Mapping[str, str]]:
        """The format of the idle-timeout heartbeat's streaming source (registered in
        ``spark`` where it must be), and the options it takes beyond those every heartbeat
        takes (:mod:`wmobs.policy._heartbeat`)."""

    @abstractmethod
    def observation(
        self, ctx: Context, staged: DataFrame, dead_letters: bool
    ) -> tuple[DataFrame, list[Column]]:
        """The columns of ``observe`` that count the policy's verdicts, dead letters
        (``dead_letters``), idle-timeout firings, its input's watermark and largest event time
        and its distributions, and ``staged`` with the columns they read."""

    @abstractmethod
    def keep_counts(self, ctx: Context, observed: DataFrame, dead_letters: bool) -> DataFrame:
        """``observed`` (after ``observe``, every row of it), with what keeps each task's counts
        of a micro-batch beside the checkpoint until Spark has committed it, where the engine
        does not keep them in its ``observe`` aggregate."""

    @abstractmethod
    def dead_letters(
        self, ctx: Context, observed: DataFrame, sink: DeadLetter, schema: StructType
    ) -> DataFrame:
        """The kept rows of ``observed``; the dropped ones, with the input columns of
        ``schema``, handed to ``sink`` in the same tasks by the plan ``apply`` chose
        (``ctx.dead_letters``)."""
