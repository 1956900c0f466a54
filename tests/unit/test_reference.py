"""The Python engine's pure rules against the reference cases in ``tests/reference/``, the same
files the JVM engine's JUnit tests read (``jvm/src/test/java/io/wmobs/spark/ReferenceTest``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.reference import generate
from wmobs.policy._python._idle import advance, read_input
from wmobs.policy._python._substream_judge import SubstreamConfig, judge_partition
from wmobs.policy._python._substream_state import KeyState
from wmobs.policy._verdicts import DROPPED_BITS, EARLY_DROPPED, OOO_ADJUSTED, OOO_DROPPED

REFERENCE = Path(__file__).resolve().parents[1] / "reference"


def load(name: str) -> Any:
    return json.loads((REFERENCE / name).read_text())


@pytest.mark.parametrize("name", sorted(generate.FILES))
def test_the_files_are_what_the_definitions_give(name: str) -> None:
    """The committed cases are the event-at-a-time definitions' (run
    ``python -m tests.reference.generate`` after changing one)."""
    assert (REFERENCE / name).read_text() == generate.render(name)


def judge(
    state: KeyState, rows: list[list[Any]], tolerance_us: int, drop: bool
) -> tuple[list[list[Any]], KeyState]:
    """``rows`` (``[key, arrival, ts, candidate]``) through the Python engine's judge: per row
    ``[system, out of order, lateness]``, and the state after them."""
    keys = np.array([r[0] for r in rows], dtype=np.int64)
    arrival = np.array([r[1] for r in rows], dtype=np.int64)
    ts = np.array([r[2] for r in rows], dtype=np.int64)
    bit = OOO_DROPPED if drop else OOO_ADJUSTED
    verdicts = np.array([0 if r[3] else EARLY_DROPPED for r in rows], dtype=np.int64)
    config = SubstreamConfig(tolerance_us, drop, candidate_bits=DROPPED_BITS, ooo_bit=bit)
    verdict, state = judge_partition(
        state, keys, arrival, ts, verdicts, heartbeat=False, now_ms=0, config=config
    )
    out = [
        [int(s), bool(v & bit), int(b)]
        for s, v, b in zip(verdict.system_us, verdict.verdicts, verdict.behind_us, strict=True)
    ]
    return out, state


@pytest.mark.parametrize("how", ["global", "substreams"])
def test_worked_example(how: str) -> None:
    """Globally one event per micro-batch judges each event against all before it: one key."""
    case = load("worked_example.json")
    tolerance = case["tolerances_s"]["out_of_order"] * 10**6
    events = case["events"]
    key = {d: i for i, d in enumerate(sorted({e["device"] for e in events}))}
    rows = [
        [
            0 if how == "global" else key[e["device"]],
            e["arrival_us"],
            e["after_arrival_us"],
            e["arrival_action"] != "dropped",
        ]
        for e in events
    ]
    judged, _ = judge(KeyState(), rows, tolerance, drop=False)
    for event, (system, late, behind) in zip(events, judged, strict=True):
        expected = case[how][str(event["id"])]
        if expected["system_us"] is None:
            assert event["arrival_action"] == "dropped"
            continue
        assert (system, late, behind) == (
            expected["system_us"],
            expected["out_of_order"],
            expected["lateness_us"],
        ), event["id"]


def test_random_streams() -> None:
    for case in load("substream_streams.json")["cases"]:
        state = KeyState()
        for batch in case["batches"]:
            judged, state = judge(state, batch["rows"], case["tolerance_us"], case["drop"])
            assert judged == batch["expected"], case["case"]
            after = dict(zip(state.keys.tolist(), state.max_us.tolist(), strict=True))
            assert {str(k): v for k, v in sorted(after.items())} == batch["state_after"]


def test_durations() -> None:
    """Both engines read a duration alike: Python's ``to_micros`` here, the JVM's
    ``PolicyOptions.micros`` (SQL's options) in ``ReferenceTest``."""
    from wmobs.policy._durations import to_micros

    for case in load("durations.json")["cases"]:
        if "us" in case:
            assert to_micros(case["text"], "late_arrival") == case["us"], case
        else:
            with pytest.raises(ValueError, match=f"late_arrival: .*{case['error']}") as found:
                to_micros(case["text"], "late_arrival")
            assert str(found.value).startswith("late_arrival: "), case


def test_batch_input() -> None:
    for case in load("batch_input.json")["cases"]:
        assert read_input(case["now"], case["before"]) == case["read_input"], case["case"]


def test_idle_clock() -> None:
    for case in load("idle_clock.json")["cases"]:
        clock = dict(case["clock"])
        for step in case["steps"]:
            if "input_ms" in step:
                clock = {**clock, "seen_ms": step["input_ms"], "advanced_ms": -1}
            else:
                moved = advance(
                    np.array([clock["max_us"]]),
                    np.array([clock["seen_ms"]]),
                    np.array([clock["advanced_ms"]]),
                    now_ms=step["now_ms"],
                    timeout_ms=case["timeout_ms"],
                )
                result = "fired" if moved.fired[0] else "moved" if moved.moved[0] else "active"
                assert result == step["result"], case["case"]
                clock = {
                    **clock,
                    "max_us": int(moved.max_us[0]),
                    "advanced_ms": int(moved.advanced_ms[0]),
                }
            assert clock == step["after"], case["case"]
