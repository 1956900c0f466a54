"""The Python engine's idle-timeout heartbeat: a streaming Python data source (see
:mod:`wmobs.policy._python._idle`).

On the driver, ``latestOffset`` decides whether a tick is due (globally: only once the query
has been idle for the timeout, judged from its offsets log; with substreams: every check
interval, since any key may be idle while others are busy). A tick is a new offset, so Spark
runs a micro-batch even when no other source has data. On an executor, ``read`` turns the tick
into rows: globally the one synthetic row that moves the watermark (computed from the batch's
watermark in the checkpoint), with substreams one wake-up row per key bucket for the stateful
operator, which decides per key.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from wmobs.policy._python._checkpoint import parse_offsets, task_batch_times, task_micro_batch
from wmobs.policy._python._idle import (
    TICK,
    InputActivity,
    global_synthetic,
    next_tick,
    quiet_only,
    read_input,
)
from wmobs.policy._python._watermark_source import NamedSource
from wmobs.policy._storage import Storage

__all__ = ["SCHEMA", "SOURCE_NAME", "IdleHeartbeatSource"]

SOURCE_NAME = "wmobs_idle_heartbeat"
SCHEMA = "wmobs_idle_bucket INT, wmobs_idle_ts_us LONG, wmobs_idle_firings LONG"


def _offsets_log(checkpoint: str, storage: Storage) -> InputActivity:
    base = storage.resolve(checkpoint.rstrip("/") + "/offsets")

    def names() -> list[str]:
        try:
            return [entry.name for entry in storage.files(base)]
        except OSError:
            return []

    def text(batch: int) -> str:
        return storage.read_text(base.child(str(batch)))

    return InputActivity(names, text)


try:  # PySpark 4.2 on: Trigger.AvailableNow runs Python sources (else one micro-batch)
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    _MIXINS: tuple[type, ...] = (SupportsTriggerAvailableNow,)
except ImportError:  # pragma: no cover - PySpark 4.0 and 4.1
    _MIXINS = ()


class _Reader(DataSourceStreamReader, *_MIXINS):  # type: ignore[misc]
    def __init__(self, options: dict[str, str]) -> None:
        self.checkpoint = options.get("checkpoint", "")
        self.relative_to = options.get("relative_to", "")
        self.storage = Storage.decode(options.get("storage", ""))
        self.mode = options.get("mode", "global")
        self.timeout_ms = int(options["timeout_ms"])
        self.interval_ms = int(options["interval_ms"])
        self.delay_ms = int(options.get("delay_ms", "0"))
        self.buckets = int(options.get("buckets", "0"))
        self._activity: InputActivity | None = None
        self._next_refresh = 0
        self._latest: dict[str, Any] | None = None
        self._available_now_ms: int | None = None

    def prepareForTriggerAvailableNow(self) -> None:
        """A ``Trigger.AvailableNow`` run sees the heartbeat as of its start: at most one tick,
        decided then."""
        self._available_now_ms = int(time.time() * 1000)

    def initialOffset(self) -> dict[str, Any]:
        return {TICK: 0}

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        """The latest tick after ``start``. Spark 4.2 on passes ``start`` (the end of the last
        micro-batch) and a read limit, which a heartbeat has no use for; Spark 4.0 and 4.1 pass
        nothing, and the start is then the offset this reader gave last."""
        if start is None:
            start = self.initialOffset() if self._latest is None else self._latest
        self._latest = self._latest_after(start)
        return self._latest

    def _latest_after(self, start: dict[str, Any]) -> dict[str, Any]:
        now_ms = self._available_now_ms or int(time.time() * 1000)
        if now_ms - int(start.get(TICK, 0)) < self.interval_ms:
            return start
        idle_since: int | None = None
        if self.mode == "global":
            if self._activity is None:
                self._activity = _offsets_log(self.checkpoint, self.storage)
            refreshed = now_ms >= self._next_refresh
            if refreshed:
                self._look(self._activity, now_ms)
            last_input = self._activity.last_input_ms
            if last_input is not None and now_ms >= last_input + self.timeout_ms and not refreshed:
                # A tick is due by what the log said at the last look: input may have come
                # since (a micro-batch between two looks). Looked at again before it is given.
                self._look(self._activity, now_ms)
                last_input = self._activity.last_input_ms
            if last_input is None:
                return start  # no input yet: nothing to close
            idle_since = last_input + self.timeout_ms
        return next_tick(
            start,
            now_ms=now_ms,
            interval_ms=self.interval_ms,
            idle_since_ms=idle_since,
            available_now=self._available_now_ms is not None,
        )

    def _look(self, activity: InputActivity, now_ms: int) -> None:
        """Reads the offsets log again; the next look is due a check interval on."""
        activity.refresh()
        self._next_refresh = now_ms + self.interval_ms

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        if end.get(TICK) == start.get(TICK):
            return []
        return [InputPartition(json.dumps([start, end]))]

    def read(self, partition: InputPartition) -> Iterator[tuple[int | None, int | None, int]]:
        start, end = json.loads(partition.value)
        if quiet_only(end, global_mode=self.mode == "global") and self._read_input():
            # The query is not idle: a source had input in this very micro-batch (a tick
            # decided as a restarted query or an AvailableNow run met a backlog). No clock
            # moves, or the backlog's rows that later micro-batches read would be judged
            # against it.
            return
        if self.mode != "global":
            for bucket in range(self.buckets):  # wake every bucket; each decides per key
                yield (bucket, None, 0)
            return
        found = task_batch_times(self.checkpoint, self.storage, self.relative_to)
        synthetic = global_synthetic(
            start,
            end,
            watermark_ms=found.watermark_ms,
            delay_ms=self.delay_ms,
            timeout_ms=self.timeout_ms,
        )
        if synthetic is not None:
            yield (None, synthetic[0], synthetic[1])

    def _read_input(self) -> bool:
        """Whether a source other than the heartbeat moved its offset in the running batch."""
        task = task_micro_batch(self.checkpoint, self.relative_to)
        log = _offsets_log(task.checkpoint, self.storage)

        def sources(batch: int) -> tuple[str, ...]:
            return parse_offsets(log.read_text(batch)).sources

        before = None if task.batch_id == 0 else sources(task.batch_id - 1)
        return read_input(sources(task.batch_id), before)


class IdleHeartbeatSource(NamedSource):
    """``spark.readStream.format("wmobs_idle_heartbeat").options(...).load()`` (internal)."""

    NAME = SOURCE_NAME
    SCHEMA = SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _Reader(dict(self.options))
