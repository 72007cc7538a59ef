"""Streamlit's magic writes every bare expression at a page's top level to the page: a
string under a constant (an attribute docstring, as modules elsewhere have) would show
up above the title. Pages keep such notes in comments."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PAGES = sorted((Path(__file__).resolve().parents[1] / "workbench" / "pages").glob("*.py"))


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_no_page_has_a_bare_string_besides_its_docstring(page: Path) -> None:
    body = ast.parse(page.read_text()).body
    strays = [
        node.lineno
        for node in body[1:]
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    ]
    assert strays == [], f"{page.name}: a bare string at line(s) {strays} would be written on the page"
