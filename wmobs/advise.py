"""Which tolerance to choose: the tolerances that would have kept 99 %, 99.9 % and 99.99 % of the
rows, from the distributions every time policy counts exactly inside the query.

``wmobs_event_lateness_seconds`` answers ``out_of_order``: a row is out of order when it is more
than the tolerance behind the largest system timestamp before it, so a tolerance ``t`` keeps
exactly the rows whose lateness is at most ``t``. ``wmobs_event_arrival_delay_seconds``
answers ``late_arrival`` (a row is late when its delay is above the tolerance) and
``early_arrival`` (early when its delay is below minus the tolerance). Suggestions are bucket
bounds (:data:`wmobs.observations.HISTOGRAMS`), so each keeps *at least* its fraction; the
fraction a configured tolerance drops or adjusts is exact at a bound and a range between two.

Usage::

    wmobs advise --metrics-url http://127.0.0.1:9464/metrics [--out-of-order 10s ...]
    wmobs advise --prometheus http://127.0.0.1:9090 --query my_query --range 6h
    advice = wmobs.advise.advise(text_of_a_scrape)
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from wmobs.listener.metrics import EVENT_HISTOGRAMS
from wmobs.observations import HISTOGRAMS
from wmobs.policy._durations import to_micros

__all__ = [
    "KEEP",
    "Advice",
    "Distribution",
    "ToleranceAdvice",
    "advise",
    "distributions",
    "from_prometheus",
    "main",
]

KEEP: tuple[float, ...] = (0.99, 0.999, 0.9999)
"""The fractions of rows to keep that the advisor suggests tolerances for."""

_TOLERANCES = {
    "out_of_order": "lateness",
    "late_arrival": "arrival_delay",
    "early_arrival": "arrival_delay",
}


@dataclass(frozen=True)
class Distribution:
    """One histogram of one input: counts at or below each bound (seconds), and in all."""

    query: str
    policy: str
    histogram: str
    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    count: float

    def at_most(self, seconds: float) -> float:
        """Rows at or below ``seconds`` (a bound)."""
        return self.cumulative[self.bounds.index(seconds)]


@dataclass(frozen=True)
class ToleranceAdvice:
    """One tolerance of one input: what each fraction needs, and what the configured one did."""

    tolerance: str
    """``out_of_order``, ``late_arrival`` or ``early_arrival``."""
    suggested_s: dict[float, float | None]
    """Per fraction to keep: the smallest bucket bound that keeps at least it (``None``: more
    than the largest bound, a day)."""
    configured_s: float | None = None
    dropped_fraction: tuple[float, float] | None = None
    """With a configured tolerance: the fraction of rows it drops or adjusts, as a range
    ``(at least, at most)`` (one value twice when the tolerance is a bound)."""


@dataclass(frozen=True)
class Advice:
    """The advice for one input (one time policy) of one query."""

    query: str
    policy: str
    rows: float
    """Rows the lateness distribution counted (out-of-order candidates)."""
    tolerances: list[ToleranceAdvice] = field(default_factory=list)


def distributions(
    samples: Mapping[tuple[str, tuple[tuple[str, str], ...]], float],
) -> list[Distribution]:
    """The distributions in parsed samples (:func:`wmobs.listener.parse_metrics` of a scrape,
    or the same shape from Prometheus' API)."""
    found: dict[tuple[str, str, str], dict[str, float]] = {}
    counts: dict[tuple[str, str, str], float] = {}
    for histogram, (name, _help) in EVENT_HISTOGRAMS.items():
        for (sample, labels), value in samples.items():
            label = dict(labels)
            key = (label.get("query", ""), label.get("policy", ""), histogram)
            if sample == f"{name}_bucket" and label.get("le") not in (None, "+Inf"):
                found.setdefault(key, {})[label["le"]] = value
            elif sample == f"{name}_count":
                counts[key] = value
    out = []
    for (query, policy, histogram), buckets in sorted(found.items()):
        bounds = HISTOGRAMS[histogram]
        cumulative = tuple(buckets.get(_le(b), 0.0) for b in bounds)
        total = counts.get((query, policy, histogram), cumulative[-1] if cumulative else 0.0)
        out.append(Distribution(query, policy, histogram, bounds, cumulative, total))
    return out


def _le(bound: float) -> str:
    return repr(float(bound))


def _keep_within(d: Distribution, fraction: float, *, early: bool) -> float | None:
    """The smallest tolerance (a bound) that keeps at least ``fraction`` of ``d``'s rows."""
    if d.count <= 0:
        return None
    if early:  # early when delay < -t: at most (1 - fraction) at or below -t
        for t in sorted(-b for b in d.bounds if b <= 0):
            if d.at_most(-t) <= (1 - fraction) * d.count:
                return t
        return None
    for b in d.bounds:
        if b >= 0 and d.at_most(b) >= fraction * d.count:
            return b
    return None


def _dropped(d: Distribution, tolerance_s: float, *, early: bool) -> tuple[float, float]:
    """The fraction a tolerance drops or adjusts, bracketed by the bounds around it."""
    if d.count <= 0:
        return (0.0, 0.0)
    if early:
        edge = -tolerance_s
        below = [b for b in d.bounds if b <= edge]
        above = [b for b in d.bounds if b >= edge]
        low = d.at_most(below[-1]) if below else 0.0
        high = d.at_most(above[0]) if above else d.count
        return (low / d.count, high / d.count)
    below = [b for b in d.bounds if b <= tolerance_s]
    above = [b for b in d.bounds if b >= tolerance_s]
    kept_high = d.at_most(above[0]) if above else d.count
    kept_low = d.at_most(below[-1]) if below else 0.0
    return ((d.count - kept_high) / d.count, (d.count - kept_low) / d.count)


def advise(
    scrape: str | Mapping[tuple[str, tuple[tuple[str, str], ...]], float],
    *,
    keep: Sequence[float] = KEEP,
    configured: Mapping[str, Mapping[str, str | timedelta | float]] | None = None,
) -> list[Advice]:
    """Per input of every query in ``scrape`` (the text of a ``/metrics`` scrape, or parsed
    samples): the tolerances that keep each fraction of ``keep``. ``configured`` maps a
    policy name (or ``"*"``: any other) to its tolerances (``{"sensors": {"out_of_order":
    "10 seconds"}}``; seconds as numbers also work), to report the fraction each drops or
    adjusts."""
    if isinstance(scrape, str):
        from wmobs.listener import parse_metrics

        scrape = parse_metrics(scrape)
    by_input: dict[tuple[str, str], dict[str, Distribution]] = {}
    for d in distributions(scrape):
        by_input.setdefault((d.query, d.policy), {})[d.histogram] = d
    result = []
    for (query, policy), found in sorted(by_input.items()):
        settings = (configured or {}).get(policy, (configured or {}).get("*", {}))
        advice = Advice(query, policy, found["lateness"].count if "lateness" in found else 0)
        for tolerance, histogram in _TOLERANCES.items():
            dist = found.get(histogram)
            if dist is None:
                continue
            early = tolerance == "early_arrival"
            suggested = {f: _keep_within(dist, f, early=early) for f in keep}
            value = settings.get(tolerance)
            seconds = None if value is None else _seconds(value, tolerance)
            dropped = None if seconds is None else _dropped(dist, seconds, early=early)
            advice.tolerances.append(ToleranceAdvice(tolerance, suggested, seconds, dropped))
        result.append(advice)
    return result


def _seconds(value: str | timedelta | float, argument: str) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    return to_micros(value, argument) / 1e6


# ---- the command ----------------------------------------------------------------------------


class UnreadableError(Exception):
    """What ``wmobs advise`` was pointed at cannot be read: the message says what and why."""


def _fetch(url: str) -> str:
    """The body at ``url``; :class:`UnreadableError` naming the URL and the cause otherwise."""
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return str(response.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:  # Prometheus says what it refused in its JSON
        try:
            said = str(json.loads(exc.read())["error"])
        except Exception:
            said = f"HTTP {exc.code} {exc.reason}"
        raise UnreadableError(f"{url.split('?', 1)[0]} answered: {said}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        where = url.split("?", 1)[0]
        raise UnreadableError(f"cannot read {where}: {getattr(exc, 'reason', exc)}") from exc


def from_prometheus(base: str, query: str, window: str) -> dict[Any, float]:
    """The distributions' increase over ``window`` for ``query``, from Prometheus' API."""
    samples: dict[Any, float] = {}
    for name, _help in EVENT_HISTOGRAMS.values():
        for suffix in ("_bucket", "_count"):
            selector = f'{name}{suffix}{{query="{query}"}}'
            expr = f"sum by (query, policy, le) (increase({selector}[{window}]))"
            url = f"{base.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
            try:
                answer = json.loads(_fetch(url))
                result = answer["data"]["result"]
            except (ValueError, KeyError, TypeError) as exc:
                said = f"{base} answered no Prometheus query result ({exc})"
                raise UnreadableError(said) from exc
            for series in result:
                labels = tuple(sorted(series["metric"].items()))
                samples[(name + suffix, labels)] = float(series["value"][1])
    return samples


def _format_s(value: float | None) -> str:
    if value is None:
        return "> 1 day"
    return f"{value:g} s"


def _report(advice: Iterable[Advice], keep: Sequence[float]) -> str:
    lines = []
    for a in advice:
        lines.append(f"query {a.query}, policy {a.policy} ({a.rows:.0f} rows judged)")
        header = "  tolerance        " + "".join(f"keep {f:.2%}".ljust(16) for f in keep)
        lines.append(header + "configured")
        for t in a.tolerances:
            cells = "".join(_format_s(t.suggested_s[f]).ljust(16) for f in keep)
            configured = "-"
            if t.configured_s is not None and t.dropped_fraction is not None:
                low, high = t.dropped_fraction
                share = f"{low:.3%}" if low == high else f"{low:.3%}-{high:.3%}"
                configured = f"{t.configured_s:g} s: drops or adjusts {share}"
            lines.append(f"  {t.tolerance:<17}{cells}{configured}")
    return "\n".join(lines) + "\n"


def _plot(advice: list[Advice], scrape: Mapping[Any, float], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = {(d.query, d.policy): d for d in distributions(scrape) if d.histogram == "lateness"}
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    for a in advice:
        d = found.get((a.query, a.policy))
        if d is None or d.count <= 0:
            continue
        bounds = [max(b, 0.005) for b in d.bounds]
        line = ax.step(bounds, [c / d.count for c in d.cumulative], where="post")[0]
        line.set_label(f"{a.query} / {a.policy}")
        for t in a.tolerances:
            if t.tolerance != "out_of_order":
                continue
            for fraction, seconds in t.suggested_s.items():
                if seconds is not None:
                    ax.axvline(max(seconds, 0.005), color=line.get_color(), ls=":", lw=1)
                    ax.annotate(f"{fraction:.2%}", (max(seconds, 0.005), fraction), fontsize=7)
            if t.configured_s is not None:
                ax.axvline(max(t.configured_s, 0.005), color=line.get_color(), lw=2)
    ax.set_xscale("log")
    ax.set_xlabel("lateness (s): out_of_order tolerance needed")
    ax.set_ylabel("fraction of rows kept")
    ax.set_title("Lateness per input: configured (solid) and suggested (dotted) tolerances")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="wmobs advise",
        description="Suggest out_of_order, late_arrival and early_arrival tolerances: those that"
        " would have kept 99 %, 99.9 % and 99.99 % of the rows, from the lateness"
        " distributions every time policy counts exactly.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--metrics-url", help="a wmobs /metrics endpoint (counts since start)")
    source.add_argument("--prometheus", help="a Prometheus server's URL (with --query)")
    parser.add_argument("--query", help="with --prometheus: the query label")
    parser.add_argument("--range", default="1h", help="with --prometheus: the window (1h)")
    parser.add_argument("--policy", help="only this policy (input)")
    for tolerance in _TOLERANCES:
        flag = "--" + tolerance.replace("_", "-")
        parser.add_argument(flag, help=f"the configured {tolerance} tolerance, e.g. '10 seconds'")
    parser.add_argument("--plot", help="write the lateness distributions as a PNG")
    args = parser.parse_args(argv)
    if args.prometheus and not args.query:
        parser.error("--prometheus needs --query")
    settings = {t: getattr(args, t) for t in _TOLERANCES if getattr(args, t) is not None}
    for tolerance, value in settings.items():
        try:
            _seconds(value, "--" + tolerance.replace("_", "-"))
        except ValueError as exc:
            parser.error(str(exc))
    if args.plot:
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            parser.error("--plot needs matplotlib: pip install 'wmobs[plot]'")
    samples: Mapping[Any, float]
    try:
        if args.metrics_url:
            from wmobs.listener import parse_metrics

            samples = parse_metrics(_fetch(args.metrics_url))
        else:
            samples = from_prometheus(args.prometheus, args.query, args.range)
    except UnreadableError as exc:
        print(f"wmobs advise: {exc}", file=sys.stderr)
        return 1
    advice = advise(samples, configured={args.policy or "*": settings})
    if args.policy:
        advice = [a for a in advice if a.policy == args.policy]
    if not advice:
        print("wmobs advise: no lateness or arrival-delay distributions found", file=sys.stderr)
        return 1
    sys.stdout.write(_report(advice, KEEP))
    return _write_plot(advice, samples, args.plot) if args.plot else 0


def _write_plot(advice: list[Advice], scrape: Mapping[Any, float], path: str) -> int:
    """:func:`_plot` into ``path``, said in one line either way; the exit code."""
    try:
        _plot(advice, scrape, path)
    except OSError as exc:
        print(f"wmobs advise: cannot write the plot to {path}: {exc}", file=sys.stderr)
        return 1
    print(f"plot: {path}")
    return 0
