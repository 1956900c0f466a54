"""wmobs' event distributions as OTLP histograms, for its own OTLP push (:mod:`._otlp`).

``wmobs_event_*_seconds`` are counted inside the query and arrive as bucket counts, which
OpenTelemetry's API cannot record; the SDK's exporters accept data points built directly. Each
policy's distribution is a ``HistogramDataPoint`` with its bounds and counts, in the
temporality the exporter prefers (``OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE``), as
the SDK's own instruments are:

- **cumulative** (the default): the counts since the series began, from the start of the
  collection before the one that first saw it; a series that went (its label forgotten after
  the retention) and comes back from zero starts again, with a new start time, as does one
  whose counts went down.
- **delta**: the counts since the collection before, which is the point's start.

Runs on the SDK's export thread (and ``close``'s); a lock keeps two collections apart.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Histogram,
    HistogramDataPoint,
    Metric,
)

from wmobs.listener._tracker import Tracker
from wmobs.listener.metrics import EVENT_HISTOGRAMS
from wmobs.observations import HISTOGRAMS

__all__ = ["EventHistograms"]


@dataclass(frozen=True)
class _Seen:
    """A series at the collection before: its counts, and the start of its cumulative run."""

    start_ns: int
    count: int
    sum_us: float
    buckets: tuple[int, ...]


class EventHistograms:
    """The event distributions of ``tracker``'s policies, collection after collection."""

    def __init__(self, tracker: Tracker, *, delta: bool, start_ns: int) -> None:
        self._tracker = tracker
        self._delta = delta
        self._temporality = (
            AggregationTemporality.DELTA if delta else AggregationTemporality.CUMULATIVE
        )
        self._lock = threading.Lock()
        self._before_ns = start_ns  # the collection before (the exporter's start, at first)
        self._seen: dict[tuple[str, str, str], _Seen] = {}

    def collect(self, now_ns: int) -> list[Metric]:
        """Every distribution that has a series, as of ``now_ns``."""
        with self._lock:
            points: dict[str, list[HistogramDataPoint]] = {which: [] for which in EVENT_HISTOGRAMS}
            seen: dict[tuple[str, str, str], _Seen] = {}
            for snap in self._tracker.snapshots():
                for label, policy in snap.policies.items():
                    for which in EVENT_HISTOGRAMS:
                        counts = policy.histograms.get(which)
                        if counts is None:
                            continue
                        key = (which, snap.label, label)
                        now = (counts.count, counts.sum_us, tuple(counts.buckets))
                        point, seen[key] = self._point(key, now, now_ns)
                        points[which].append(point)
            self._seen = seen  # a series not seen now starts again if it comes back
            self._before_ns = now_ns
            return [self._metric(which, found) for which, found in points.items() if found]

    def _point(
        self, key: tuple[str, str, str], now: tuple[int, float, tuple[int, ...]], now_ns: int
    ) -> tuple[HistogramDataPoint, _Seen]:
        count, sum_us, buckets = now
        before = self._seen.get(key)
        if before is not None and (
            count < before.count
            or len(buckets) != len(before.buckets)
            or any(b < a for a, b in zip(before.buckets, buckets, strict=True))
        ):
            before = None  # counted from zero again: a new series
        start_ns = self._before_ns if before is None else before.start_ns
        seen = _Seen(start_ns, count, sum_us, buckets)
        if self._delta and before is not None:
            count -= before.count
            sum_us -= before.sum_us
            buckets = tuple(b - a for a, b in zip(before.buckets, buckets, strict=True))
        point = HistogramDataPoint(
            attributes={"query": key[1], "policy": key[2]},
            start_time_unix_nano=self._before_ns if self._delta else start_ns,
            time_unix_nano=now_ns,
            count=count,
            sum=sum_us / 1e6,
            bucket_counts=list(buckets),
            explicit_bounds=list(HISTOGRAMS[key[0]]),
            min=None,  # type: ignore[arg-type]  # not counted: OTLP's min and max are optional
            max=None,  # type: ignore[arg-type]
        )
        return point, seen

    def _metric(self, which: str, points: list[HistogramDataPoint]) -> Metric:
        prometheus, description = EVENT_HISTOGRAMS[which]
        return Metric(
            name="wmobs.event." + prometheus.removeprefix("wmobs_event_").removesuffix("_seconds"),
            description=description,
            unit="s",
            data=Histogram(data_points=points, aggregation_temporality=self._temporality),
        )
