"""The specs the JVM engine's functions take: one dataclass per function, as its Java side
parses it (each member by name, an unknown or missing one an error naming it).

A spec is the first argument of a call of wmobs' extension (a JSON string literal), so that
one function per kind, registered once per session, serves every policy and a Spark Connect
client calls it by name. Each dataclass here is the contract with one Java parser:

=============================  =================================  ===========================
function                       dataclass                          parsed by
=============================  =================================  ===========================
``wmobs_judge``                :class:`JudgeSpec`                 ``PolicyRules.of``
``wmobs_policy_observation``   :class:`ObservationSpec`           ``Observation``
``wmobs_substreams``           :class:`SubstreamsSpec`            ``Substreams.Settings``
``wmobs_dead_letters``         :class:`DeadLettersSpec`           ``DeadLetterWriter``
=============================  =================================  ===========================

Every member is written, ``None`` as JSON null, and checked against its annotation when
written (:func:`to_json`): a value of another type is an error naming it, as on the Java side
(``Spec.Reader``). ``tests/reference/jvm_specs.json`` lists each function's members as these
dataclasses say (:func:`members`) and example specs written by them; a Python test keeps it
so, and a JUnit test parses every example with its Java parser (and refuses each member of
another type).
"""

from __future__ import annotations

import json
import types
import typing
from dataclasses import asdict, dataclass, fields, is_dataclass
from typing import Any

__all__ = [
    "SPECS",
    "DeadLettersSpec",
    "HistogramSpec",
    "JudgeSpec",
    "KeptSpec",
    "ObservationSpec",
    "QueueingSpec",
    "SubstreamsSpec",
    "members",
    "to_json",
]


@dataclass(frozen=True)
class JudgeSpec:
    """``wmobs_judge``: the rules (tolerances in µs, ``None``: no such rule; actions) and the
    field of a row's judgement one call returns."""

    early_arrival_us: int | None
    early_arrival_drop: bool
    late_arrival_us: int | None
    late_arrival_drop: bool
    out_of_order_us: int | None
    out_of_order_drop: bool
    bits: list[list[str | int]]
    """``[[rule, action, bit], ...]``: the verdict bits."""
    field: str = ""
    """``system``, ``verdict``, ``delay``, ``queue``, ``lateness`` or ``arrival``."""


@dataclass(frozen=True)
class HistogramSpec:
    """The two joint distributions: the column of their buckets, of their sums, their bounds."""

    buckets: str
    sums: list[str]
    bounds: list[list[int]]


@dataclass(frozen=True)
class QueueingSpec:
    """The queueing delay's distribution: its columns and bounds."""

    buckets: str
    sum: str
    bounds: list[int]


@dataclass(frozen=True)
class KeptSpec:
    """Where each task's counts are kept until Spark commits the micro-batch (``KeptCounts``)."""

    checkpoint: str
    directory: str


@dataclass(frozen=True)
class ObservationSpec:
    """``wmobs_policy_observation``: what one aggregate counts, the columns of its JSON."""

    counts: list[list[str | int]]
    """``[[column, bit], ...]``: a count per verdict bit."""
    dropped_bits: int
    dead_letters: str | None
    firings: str | None
    watermark: str
    event_time: str
    tolerance_us: int
    histogram: HistogramSpec | None
    queueing: QueueingSpec | None
    spread: str | None
    kept: KeptSpec | None
    """Where each task's counts are kept until Spark commits (``None``: not kept, outside a
    streaming query)."""


@dataclass(frozen=True)
class SubstreamsSpec:
    """``wmobs_substreams``: the per-key judgement (``Substreams.java``)."""

    tolerance_us: int
    drop: bool
    ttl_ms: int | None
    idle_timeout_ms: int | None
    check_interval_ms: int | None
    candidate_bits: int
    ooo_bit: int
    key: str
    ts: str
    arrival: str
    verdict: str
    place: str
    """A row's place before the shuffle by key (``wmobs_row_place``), after its arrival the
    order of a key's rows."""
    idle: str | None
    appended: list[str]
    checkpoint: str
    files: str


@dataclass(frozen=True)
class DeadLettersSpec:
    """``wmobs_dead_letters``: where the dropped rows go, the rules' bits, the policy."""

    directory: str
    rules: list[list[str | int]]
    policy: str


SPECS: dict[str, type] = {
    "wmobs_judge": JudgeSpec,
    "wmobs_policy_observation": ObservationSpec,
    "wmobs_substreams": SubstreamsSpec,
    "wmobs_dead_letters": DeadLettersSpec,
}
"""Each JVM function that takes a JSON spec, and its dataclass."""

CALLED_BY_NAME: dict[str, list[str]] = {
    "wmobs_substreams": ["columns"],
    "wmobs_dead_letters": ["columns"],
}
"""Members a spec has beyond its dataclass's where a Spark Connect client calls the function
by name (the names of the columns it passes)."""


def members(spec: type) -> list[str]:
    """The members of a spec dataclass, as its JSON has them."""
    return sorted(f.name for f in fields(spec))


def to_dict(spec: Any) -> dict[str, Any]:
    """``spec`` as the JSON object its function reads (nested specs as objects), each member
    checked against its annotation (a ``TypeError`` naming it)."""
    _check(spec)
    return asdict(spec)


def _check(spec: Any) -> None:
    hints = typing.get_type_hints(type(spec))
    for f in fields(spec):
        value = getattr(spec, f.name)
        if not _conforms(value, hints[f.name]):
            raise TypeError(
                f"wmobs: {type(spec).__name__}.{f.name} is {value!r}, not {hints[f.name]}"
            )


def _conforms(value: Any, hint: Any) -> bool:
    """True if ``value`` is of ``hint`` (the annotations the specs use; ``bool`` is no int)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, h) for h in typing.get_args(hint))
    if origin is list:
        (item,) = typing.get_args(hint)
        return isinstance(value, list) and all(_conforms(v, item) for v in value)
    if isinstance(hint, type) and is_dataclass(hint) and isinstance(value, hint):
        _check(value)  # a nested spec: its members checked too
        return True
    return isinstance(value, hint) and not (hint is int and isinstance(value, bool))


def to_json(spec: Any) -> str:
    """``spec`` as the JSON text of its function's first argument."""
    return json.dumps(to_dict(spec), sort_keys=True)
