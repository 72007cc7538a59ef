"""The selection a link names follows the person through the sidebar (issue 23).

A copied link (``/context?session=…``, no ``store=``: the server's default store) showed
the session, and the first click in the sidebar lost it: a click while the page still
ran cut the run short, and the run's last step, which keeps the selection for the next
page, already saw the next page's empty query string and kept that.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from streamlit.testing.v1 import AppTest

from soap_core import SessionNotFoundError, Store
from tests.apptest import open_app_page
from workbench.views import error_first

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "soap"
SESSION = "20250611-3f0c2b6e-8a41-4d8e-9c1a-5b7d2e9f4a10"


def cut_short_by_a_click() -> None:
    """A run of app.py as a click in the sidebar leaves it: the selection restored and
    kept, then (mid-page) the query string replaced by the next page's, then the
    selection remembered in the ``finally``."""
    import streamlit as st

    from workbench.selection import remember_selection, restore_selection

    restore_selection()
    if st.session_state.get("cut"):
        st.query_params.clear()
    remember_selection()


def test_a_run_cut_short_by_a_sidebar_click_keeps_the_links_selection() -> None:
    at = AppTest.from_function(cut_short_by_a_click)
    at.query_params["session"] = "3f0c"
    at.query_params["context"] = "e7c4"
    at.session_state["cut"] = True
    at.run()
    assert not at.exception
    at.session_state["cut"] = False
    at.query_params.clear()  # the next page opens with no query string
    at.run()
    assert (at.query_params.get("session"), at.query_params.get("context")) == ("3f0c", "e7c4")


def test_a_link_naming_another_selection_replaces_the_kept_one() -> None:
    at = AppTest.from_function(cut_short_by_a_click)
    at.query_params["session"] = "3f0c"
    at.run()
    at.query_params.clear()
    at.query_params["session"] = "9d41"
    at.run()
    at.query_params.clear()
    at.run()
    assert at.query_params.get("session") == "9d41" and "context" not in at.query_params


# -- a link naming what the store does not have ------------------------------------------


def test_a_link_to_an_unknown_session_offers_the_picker(tmp_path: Path) -> None:
    store = tmp_path / "soap"
    shutil.copytree(FIXTURE, store)
    at = open_app_page(store, "context", session="zzzz")
    shown = [w.value.replace("\\", "") for w in at.warning]  # markdown escapes off
    assert shown == ["No session of this store matches 'zzzz': pick one below."]
    assert not at.error
    [picker] = [s for s in at.selectbox if s.label == "Session"]
    picker.set_value(SESSION).run()
    assert not at.exception and not at.warning
    assert at.query_params["session"] == SESSION
    assert any(s.label == "Context" for s in at.selectbox)  # the transcript's own picker: the page went on


def test_a_link_naming_no_session_offers_the_picker_too(tmp_path: Path) -> None:
    store = tmp_path / "soap"
    shutil.copytree(FIXTURE, store)
    at = open_app_page(store, "context")
    assert [s.label for s in at.selectbox] == ["Session"] and not at.error


def test_a_link_to_an_unknown_context_shows_the_active_one_and_says_so(tmp_path: Path) -> None:
    store = tmp_path / "soap"
    shutil.copytree(FIXTURE, store)
    at = open_app_page(store, "context", session=SESSION, context="zzzz")
    [warning] = [w.value for w in at.warning]
    assert "zzzz" in warning and "showing the active context instead" in warning and not at.error
    active = Store(store).load_session(SESSION).active_context_id
    assert at.query_params["context"] == active


def test_an_error_about_the_store_itself_names_no_path() -> None:
    error = SessionNotFoundError(Path("/stores/x"), "no session matches 'zzzz'")
    assert error_first(error, "/stores/x") == "no session matches 'zzzz'"
    assert error_first(str(error), "/stores/x") == "no session matches 'zzzz'"
