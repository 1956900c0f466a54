"""One metric contract: the code and its reference page (docs/reference/metrics.md) agree."""

from __future__ import annotations

from pathlib import Path

from wmobs.metrics import CONTRACT

from .contract import markdown_table

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference" / "metrics.md"


def test_the_reference_page_is_the_contract() -> None:
    assert markdown_table(REFERENCE.read_text()) == CONTRACT


def test_no_other_page_has_a_contract_table_of_its_own() -> None:
    """The README and the other pages link to the reference; a second table would drift."""
    pages = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    for page in pages:
        if page != REFERENCE:
            assert not markdown_table(page.read_text()), page


def test_module_docstring_lists_every_metric() -> None:
    """The module that declares the instruments documents every one of them."""
    import wmobs.listener.metrics

    doc = wmobs.listener.metrics.__doc__ or ""
    for name in CONTRACT:
        assert f"``{name}``" in doc, name
