"""The Prometheus endpoint: every instrument of :mod:`wmobs.listener.metrics`, rendered straight
from the tracker when scraped.

The values wmobs exports are already final when collected (cumulative counts, gauges computed
at ``now``, the batch-duration histogram kept per query by the tracker), so the OpenTelemetry
SDK's per-scrape work for a pull endpoint (aggregating every observation into its storage,
hashing attributes, translating to prometheus_client's families, then formatting them) is work
that need not be done: with 100 queries it cost ~56 ms a scrape. This module renders the same
names, types, help texts and labels in one pass (tested sample for sample against the SDK's
exporter), on the scraping thread. OTLP and injected meter providers still go through the SDK.

``Exposition`` also serves ``monitor.registry`` (a ``prometheus_client`` collector yielding the
same families), for code that collects it directly.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from wmobs._log import get_logger
from wmobs.listener._snapshots import BATCH_DURATION_BUCKETS, QuerySnapshot
from wmobs.listener._tracker import Tracker
from wmobs.listener.metrics import BATCH_DURATION_HELP, EVENT_HISTOGRAMS, OBSERVABLES
from wmobs.observations import HISTOGRAMS

__all__ = ["CONTENT_TYPE", "Exposition", "MetricsServer", "parse_metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_HISTOGRAM = "wmobs_batch_duration_seconds"


def _number(value: float) -> str:
    """A sample value as Prometheus' text format writes it."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


_LE = [_number(b) for b in BATCH_DURATION_BUCKETS] + ["+Inf"]


def _escape(value: str) -> str:
    """A label value as the text format escapes it: backslash, line feed, double quote."""
    return _escape_help(value).replace('"', r"\"")


def _escape_help(value: str) -> str:
    """A ``# HELP`` text as the text format escapes it: backslash and line feed only."""
    return value.replace("\\", r"\\").replace("\n", r"\n")


def _labels(attributes: Any) -> str:
    return ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(attributes.items()))


def _histogram_lines(snap: QuerySnapshot, _now: float) -> Iterator[str]:
    query = f'query="{_escape(snap.label)}"'
    total = sum(snap.batch_durations)
    if not total:
        return
    cumulative = 0
    for le, count in zip(_LE, snap.batch_durations, strict=True):
        cumulative += count
        yield f'{_HISTOGRAM}_bucket{{le="{le}",{query}}} {_number(cumulative)}'
    yield f"{_HISTOGRAM}_count{{{query}}} {_number(total)}"
    yield f"{_HISTOGRAM}_sum{{{query}}} {_number(snap.batch_duration_sum)}"


def _event_histogram_lines(histogram: str) -> Any:
    """The lines of one distribution of :data:`EVENT_HISTOGRAMS`, per policy of a query."""
    name = EVENT_HISTOGRAMS[histogram][0]
    les = [_number(b) for b in HISTOGRAMS[histogram]] + ["+Inf"]

    def lines(snap: QuerySnapshot, _now: float) -> Iterator[str]:
        for label, policy in snap.policies.items():
            counts = policy.histograms.get(histogram)
            if counts is None:
                continue
            where = f'policy="{_escape(label)}",query="{_escape(snap.label)}"'
            for le, cumulative in zip(les, [*counts.cumulative, counts.count], strict=True):
                yield f'{name}_bucket{{le="{le}",{where}}} {_number(cumulative)}'
            yield f"{name}_count{{{where}}} {_number(counts.count)}"
            yield f"{name}_sum{{{where}}} {_number(counts.sum_us / 1e6)}"

    return lines


class Exposition:
    """Renders ``tracker`` in Prometheus' text format (and as a ``prometheus_client``
    collector). Nothing once the tracker is closed."""

    def __init__(self, tracker: Tracker) -> None:
        self._tracker = tracker

    def _families(self) -> Iterator[tuple[str, str, str, list[str]]]:
        """``(name, type, help, sample lines)`` of every family that has samples."""
        observe = self._tracker.observe
        histogram = observe(_histogram_lines)
        if histogram:
            yield _HISTOGRAM, "histogram", BATCH_DURATION_HELP, histogram
        for which, (name, description) in EVENT_HISTOGRAMS.items():
            samples = observe(_event_histogram_lines(which))
            if samples:
                yield name, "histogram", description, samples
        for spec in OBSERVABLES:
            name = spec.prometheus

            def lines(snap: QuerySnapshot, now: float, name: str = name, fn: Any = spec.fn) -> Any:
                for o in fn(snap, now):
                    yield f"{name}{{{_labels(o.attributes)}}} {_number(o.value)}"

            samples = observe(lines)
            if samples:
                yield name, spec.kind, spec.description, samples

    def render(self) -> bytes:
        """One scrape: ``# HELP``/``# TYPE`` and the samples of every family."""
        out: list[str] = []
        for name, kind, description, samples in self._families():
            out.append(f"# HELP {name} {_escape_help(description)}")
            out.append(f"# TYPE {name} {kind}")
            out.extend(samples)
        out.append("")
        return "\n".join(out).encode("utf-8")

    def collect(self) -> Iterator[Any]:
        """The same families for a ``prometheus_client`` registry (``monitor.registry``)."""
        from prometheus_client.parser import text_string_to_metric_families

        yield from text_string_to_metric_families(self.render().decode("utf-8"))


class MetricsServer(ThreadingHTTPServer):
    """``GET /metrics`` (any path) on its own threads: the rendered exposition. Quiet: a
    scraper that goes away mid-response (its scrape timeout) is a debug line, a failure to
    render is a 500 naming it and one warning, never a traceback on the application's
    stderr."""

    daemon_threads = True

    def __init__(self, addr: str, port: int, exposition: Exposition, logger: Any = None) -> None:
        exposition_ = exposition
        self._log = log = logger if logger is not None else get_logger()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                try:
                    body, status, kind = exposition_.render(), 200, CONTENT_TYPE
                except Exception as exc:
                    log.warning("wmobs.exposition_failed", exc_info=True)
                    body = f"wmobs: rendering the metrics failed: {exc!r}\n".encode()
                    status, kind = 500, "text/plain; charset=utf-8"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # no access log on stderr
                return

        super().__init__((addr, port), Handler)
        self._thread = threading.Thread(
            target=self.serve_forever, name="wmobs-metrics", daemon=True
        )
        self._thread.start()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Logged, where socketserver prints a traceback to stderr."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError):  # the scraper hung up: its timeout, not ours
            self._log.debug("wmobs.scrape_abandoned", client=client_address[0], error=repr(error))
        else:
            self._log.warning("wmobs.scrape_failed", client=client_address[0], exc_info=True)


def parse_metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A Prometheus text exposition (a ``/metrics`` scrape) as ``{(name, labels): value}``.

    ``labels`` is a sorted tuple of ``(label, value)`` pairs, e.g.
    ``samples[("wmobs_query_active", (("query", "q"),))]``.
    """
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
