"""No table cell reads "None" (issue 23): a value that is missing says what it means
("not measured", "from Python", "(not set)", "-"), on every page, for every session of a
store that holds refused invocations, re-runs, forks and unmeasured drift."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from pandas.io.formats.style import Styler
from streamlit.testing.v1 import AppTest

from soap_core import Store
from tests.apptest import PAGES, open_app_page
from workbench.views import blanks_as


def shown(table: object) -> pd.DataFrame:
    """A table's cells as the browser's grid draws them: its data (a Styler's display
    values do not reach a missing cell, which the grid draws as "None")."""
    return table.value  # type: ignore[attr-defined,no-any-return]


def blank_cells(at: AppTest) -> list[str]:
    found = []
    for table in at.dataframe:
        frame = shown(table)
        for column in frame.columns:
            if frame[column].isna().any():
                found.append(f"{column!r} in a table of {list(frame.columns)}")
    return found


@pytest.mark.parametrize("page", PAGES)
def test_no_cell_is_left_blank_for_streamlit_to_call_none(page: str, workbench_store: Path) -> None:
    problems = []
    for session in Store(workbench_store).sessions():
        at = open_app_page(workbench_store, page, timeout=120, session=session.uuid)
        assert not at.exception
        problems += [f"{session.role}: {p}" for p in blank_cells(at)]
    assert not problems, problems


def test_a_missing_value_reads_as_words_in_the_data_the_grid_draws() -> None:
    table = pd.DataFrame({"drift": pd.array([0.42, None], dtype="Float64"), "who": ["a", None]})
    plain = blanks_as(table, {"drift": "not measured"})
    assert isinstance(plain, pd.DataFrame) and plain["drift"].tolist() == ["0.42", "not measured"]
    assert plain["who"].isna().any() and table["drift"].isna().any()  # only the column named; the input kept
    styled = blanks_as(table.style.apply(lambda row: ["color: red"] * len(row), axis=1), "-")
    assert isinstance(styled, Styler) and styled.data["who"].tolist() == ["a", "-"]
    assert "color: red" in styled.to_html()  # the styles stay
    assert blanks_as(pd.DataFrame({"n": [1, 2]}), "-").equals(pd.DataFrame({"n": [1, 2]}))  # type: ignore[union-attr]
