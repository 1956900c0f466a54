"""What the tracker knows of each query, as plain data (pure Python, no Spark, no JVM): the
per-query and per-policy snapshots the metric callbacks read, the summary of one progress
event, and Spark's progress timestamps as unix seconds."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import overload

from wmobs.listener._observed import HistogramCounts, PolicyCounts
from wmobs.observations import ACTIONS, RULES

__all__ = [
    "BATCH_DURATION_BUCKETS",
    "OUTCOMES",
    "BatchSummary",
    "OperatorSnapshot",
    "PolicySnapshot",
    "QuerySnapshot",
    "format_timestamp",
    "parse_timestamp",
]

OUTCOMES: tuple[str, ...] = ("stopped", "failed")
BATCH_DURATION_BUCKETS: tuple[float, ...] = (
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)  # fmt: skip
"""Upper bounds (seconds) of ``wmobs_batch_duration_seconds``: micro-batches, not requests."""


def parse_timestamp(value: str | None) -> float | None:
    """Spark's ISO-8601 progress timestamp (``2026-01-01T00:00:00.000Z``) as unix seconds.

    ``None``, an empty string and the epoch (Spark's "no watermark yet") give ``None``.
    """
    if not value:
        return None
    if value.endswith("Z"):
        value = value[:-1] + "+00:00"
    seconds = datetime.fromisoformat(value).timestamp()
    return seconds if seconds != 0.0 else None


@overload
def format_timestamp(seconds: float) -> str: ...
@overload
def format_timestamp(seconds: None) -> None: ...
def format_timestamp(seconds: float | None) -> str | None:
    """Unix seconds as ISO-8601 UTC with milliseconds (for logs and the demo); ``None`` stays."""
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, tz=timezone.utc).isoformat(timespec="milliseconds")


@dataclass
class OperatorSnapshot:
    """A stateful operator of a query, labelled by its name (``name#i`` when repeated)."""

    rows_dropped_by_watermark: int = 0
    state_rows: int | None = None
    state_memory_bytes: int | None = None


def _zero_events() -> dict[tuple[str, str], int]:
    # Known label sets start at 0, so rate() and alerts see them.
    return {(r, a): 0 for r in RULES for a in ACTIONS}


@dataclass
class PolicySnapshot:
    """One time policy of a query (one input; the ``policy`` label), from its observations."""

    events: dict[tuple[str, str], int] = field(default_factory=_zero_events)
    """Rows per verdict so far: (rule, action) -> count, every known pair from 0."""
    dead_letter_rows: int | None = None
    idle_timeout_firings: int | None = None
    engine: str | None = None
    """The engine it runs on (``jvm`` or ``python``), once an observation says."""
    dead_letter_plan: str | None = None
    """How it keeps the rows it drops, once an observation says."""
    watermark: float | None = None
    """Largest watermark of this input seen, unix seconds."""
    max_event_time: float | None = None
    """Largest event time of this input seen, unix seconds."""
    substream_spread: float | None = None
    """Substreams: in the latest micro-batch that judged rows, how far the slowest key seen
    ran behind the fastest, seconds (what ``substream_skew`` must cover)."""
    histograms: dict[str, HistogramCounts] = field(default_factory=dict)
    """Per histogram name of :data:`wmobs.observations.HISTOGRAMS`: counts so far."""


@dataclass
class QuerySnapshot:
    """What wmobs knows about one query (all runs of it: the id survives restarts)."""

    label: str
    query_id: str
    name: str | None = None
    run_id: str | None = None
    active: bool = True
    batch_id: int | None = None
    watermark: float | None = None
    """Largest watermark seen, unix seconds; ``None`` until the query has one."""
    max_event_time: float | None = None
    """Largest event time seen (``progress.eventTime.max``), unix seconds."""
    last_data_batch_end: float | None = None
    """Wall-clock end of the last micro-batch that read input rows, unix seconds."""
    input_rows: int = 0
    batches: int = 0
    run_batches: int = 0
    """Micro-batches of the current run seen so far."""
    operators: dict[str, OperatorSnapshot] = field(default_factory=dict)
    policies: dict[str, PolicySnapshot] = field(default_factory=dict)
    """Per time policy (``policy`` label), once its first observation arrives."""
    backlogs: dict[str, int] = field(default_factory=dict)
    """Per source (its description): records behind the latest, as of the last micro-batch
    whose progress said (Kafka's ``maxOffsetsBehindLatest``)."""
    terminations: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    last_exception: str | None = None
    batch_durations: list[int] = field(
        default_factory=lambda: [0] * (len(BATCH_DURATION_BUCKETS) + 1)
    )
    """Micro-batches per bucket of :data:`BATCH_DURATION_BUCKETS` (not cumulative; the last
    one above the largest bound)."""
    batch_duration_sum: float = 0.0
    started: int = 0
    """When the query last started, in the tracker's order of events (the latest of several
    queries under one name is the one whose gauges are exported)."""
    terminated_at: float | None = None
    """When the query terminated (the tracker's clock), while it is not running."""

    def policy(self, name: str | None = None) -> PolicySnapshot | None:
        """The policy ``name``; without it, the query's only policy (None if it has none, or
        several)."""
        if name is not None:
            return self.policies.get(name)
        return next(iter(self.policies.values())) if len(self.policies) == 1 else None


@dataclass(frozen=True)
class BatchSummary:
    """What one progress event changed: the listener logs it and records the histogram."""

    label: str
    batch_id: int
    input_rows: int
    duration_s: float | None
    watermark: float | None
    rows_dropped_by_watermark: int
    unknown_columns: tuple[str, ...] = ()
    replayed: bool = False
    """The micro-batch ran before (a restart re-running it): its counts were not added
    again."""
    output_rows: int | None = None
    """Rows the sink wrote (the progress event's ``sink.numOutputRows``); ``None`` where the
    sink does not say."""
    unreported: tuple[str, ...] = ()
    """Policies (labels) on the Python engine whose counts of this micro-batch are not in the
    event: the first micro-batch of a query run, whose sources moved but whose plan read no
    row, is one that the sink skipped when Spark ran it again after a crash between the
    sink's commit and Spark's (the JVM engine reports the first attempt's counts then)."""
    policies: Mapping[str, PolicyCounts] = field(default_factory=dict)
    """What each policy (label) observed in this micro-batch (its verdicts, dead letters,
    idle-timeout firings), as the progress event carried it."""
    heap_state: tuple[int, int] | None = None
    """``(keys, bytes)`` of a per-key operator (substreams) holding a million keys or more on
    the executors' heap, in Spark's default state store; else ``None``."""
