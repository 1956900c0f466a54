"""The per-key out-of-order logic, without a JVM, against the event-at-a-time definition."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from wmobs.policy._durations import to_micros
from wmobs.policy._python._substream_judge import advance_idle
from wmobs.policy._python._substream_state import KeyState

from ._reference import (
    advance_idle_keys,
    judge_bucket,
    judge_key_reference,
    lateness_reference,
)
from ._substream_stage import SubstreamStage


def _one_key(state: int | None, ts: list[int], candidate: list[bool], tol: int, drop: bool) -> Any:
    n = len(ts)
    return judge_bucket(
        {} if state is None else {7: state},
        np.full(n, 7, dtype=np.int64),
        np.arange(n, dtype=np.int64),
        np.array(ts, dtype=np.int64),
        np.array(candidate, dtype=bool),
        tolerance_us=tol,
        drop=drop,
    )


@pytest.mark.parametrize("seed", range(200))
def test_one_key_matches_the_definition(seed: int) -> None:
    rnd = random.Random(seed)
    n = rnd.randint(0, 40)
    tolerance = rnd.choice([0, 1, 5, 30])
    drop = rnd.random() < 0.5
    state = rnd.choice([None, rnd.randint(0, 100)])
    events = [(rnd.randint(0, 120), rnd.random() < 0.85) for _ in range(n)]

    expected = judge_key_reference(state, events, tolerance, drop)
    got = _one_key(state, [t for t, _ in events], [c for _, c in events], tolerance, drop)
    assert got.system_us.tolist() == expected[0]
    assert got.out_of_order.tolist() == expected[1]
    assert got.new_max.get(7) == expected[2]


def test_batches_chain_through_the_state() -> None:
    """Judging in two batches with the state in between equals judging all at once."""
    rnd = random.Random(7)
    ts = [rnd.randint(0, 500) for _ in range(60)]
    whole = judge_key_reference(None, [(t, True) for t in ts], 20, drop=False)
    first = _one_key(None, ts[:25], [True] * 25, 20, False)
    second = _one_key(first.new_max[7], ts[25:], [True] * 35, 20, False)
    assert first.system_us.tolist() + second.system_us.tolist() == whole[0]


def test_rows_of_equal_arrival_are_judged_in_their_place_before_the_shuffle() -> None:
    """A key's rows of one arrival (a micro-batch without an arrival column: the batch's time)
    as a shuffle may hand them over, in either order: judged by their place before it, so a
    retried task, whose shuffle order differs, judges them alike."""
    from wmobs.policy._python._substream_judge import NONE, judge_rows

    ts = np.array([100, 50], dtype=np.int64)  # place 1 holds 100, place 2 holds 50
    place = np.array([1, 2], dtype=np.int64)
    verdicts = []
    for order in ([0, 1], [1, 0]):
        judged = judge_rows(
            np.zeros(2, dtype=np.int64),
            np.zeros(2, dtype=np.int64),
            ts[order],
            np.ones(2, dtype=bool),
            lambda keys: np.full(len(keys), NONE, dtype=np.int64),
            tolerance_us=10,
            drop=False,
            place=place[order],
        )
        verdicts.append(dict(zip(ts[order].tolist(), judged.out_of_order.tolist(), strict=True)))
    assert verdicts == [{100: False, 50: True}] * 2


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


@pytest.mark.parametrize("seed", range(150))
def test_bucket_judge_matches_per_key_definition(seed: int) -> None:
    rnd = random.Random(1000 + seed)
    n = rnd.randint(0, 60)
    tolerance = rnd.choice([0, 3, 20])
    drop = rnd.random() < 0.5
    # Close timestamps (many ties and tolerances that matter), or years 1..9999 in µs over many
    # keys: a running maximum must not overflow on the widest range Spark's timestamps have.
    low, span, pool = rnd.choice(
        [(1_800_000_000_000_000, 200, 6), (-62_135_596_800_000_000, 2**58, 50)]
    )
    key_pool = [rnd.randint(-(2**62), 2**62) for _ in range(rnd.randint(1, pool))]
    state = {k: low + rnd.randint(0, span) for k in key_pool if rnd.random() < 0.4}
    keys = [rnd.choice(key_pool) for _ in range(n)]
    arrival = [rnd.randint(0, 30) for _ in range(n)]  # ties: input order decides
    ts = [low + rnd.randint(0, span) for _ in range(n)]
    cand = [rnd.random() < 0.85 for _ in range(n)]

    got = judge_bucket(
        state,
        np.array(keys, dtype=np.int64),
        np.array(arrival, dtype=np.int64),
        np.array(ts, dtype=np.int64),
        np.array(cand, dtype=bool),
        tolerance_us=tolerance,
        drop=drop,
    )
    expected_system = [0] * n
    expected_ooo = [False] * n
    expected_behind = [0] * n
    expected_max = dict(state)
    for key in set(keys):
        rows = sorted((i for i in range(n) if keys[i] == key), key=lambda i: (arrival[i], i))
        events = [(ts[i], cand[i]) for i in rows]
        system, flags, last = judge_key_reference(state.get(key), events, tolerance, drop)
        behind = lateness_reference(state.get(key), events)
        for i, value, flag, late in zip(rows, system, flags, behind, strict=True):
            expected_system[i], expected_ooo[i], expected_behind[i] = value, flag, late
        if last is not None:
            expected_max[key] = last
    assert got.system_us.tolist() == expected_system
    assert got.out_of_order.tolist() == expected_ooo
    assert got.new_max == expected_max
    assert got.behind_us.tolist() == expected_behind


def test_idle_keys_are_forgotten_after_the_ttl(tmp_path: Path) -> None:
    """The real stage, without a JVM, with a controlled clock and its state files."""
    stage = SubstreamStage(tmp_path, ttl_ms=60_000)
    stage.now = 1000.0

    def feed(rows: list[tuple[int, int]]) -> list[int]:
        return [row["ts"] for row in stage.feed(rows)]

    feed([(1, 500), (2, 900)])
    assert stage.store.stored_keys() == 2
    stage.now += 30  # key 2 idle for 30 s: kept
    assert feed([(1, 600)]) == [600]
    assert stage.store.stored_keys() == 2
    stage.now += 45  # key 2 idle for 75 s > 60 s, but its bucket (2 mod 64) has no rows
    assert feed([(1, 700), (65, 5)]) == [700, 5]  # 65 is in key 1's bucket
    assert stage.store.stored_keys() == 3
    # Key 2's bucket gets rows (66): key 2 is forgotten first, so 1 is not out of order.
    assert feed([(66, 5), (2, 1)]) == [5, 1]
    assert stage.store.stored_keys() == 4
    stage.now += 61  # 65 is forgotten when key 1 gets rows; 2 and 66 wait for their bucket
    assert feed([(1, 800)]) == [800]
    assert stage.store.stored_keys() == 3
    # Key 1 was never idle: 10 is below its watermark 800 and is adjusted up to it.
    assert feed([(1, 10)]) == [800]


def test_the_state_is_versioned_by_micro_batch(tmp_path: Path) -> None:
    """A retried micro-batch reads the state its first attempt read, so retries judge the
    same; a task writes one file per batch, and only the files that a retry could read are
    kept."""
    stage = SubstreamStage(tmp_path)
    state = tmp_path / "state"
    stage.feed([(1, 500)])
    assert [row["ts"] for row in stage.feed([(1, 100)])] == [500]  # batch 1: out of order
    stage.batch -= 1  # batch 1 again (a retry): the same verdict, not judged against itself
    assert [row["ts"] for row in stage.feed([(1, 100)])] == [500]
    stage.batch -= 1
    assert [row["ts"] for row in stage.feed([(1, 900)])] == [900]
    assert [row["ts"] for row in stage.feed([(1, 800)])] == [900]  # batch 2 sees batch 1's 900
    stage.feed([(1, 1000)])
    assert sorted(p.name for p in state.iterdir()) == [
        "2-0000000000000002.arrow",  # read by batch 3
        "3-0000000000000002.arrow",
    ]
    # Keys 1 and 2 (bits 0x6) in one task: one file. Batch 4 reads batch 3's file for bucket 1
    # and nothing for bucket 2; batch 5 reads batch 4's for both, and batch 3's is not needed.
    assert [row["ts"] for row in stage.feed([(1, 1100), (2, 70)])] == [1100, 70]
    assert [row["ts"] for row in stage.feed([(2, 60), (1, 1000)])] == [70, 1100]
    assert sorted(p.name for p in state.iterdir()) == [
        "4-0000000000000006.arrow",
        "5-0000000000000006.arrow",
    ]
    # A task that died while writing left a temporary file: removed once it is an hour old.
    dead, fresh = state / ".9-0000000000000002.arrow.dead.tmp", state / ".9.b.tmp"
    dead.write_bytes(b"partial")
    fresh.write_bytes(b"being written")
    os.utime(dead, (time.time() - 7200, time.time() - 7200))
    stage.feed([(1, 1200)])
    assert not dead.exists() and fresh.exists()


def test_a_task_reads_the_newest_file_of_each_of_its_buckets(tmp_path: Path) -> None:
    """Which buckets a task gets is Spark's business: a task reads each bucket from the newest
    file that holds it, whoever wrote it, and a file goes once none of its buckets needs it."""
    stage = SubstreamStage(tmp_path)
    state = tmp_path / "state"
    stage.feed([(1, 500), (2, 600)])  # one task: 0-...6
    stage.feed([(1, 700)])  # bucket 1 alone: 1-...2
    stage.feed([(2, 800), (3, 900)])  # 2-...c: bucket 2 from batch 0, bucket 3 new
    # Buckets 1, 2 and 3 together: each from its newest file, so 1 is behind 700, 2 behind 800.
    got = stage.feed([(1, 650), (2, 750), (3, 950)])
    assert [(row["ts"], row["v"]) for row in got] == [(700, 32), (800, 32), (950, 0)]
    assert sorted(p.name for p in state.iterdir()) == [
        "1-0000000000000002.arrow",  # read by batch 3
        "2-000000000000000c.arrow",  # read by batch 3
        "3-000000000000000e.arrow",
    ]  # 0-...6 went: batch 1 and 2's files are newer for both its buckets


def test_state_of_the_per_bucket_layout_is_read_and_replaced(tmp_path: Path) -> None:
    """A checkpoint of an earlier wmobs (one file per bucket and batch, ``<bucket>/<batch>
    .arrow``) goes on where it stopped: its state is read, and its files go once a task file
    is newer."""
    import pyarrow as pa

    state = tmp_path / "state"

    def legacy(bucket: int, batch: int, key: int, max_us: int) -> None:
        columns = {"key": [key], "max_us": [max_us], "seen_ms": [0], "advanced_ms": [-1]}
        table = pa.table({c: pa.array(v, pa.int64()) for c, v in columns.items()})
        (state / str(bucket)).mkdir(parents=True, exist_ok=True)
        with pa.ipc.new_stream(str(state / str(bucket) / f"{batch}.arrow"), table.schema) as w:
            w.write_table(table)

    legacy(1, 3, key=1, max_us=400)
    legacy(1, 4, key=1, max_us=900)
    legacy(5, 4, key=5, max_us=300)
    stage = SubstreamStage(tmp_path)
    stage.batch = 5
    assert [row["ts"] for row in stage.feed([(1, 100)])] == [900]  # bucket 1 as batch 4 left it
    stage.batch -= 1  # a retry of batch 5 reads the per-bucket file again
    assert [row["ts"] for row in stage.feed([(1, 100)])] == [900]
    assert sorted(p.name for p in (state / "1").iterdir()) == ["4.arrow"]
    assert [row["ts"] for row in stage.feed([(1, 950), (5, 100)])] == [950, 300]
    assert not (state / "1").exists()  # batch 5's task file is newer: the folder went
    assert [row["ts"] for row in stage.feed([(5, 50)])] == [300]
    assert not (state / "5").exists()
    assert stage.store.stored_keys() == 2


@pytest.mark.parametrize("seed", range(50))
def test_vectorised_idle_clocks_match_the_definition(seed: int) -> None:
    """:func:`advance_idle` (arrays, the stage's) against ``advance_idle_keys`` (the rule)."""
    rnd = random.Random(seed)
    keys = sorted(rnd.sample(range(-1000, 1000), rnd.randint(1, 12)))
    maxima = {k: rnd.randint(0, 10**12) for k in keys}
    seen = {k: rnd.randint(0, 10_000) for k in keys}
    advanced = {k: seen[k] + rnd.randint(0, 5_000) for k in keys if rnd.random() < 0.4}
    state = KeyState(
        np.array(keys, dtype=np.int64),
        np.array([maxima[k] for k in keys], dtype=np.int64),
        np.array([seen[k] for k in keys], dtype=np.int64),
        np.array([advanced.get(k, -1) for k in keys], dtype=np.int64),
    )
    for _ in range(3):
        now = rnd.randint(0, 20_000)
        timeout = rnd.choice([1, 1000, 4000])
        top, firings = advance_idle_keys(maxima, seen, advanced, now_ms=now, timeout_ms=timeout)
        got = advance_idle(state, now_ms=now, timeout_ms=timeout)
        assert got == (None if top is None else (top, firings))
        assert state.max_us.tolist() == [maxima[k] for k in keys]
        assert state.advanced_ms.tolist() == [advanced.get(k, -1) for k in keys]


def test_many_keys_over_the_widest_timestamps() -> None:
    """Years 1 and 9999 in µs on 40 keys: a running maximum computed on raw values shifted
    per key would overflow 64 bits here."""
    year1, year9999 = -62_135_596_800_000_000, 253_402_300_799_000_000
    keys = [k for k in range(40) for _ in range(2)]
    ts = [year9999 if i % 2 == 0 else year1 for i in range(80)]
    got = judge_bucket(
        {},
        np.array(keys, dtype=np.int64),
        np.arange(80, dtype=np.int64),
        np.array(ts, dtype=np.int64),
        np.ones(80, dtype=bool),
        tolerance_us=0,
        drop=False,
    )
    assert got.system_us.tolist() == [year9999] * 80  # every second event is adjusted up
    assert got.out_of_order.tolist() == [False, True] * 40
    assert got.new_max == dict.fromkeys(range(40), year9999)


def test_the_python_engine_warns_once_when_a_task_holds_many_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its substreams read and rewrite every key their buckets hold, each micro-batch: past
    100,000 keys in a task, one warning per Python worker names how many."""
    from structlog.testing import capture_logs

    from wmobs.policy._python import _substream_stage

    monkeypatch.setattr(_substream_stage, "_WARNED", set())
    with capture_logs() as logs:
        _substream_stage._warn_if_many(_substream_stage.MANY_KEYS)
        _substream_stage._warn_if_many(_substream_stage.MANY_KEYS + 1)
        _substream_stage._warn_if_many(10 * _substream_stage.MANY_KEYS)
    assert [(e["event"], e["keys_held"]) for e in logs] == [
        ("wmobs.substream_keys_many", _substream_stage.MANY_KEYS + 1)
    ]
    assert "JVM engine" in logs[0]["hint"]
