"""The verdicts a time policy gives a row, as bits of one internal column, and the names of
the internal columns the policy's stages pass between them."""

from __future__ import annotations

__all__ = [
    "DROPPED_BITS",
    "DROP_POLICIES",
    "EARLY_ADJUSTED",
    "EARLY_DROPPED",
    "HEARTBEAT",
    "INVALID_DROPPED",
    "LATE_ADJUSTED",
    "LATE_DROPPED",
    "OOO_ADJUSTED",
    "OOO_DROPPED",
    "REAL",
    "VERDICT_BITS",
]

# Verdict bits, one per (rule, action) that can happen.
INVALID_DROPPED = 1
EARLY_ADJUSTED = 2
EARLY_DROPPED = 4
LATE_ADJUSTED = 8
LATE_DROPPED = 16
OOO_ADJUSTED = 32
OOO_DROPPED = 64
VERDICT_BITS: dict[tuple[str, str], int] = {
    ("invalid_time", "dropped"): INVALID_DROPPED,
    ("early_arrival", "adjusted"): EARLY_ADJUSTED,
    ("early_arrival", "dropped"): EARLY_DROPPED,
    ("late_arrival", "adjusted"): LATE_ADJUSTED,
    ("late_arrival", "dropped"): LATE_DROPPED,
    ("out_of_order", "adjusted"): OOO_ADJUSTED,
    ("out_of_order", "dropped"): OOO_DROPPED,
}
DROP_POLICIES: list[tuple[str, int]] = [
    (rule, bit) for (rule, action), bit in VERDICT_BITS.items() if action == "dropped"
]
"""``(rule, bit)`` of every dropping verdict, in the order the rules judge."""
DROPPED_BITS = sum(bit for _, bit in DROP_POLICIES)

# Internal columns (a user column with one of these names is refused).
TS = "wmobs__ts_us"
ARRIVAL = "wmobs__arrival_us"
VERDICT = "wmobs__verdict"
KEY = "wmobs__key"
WATERMARK = "wmobs_watermark_ms"
BATCH_TIME = "wmobs_batch_time_ms"
IDLE = "wmobs__idle"
REAL = -1
"""The idle column of a real row; synthetic rows carry their firings (>= 0)."""
HEARTBEAT = -2
"""The idle column of a heartbeat row on its way into the substreams' stateful operator."""
DELAY = "wmobs__delay_us"
"""Arrival time - event time (µs) of a valid row."""
LATENESS = "wmobs__lateness_us"
"""How far a row still in play is behind the largest system timestamp before it (µs)."""
DELAY_BUCKET = "wmobs__delay_bucket"
LATENESS_BUCKET = "wmobs__lateness_bucket"
"""The histogram bucket of DELAY and LATENESS, computed before ``observe`` counts them."""
BUCKETS = "wmobs__buckets"
"""Both buckets in one index (:func:`wmobs.observations.joint_histogram_index`)."""
QUEUE = "wmobs__queue_us"
"""The micro-batch's time - arrival time (µs) of a row with an arrival time."""
QUEUE_BUCKET = "wmobs__queue_bucket"
EVENT = "wmobs__event_us"
"""The event time (µs) that wmobs' observation aggregate reads, computed before ``observe``."""
PLACE = "wmobs__place"
"""Substreams: a row's place before the shuffle by key, which orders a key's rows of equal
arrival the same way in every attempt of a task (the shuffle hands over each input partition's
rows in their order, but the partitions in an order that changes from one attempt to the next):
on the JVM engine its input partition and its place in it (``wmobs_row_place``), on the Python
engine its input partition, the order they come in then doing the rest."""
SLOWEST = "wmobs__key_slowest_us"
FASTEST = "wmobs__key_fastest_us"
"""Substreams: the smallest and the largest of a partition's keys' largest system timestamps
(µs), on one of its rows (null on the others), from which ``observe`` finds the batch's spread."""
INTERNAL = (
    TS, ARRIVAL, VERDICT, KEY, WATERMARK, BATCH_TIME, IDLE, DELAY, LATENESS, DELAY_BUCKET,
    LATENESS_BUCKET, BUCKETS, EVENT, QUEUE, QUEUE_BUCKET, SLOWEST, FASTEST, PLACE,
)  # fmt: skip
