"""Prometheus alerting rules for wmobs, rendered from one config block.

The shipped ``dashboards/wmobs-alerts.yaml`` is :func:`render` with the defaults of
:class:`RulesConfig` (a test keeps the two identical). To change a threshold or the job
selector, render your own: ``wmobs rules --delay-threshold 10m --selector 'job="etl"' > r.yaml``.

=============================  ========  ===============================================
alert                          severity  fires when (defaults)
=============================  ========  ===============================================
``WmobsWatermarkDelayHigh``    warning   watermark delay > 5m, for 10m
``WmobsWatermarkStalled``      warning   watermark unchanged for 15m while the query is
                                         active and reads rows, for 5m
``WmobsEventsDropped``         warning   a policy dropped rows, or Spark dropped rows by
                                         watermark, in the last 10m, for 5m
``WmobsDeadLetterGrowing``     warning   a policy's dead-lettered rows increasing over
                                         10m, for 15m
``WmobsQueryFailed``           critical  a query terminated with an exception in the last
                                         10m
``WmobsSourceIdle``            info      no input rows for more than 10m, for 1m
``WmobsInputWatermarkBehind``  warning   one input's watermark 5m behind the query's most
                                         advanced input, for 10m
``WmobsSourceBacklogGrowing``  warning   a source's backlog above 1000 records and growing
                                         over 10m, for 15m
=============================  ========  ===============================================
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, fields

__all__ = ["ALERTS", "RulesConfig", "parse_duration", "render"]

_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
# One PromQL label matcher: a label name, an operator and a quoted string (PromQL's three
# quotes; a backtick string has no escapes).
_QUOTED = r"""(?:"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)"""
_MATCHER = rf"\s*[A-Za-z_][A-Za-z0-9_]*\s*(?:=~|!~|!=|=)\s*{_QUOTED}\s*"
_MATCHERS = re.compile(rf"{_MATCHER}(?:,{_MATCHER})*,?\s*")


def parse_duration(text: str) -> int:
    """A Prometheus duration (``90s``, ``5m``, ``1h30m``) in seconds."""
    match = _DURATION.match(text.strip())
    if not text.strip() or match is None:
        raise ValueError(f"not a Prometheus duration (like 30s, 5m, 1h30m): {text!r}")
    h, m, s = (int(g or 0) for g in match.groups())
    return h * 3600 + m * 60 + s


@dataclass(frozen=True)
class RulesConfig:
    """Every threshold and selector of the alerting rules: the one place to change them."""

    selector: str = ""
    """PromQL label matchers added to every selector, e.g. ``job="wmobs"`` (default: none)."""
    delay_threshold: str = "5m"
    delay_for: str = "10m"
    """``WmobsWatermarkDelayHigh``: the watermark delay above ``delay_threshold`` for this
    long."""
    stall_window: str = "15m"
    """``WmobsWatermarkStalled``: the watermark did not change within this window although the
    query is active and read rows in it; ``stall_for`` is how long that must last."""
    stall_for: str = "5m"
    drop_window: str = "10m"
    """``WmobsEventsDropped``: rows dropped, by a time policy or by Spark's watermark, within
    this window (``drop_for``: for how long)."""
    drop_for: str = "5m"
    dead_letter_window: str = "10m"
    dead_letter_for: str = "15m"
    """``WmobsDeadLetterGrowing``: rows dead-lettered in every ``dead_letter_window`` for this
    long."""
    failure_window: str = "10m"
    """``WmobsQueryFailed`` fires at once, for a failure within this window."""
    idle_threshold: str = "10m"
    idle_for: str = "1m"
    """``WmobsSourceIdle`` (info): no input rows for ``idle_threshold``, for this long."""
    input_behind_threshold: str = "5m"
    input_behind_for: str = "10m"
    """``WmobsInputWatermarkBehind``: one input's watermark more than ``input_behind_threshold``
    behind the query's most advanced input, for this long."""
    backlog_records: str = "1000"
    backlog_window: str = "10m"
    backlog_for: str = "15m"
    """``WmobsSourceBacklogGrowing``: a source's backlog (records not read yet) above
    ``backlog_records`` and still growing over ``backlog_window``, for this long."""
    runbook_url: str = "https://github.com/wmobs/wmobs/blob/main/docs/runbook.md"
    """The runbook document; each alert links to its section (``#wmobswatermarkdelayhigh``)."""

    def __post_init__(self) -> None:
        selector = self.selector.strip()
        if selector.startswith("{") and selector.endswith("}"):  # a whole selector: its inside
            selector = selector[1:-1].strip()
        if selector and not _MATCHERS.fullmatch(selector):
            raise ValueError(
                'selector: PromQL label matchers with quoted values, like job="etl" or'
                f' job="etl", env!~"dev|test"; got {self.selector!r}'
            )
        object.__setattr__(self, "selector", selector.rstrip(", "))
        for f in fields(self):
            if f.name.endswith(("_threshold", "_for", "_window")):
                parse_duration(getattr(self, f.name))
        if not str(self.backlog_records).isdigit():
            raise ValueError(f"backlog_records: a number of records, got {self.backlog_records!r}")

    def sel(self, *matchers: str) -> str:
        parts = [m for m in (self.selector, *matchers) if m]
        return "{" + ", ".join(parts) + "}" if parts else ""


@dataclass(frozen=True)
class Alert:
    name: str
    severity: str
    expr: str
    for_: str
    summary: str
    description: str


_BY = "sum by (job, instance, query)"


def alerts(c: RulesConfig) -> list[Alert]:
    failed = "wmobs_query_terminations_total" + c.sel('outcome="failed"')
    dropped = c.sel('action="dropped"')
    return [
        Alert(
            "WmobsWatermarkDelayHigh",
            "warning",
            f"wmobs_watermark_delay_seconds{c.sel()} > {parse_duration(c.delay_threshold)}",
            c.delay_for,
            "A streaming query's watermark is far behind the wall clock.",
            "The watermark of query {{ $labels.query }} ({{ $labels.instance }}) is "
            "{{ $value | humanizeDuration }} behind the wall clock "
            f"(threshold {c.delay_threshold}).",
        ),
        Alert(
            "WmobsWatermarkStalled",
            "warning",
            f"changes(wmobs_watermark_timestamp_seconds{c.sel()}[{c.stall_window}]) == 0"
            f" and wmobs_query_active{c.sel()} == 1"
            f" and increase(wmobs_input_rows_total{c.sel()}[{c.stall_window}]) > 0",
            c.stall_for,
            "A streaming query reads rows but its watermark does not advance.",
            "The watermark of query {{ $labels.query }} ({{ $labels.instance }}) has not "
            f"advanced for {c.stall_window} although the query is active and reading rows.",
        ),
        Alert(
            "WmobsEventsDropped",
            "warning",
            f"{_BY} (increase(wmobs_policy_events_total{dropped}"
            f"[{c.drop_window}])) > 0"
            f" or {_BY} (increase(wmobs_rows_dropped_by_watermark_total{c.sel()}"
            f"[{c.drop_window}])) > 0",
            c.drop_for,
            "A streaming query is dropping events.",
            "Query {{ $labels.query }} ({{ $labels.instance }}) dropped "
            "{{ $value | humanize }} rows by time policy or watermark in the last "
            f"{c.drop_window}.",
        ),
        Alert(
            "WmobsDeadLetterGrowing",
            "warning",
            "sum by (job, instance, query, policy) "
            f"(increase(wmobs_dead_letter_rows_total{c.sel()}[{c.dead_letter_window}])) > 0",
            c.dead_letter_for,
            "Rows keep arriving in a streaming query's dead-letter destination.",
            "Policy {{ $labels.policy }} of query {{ $labels.query }} ({{ $labels.instance }}) "
            "dead-lettered "
            "{{ $value | humanize }} rows in the last "
            f"{c.dead_letter_window}, continuously for {c.dead_letter_for}.",
        ),
        Alert(
            "WmobsQueryFailed",
            "critical",
            f"increase({failed}[{c.failure_window}]) > 0"
            f" or ({failed} > 0 unless {failed} offset {c.failure_window})",
            "0m",
            "A streaming query terminated with an exception.",
            "Query {{ $labels.query }} ({{ $labels.instance }}) failed in the last "
            f"{c.failure_window}; see the wmobs.query_failed log event for the exception.",
        ),
        Alert(
            "WmobsSourceIdle",
            "info",
            f"wmobs_source_idle_seconds{c.sel()} > {parse_duration(c.idle_threshold)}",
            c.idle_for,
            "A streaming query has read no input for a while.",
            "Query {{ $labels.query }} ({{ $labels.instance }}) has read no input rows for "
            "{{ $value | humanizeDuration }}; "
            f"its windows will not close without new data (threshold {c.idle_threshold}).",
        ),
        Alert(
            "WmobsInputWatermarkBehind",
            "warning",
            f"wmobs_input_watermark_delay_seconds{c.sel()}"
            " - on (job, instance, query) group_left"
            f" min by (job, instance, query) (wmobs_input_watermark_delay_seconds{c.sel()})"
            f" > {parse_duration(c.input_behind_threshold)}",
            c.input_behind_for,
            "One input of a streaming query holds its watermark back.",
            "Input {{ $labels.policy }} of query {{ $labels.query }} ({{ $labels.instance }}) "
            "is {{ $value | humanizeDuration }} behind the query's most advanced input "
            f"(threshold {c.input_behind_threshold}); the query's watermark waits for it.",
        ),
        Alert(
            "WmobsSourceBacklogGrowing",
            "warning",
            f"wmobs_source_backlog_records{c.sel()} > {c.backlog_records}"
            f" and deriv(wmobs_source_backlog_records{c.sel()}[{c.backlog_window}]) > 0",
            c.backlog_for,
            "A streaming query falls further and further behind its source.",
            "Source {{ $labels.source }} of query {{ $labels.query }} ({{ $labels.instance }}) "
            "holds {{ $value | humanize }} records the query has not read, and the number has "
            f"grown over {c.backlog_window} for {c.backlog_for}.",
        ),
    ]


ALERTS: tuple[str, ...] = tuple(a.name for a in alerts(RulesConfig()))


def _q(text: str) -> str:
    """A YAML double-quoted scalar (JSON strings are valid YAML)."""
    return json.dumps(text, ensure_ascii=False)


def render(config: RulesConfig | None = None) -> str:
    """The rules file (YAML) for ``config``."""
    c = config or RulesConfig()
    lines = [
        "# wmobs alerting rules. Generated by `wmobs rules` (wmobs/rules.py): render your own",
        "# with other thresholds instead of editing this file; the runbook explains each alert.",
        "groups:",
        "  - name: wmobs",
        "    rules:",
    ]
    for a in alerts(c):
        lines += [
            f"      - alert: {a.name}",
            "        expr: |-",
            f"          {a.expr}",
            f"        for: {a.for_}",
            "        labels:",
            f"          severity: {a.severity}",
            "        annotations:",
            f"          summary: {_q(a.summary)}",
            f"          description: {_q(a.description)}",
            f"          runbook_url: {_q(c.runbook_url + '#' + a.name.lower())}",
        ]
    return "\n".join(lines) + "\n"
