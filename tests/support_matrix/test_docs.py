"""docs/support-matrix.md is what the support matrix module says (regenerate it with the command it names)."""

from __future__ import annotations

from pathlib import Path

from drafting.support_matrix.docs import render_docs

PAGE = Path(__file__).resolve().parents[2] / "docs" / "support-matrix.md"


def test_the_support_matrix_page_is_generated_from_the_module() -> None:
    page = PAGE.read_text()
    assert page == render_docs(), "run: python -m drafting.support_matrix docs > docs/support-matrix.md"
    assert "| `KimiK25ForConditionalGeneration` | yes (`kimi_k25.KimiK25ForConditionalGeneration`)" in page
    assert "| `MixtralForCausalLM` |" not in page  # refused classes are listed apart, not in the table
    assert "`MixtralForCausalLM`" in page.split("## Refused by SGLang 0.5.14")[1]
