"""wmobs' OpenTelemetry instruments: every metric, declared in one place.

Names below are as Prometheus scrapes them; the OpenTelemetry instrument name is the same with
dots and without the unit suffix (``wmobs.watermark.delay``, unit ``s``; a unit in braces, which
a translation to Prometheus drops, is not a suffix: ``wmobs.source.backlog.records``, unit
``{record}``). Label ``query`` is
the query's name, or its id when it has none (never the run id, so a restarted query keeps its
series). A query started under an earlier one's name with a new checkpoint (a new id) continues
that name's series: its counters and histograms go on from the earlier one's, its gauges are
its own.

=========================================  =========  ===========================  ==========
Prometheus name                            type       labels                       unit
=========================================  =========  ===========================  ==========
``wmobs_watermark_delay_seconds``          gauge      query                        ``s``
``wmobs_watermark_timestamp_seconds``      gauge      query                        ``s``
``wmobs_event_time_lag_seconds``           gauge      query                        ``s``
``wmobs_source_idle_seconds``              gauge      query                        ``s``
``wmobs_input_rows_total``                 counter    query                        ``{row}``
``wmobs_batch_duration_seconds``           histogram  query                        ``s``
``wmobs_rows_dropped_by_watermark_total``  counter    query, operator              ``{row}``
``wmobs_state_rows``                       gauge      query, operator              ``{row}``
``wmobs_state_memory_bytes``               gauge      query, operator              ``By``
``wmobs_policy_events_total``              counter    query, policy, rule, action  ``{event}``
``wmobs_dead_letter_rows_total``           counter    query, policy                ``{row}``
``wmobs_idle_timeout_firings_total``       counter    query, policy                ``{firing}``
``wmobs_policy_info``                      gauge      query, policy, engine,       ``{policy}``
                                                      dead_letters
``wmobs_query_active``                     gauge      query                        ``{query}``
``wmobs_query_terminations_total``         counter    query, outcome               ``{query}``
``wmobs_source_backlog_records``           gauge      query, source                ``{record}``
``wmobs_substream_spread_seconds``         gauge      query, policy                ``s``
=========================================  =========  ===========================  ==========

Label ``policy`` is a time policy's name (``TimePolicy(name=...)``, or the default name an
unnamed policy gets, the one its state directory uses) on every metric that has it; ``rule``
is the verdict kind (``early_arrival``, ``late_arrival``, ``out_of_order``, ``invalid_time``),
``action`` what it did (``adjusted``, ``dropped``), ``engine`` ``jvm`` or ``python``,
``dead_letters`` how the policy keeps the rows it drops (``none``, ``jvm``, ``python_dropped``,
``python_all``: :data:`wmobs.observations.DEAD_LETTER_PLANS`).

- ``wmobs_watermark_delay_seconds``: wall clock **at collection** minus the largest watermark
  seen, so it keeps growing while a query is stalled or idle.
- ``wmobs_event_time_lag_seconds``: wall clock at collection minus the largest event time seen.
- ``wmobs_source_idle_seconds``: wall clock at collection minus the end of the last micro-batch
  that read input rows.
- The four time gauges and the state gauges are exported only while the query is active, and
  only once their input exists (a watermark of epoch 0 is "no watermark yet").
- ``wmobs_rows_dropped_by_watermark_total`` is Spark's ``numRowsDroppedByWatermark``: it counts
  rows *after partial aggregation* (groups, not input rows). Exact per-row counts come from
  wmobs' time policies, in ``wmobs_policy_events_total``.
- ``wmobs_policy_events_total``, ``wmobs_dead_letter_rows_total`` and
  ``wmobs_idle_timeout_firings_total`` come from operator-side observations
  (:mod:`wmobs.observations`), one series set per policy: a policy has them once its first
  observation arrives, with every known ``rule``/``action`` pair starting at 0. Two policies
  of one query (a join or union of two policed inputs) are counted apart.
- ``wmobs_policy_info`` is 1 for each time policy of a running query, once its first
  observation says which engine runs it and how it keeps dropped rows (absent after the
  query terminates).
- ``wmobs_query_terminations_total{outcome="stopped"|"failed"}`` starts at 0 for both outcomes.
- ``wmobs_input_watermark_delay_seconds`` and ``wmobs_input_event_time_lag_seconds``: the same
  as the query's two time gauges, for one input (one time policy): wall
  clock at collection minus that input's largest watermark / event time (observed with the
  ``input_*`` columns of :mod:`wmobs.observations`). In a join or union of two policed inputs
  the query's watermark is the smaller one; these say which input holds it back.
- ``wmobs_source_backlog_records``: per source of an active query, the records its broker
  holds that the query has not read yet, as the source reports it after each micro-batch
  (Kafka's ``maxOffsetsBehindLatest``, the partition furthest behind); absent for sources that
  report none. ``source`` is the source's description (``KafkaV2[Subscribe[topic]]``).
- ``wmobs_substream_spread_seconds``: per policy with ``substream_by`` of an active query, in
  its latest micro-batch that judged rows, how far the slowest key seen ran behind the fastest
  (the largest minus the smallest of those keys' largest system timestamps). A window
  aggregation after the policy drops a key's rows once this passes ``out_of_order`` plus
  ``substream_skew``: size ``substream_skew`` to its peaks.
- ``wmobs_event_queueing_delay_seconds``: the micro-batch's time minus the arrival time of
  every row that has one (Kafka's ``timestamp``): how long rows waited in the broker before a
  micro-batch read them; the buckets of the arrival delay.
- ``wmobs_event_arrival_delay_seconds`` (arrival time - event time of every valid row; buckets
  from a day early to a day late) and ``wmobs_event_lateness_seconds`` (how far each row was
  behind the largest system timestamp seen before it, globally the batch's, with substreams
  its key's; 0 if not behind): exact distributions per input, counted inside the query
  (buckets :data:`wmobs.observations.HISTOGRAMS`).
  They arrive pre-aggregated, which OpenTelemetry's API cannot record: the Prometheus endpoint
  (and ``monitor.registry``) exports them, and wmobs' own OTLP push adds them to each push as
  OTLP histograms (:mod:`wmobs.listener._otlp`); an injected meter provider does not get them.

Usage::

    from opentelemetry.sdk.metrics import MeterProvider
    from wmobs.listener import Instruments, Tracker

    tracker = Tracker()
    instruments = Instruments(tracker, meter_provider=MeterProvider(metric_readers=[...]))

Most users never touch this module: :func:`wmobs.attach` wires it up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from opentelemetry.metrics import Histogram, Meter, MeterProvider, Observation, get_meter_provider

from wmobs._version import __version__
from wmobs.listener._meters import MeterInstruments, instruments_on
from wmobs.listener._snapshots import BATCH_DURATION_BUCKETS, QuerySnapshot
from wmobs.listener._tracker import Tracker

__all__ = [
    "BATCH_DURATION_BUCKETS",
    "CONTRACT",
    "OBSERVABLES",
    "Instruments",
    "Observable",
    "Tracker",
]

CONTRACT: dict[str, tuple[str, tuple[str, ...]]] = {
    "wmobs_watermark_delay_seconds": ("gauge", ("query",)),
    "wmobs_watermark_timestamp_seconds": ("gauge", ("query",)),
    "wmobs_event_time_lag_seconds": ("gauge", ("query",)),
    "wmobs_source_idle_seconds": ("gauge", ("query",)),
    "wmobs_input_rows_total": ("counter", ("query",)),
    "wmobs_batch_duration_seconds": ("histogram", ("query",)),
    "wmobs_rows_dropped_by_watermark_total": ("counter", ("query", "operator")),
    "wmobs_state_rows": ("gauge", ("query", "operator")),
    "wmobs_state_memory_bytes": ("gauge", ("query", "operator")),
    "wmobs_policy_events_total": ("counter", ("query", "policy", "rule", "action")),
    "wmobs_dead_letter_rows_total": ("counter", ("query", "policy")),
    "wmobs_idle_timeout_firings_total": ("counter", ("query", "policy")),
    "wmobs_policy_info": ("gauge", ("query", "policy", "engine", "dead_letters")),
    "wmobs_query_active": ("gauge", ("query",)),
    "wmobs_query_terminations_total": ("counter", ("query", "outcome")),
    "wmobs_input_watermark_delay_seconds": ("gauge", ("query", "policy")),
    "wmobs_input_event_time_lag_seconds": ("gauge", ("query", "policy")),
    "wmobs_event_arrival_delay_seconds": ("histogram", ("query", "policy")),
    "wmobs_event_lateness_seconds": ("histogram", ("query", "policy")),
    "wmobs_event_queueing_delay_seconds": ("histogram", ("query", "policy")),
    "wmobs_source_backlog_records": ("gauge", ("query", "source")),
    "wmobs_substream_spread_seconds": ("gauge", ("query", "policy")),
}
"""The metric contract (``docs/reference/metrics.md``): Prometheus name -> (type, labels)."""

BATCH_DURATION_HELP = "Trigger execution time per micro-batch."
EVENT_HISTOGRAMS: dict[str, tuple[str, str]] = {
    "arrival_delay": (
        "wmobs_event_arrival_delay_seconds",
        "Arrival time minus event time of every valid row, per input (negative: early).",
    ),
    "lateness": (
        "wmobs_event_lateness_seconds",
        "How far each row is behind the largest system timestamp seen before it, per input.",
    ),
    "queueing_delay": (
        "wmobs_event_queueing_delay_seconds",
        "The micro-batch's time minus the arrival time of every row that has one, per input.",
    ),
}
"""The distributions of :data:`wmobs.observations.HISTOGRAMS`: Prometheus name, help."""


def _q(snap: QuerySnapshot) -> dict[str, str]:
    return {"query": snap.label}


ObserveFn = Callable[[QuerySnapshot, float], Iterable[Observation]]
"""Computes one instrument's observations for one query at collection time ``now``."""


def _active_time_gauge(value_of: str) -> ObserveFn:
    """A gauge callback: ``now - snapshot.<value_of>`` for active queries that have it."""

    def fn(snap: QuerySnapshot, now: float) -> Iterable[Observation]:
        value = getattr(snap, value_of)
        if snap.active and value is not None:
            yield Observation(now - value, _q(snap))

    return fn


def _p(snap: QuerySnapshot, policy: str) -> dict[str, str]:
    return {"query": snap.label, "policy": policy}


def _input_time_gauge(value_of: str) -> ObserveFn:
    """Per policy (input) of an active query: ``now - policy.<value_of>``, once it has one."""

    def fn(snap: QuerySnapshot, now: float) -> Iterable[Observation]:
        if snap.active:
            for label, state in snap.policies.items():
                value = getattr(state, value_of)
                if value is not None:
                    yield Observation(now - value, _p(snap, label))

    return fn


# ---- callbacks: (snapshot, now) -> observations ----------------------------------------


def _substream_spread(snap: QuerySnapshot, now: float) -> Iterable[Observation]:
    if snap.active:
        for label, state in snap.policies.items():
            if state.substream_spread is not None:
                yield Observation(state.substream_spread, _p(snap, label))


def _watermark_timestamp(snap: QuerySnapshot, now: float) -> Iterable[Observation]:
    if snap.active and snap.watermark is not None:
        yield Observation(snap.watermark, _q(snap))


def _input_rows(snap: QuerySnapshot, now: float) -> Iterable[Observation]:
    yield Observation(snap.input_rows, _q(snap))


def _dropped_by_watermark(snap: QuerySnapshot, now: float) -> Iterable[Observation]:
    for op, state in snap.operators.items():
        yield Observation(state.rows_dropped_by_watermark, {"query": snap.label, "operator": op})


def _state_rows(snap: QuerySnapshot, now: float) -> Iterable[Observation]:
    if snap.active:
        for op, state in snap.operators.items():
            if state.state_rows is not None:
                yield Observation(state.state_rows, {"query": snap.label, "operator": op})


def _state_memory(snap: QuerySnapshot, now: float) -> Iterable[Observation]:
    if snap.active:
        for op, state in snap.operators.items():
            if state.state_memory_bytes is not None:
                yield Observation(state.state_memory_bytes, {"query": snap.label, "operator": op})


def _policy_events(snap: QuerySnapshot, now: float) -> Iterable[Observation]:
    for policy, state in snap.policies.items():
        for (rule, action), count in state.events.items():
            yield Observation(count, {**_p(snap, policy), "rule": rule, "action": action})


def _dead_letter_rows(snap: QuerySnapshot, now: float) -> Iterable[Observation]:
    for policy, state in snap.policies.items():
        if state.dead_letter_rows is not None:
            yield Observation(state.dead_letter_rows, _p(snap, policy))


def _idle_timeout_firings(snap: QuerySnapshot, now: float) -> Iterable[Observation]:
    for policy, state in snap.policies.items():
        if state.idle_timeout_firings is not None:
            yield Observation(state.idle_timeout_firings, _p(snap, policy))


def _policy_info(snap: QuerySnapshot, now: float) -> Iterable[Observation]:
    if snap.active:
        for policy, state in snap.policies.items():
            if state.engine is not None:
                labels = {"engine": state.engine, "dead_letters": state.dead_letter_plan or ""}
                yield Observation(1, {**_p(snap, policy), **labels})


def _source_backlog(snap: QuerySnapshot, now: float) -> Iterable[Observation]:
    if snap.active:
        for source, records in snap.backlogs.items():
            yield Observation(records, {"query": snap.label, "source": source})


def _query_active(snap: QuerySnapshot, now: float) -> Iterable[Observation]:
    yield Observation(1 if snap.active else 0, _q(snap))


def _terminations(snap: QuerySnapshot, now: float) -> Iterable[Observation]:
    for outcome, count in snap.terminations.items():
        yield Observation(count, {"query": snap.label, "outcome": outcome})


@dataclass(frozen=True)
class Observable:
    """One observable instrument: computed from the tracker when collected."""

    name: str
    """The OpenTelemetry name (``wmobs.watermark.delay``)."""
    prometheus: str
    """The name Prometheus scrapes (the exporter's rule: dots to ``_``, the unit's suffix,
    ``_total`` for counters)."""
    kind: str
    """``gauge`` or ``counter``."""
    unit: str
    description: str
    fn: ObserveFn


OBSERVABLES: tuple[Observable, ...] = (
    Observable(
        "wmobs.watermark.delay", "wmobs_watermark_delay_seconds", "gauge", "s",
        "Wall clock at collection minus the largest watermark seen.",
        _active_time_gauge("watermark"),
    ),
    Observable(
        "wmobs.watermark.timestamp", "wmobs_watermark_timestamp_seconds", "gauge", "s",
        "Largest watermark seen, unix seconds.",
        _watermark_timestamp,
    ),
    Observable(
        "wmobs.event_time.lag", "wmobs_event_time_lag_seconds", "gauge", "s",
        "Wall clock at collection minus the largest event time seen.",
        _active_time_gauge("max_event_time"),
    ),
    Observable(
        "wmobs.source.idle", "wmobs_source_idle_seconds", "gauge", "s",
        "Wall clock minus the end of the last micro-batch that had input rows.",
        _active_time_gauge("last_data_batch_end"),
    ),
    Observable(
        "wmobs.input.rows", "wmobs_input_rows_total", "counter", "{row}",
        "Rows read by the query.",
        _input_rows,
    ),
    Observable(
        "wmobs.rows.dropped_by_watermark", "wmobs_rows_dropped_by_watermark_total", "counter",
        "{row}",
        "Spark's numRowsDroppedByWatermark per stateful operator (after partial aggregation).",
        _dropped_by_watermark,
    ),
    Observable(
        "wmobs.state.rows", "wmobs_state_rows", "gauge", "{row}", "Rows in state.", _state_rows
    ),
    Observable(
        "wmobs.state.memory", "wmobs_state_memory_bytes", "gauge", "By",
        "Memory used by state.",
        _state_memory,
    ),
    Observable(
        "wmobs.policy.events", "wmobs_policy_events_total", "counter", "{event}",
        "Rows per time-policy verdict (policy, rule, action).",
        _policy_events,
    ),
    Observable(
        "wmobs.dead_letter.rows", "wmobs_dead_letter_rows_total", "counter", "{row}",
        "Rows a time policy wrote to its dead-letter destination.",
        _dead_letter_rows,
    ),
    Observable(
        "wmobs.idle_timeout.firings", "wmobs_idle_timeout_firings_total", "counter", "{firing}",
        "Idle periods in which the idle timeout moved a clock (one firing each).",
        _idle_timeout_firings,
    ),
    Observable(
        "wmobs.policy.info", "wmobs_policy_info", "gauge", "{policy}",
        "1 for each time policy of a running query, labelled with the engine that runs it "
        "and how it keeps the rows it drops.",
        _policy_info,
    ),
    Observable(
        "wmobs.query.active", "wmobs_query_active", "gauge", "{query}",
        "1 while the query runs, 0 after it terminated.",
        _query_active,
    ),
    Observable(
        "wmobs.query.terminations", "wmobs_query_terminations_total", "counter", "{query}",
        "Query terminations by outcome (stopped, failed).",
        _terminations,
    ),
    Observable(
        "wmobs.source.backlog.records", "wmobs_source_backlog_records", "gauge", "{record}",
        "Records a source's broker holds that the query has not read yet (Kafka's "
        "maxOffsetsBehindLatest).",
        _source_backlog,
    ),
    Observable(
        "wmobs.input.watermark.delay", "wmobs_input_watermark_delay_seconds", "gauge", "s",
        "Wall clock at collection minus the largest watermark of one time policy's input.",
        _input_time_gauge("watermark"),
    ),
    Observable(
        "wmobs.input.event_time.lag", "wmobs_input_event_time_lag_seconds", "gauge", "s",
        "Wall clock at collection minus the largest event time of one time policy's input.",
        _input_time_gauge("max_event_time"),
    ),
    Observable(
        "wmobs.substream.spread", "wmobs_substream_spread_seconds", "gauge", "s",
        "A substream policy's latest micro-batch: how far its slowest key seen ran behind "
        "the fastest.",
        _substream_spread,
    ),
)  # fmt: skip
"""Every instrument but the batch-duration histogram, which is recorded, not observed."""


class Instruments:
    """Creates every wmobs instrument on ``meter_provider`` (default: the global one).

    Observable instruments read ``tracker`` when collected, until it is closed; only the
    batch-duration histogram is recorded synchronously, by :meth:`record_batch_duration`. The
    instruments are made once per meter and read every tracker given to it
    (:mod:`wmobs.listener._meters`), so a monitor attached again on one provider exports again.
    """

    def __init__(self, tracker: Tracker, meter_provider: MeterProvider | None = None) -> None:
        self._tracker = tracker
        provider = meter_provider if meter_provider is not None else get_meter_provider()
        self._on_meter = instruments_on(
            provider,
            lambda meter: MeterInstruments(meter, OBSERVABLES, _batch_duration),
            version=__version__,
        )
        self._on_meter.add(tracker)

    def record_batch_duration(self, label: str, seconds: float) -> None:
        self._on_meter.histogram.record(seconds, {"query": label})


def _batch_duration(meter: Meter) -> Histogram:
    return meter.create_histogram(
        "wmobs.batch.duration",
        unit="s",
        description=BATCH_DURATION_HELP,
        explicit_bucket_boundaries_advisory=BATCH_DURATION_BUCKETS,
    )
