"""Writes the reference cases that both engines answer to (pytest reads them in
``tests/unit/test_reference.py`` and ``tests/spark/``, JUnit in ``jvm/src/test/``):

- ``worked_example.json``: DESIGN's worked example, the arrival policies' verdicts, and every
  row's result globally (one event per micro-batch) and per device;
- ``substream_streams.json``: random multi-batch streams of many keys, with every row's
  verdict and each batch's state after it;
- ``idle_clock.json``: idle clocks along timelines of processing time;
- ``histogram_buckets.json``: each distribution's bounds, and values at and around each edge
  with their bucket;
- ``batch_input.json``: pairs of offsets-log entries (a file source, a Kafka source and the
  idle heartbeat) and whether the later micro-batch read input, the heartbeat's test of a tick
  that meets a backlog.

Every expectation comes from the event-at-a-time definitions in ``tests/unit/_reference.py``
(and, for the worked example, the hand-worked table it is checked against), never from an
engine. Run ``python -m tests.reference.generate`` after changing a definition; the JSON is
committed, and a test checks that it is what this script writes.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tests.unit._reference import advance_idle_keys, judge_key_reference, lateness_reference
from wmobs.observations import HISTOGRAMS, bounds_us

HERE = Path(__file__).resolve().parent
MINUTE_US = 60 * 10**6

# (#, event time, arrival time, device), in arrival order; tolerances: early arrival 5 min,
# late arrival 5 min, out of order 2 min (all adjust but early arrival, which drops).
WORKED = [
    (1, "12:07", "12:07", "device1"),
    (2, "12:08", "12:08", "device2"),
    (3, "12:17", "12:11", "device1"),
    (4, "12:08", "12:13", "device3"),
    (5, "12:19", "12:16", "device1"),
    (6, "12:12", "12:17", "device3"),
    (7, "12:17", "12:18", "device2"),
    (8, "12:20", "12:19", "device2"),
    (9, "12:16", "12:21", "device3"),
    (10, "12:23", "12:22", "device2"),
    (11, "12:22", "12:24", "device2"),
    (12, "12:21", "12:27", "device3"),
]
# Worked out by hand from the rules (DESIGN §2): id -> system timestamp, None when dropped.
GLOBAL = {
    1: "12:07", 2: "12:08", 3: None, 4: "12:08", 5: "12:19",
    6: "12:17",   # behind the watermark 12:19 - 2 = 12:17: adjusted to it
    7: "12:17",   # equal to the watermark (12:17) is not behind it
    8: "12:20",
    9: "12:18",   # behind the watermark 12:20 - 2 = 12:18: adjusted
    10: "12:23",
    11: "12:22",  # the watermark is 12:21
    12: "12:22",  # 6 min late: adjusted to 12:27 - 5 = 12:22, above the watermark
}  # fmt: skip
# Per device every device has its own watermark: nothing is out of order.
SUBSTREAMS = {**GLOBAL, 6: "12:12", 9: "12:16"}
TOLERANCES_S = {"early_arrival": 300, "late_arrival": 300, "out_of_order": 120}


def micros(hhmm: str) -> int:
    moment = datetime.fromisoformat(f"2026-01-01T{hhmm}:00+00:00")
    return int(moment.astimezone(timezone.utc).timestamp()) * 10**6


def _arrival(event_us: int, arrival_us: int) -> tuple[int, str | None, str | None]:
    """The arrival policies, event at a time: (system µs, rule, action)."""
    if event_us > arrival_us + TOLERANCES_S["early_arrival"] * 10**6:
        return event_us, "early_arrival", "dropped"
    floor = arrival_us - TOLERANCES_S["late_arrival"] * 10**6
    if event_us < floor:
        return floor, "late_arrival", "adjusted"
    return event_us, None, None


def worked_example() -> dict[str, Any]:
    tolerance = TOLERANCES_S["out_of_order"] * 10**6
    events = []
    for i, event, arrival, device in WORKED:
        system, rule, action = _arrival(micros(event), micros(arrival))
        events.append(
            {
                "id": i,
                "event": event,
                "arrival": arrival,
                "device": device,
                "event_us": micros(event),
                "arrival_us": micros(arrival),
                "after_arrival_us": system,
                "arrival_rule": rule,
                "arrival_action": action,
            }
        )

    def judged(streams: dict[str, list[dict[str, Any]]], table: dict[int, str | None]) -> Any:
        results: dict[str, Any] = {}
        for rows in streams.values():
            pairs = [(r["after_arrival_us"], r["arrival_action"] != "dropped") for r in rows]
            system, late, _ = judge_key_reference(None, pairs, tolerance, drop=False)
            behind = lateness_reference(None, pairs)
            for row, s, o, b in zip(rows, system, late, behind, strict=True):
                kept = row["arrival_action"] != "dropped"
                expected = table[row["id"]]
                assert (micros(expected) if expected else None) == (s if kept else None), row
                results[str(row["id"])] = {
                    "system_us": s if kept else None,
                    "system": expected,
                    "out_of_order": o,
                    "lateness_us": b if kept else None,
                }
        return results

    per_device: dict[str, list[dict[str, Any]]] = {}
    for row in events:
        per_device.setdefault(row["device"], []).append(row)
    return {
        "tolerances_s": TOLERANCES_S,
        "events": events,
        "global": judged({"all": events}, GLOBAL),
        "substreams": judged(per_device, SUBSTREAMS),
    }


def substream_streams(cases: int = 40, seed: int = 2026) -> dict[str, Any]:
    """Random streams: per case a tolerance, an action and batches of rows ``[key, arrival,
    ts, candidate]``, judged per key in arrival order (ties in input order) with the state of
    earlier batches."""
    rnd = random.Random(seed)
    out = []
    for case in range(cases):
        tolerance = rnd.choice([0, 1, 5, 30])
        drop = rnd.random() < 0.5
        keys = rnd.sample(range(-(2**40), 2**40), rnd.randint(1, 6))
        state: dict[int, int] = {}
        batches = []
        for _ in range(rnd.randint(1, 4)):
            rows = [
                [rnd.choice(keys), rnd.randint(0, 30), rnd.randint(0, 120), rnd.random() < 0.85]
                for _ in range(rnd.randint(0, 25))
            ]
            expected: list[Any] = [None] * len(rows)
            for key in sorted({r[0] for r in rows}):
                index = sorted((i for i, r in enumerate(rows) if r[0] == key),
                               key=lambda i: (rows[i][1], i))  # fmt: skip
                events = [(rows[i][2], rows[i][3]) for i in index]
                system, late, last = judge_key_reference(state.get(key), events, tolerance, drop)
                behind = lateness_reference(state.get(key), events)
                for i, s, o, b in zip(index, system, late, behind, strict=True):
                    expected[i] = [s, o, b]
                if last is not None:
                    state[key] = last
            batches.append(
                {
                    "rows": rows,
                    "expected": expected,
                    "state_after": {str(k): v for k, v in sorted(state.items())},
                }
            )
        out.append({"case": case, "tolerance_us": tolerance, "drop": drop, "batches": batches})
    return {
        "rows": "[key, arrival_us, ts_us, candidate]",
        "expected": "[system_us, out_of_order, lateness_us (-1: not in play)]",
        "cases": out,
    }


def idle_clock(cases: int = 30, seed: int = 7) -> dict[str, Any]:
    """Clocks along a timeline of processing time: each step moves them to ``now_ms`` (or gives
    one of them input at ``now_ms``, which makes it active again)."""
    rnd = random.Random(seed)
    out = []
    for case in range(cases):
        timeout = rnd.choice([1000, 5000, 60_000])
        seen = rnd.randint(0, 10_000)
        start = (seen + rnd.randint(-120_000, 120_000)) * 1000  # leads or lags processing time
        clock = {"max_us": start, "seen_ms": seen, "advanced_ms": -1}
        now = seen
        steps = []
        for _ in range(rnd.randint(1, 8)):
            now += rnd.choice([0, 1, 250, timeout // 2, timeout, 3 * timeout])
            if rnd.random() < 0.15:  # input: the clock is active again from now
                clock = {"max_us": clock["max_us"], "seen_ms": now, "advanced_ms": -1}
                steps.append({"input_ms": now, "after": dict(clock)})
                continue
            maxima, seen_ms = {0: clock["max_us"]}, {0: clock["seen_ms"]}
            advanced = {} if clock["advanced_ms"] < 0 else {0: clock["advanced_ms"]}
            top, fired = advance_idle_keys(
                maxima, seen_ms, advanced, now_ms=now, timeout_ms=timeout
            )
            result = "active" if top is None else ("fired" if fired else "moved")
            clock = {
                "max_us": maxima[0],
                "seen_ms": clock["seen_ms"],
                "advanced_ms": advanced.get(0, -1),
            }
            steps.append({"now_ms": now, "result": result, "after": dict(clock)})
        initial = {"max_us": start, "seen_ms": seen, "advanced_ms": -1}
        out.append({"case": case, "timeout_ms": timeout, "clock": initial, "steps": steps})
    return {"cases": out}


def histogram_buckets() -> dict[str, Any]:
    """Per histogram: its bounds (µs) and values at, just below and just above each bound,
    below the first and above the last, with the bucket each falls in (how many bounds are
    below it)."""
    out = {}
    for name in HISTOGRAMS:
        bounds = bounds_us(name)
        values = sorted(
            {b + d for b in bounds for d in (-1, 0, 1)} | {bounds[0] - 10**9, bounds[-1] + 10**9}
        )
        out[name] = {
            "bounds_us": bounds,
            "values": [[v, sum(v > b for b in bounds)] for v in values],
        }
    return out


def batch_input() -> dict[str, Any]:
    """Whether a micro-batch read input: a source other than the heartbeat moved its offset
    from the batch before (``before`` null: the query's first batch, where any offset counts).
    Hand-written: the offsets log's lines as Spark writes them."""
    file = '{"logOffset":%d}'
    kafka = '{"clicks":{"0":%d,"1":7}}'
    tick = '{"wmobs_idle_tick":%d,"idle_since":1700000000000}'

    def log(file_offset: int, kafka_offset: int, tick_ms: int) -> list[str]:
        """The source lines of a query reading a file source and Kafka, with the heartbeat."""
        return [file % file_offset, kafka % kafka_offset, tick % tick_ms]

    cases = [
        ("nothing moved: a no-data batch", log(3, 5, 1), log(3, 5, 1), False),
        ("only the heartbeat ticked", log(3, 5, 2), log(3, 5, 1), False),
        ("the file source moved", log(4, 5, 1), log(3, 5, 1), True),
        ("Kafka moved as the heartbeat ticked", log(3, 6, 2), log(3, 5, 1), True),
        ("a source with no offset before", [file % 0, "-", tick % 1], ["-", "-", tick % 1], True),
        ("first batch, a source with an offset", [file % 0, "-", tick % 1], None, True),
        ("first batch, only the heartbeat", ["-", "-", tick % 1], None, False),
    ]
    return {
        "cases": [
            {"case": name, "now": now, "before": before, "read_input": expected}
            for name, now, before, expected in cases
        ]
    }


def durations() -> dict[str, Any]:
    """Durations as a policy's options take them, from Python and from SQL (hand-written):
    their microseconds, or the start of the error naming the option."""
    day = 86_400_000_000
    cases: list[tuple[str, int | str]] = [
        ("5 seconds", 5_000_000),
        ("1 hour 30 minutes", 5_400_000_000),
        ("250 ms", 250_000),
        ("INTERVAL 2 MINUTES", 120_000_000),
        ("interval 1 day", day),
        ("1.5 s", 1_500_000),
        ("3 weeks", 21 * day),
        ("0 seconds", 0),
        ("7 microseconds", 7),
        ("2 h 1 min 1 sec", 7_261_000_000),
        ("9999 weeks", 9999 * 7 * day),
        ("-1 second", "must not be negative"),
        ("5 parsecs", "is not a duration"),
        ("five seconds", "is not a duration"),
        ("", "empty"),
        ("   ", "empty"),
        ("600000 weeks", "is longer than 10,000 years"),
    ]
    return {
        "cases": [
            {"text": text, "us": found}
            if isinstance(found, int)
            else {"text": text, "error": found}
            for text, found in cases
        ]
    }


FILES = {
    "durations.json": durations,
    "worked_example.json": worked_example,
    "substream_streams.json": substream_streams,
    "idle_clock.json": idle_clock,
    "histogram_buckets.json": histogram_buckets,
    "batch_input.json": batch_input,
}


def render(name: str) -> str:
    return json.dumps(FILES[name](), indent=1) + "\n"


def main() -> None:
    for name in FILES:
        (HERE / name).write_text(render(name))
        print(HERE / name)


if __name__ == "__main__":
    main()
