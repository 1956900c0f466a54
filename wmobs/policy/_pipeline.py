"""A time policy inside a Spark Declarative Pipelines query function (``@dp.table``,
``@dp.append_flow``, ``@dp.temporary_view``), where nothing may analyse a DataFrame: the policy
is one call by name of the extension's ``wmobs_policy`` over ``struct(*)``, which the
extension's analyzer rule plans on the server when the pipeline analyses the flow (the plan of
SQL's ``wmobs_time_policy``, ``PolicyPlan.java``), the checks on the input's columns with it.
The flow's checkpoint, under the pipeline's storage, is found there too.

Here: whether a query function is running (:func:`pipeline_flow`), and the policy's options as
SQL's ``wmobs_time_policy`` takes them (:func:`sql_options`); the switch gives the policy to the
JVM engine (:func:`wmobs.policy._engine.planned_in_pipeline`), which plans the call
(:mod:`wmobs.policy._jvm._pipeline`)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wmobs.policy._deadletter import DeadLetter
    from wmobs.policy._time_policy import TimePolicy

__all__ = ["flow_policy_name", "pipeline_flow", "sql_options"]


def pipeline_flow(spark: Any) -> str | None:
    """The flow whose query function is running on this thread (its name as the decorator
    gave it), or None outside one: Spark's pipeline analysis context, which PySpark's
    ``spark-pipelines`` sets around each query function (PySpark 4.1+, Spark Connect)."""
    if "connect" not in type(spark).__module__:  # Connect sessions only (a classic
        return None  # session's .client raises)
    client = getattr(spark, "client", None)
    local = getattr(client, "thread_local", None)
    extensions = getattr(local, "user_context_extensions", None) or []
    if not extensions:
        return None
    try:
        from pyspark.sql.connect.proto import PipelineAnalysisContext
    except ImportError:  # PySpark before 4.1: no pipelines
        return None
    for _, message in extensions:
        if message.Is(PipelineAnalysisContext.DESCRIPTOR):
            context = PipelineAnalysisContext()
            message.Unpack(context)
            if context.HasField("flow_name"):  # a file's top level has no flow
                return str(context.flow_name)
    return None


def _duration(us: int | None) -> str | None:
    """A duration the policy resolved (to microseconds, as its checks read it), in the form
    the extension reads: not the text the user wrote, which Python's parser may read where
    Java's would not (a non-breaking space, another script's digits)."""
    return None if us is None else f"{us} microseconds"


def flow_policy_name(flow: str, *, longest: int) -> str:
    """An unnamed policy's name in pipeline flow ``flow``: the flow's own (its characters that
    a policy's name cannot have as ``_``), the same in every run. The name generated outside a
    pipeline counts policies in the order they are made, which here is the order the pipeline
    imports its files: a file added would rename the policies of the files after it, and their
    counts' folders in the flows' checkpoints with them. At most ``longest`` characters."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", flow)[:longest]
    return name if name.strip(".") else "_"


def sql_options(
    policy: TimePolicy,
    *,
    name: str,
    sink: DeadLetter | None,
    checkpoint_location: str | None,
    arrival_default: bool,
) -> dict[str, Any]:
    """``policy``'s options as SQL's ``wmobs_time_policy`` takes them, for the extension to plan
    without analysing the input. ``arrival_default``: ``arrival_time`` left at its default
    (which the extension applies alike: the column ``ArrivalTime`` where the input has one,
    else the micro-batch's time). ``name``: the policy's, or for an unnamed one its flow's
    (:func:`flow_policy_name`)."""
    us = policy.tolerances
    options: dict[str, Any] = {
        "event_time": policy.event_time,
        "early_arrival": _duration(us.early_arrival_us),
        "early_arrival_action": policy.early_arrival_action,
        "late_arrival": _duration(us.late_arrival_us),
        "late_arrival_action": policy.late_arrival_action,
        "out_of_order": _duration(us.out_of_order_us),
        "out_of_order_action": policy.out_of_order_action,
        "substream_by": None if policy.substream_by is None else ",".join(policy.substream_by),
        "substream_ttl": _duration(us.substream_ttl_us),
        "substream_skew": _duration(us.substream_skew_us),
        "idle_timeout": _duration(us.idle_timeout_us),
        "idle_check_interval": _duration(us.idle_check_interval_us),
        "distributions": policy.distributions,
        "name": name,
        "dead_letter": None if sink is None else sink.directory,
        "checkpoint_location": checkpoint_location,
    }
    if not arrival_default:
        options["arrival_time"] = policy.arrival_time
    return options
