"""The JVM engine's specs, one dataclass per function (wmobs/policy/_jvm/_specs.py): the
reference file that the Java parsers are checked against (SpecTest.java) says what the
dataclasses say, with example specs as they write them (which SpecTest parses with each
function's parser); a spec's JSON has every member, null where unset, each of its type."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from wmobs.observations import (
    DEAD_LETTER_COLUMN,
    IDLE_TIMEOUT_COLUMN,
    INPUT_EVENT_TIME_COLUMN,
    INPUT_WATERMARK_COLUMN,
    SUBSTREAM_SPREAD_COLUMN,
    bounds_us,
    histogram_buckets_column,
    histogram_sum_column,
    joint_histogram_column,
)
from wmobs.policy._jvm._specs import (
    CALLED_BY_NAME,
    SPECS,
    DeadLettersSpec,
    HistogramSpec,
    JudgeSpec,
    KeptSpec,
    ObservationSpec,
    QueueingSpec,
    SubstreamsSpec,
    members,
    to_dict,
    to_json,
)
from wmobs.policy._observe import JOINT_HISTOGRAMS
from wmobs.policy._verdicts import (
    ARRIVAL,
    DROP_POLICIES,
    DROPPED_BITS,
    FASTEST,
    IDLE,
    KEY,
    LATENESS,
    OOO_ADJUSTED,
    PLACE,
    SLOWEST,
    TS,
    VERDICT,
    VERDICT_BITS,
)

BITS: list[list[str | int]] = [[r, a, b] for (r, a), b in VERDICT_BITS.items()]
ALL_RULES = JudgeSpec(
    early_arrival_us=300_000_000,
    early_arrival_drop=True,
    late_arrival_us=5_000_000,
    late_arrival_drop=False,
    out_of_order_us=120_000_000,
    out_of_order_drop=False,
    bits=BITS,
    field="system",
)
HISTOGRAM = HistogramSpec(
    buckets=joint_histogram_column(JOINT_HISTOGRAMS),
    sums=[histogram_sum_column(h) for h in JOINT_HISTOGRAMS],
    bounds=[bounds_us(h) for h in JOINT_HISTOGRAMS],
)
QUEUEING = QueueingSpec(
    buckets=histogram_buckets_column("queueing_delay"),
    sum=histogram_sum_column("queueing_delay"),
    bounds=bounds_us("queueing_delay"),
)
KEYED = SubstreamsSpec(
    tolerance_us=120_000_000,
    drop=False,
    ttl_ms=None,
    idle_timeout_ms=None,
    check_interval_ms=None,
    candidate_bits=DROPPED_BITS,
    ooo_bit=OOO_ADJUSTED,
    key=KEY,
    ts=TS,
    arrival=ARRIVAL,
    verdict=VERDICT,
    place=PLACE,
    idle=None,
    appended=[LATENESS, SLOWEST, FASTEST],
    checkpoint="",
    files="wmobs/substreams/sensors",
)
EXAMPLES: dict[str, list[Any]] = {
    "wmobs_judge": [
        ALL_RULES,
        JudgeSpec(
            early_arrival_us=None,
            early_arrival_drop=False,
            late_arrival_us=0,
            late_arrival_drop=True,
            out_of_order_us=None,
            out_of_order_drop=True,
            bits=BITS,
            field="verdict",
        ),
    ],
    "wmobs_policy_observation": [
        ObservationSpec(
            counts=[["early_arrival_dropped", 2], ["late_arrival_adjusted", 4]],
            dropped_bits=DROPPED_BITS,
            dead_letters=DEAD_LETTER_COLUMN,
            firings=IDLE_TIMEOUT_COLUMN,
            watermark=INPUT_WATERMARK_COLUMN,
            event_time=INPUT_EVENT_TIME_COLUMN,
            tolerance_us=120_000_000,
            histogram=HISTOGRAM,
            queueing=QUEUEING,
            spread=SUBSTREAM_SPREAD_COLUMN,
            kept=KeptSpec(checkpoint="s3a://bucket/chk", directory="wmobs/observations/sensors"),
        ),
        ObservationSpec(
            counts=[],
            dropped_bits=DROPPED_BITS,
            dead_letters=None,
            firings=None,
            watermark=INPUT_WATERMARK_COLUMN,
            event_time=INPUT_EVENT_TIME_COLUMN,
            tolerance_us=0,
            histogram=None,
            queueing=None,
            spread=None,
            kept=None,
        ),
    ],
    "wmobs_substreams": [
        KEYED,
        replace(
            KEYED,
            ttl_ms=3_600_000,
            idle_timeout_ms=10_000,
            check_interval_ms=2_500,
            idle=IDLE,
            checkpoint="/chk/sensors",
        ),
    ],
    "wmobs_dead_letters": [
        DeadLettersSpec(
            directory="/data/dead", rules=[[r, b] for r, b in DROP_POLICIES], policy="sensors"
        )
    ],
}
"""Specs as the plan writes them, one or more per function: each member's branches (null or
not) taken at least once."""

REFERENCE = Path(__file__).resolve().parents[1] / "reference" / "jvm_specs.json"


def test_the_reference_says_what_the_dataclasses_say() -> None:
    found = json.loads(REFERENCE.read_text())
    assert found["specs"] == {
        name: {"members": members(cls), "optional": CALLED_BY_NAME.get(name, [])}
        for name, cls in SPECS.items()
    }, f"update {REFERENCE} from wmobs/policy/_jvm/_specs.py"
    assert found["nested"] == {
        "wmobs_policy_observation.histogram": members(HistogramSpec),
        "wmobs_policy_observation.queueing": members(QueueingSpec),
        "wmobs_policy_observation.kept": members(KeptSpec),
    }


def test_the_reference_holds_the_example_specs_as_python_writes_them() -> None:
    found = json.loads(REFERENCE.read_text())
    assert sorted(EXAMPLES) == sorted(SPECS)
    assert found["examples"] == {
        name: [to_dict(spec) for spec in specs] for name, specs in EXAMPLES.items()
    }, f"update {REFERENCE} from EXAMPLES"


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        (replace(ALL_RULES, early_arrival_drop="yes"), "drop"),
        (replace(ALL_RULES, late_arrival_us=True), "late"),
        (replace(ALL_RULES, bits=[["a", "b", 1.5]]), "bits"),
        (DeadLettersSpec(directory=None, rules=[], policy="p"), "directory"),  # type: ignore[arg-type]
        (HistogramSpec(buckets="b", sums=["s", 2], bounds=[]), "sums"),  # type: ignore[list-item]
    ],
)
def test_a_member_of_another_type_is_refused_by_name(spec: Any, error: str) -> None:
    with pytest.raises(TypeError, match=rf"wmobs: \w+Spec\.\w*{error}\w* is "):
        to_json(spec)


def test_a_nested_spec_of_another_type_is_refused_by_name() -> None:
    minimal = EXAMPLES["wmobs_policy_observation"][1]
    with pytest.raises(TypeError, match=r"ObservationSpec\.kept is 'k'"):
        to_json(replace(minimal, kept="k"))
    with pytest.raises(TypeError, match=r"KeptSpec\.directory is 3"):
        to_json(replace(minimal, kept=KeptSpec("c", 3)))  # type: ignore[arg-type]


def test_a_spec_is_written_with_every_member() -> None:
    text = to_json(DeadLettersSpec(directory="/dl", rules=[["late_arrival", 2]], policy="p"))
    assert json.loads(text) == {"directory": "/dl", "rules": [["late_arrival", 2]], "policy": "p"}
    nested = json.loads(to_json(KeptSpec(checkpoint="", directory="wmobs/observations/p")))
    assert sorted(nested) == ["checkpoint", "directory"]
