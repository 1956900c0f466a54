"""The per-key out-of-order logic, without a JVM, against the event-at-a-time definition."""

from __future__ import annotations

import random

import numpy as np
import pytest

from wmobs._durations import to_micros
from wmobs._substreams import judge_key, judge_key_reference


@pytest.mark.parametrize("seed", range(200))
def test_vectorised_judge_matches_the_definition(seed: int) -> None:
    rnd = random.Random(seed)
    n = rnd.randint(0, 40)
    tolerance = rnd.choice([0, 1, 5, 30])
    drop = rnd.random() < 0.5
    state = rnd.choice([None, rnd.randint(0, 100)])
    events = [(rnd.randint(0, 120), rnd.random() < 0.85) for _ in range(n)]

    expected = judge_key_reference(state, events, tolerance, drop)
    got = judge_key(
        state,
        np.array([t for t, _ in events], dtype=np.int64),
        np.array([c for _, c in events], dtype=bool),
        tolerance,
        drop,
    )
    assert got.system_us.tolist() == expected[0]
    assert got.out_of_order.tolist() == expected[1]
    assert got.new_max_us == expected[2]


def test_batches_chain_through_the_state() -> None:
    """Judging in two batches with the state in between equals judging all at once."""
    rnd = random.Random(7)
    events = [(rnd.randint(0, 500), True) for _ in range(60)]
    whole = judge_key_reference(None, events, 20, drop=False)
    first = judge_key(None, np.array([t for t, _ in events[:25]]), np.ones(25, bool), 20, False)
    second = judge_key(
        first.new_max_us, np.array([t for t, _ in events[25:]]), np.ones(35, bool), 20, False
    )
    assert first.system_us.tolist() + second.system_us.tolist() == whole[0]


def test_durations() -> None:
    from datetime import timedelta

    assert to_micros("5 minutes", "x") == 300_000_000
    assert to_micros("1 hour 30 minutes", "x") == 5_400_000_000
    assert to_micros("250 ms", "x") == 250_000
    assert to_micros("0 seconds", "x") == 0
    assert to_micros(timedelta(seconds=2), "x") == 2_000_000
    with pytest.raises(ValueError, match="late_arrival: must not be negative"):
        to_micros("-5 seconds", "late_arrival")
    with pytest.raises(ValueError, match="out_of_order: 'soon' is not a duration"):
        to_micros("soon", "out_of_order")
    with pytest.raises(TypeError, match="early_arrival"):
        to_micros(5, "early_arrival")  # type: ignore[arg-type]
