"""The docs' picture of a micro-batch's trace, drawn in the docs build from real spans.

``docs/guide/micro-batch-trace.json`` holds the spans of one micro-batch as an OpenTelemetry
Collector's file exporter wrote them (OTLP JSON; ``WMOBS_TRACE_SAMPLE=<file>`` on
``tests/spark/test_otlp.py`` writes it anew). This mkdocs hook (``hooks:`` in mkdocs.yml)
renders them as an SVG waterfall, the way a trace viewer lays them out, into the site as
``guide/micro-batch-trace.svg``.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

SPANS = "guide/micro-batch-trace.json"
PICTURE = "guide/micro-batch-trace.svg"

WIDTH = 820
LABELS = 190
"""Width of the span names' column."""
ROW = 26
COLOURS = ("#3b6fb6", "#4f9d69", "#c7812e")
"""Per depth: the micro-batch, Spark's phases, the policies."""


def attributes(span: dict[str, Any]) -> dict[str, Any]:
    """A span's attributes (OTLP JSON) as Python values."""
    out: dict[str, Any] = {}
    for attribute in span.get("attributes", []):
        value = attribute["value"]
        out[attribute["key"]] = (
            int(value["intValue"]) if "intValue" in value else next(iter(value.values()))
        )
    return out


def _tree(spans: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """(depth, span) in the order a viewer lists them: each span before its children, the
    children in start order."""
    children: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        children.setdefault(span.get("parentSpanId") or "", []).append(span)
    ordered: list[tuple[int, dict[str, Any]]] = []

    def walk(parent: str, depth: int) -> None:
        for span in sorted(children.get(parent, []), key=lambda s: int(s["startTimeUnixNano"])):
            ordered.append((depth, span))
            walk(span["spanId"], depth + 1)

    walk("", 0)
    return ordered


def render(spans: list[dict[str, Any]]) -> str:
    """The spans as an SVG waterfall, with the micro-batch's and the policies' attributes
    below it."""
    rows = _tree(spans)
    start = min(int(s["startTimeUnixNano"]) for s in spans)
    end = max(int(s["endTimeUnixNano"]) for s in spans)
    scale = (WIDTH - LABELS - 70) / max(end - start, 1)
    details = [
        (span["name"], attributes(span))
        for depth, span in rows
        if depth == 0 or span["name"].startswith("policy ")
    ]
    detail_lines = sum(1 + len(a) for _, a in details)
    height = 34 + ROW * len(rows) + 16 + 15 * detail_lines
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>',
        f'<text x="8" y="18" font-weight="bold">Trace of one micro-batch ({(end - start) / 1e6:.0f}'
        " ms), as spans arrive at a Collector</text>",
    ]
    for i, (depth, span) in enumerate(rows):
        y = 30 + i * ROW
        s0, s1 = int(span["startTimeUnixNano"]), int(span["endTimeUnixNano"])
        x = LABELS + (s0 - start) * scale
        w = max((s1 - s0) * scale, 1.5)
        colour = COLOURS[min(depth, len(COLOURS) - 1)]
        out += [
            f'<text x="{8 + 14 * depth}" y="{y + 16}">{escape(span["name"])}</text>',
            f'<rect x="{x:.1f}" y="{y + 4}" width="{w:.1f}" height="{ROW - 8}" rx="3" '
            f'fill="{colour}"/>',
            f'<text x="{x + w + 5:.1f}" y="{y + 16}" fill="#555">{(s1 - s0) / 1e6:.0f} ms</text>',
        ]
    y = 30 + ROW * len(rows) + 16
    for name, attrs in details:
        out.append(f'<text x="8" y="{y}" font-weight="bold">{escape(name)}</text>')
        y += 15
        for key, value in attrs.items():
            out.append(
                f'<text x="22" y="{y}" font-family="monospace" font-size="11">'
                f"{escape(key)} = {escape(str(value))}</text>"
            )
            y += 15
    out.append("</svg>")
    return "\n".join(out) + "\n"


def on_files(files: Any, config: Any) -> Any:
    """mkdocs hook: the picture, drawn from the spans, among the site's files."""
    from mkdocs.structure.files import File

    spans = json.loads((Path(config["docs_dir"]) / SPANS).read_text())
    files.append(File.generated(config, PICTURE, content=render(spans)))
    return files
