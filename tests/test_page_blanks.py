"""No table cell reads "None" (issue 23): a value that is missing says what it means
("not measured", "from Python", "(not set)", "-"), on every page, for every session of a
store that holds refused invocations, re-runs, forks and unmeasured drift."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from streamlit import dataframe_util
from streamlit.testing.v1 import AppTest

from soap_core import Store
from tests.apptest import PAGES, open_app_page
from workbench.views import STYLED_ROWS, blanks_as


def shown(table: object) -> pd.DataFrame:
    """A table as the browser shows it: the Styler's display values where it has them."""
    proto = table.proto  # type: ignore[attr-defined]
    styled = proto.arrow_data.styler.display_values if proto.arrow_data.HasField("styler") else b""
    return dataframe_util.convert_arrow_bytes_to_pandas_df(styled) if styled else table.value  # type: ignore[attr-defined]


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


def test_a_missing_value_reads_as_words_and_the_numbers_stay_numbers() -> None:
    table = pd.DataFrame({"drift": pd.array([0.42, None], dtype="Float64"), "who": ["a", None]})
    styled = blanks_as(table, {"drift": "not measured"})
    assert styled.data is table and table["drift"].dtype == "Float64"  # type: ignore[union-attr]
    html = styled.to_html()  # type: ignore[union-attr]
    assert "not measured" in html and "0.42" in html
    assert blanks_as(table.dropna(), "-") is not None
    long = pd.DataFrame({"n": pd.array([None, *range(STYLED_ROWS)], dtype="Int64")})
    plain = blanks_as(long, "-")
    assert isinstance(plain, pd.DataFrame) and plain["n"].tolist()[:2] == ["-", "0"]  # text, not a Styler
    assert blanks_as(pd.DataFrame({"n": [1, 2]}), "-").equals(pd.DataFrame({"n": [1, 2]}))  # type: ignore[union-attr]
