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
    if not DESIGN.exists():
        pytest.skip("../shared/DESIGN.md is not beside this checkout")
    assert markdown_table(DESIGN.read_text()) == CONTRACT


def test_module_docstring_lists_every_metric() -> None:
    """The module that declares the instruments documents every one of them."""
    import wmobs.listener.metrics

    doc = wmobs.listener.metrics.__doc__ or ""
    for name in CONTRACT:
        assert f"``{name}``" in doc, name
