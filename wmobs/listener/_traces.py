"""A trace of every micro-batch, built from its progress event on the driver.

Each micro-batch of each query is one trace: a root span ``micro-batch <query>`` from the
trigger's start (``progress.timestamp``) for ``durationMs.triggerExecution``, and a child span
per phase Spark timed (``latestOffset``, ``walCommit``, ``getBatch``, ``queryPlanning``,
``addBatch``, ``commitOffsets``). Spark reports each phase's duration, not its start: the
phases are laid end to end from the trigger's start in the order Spark runs them
(MicroBatchExecution), so what Spark did between them shows as the gap at the end. Under
``addBatch``, where the query's tasks run, a span per time policy carries its verdicts of the
micro-batch. Each micro-batch's root span links to the one before it in the same run, so a
viewer walks a run from batch to batch; every span carries the query's id and run id.

Nothing is added to the query's tasks; spans are made in the listener callback (O(phases +
policies), no I/O) and exported by the provider's own processor (the SDK's batch processor on
its thread).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanContext, SpanKind, Tracer, TracerProvider

from wmobs._version import __version__
from wmobs.listener._observed import PolicyCounts
from wmobs.listener._snapshots import BatchSummary, format_timestamp, parse_timestamp

__all__ = ["PHASES", "BatchTracer"]

PHASES: tuple[str, ...] = (
    "latestOffset",
    "walCommit",
    "getBatch",
    "queryPlanning",
    "addBatch",
    "commitOffsets",
)
"""Spark's timed phases of a micro-batch (``durationMs`` keys), in the order it runs them."""

_NANOS_PER_MS = 1_000_000


def _policy_attributes(label: str, counts: PolicyCounts) -> dict[str, Any]:
    attributes: dict[str, Any] = {"wmobs.policy": label}
    if counts.engine is not None:
        attributes["wmobs.policy.engine"] = counts.engine
    if counts.dead_letter_plan is not None:
        attributes["wmobs.policy.dead_letters"] = counts.dead_letter_plan
    judged = 0
    for (rule, action), rows in sorted(counts.events.items()):
        attributes[f"wmobs.policy.{rule}.{action}"] = rows
        judged += rows
    attributes["wmobs.policy.events"] = judged
    if counts.dead_letter_rows is not None:
        attributes["wmobs.policy.dead_letter_rows"] = counts.dead_letter_rows
    if counts.idle_timeout_firings is not None:
        attributes["wmobs.policy.idle_timeout_firings"] = counts.idle_timeout_firings
    return attributes


class BatchTracer:
    """Makes the spans of each micro-batch on ``provider``."""

    def __init__(self, provider: TracerProvider) -> None:
        self._tracer: Tracer = provider.get_tracer("wmobs", __version__)
        self._previous: dict[str, SpanContext] = {}
        """Per run id: the root span of its latest micro-batch (the next one links to it)."""

    def on_progress(self, progress: Mapping[str, Any], summary: BatchSummary) -> None:
        started = parse_timestamp(progress.get("timestamp"))
        durations: Mapping[str, Any] = progress.get("durationMs") or {}
        total_ms = durations.get("triggerExecution")
        if started is None or total_ms is None:
            return
        start_ns = round(started * 1e9)
        end_ns = start_ns + int(total_ms) * _NANOS_PER_MS
        run_id = str(progress.get("runId"))
        attributes: dict[str, Any] = {
            "wmobs.query": summary.label,
            "spark.query.id": str(progress.get("id")),
            "spark.query.run_id": run_id,
            "spark.batch.id": summary.batch_id,
            "spark.batch.input_rows": summary.input_rows,
        }
        if progress.get("name"):
            attributes["spark.query.name"] = str(progress["name"])
        if summary.output_rows is not None:
            attributes["spark.batch.output_rows"] = summary.output_rows
        if summary.watermark is not None:
            attributes["spark.watermark"] = format_timestamp(summary.watermark)
            attributes["wmobs.watermark.delay_s"] = round(end_ns / 1e9 - summary.watermark, 3)
        if summary.replayed:
            attributes["spark.batch.replayed"] = True
        for key, ms in durations.items():
            if key not in PHASES and key != "triggerExecution":
                attributes[f"spark.duration.{key}_ms"] = ms  # Spark's phases not laid out
        previous = self._previous.get(run_id)
        root = self._tracer.start_span(
            f"micro-batch {summary.label}",
            context=Context(),  # a trace of its own, whatever the thread's context
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=[Link(previous)] if previous is not None else None,
            start_time=start_ns,
        )
        parent = trace.set_span_in_context(root)
        at = start_ns
        for phase in PHASES:
            ms = durations.get(phase)
            if ms is None:
                continue
            phase_end = min(at + int(ms) * _NANOS_PER_MS, end_ns)
            span = self._tracer.start_span(
                phase, context=parent, start_time=at, attributes={"spark.phase": phase}
            )
            if phase == "addBatch":
                self._policy_spans(span, summary, at, phase_end)
            span.end(end_time=phase_end)
            at = phase_end
        root.end(end_time=end_ns)
        self._previous[run_id] = root.get_span_context()

    def _policy_spans(self, add_batch: Any, summary: BatchSummary, start: int, end: int) -> None:
        context = trace.set_span_in_context(add_batch)
        for label, counts in summary.policies.items():
            self._tracer.start_span(
                f"policy {label}",
                context=context,
                start_time=start,
                attributes=_policy_attributes(label, counts),
            ).end(end_time=end)

    def on_terminated(self, run_id: str) -> None:
        self._previous.pop(run_id, None)
