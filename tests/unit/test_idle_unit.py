"""The idle-timeout decisions, without a JVM: ticks, the global synthetic row, per-key clocks,
the offsets-log reader, and the substreams stage (its state files in a temporary directory)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from wmobs.policy._heartbeat import default_check_interval_ms
from wmobs.policy._python._idle import (
    TICK,
    InputActivity,
    global_synthetic,
    idle_jump_ms,
    next_tick,
    quiet_only,
)
from wmobs.policy._verdicts import REAL
from wmobs.testing import MetricsRecorder, progress_json

from ._reference import advance_idle_keys
from ._substream_stage import SubstreamStage

S = 1000  # ms


def test_ticks_wait_for_idleness_and_the_interval() -> None:
    start = {TICK: 0}
    # Not idle yet: no tick, however long since the last one.
    assert next_tick(start, now_ms=10 * S, interval_ms=250, idle_since_ms=11 * S) is start
    # Idle: a tick carrying when idleness began.
    tick = next_tick(start, now_ms=11 * S, interval_ms=250, idle_since_ms=11 * S)
    assert tick == {TICK: 11 * S, "idle_since": 11 * S}
    # Within the interval of the previous tick: nothing new.
    assert next_tick(tick, now_ms=11 * S + 249, interval_ms=250, idle_since_ms=11 * S) is tick
    # Substreams tick every interval, idle or not.
    assert next_tick(start, now_ms=5 * S, interval_ms=250, idle_since_ms=None) == {TICK: 5 * S}
    assert default_check_interval_ms(1 * S) == 250
    assert default_check_interval_ms(10) == 100
    assert default_check_interval_ms(3600 * S) == 5 * S


def test_an_available_now_run_ticks_once_as_of_its_start() -> None:
    """Under ``Trigger.AvailableNow`` the reader decides as of the run's start: one tick at
    most, marked so that it moves no substreams clock in a micro-batch that read input (a
    global tick never does)."""
    import time

    pytest.importorskip("pyarrow")
    from wmobs.policy._python._idle_source import _Reader

    reader = _Reader({"mode": "substreams", "timeout_ms": "1000", "interval_ms": "1"})
    reader.prepareForTriggerAvailableNow()
    tick = reader.latestOffset({TICK: 0}, None)
    assert tick[TICK] > 0 and tick["available_now"] is True
    time.sleep(0.01)  # wall time passes; the run's "now" does not
    assert reader.latestOffset(tick, None) is tick
    assert quiet_only(tick, global_mode=False)
    assert not quiet_only({TICK: 5}, global_mode=False)  # processing-time substreams ticks
    assert quiet_only({TICK: 5, "idle_since": 1}, global_mode=True)
    plain = next_tick({TICK: 0}, now_ms=5 * S, interval_ms=250, idle_since_ms=4 * S)
    assert "available_now" not in plain


def test_the_heartbeat_reader_answers_both_of_sparks_calls() -> None:
    """Spark 4.2 on calls ``latestOffset(start, limit)`` where the reader's signature takes
    them; Spark 4.0 and 4.1 call ``latestOffset()`` (the reader once took only the former,
    and the Python engine's idle timeout failed on those lines). Without arguments the start
    is the offset the reader gave last."""
    import inspect

    pytest.importorskip("pyarrow")
    from wmobs.policy._python._idle_source import _Reader

    options = {"mode": "substreams", "timeout_ms": "1000", "interval_ms": str(3600 * S)}
    assert inspect.signature(_Reader(options).latestOffset).parameters  # 4.2's convention
    old = _Reader(options)  # 4.0's and 4.1's
    first = old.latestOffset()
    assert first[TICK] > 0  # due at once after the initial offset
    assert old.latestOffset() == first  # the interval has not passed since: no new tick
    new = _Reader(options)
    assert new.latestOffset({TICK: 0}, None)[TICK] > 0
    assert new.latestOffset(first, None) == first


def synthetic(
    start: dict[str, int], end: dict[str, int], watermark: int | None, delay: int
) -> tuple[int, int] | None:
    """The global synthetic row, with a 1-second timeout."""
    return global_synthetic(start, end, watermark_ms=watermark, delay_ms=delay, timeout_ms=S)


def test_global_clock_runs_on_with_processing_time_from_idleness() -> None:
    """Last input at 100 s, timeout 1 s: ticks at 101.5, 102, 103 move the largest system
    timestamp (watermark + delay) by the processing time since idleness began; one firing."""
    idle_since = 101 * S
    t0 = {TICK: 50 * S}  # a tick of an earlier idle period
    t1 = {TICK: 101_500, "idle_since": idle_since}
    t2 = {TICK: 102 * S, "idle_since": idle_since}
    t3 = {TICK: 103 * S, "idle_since": idle_since}
    watermark, delay = 99_000, 2 * S  # largest system timestamp so far: 101 s
    assert synthetic(t0, t1, watermark, delay) == (101_500_000, 1)
    # Next batch: the synthetic row raised the watermark by 0.5 s; the clock goes on.
    assert synthetic(t1, t2, 99_500, delay) == (102_000_000, 0)
    assert synthetic(t2, t3, 100_000, delay) == (103_000_000, 0)
    # Without a watermark there is nothing to move; without a tick, nothing to do.
    assert synthetic(t0, t1, None, delay) is None
    assert synthetic(t1, t1 | {"idle_since": idle_since}, 1, 0) is None
    assert synthetic(t0, {TICK: 7}, 1, 0) is None


def test_the_first_tick_moves_the_clock_by_the_lag_up_to_the_timeout() -> None:
    """Last input at 100 s, timeout 1 s, first tick right at 101 s: a stream 0.4 s behind
    processing time moves to 100 s (then runs at now - 1 s: Atlas' rule); one 95 s behind
    moves by the timeout only (then runs at now - 95 s: it keeps its lag); one ahead of
    processing time does not move yet. Each is one firing."""
    tick = {TICK: 101 * S, "idle_since": 101 * S}
    start = {TICK: 0}
    assert synthetic(start, tick, 99_600, 0) == (100_000_000, 1)
    assert synthetic(start, tick, 5 * S, 0) == (6_000_000, 1)
    assert synthetic(start, tick, 101 * S, 0) == (101_000_000, 1)


@pytest.mark.parametrize("seed", range(5))
def test_key_clocks_advance_by_the_idle_time(seed: int) -> None:
    """Random arrivals and ticks for several keys: a key's clock equals its largest system
    timestamp plus its lag at its last input (at most the timeout) plus the processing time it
    has been idle beyond the timeout at the last tick; every idle period that moved it is one
    firing; a busy key never moves."""
    rng = random.Random(seed)
    timeout = 1000
    maxima: dict[int, int] = {}
    seen: dict[int, int] = {}
    advanced: dict[int, int] = {}
    firings_by_key = dict.fromkeys(range(4), 0)
    idle_periods = dict.fromkeys(range(4), 0)
    real_max: dict[int, int] = {}
    now = 0
    for _ in range(200):
        now += rng.randint(50, 700)
        if rng.random() < 0.5:
            key = rng.randrange(4)
            ts = now * 1000 + rng.randint(-500_000, 500_000)
            if key in seen and key in advanced:
                idle_periods[key] += 1
            seen[key] = now
            advanced.pop(key, None)
            maxima[key] = max(maxima.get(key, ts), ts)
            real_max[key] = maxima[key]
        else:
            before = set(advanced)
            top, fired = advance_idle_keys(maxima, seen, advanced, now_ms=now, timeout_ms=timeout)
            newly = set(advanced) - before
            assert fired == len(newly)
            for key in newly:
                firings_by_key[key] += 1
            moved = [maxima[k] for k in advanced]
            assert top == (max(moved) if moved else None)
            for key, last in seen.items():
                idle = now - last - timeout
                if idle < 0:
                    assert key not in advanced  # busy: untouched
                    assert maxima[key] == real_max[key]
                else:
                    jump = idle_jump_ms(last, real_max[key] // 1000, timeout)
                    assert maxima[key] == real_max[key] + (idle + jump) * 1000
    for key in seen:
        assert firings_by_key[key] == idle_periods[key] + (1 if key in advanced else 0)


def test_offsets_log_tells_input_batches_from_heartbeat_batches() -> None:
    def offsets(ts: int, file_offset: int | None, tick: int | None) -> list[str]:
        lines = ["v1", json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": ts})]
        lines.append("-" if file_offset is None else json.dumps({"logOffset": file_offset}))
        lines.append(json.dumps({TICK: tick}) if tick is not None else "-")
        return lines

    log: dict[int, list[str]] = {
        0: offsets(1000, 0, None),
        1: offsets(2000, 1, None),
        2: offsets(3000, 1, 2900),  # heartbeat only
    }

    def text(batch: int) -> str:
        return "\n".join(log[batch])

    activity = InputActivity(lambda: [str(b) for b in log] + [".0.crc", "tmp"], text)
    assert activity.refresh() == 2000
    log[3] = offsets(4000, 1, 3900)
    assert activity.refresh() == 2000
    log[4] = offsets(5000, 2, 3900)  # input again, in the same batch as no new tick
    assert activity.refresh() == 5000
    # A restarted reader that sees only a later part of the log starts from its first batch.
    late = InputActivity(lambda: ["3", "4"], text)
    assert late.refresh() == 5000
    tail = InputActivity(lambda: ["3"], text)
    assert tail.refresh() == 4000
    # Nothing yet.
    assert InputActivity(lambda: [], text).refresh() is None


def test_heartbeat_rows_are_not_input_rows() -> None:
    """A heartbeat-only batch adds no input rows, leaves the source idle and the largest event
    time alone (its event times are synthetic)."""
    recorder = MetricsRecorder(clock=lambda: 200.0)
    try:
        tracker = recorder.tracker
        tracker.on_progress(
            progress_json(name="q", batch_id=0, timestamp=100.0, rows=3, event_time_max=100.0)
        )
        tracker.on_progress(
            progress_json(
                name="q",
                batch_id=1,
                timestamp=150.0,
                rows=0,
                heartbeat_rows=64,
                event_time_max=5000.0,
                watermark=140.0,
            )
        )
        assert recorder.value("wmobs_input_rows_total", query="q") == 3
        assert recorder.value("wmobs_event_time_lag_seconds", query="q") == 100.0
        assert recorder.value("wmobs_source_idle_seconds", query="q") == pytest.approx(99.75)
    finally:
        recorder.shutdown()


def test_stage_moves_quiet_keys_and_leaves_busy_ones(tmp_path: Path) -> None:
    """The real substreams stage (no JVM) with a controlled clock: key 1 goes quiet, key 2
    keeps sending; a heartbeat moves key 1 only, counts one firing, and emits one synthetic
    row; the state of the quiet key is evicted after the TTL."""
    stage = SubstreamStage(tmp_path, ttl_ms=30_000, idle_timeout_ms=1000)
    stage.now = 100.0
    every = range(64)  # the heartbeat wakes every bucket

    out = stage.feed([(1, 100_000_000), (2, 100_000_000)])
    assert [row["idle"] for row in out] == [REAL, REAL]
    stage.now = 100.5
    out = stage.feed([(2, 100_500_000)], every)  # nobody idle for 1 s yet
    assert [row["idle"] for row in out] == [REAL]
    stage.now = 101.75
    out = stage.feed([(2, 101_700_000)], every)
    synthetic = [row for row in out if row["idle"] >= 0]
    assert [row["idle"] for row in synthetic] == [1]  # key 1: one firing
    assert [row["ts"] for row in synthetic] == [100_750_000]  # 100 s + 0.75 s beyond the timeout
    stage.now = 102.0
    out = stage.feed([], every)  # the same idle period: moves on, no new firing
    assert [(row["idle"], row["ts"]) for row in out] == [(0, 101_000_000)]
    # Key 1 returns with an event behind its moved clock: out of order, adjusted up to it.
    out = stage.feed([(1, 100_900_000)])
    assert [(row["ts"], row["v"]) for row in out] == [(101_000_000, 32)]
    # Quiet for longer than the TTL: both keys are evicted on the next heartbeat.
    stage.now = 140.0
    assert stage.feed([], every) == []
    assert stage.store.stored_keys() == 0
    # Heartbeats woke all 64 buckets; only the two that ever held keys (1 and 2: bits 0x6) are
    # in state files: batch 5's (their keys evicted) and the two it read, kept for a retry.
    assert sorted(p.name for p in (tmp_path / "state").iterdir()) == [
        "3-0000000000000006.arrow",
        "4-0000000000000002.arrow",
        "5-0000000000000006.arrow",
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"idle_timeout": "0 seconds"}, "idle_timeout: must be at least 1 millisecond"),
        ({"idle_timeout": "-1 second"}, "idle_timeout"),
        ({"idle_timeout": "soon"}, "idle_timeout"),
        ({"idle_check_interval": "1 second"}, "idle_check_interval: only meaningful"),
        ({"idle_timeout": "1 minute", "idle_check_interval": "0 ms"}, "idle_check_interval"),
    ],
)
def test_idle_arguments_are_checked_when_the_policy_is_made(
    kwargs: dict[str, str], message: str
) -> None:
    from wmobs import TimePolicy

    with pytest.raises((ValueError, TypeError), match=message):
        TimePolicy(**kwargs)  # type: ignore[arg-type]


def test_a_tick_is_given_only_on_a_fresh_look_at_the_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """The log is looked at once per check interval; a tick that the last look makes due is
    looked at again first: input may have come since (here at 0.9 s, between looks at 0.8 s
    and 1 s), and the stream is not idle."""
    pytest.importorskip("pyarrow")
    from wmobs.policy._python import _idle_source

    class Log:
        last_input_ms: int | None = None
        written: int | None = None
        looks = 0

        def refresh(self) -> int | None:
            self.looks += 1
            self.last_input_ms = self.written
            return self.last_input_ms

    options = {"mode": "global", "timeout_ms": "1000", "interval_ms": "250", "checkpoint": "/x"}
    reader = _idle_source._Reader(options)
    log = reader._activity = Log()  # type: ignore[assignment]
    now = {"ms": 800}
    monkeypatch.setattr(_idle_source.time, "time", lambda: now["ms"] / 1000)
    log.written = 0  # input in a micro-batch at 0 s
    start = {TICK: 0}
    assert reader.latestOffset(start, None) == start  # idle from 1 s: not yet
    log.written = 900  # input at 0.9 s, not looked at yet (the next look is due at 1.05 s)
    now["ms"] = 1000
    assert reader.latestOffset(start, None) == start  # looked again: not idle
    assert log.looks == 2
    now["ms"] = 1900
    assert reader.latestOffset(start, None)[TICK] == 1900  # idle since 1.9 s: a tick
