"""The documentation: every Python block parses, the README stays a landing page, and the site's
pages link where they say. (``mkdocs build --strict`` in ``./dev test`` checks every link and
the API reference; ``tests/spark/test_quickstart.py`` runs the README's quick start.)"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
_PYTHON = re.compile(r"```python\n(.*?)```", re.S)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_block_parses(page: Path) -> None:
    for block in _PYTHON.findall(page.read_text()):
        ast.parse(textwrap.dedent(block))  # blocks inside list items are indented


def test_the_readme_is_a_landing_page() -> None:
    """Two screens: what wmobs is, install early, the quick start, links into the docs."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 350
    install = next(i for i, line in enumerate(lines) if line.startswith("pip install"))
    assert install < 60
    assert any("docs/" in line for line in lines)


def test_every_relative_link_of_the_readme_exists() -> None:
    text = (ROOT / "README.md").read_text()
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
        assert (ROOT / target).exists(), target


def test_the_getting_started_page_has_the_readmes_quick_start() -> None:
    """The README's quick start runs as written in the tests; the docs' copy is the same."""
    readme = (ROOT / "README.md").read_text()
    found = re.search(r"<!-- quickstart:[^>]*-->\s*```python\n(.*?)```", readme, re.S)
    assert found is not None
    assert found.group(1) in (ROOT / "docs" / "getting-started.md").read_text()


def test_the_picture_of_a_trace_is_drawn_from_its_spans() -> None:
    """The docs build draws ``guide/micro-batch-trace.svg`` from real spans: one bar per span,
    each where its start time puts it, children after their parent."""
    import json
    import sys

    sys.path.insert(0, str(ROOT / "tools" / "docs"))
    try:
        import trace_picture
    finally:
        sys.path.pop(0)
    spans = json.loads((ROOT / "docs" / trace_picture.SPANS).read_text())
    svg = trace_picture.render(spans)
    names = re.findall(r'<text x="\d+" y="[\d.]+">([^<]+)</text>', svg)
    assert sorted(names) == sorted(s["name"] for s in spans)
    assert names[0].startswith("micro-batch ")
    bars = [float(x) for x in re.findall(r'<rect x="([\d.]+)" y="[\d.]+" width', svg)]
    starts = {s["name"]: int(s["startTimeUnixNano"]) for s in spans}
    by_start = sorted(range(len(names)), key=lambda i: starts[names[i]])
    assert [bars[i] for i in by_start] == sorted(bars)
    assert "wmobs.policy.events" in svg
