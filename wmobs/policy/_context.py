"""What every stage of one policy's plan needs to know, resolved once by ``TimePolicy.apply``:
the policy's settings, its tolerances, where its query keeps its checkpoint, how wmobs reaches
storage beside Spark, the engine it runs on and how it keeps the rows it drops."""

from __future__ import annotations

from dataclasses import dataclass, field

from wmobs.observations import OBSERVATION_PREFIX
from wmobs.policy._deadletter_plan import NOT_KEPT, DeadLetterPlan
from wmobs.policy._durations import Tolerances
from wmobs.policy._stages import Engine
from wmobs.policy._storage import Storage

__all__ = ["Context", "substream_files"]

_PAST_TENSE = {"adjust": "adjusted", "drop": "dropped"}


@dataclass(frozen=True)
class Context:
    """One policy's plan, before it is built."""

    name: str
    """The policy's name: its ``policy`` label, observation and state directory."""
    named: bool
    """True if the user gave the name (an unnamed policy's depends on creation order)."""
    event_time: str
    arrival_time: str | None
    early_arrival_action: str | None
    """None: no early-arrival policy."""
    late_arrival_action: str
    out_of_order_action: str
    substream_by: tuple[str, ...] | None
    distributions: bool
    tolerances: Tolerances
    checkpoint: str | None
    storage: Storage
    engine: Engine
    """The engine the plan asks for its stages (:mod:`wmobs.policy._stages`)."""
    dead_letters: DeadLetterPlan = NOT_KEPT
    """How dropped rows are kept (:func:`wmobs.policy._deadletter_plan.choose_plan`)."""
    renamed: dict[str, str] = field(default_factory=dict)
    """Input columns with a ``.`` in their name -> their name inside the plan."""
    relative_to: str = ""
    """Without ``checkpoint`` (a named query's, below the session's root): the driver's working
    directory, against which a task resolves a relative root as Spark did on the driver."""
    checkpoint_root: str | None = None
    """Without ``checkpoint``: the session's ``spark.sql.streaming.checkpointLocation``, below
    which a named query keeps its checkpoint."""

    @property
    def observation_name(self) -> str:
        return f"{OBSERVATION_PREFIX}.policy.{self.name}"

    @property
    def idle(self) -> bool:
        return self.tolerances.idle_timeout_us is not None

    def column(self, name: str) -> str:
        """The name inside the plan of input column ``name``."""
        return self.renamed.get(name, name)

    @property
    def original(self) -> dict[str, str]:
        """The inverse of ``renamed``: a renamed column's name inside the plan -> its name in
        the input (as dead letters carry it)."""
        return {inside: name for name, inside in self.renamed.items()}

    def can_happen(self, rule: str, action: str) -> bool:
        """True for the verdicts this policy can give (the others are not observed: the
        listener exports them as 0)."""
        configured = {
            "invalid_time": "drop",
            "early_arrival": self.early_arrival_action,
            "late_arrival": self.late_arrival_action,
            "out_of_order": self.out_of_order_action,
        }[rule]
        return configured is not None and _PAST_TENSE[configured] == action


def substream_files(policy: str) -> str:
    """Where the Python engine keeps a policy's per-key state, relative to the query's
    checkpoint (a folder per bucket count: :func:`wmobs.policy._python._substream_state.
    state_directory`); the JVM engine refuses a checkpoint that has it."""
    return f"wmobs/substreams/{policy}"
