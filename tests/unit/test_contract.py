"""One metric contract: the code, DESIGN.md §3 and the README's table agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from wmobs.metrics import CONTRACT

from .contract import markdown_table

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT.parent / "shared" / "DESIGN.md"


def test_readme_table_is_the_contract() -> None:
    assert markdown_table((ROOT / "README.md").read_text()) == CONTRACT


def test_design_table_is_the_contract() -> None:
    """DESIGN.md's contract table, plus each of its planned rows that the code declares (a
    planned row is a contract row from then on: name, type and labels must agree)."""
    if not DESIGN.exists():
        pytest.skip("../shared/DESIGN.md is not beside this checkout")
    text = DESIGN.read_text()
    planned = markdown_table(text, planned=True)
    declared = {name: row for name, row in planned.items() if name in CONTRACT}
    assert markdown_table(text) | declared == CONTRACT


def test_module_docstring_lists_every_metric() -> None:
    """The module that declares the instruments documents every one of them."""
    import wmobs.listener.metrics

    doc = wmobs.listener.metrics.__doc__ or ""
    for name in CONTRACT:
        assert f"``{name}``" in doc, name
