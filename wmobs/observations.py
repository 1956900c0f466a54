"""Where the two halves of wmobs meet: the naming convention that links operator-side counts
(:mod:`wmobs.policy`, or code of yours) to the listener (:mod:`wmobs.listener`). This module is
the contract only; the policy half builds the columns (``wmobs.policy._observe``), the listener
reads them (``wmobs.listener._observed``).

Operator-side producers (wmobs' time policies, or any code of yours) count rows with
:meth:`pyspark.sql.DataFrame.observe`. The listener reads every observation of a query's
``progress.observedMetrics`` whose **name** is ``wmobs`` or starts with ``wmobs.``. One
observation is one **policy**: its name after ``wmobs.policy.`` (or after ``wmobs.``) is the
``policy`` label of everything it counts (``wmobs.policy.clicks`` -> ``clicks``; a time
policy's is its ``name``). The listener adds up each observation's **columns** across batches
and exports them:

=================================  ============================================================
column                             exported as
=================================  ============================================================
``rule:<rule>:<action>``           ``wmobs_policy_events_total{policy, rule, action}``
``dead_letter_rows``               ``wmobs_dead_letter_rows_total{policy}``
``idle_timeout_firings``           ``wmobs_idle_timeout_firings_total{policy}``
``engine`` (text: jvm or python)   ``wmobs_policy_info{policy, engine, dead_letters}``
``dead_letter_plan`` (text)        its ``dead_letters`` label (:data:`DEAD_LETTER_PLANS`)
``input_watermark_us``             ``wmobs_input_watermark_delay_seconds{policy}``
``input_event_time_us``            ``wmobs_input_event_time_lag_seconds{policy}``
``substream_spread_us``            ``wmobs_substream_spread_seconds{policy}``
``hist:<h>:buckets``               ``wmobs_event_<h>_seconds_bucket{policy, le}``, ``_count``
``hist:<h1>*<h2>:buckets``         the same, for both histograms from one column
``hist:<h>:sum_us``                ``wmobs_event_<h>_seconds_sum{policy}``
``columns`` (JSON text or struct)  each of its members, as if it were a column
=================================  ============================================================

``<rule>`` is one of :data:`RULES` and ``<action>`` one of :data:`ACTIONS`; other columns of a
``wmobs`` observation are ignored (and logged once), so the label values stay bounded. (Columns
named ``policy:<rule>:<action>``, as wmobs before 0.2 wrote them, are read as ``rule:``.)
Every value is the count **for that micro-batch** (``observe`` resets per batch); ``null``
counts as 0.

Histograms ``<h>`` (:data:`HISTOGRAMS`) are ``arrival_delay`` (arrival time - event time of
every valid row; negative: early), ``lateness`` (how far each row is behind the largest system
timestamp seen before it; 0 when not behind) and ``queueing_delay`` (the micro-batch's time -
arrival time of every row with an arrival time: how long it waited in the broker before a
micro-batch read it). ``buckets`` is the batch's count per
bucket, as ``histogram_numeric`` of the bucket index gives it (``[{x: index, y: count}, ...]``,
an index may repeat: its counts add up; ``x`` may be a rounding error off the index: read it
rounded; index ``i`` counts the values above bound ``i - 1`` and at most bound ``i`` of
:data:`HISTOGRAMS` ``[h]``, in seconds; the last one, above every bound); ``sum_us`` their sum
in microseconds. ``hist:<h1>*<h2>:buckets`` counts two histograms' buckets in one column:
index ``i1 * (n2 + 1) + i2``, where ``n2`` is the bucket count of ``<h2>`` and ``i1 = n1``,
``i2 = n2`` stand for a row that has no value in that histogram.

The two ``input_*`` columns describe the policy's input: its watermark (the one it puts on its
output: largest system timestamp - ``out_of_order`` - ``substream_skew``) and its largest event
time in the micro-batch, unix **microseconds** (``observe`` cuts timestamps to seconds: observe
``unix_micros(...)``). The listener keeps the largest of each per policy, so a query that joins
two policed inputs shows which one holds its watermark back. ``substream_spread_us``
(substreams only): how far the slowest key seen in the micro-batch runs behind the fastest,
the largest minus the smallest of those keys' largest system timestamps (µs; the listener
keeps the latest). Example::

    from pyspark.sql import functions as F
    from wmobs.observations import rule_column

    df = df.observe(
        "wmobs.policy.sensors",
        F.count_if(F.col("late")).alias(rule_column("late_arrival", "dropped")),
    )
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "ACTIONS",
    "DEAD_LETTER_COLUMN",
    "DEAD_LETTER_PLANS",
    "DEAD_LETTER_PLAN_COLUMN",
    "ENGINES",
    "ENGINE_COLUMN",
    "HISTOGRAMS",
    "IDLE_TICK",
    "IDLE_TIMEOUT_COLUMN",
    "INPUT_EVENT_TIME_COLUMN",
    "INPUT_WATERMARK_COLUMN",
    "OBSERVATION_PREFIX",
    "POLICIES",
    "RULES",
    "STRUCT_COLUMN",
    "SUBSTREAM_SPREAD_COLUMN",
    "bounds_us",
    "histogram_buckets_column",
    "histogram_sum_column",
    "input_label",
    "is_wmobs_observation",
    "joint_histogram_column",
    "policy_column",
    "policy_label",
    "rule_column",
]

OBSERVATION_PREFIX = "wmobs"
RULES: tuple[str, ...] = ("early_arrival", "late_arrival", "out_of_order", "invalid_time")
"""The verdict kinds of a time policy: the ``rule`` label."""
POLICIES = RULES
"""The name :data:`RULES` had before the ``rule`` label (kept for code that imports it)."""
ACTIONS: tuple[str, ...] = ("adjusted", "dropped")
ENGINES: tuple[str, ...] = ("jvm", "python")
"""The engines a time policy runs on: the ``engine`` label of ``wmobs_policy_info``."""
DEAD_LETTER_COLUMN = "dead_letter_rows"
IDLE_TIMEOUT_COLUMN = "idle_timeout_firings"
ENGINE_COLUMN = "engine"
DEAD_LETTER_PLANS: tuple[str, ...] = ("none", "jvm", "python_dropped", "python_all")
"""How a time policy keeps the rows it drops, decided once when it is applied: the
``dead_letters`` label of ``wmobs_policy_info``. ``none``: counted, not kept (no
``dead_letter``); ``jvm``: a Parquet directory written by Spark's Parquet writer in the JVM (no
row crosses into Python); ``python_dropped``: each dropped row crosses into Python, kept rows
stay in the JVM; ``python_all``: every row crosses into Python (``mapInArrow``)."""
DEAD_LETTER_PLAN_COLUMN = "dead_letter_plan"
STRUCT_COLUMN = "columns"
"""A JSON object (text) or a struct whose members are columns of the observation (how wmobs'
JVM engine observes them all at once): read as if they were its own."""
_POSITIVE = (
    0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
    21600.0, 86400.0,
)  # fmt: skip
_DELAY = (-86400.0, -3600.0, -600.0, -60.0, -10.0, -1.0, 0.0, *_POSITIVE)
HISTOGRAMS: dict[str, tuple[float, ...]] = {
    "arrival_delay": _DELAY,
    "lateness": (0.0, *_POSITIVE),
    "queueing_delay": _DELAY,
}
"""Bucket upper bounds (seconds) of the distributions: 10 ms to 1 day, about a factor of 2-5
apart; the delays also below 0 (early events; arrival times after the batch's clock), down to a
day."""
INPUT_WATERMARK_COLUMN = "input_watermark_us"
INPUT_EVENT_TIME_COLUMN = "input_event_time_us"
SUBSTREAM_SPREAD_COLUMN = "substream_spread_us"
IDLE_TICK = "wmobs_idle_tick"
"""The key of the offset of an idle-timeout heartbeat source (its tick's processing time, ms).

The policy half's heartbeat writes it into every offset it reports; the listener recognises
the heartbeat by it in ``progress.sources`` and does not count its rows as input."""


def rule_column(rule: str, action: str) -> str:
    """The observed column name that counts rows of ``rule`` given ``action``."""
    if rule not in RULES or action not in ACTIONS:
        raise ValueError(
            f"unknown rule/action {rule!r}/{action!r}: rule must be one of {RULES}, "
            f"action one of {ACTIONS}"
        )
    return f"rule:{rule}:{action}"


def policy_column(policy: str, action: str) -> str:
    """:func:`rule_column`, by the name it had before the ``rule`` label."""
    return rule_column(policy, action)


def is_wmobs_observation(name: str) -> bool:
    """True for observation names the listener reads: ``wmobs`` or ``wmobs.<anything>``."""
    return name == OBSERVATION_PREFIX or name.startswith(OBSERVATION_PREFIX + ".")


def policy_label(name: str) -> str:
    """The ``policy`` label of an observation: ``wmobs.policy.sensors`` -> ``sensors``."""
    for prefix in (OBSERVATION_PREFIX + ".policy.", OBSERVATION_PREFIX + "."):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def input_label(name: str) -> str:
    """:func:`policy_label`, by its earlier name."""
    return policy_label(name)


def bounds_us(histogram: str) -> list[int]:
    """The bucket upper bounds of ``histogram`` (:data:`HISTOGRAMS`) in µs."""
    return [round(bound * 1e6) for bound in HISTOGRAMS[histogram]]


def histogram_buckets_column(histogram: str) -> str:
    """The name of the column that counts ``histogram``'s buckets."""
    return f"hist:{histogram}:buckets"


def joint_histogram_column(histograms: Sequence[str]) -> str:
    """The name of the column that counts ``histograms``' joint buckets."""
    return histogram_buckets_column("*".join(histograms))


def histogram_sum_column(histogram: str) -> str:
    """The name of the column that sums ``histogram``'s values (µs)."""
    return f"hist:{histogram}:sum_us"
