"""The catalog's long work as the pages show it.

A new store (or one that changed a lot while no one looked) is indexed once, on the
first page that lists it: :class:`PageProgress` draws a progress bar for that, once it
has taken longer than :data:`SHOWN_AFTER_S` (a listing that reads three changed files
draws nothing). The token counts of a new store's files and the messages' text come in
behind it, in one background thread per store and server process
(:func:`fill_text_behind`); the Sessions page says how much is left while it runs and
draws the table again once the counts are in, and a search made meanwhile fills in the
rest of the text first (:meth:`soap_core.Catalog.search`).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import streamlit as st

from soap_core import SoapError

SHOWN_AFTER_S = 0.5
"""Work that ends sooner draws no bar."""
REDRAW_S = 0.1
"""At most one redraw of the bar in this time (each is a message to the browser)."""

_LOG = logging.getLogger(__name__)
_FILLING: set[str] = set()
_FILLING_LOCK = threading.Lock()


class _Fills(Protocol):
    def fill_counts(self) -> int: ...
    def fill_text(self) -> int: ...


class PageProgress:
    """A :data:`soap_core.reporting_progress` report drawn as ``st.progress`` in the page
    being run, created on the first draw and removed when the work ends."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._started = 0.0
        self._drawn_at = 0.0
        self._bar: Any = None

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = self._clock()
        if done == 0:
            self._started = now
            return
        if done >= total:
            if self._bar is not None:
                self._bar.empty()
                self._bar = None
            return
        if self._bar is None and now - self._started < SHOWN_AFTER_S:
            return
        if self._bar is not None and now - self._drawn_at < REDRAW_S:
            return
        self._drawn_at = now
        text = {
            "sessions": f"Indexing the store, once: {done:,} of {total:,} new or changed sessions",
            "tokens": f"Counting tokens: {done:,} of {total:,} files",
        }.get(stage, f"Text search: indexing {done:,} of {total:,} files")
        if self._bar is None:
            self._bar = st.progress(done / total, text=text)
        else:
            self._bar.progress(done / total, text=text)


def fill_text_behind(key: str, open_catalog: Callable[[], _Fills | None]) -> bool:
    """Start the background thread that takes the waiting token counts of the store
    ``key`` and then puts its waiting text into the search index, unless one runs
    already in this process; True while one runs.
    The thread opens a catalog of its own (its own database connection)."""
    with _FILLING_LOCK:
        if key in _FILLING:
            return True
        _FILLING.add(key)

    def fill() -> None:
        try:
            catalog = open_catalog()
            if catalog is not None:
                catalog.fill_counts()  # first: the listing waits for them, a search for the text
                catalog.fill_text()
        except (SoapError, OSError, sqlite3.Error) as exc:  # a search fills in what is left
            _LOG.warning("filling in the text search of %s stopped: %s", key, exc)
        finally:
            with _FILLING_LOCK:
                _FILLING.discard(key)

    _start(fill, f"soapwb-text-{key}")
    return True


def _start(work: Callable[[], None], name: str) -> None:
    threading.Thread(target=work, name=name, daemon=True).start()
