"""The real substreams ``mapInArrow`` stage, run without a JVM."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa

from wmobs import Storage
from wmobs.policy._python._substream_judge import SubstreamConfig
from wmobs.policy._python._substream_stage import Columns, substream_stage
from wmobs.policy._python._substream_state import StateStore
from wmobs.policy._verdicts import HEARTBEAT, REAL


class SubstreamStage:
    """The real substreams ``mapInArrow`` stage, run without a JVM: state files in
    ``directory``, a controlled micro-batch time (``now``, unix seconds, in each row's batch
    time column, as Spark's batch timestamp) and micro-batch id. Columns k, ts, arrival, v
    (verdict bit 1 drops, out of order is 32), idle and t (the batch time); no tolerance,
    adjusting; ``options`` overrides the
    :class:`wmobs.policy._python._substream_judge.SubstreamConfig`. The stage's own clock
    reads a wall clock far ahead of every batch time: a stage that read it would forget every
    key with a TTL at once."""

    def __init__(
        self, directory: Path | str, storage: Storage | None = None, **options: Any
    ) -> None:
        self.now = 0.0
        self.batch = 0
        defaults = {"tolerance_us": 0, "drop": False, "candidate_bits": 1, "ooo_bit": 32}
        config = SubstreamConfig(**(defaults | options))
        columns = Columns("k", "ts", "arrival", "v", "idle", ("ts", "v", "idle"), batch_time="t")
        self.stage = substream_stage(
            config,
            columns,
            checkpoint=str(directory),
            directory="state",
            storage=storage,
            clock=lambda: self.now + 10**9,
            batch_id=lambda: self.batch,
        )
        self.store = StateStore(f"{str(directory).rstrip('/')}/state", storage)

    def feed(
        self, rows: list[tuple[int, int]], heartbeats: Iterable[int] = ()
    ) -> list[dict[str, Any]]:
        """One micro-batch: ``(key, ts)`` rows in arrival order, then a heartbeat row per
        bucket in ``heartbeats``; the output rows."""

        beats = list(heartbeats)
        batch = pa.record_batch(
            {
                "k": pa.array([k for k, _ in rows] + beats, pa.int64()),
                "ts": pa.array([t for _, t in rows] + [0] * len(beats), pa.int64()),
                "arrival": pa.array(range(len(rows) + len(beats)), pa.int64()),
                "v": pa.array([0] * (len(rows) + len(beats)), pa.int64()),
                "idle": pa.array([REAL] * len(rows) + [HEARTBEAT] * len(beats), pa.int64()),
                "t": pa.array([int(self.now * 1000)] * (len(rows) + len(beats)), pa.int64()),
            }
        )
        out = [row for part in self.stage(iter([batch])) for row in part.to_pylist()]
        self.batch += 1
        return out
