"""Opening the real app headless (Streamlit's AppTest) on a store, at a page."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = Path(__file__).resolve().parents[1] / "app.py"


PAGES = [
    "sessions",
    "context",
    "fork_tree",
    "traceback",
    "token_budget",
    "replay",
    "compaction",
    "object_state",
]
"""Every page of the app, by the file name under workbench/pages/."""


def open_app_page(store: Path | None, page: str, timeout: float = 60, **params: str) -> AppTest:
    """Run the app with ``?store=`` and ``params`` set, then switch to ``workbench/pages/<page>.py``;
    the page must not have raised."""
    at = AppTest.from_file(str(APP), default_timeout=timeout)
    if store is not None:
        at.query_params["store"] = str(store)
    at.query_params.update(params)
    at.run()
    if page != "sessions":
        at.switch_page(f"workbench/pages/{page}.py").run()
    assert not at.exception
    return at
