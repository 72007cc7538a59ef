"""The selection a link names follows the person through the sidebar (issue 23).

A copied link (``/context?session=…``, no ``store=``: the server's default store) showed
the session, and the first click in the sidebar lost it: a click while the page still
ran cut the run short, and the run's last step, which keeps the selection for the next
page, already saw the next page's empty query string and kept that.
"""

from __future__ import annotations

from streamlit.testing.v1 import AppTest


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
