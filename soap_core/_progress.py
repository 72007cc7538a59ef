"""Progress of the store's long work, for whoever shows it: the catalog's first
indexing of a store (``"sessions"``: session folders read of those that changed), the
token counts it left behind (``"tokens"``: context files counted) and the text search
filling in behind it (``"text"``: context files whose text went into
the trigram index). A caller that shows progress (the CLI's bar, the page's) wraps its
call in :func:`reporting`; everything else reports to no one at no cost."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

SESSIONS = "sessions"
TOKENS = "tokens"
TEXT = "text"

Report = Callable[[str, int, int], None]
"""``report(stage, done, total)``: called with ``done == 0`` first and ``done == total``
last, in between as the work goes."""

_REPORT: ContextVar[Report | None] = ContextVar("soap_core_progress", default=None)


@contextlib.contextmanager
def reporting(report: Report) -> Iterator[None]:
    """Send the progress of the store work done inside (in this thread) to ``report``."""
    token = _REPORT.set(report)
    try:
        yield
    finally:
        _REPORT.reset(token)


def current() -> Report | None:
    """The report of the caller, taken before work moves to another thread."""
    return _REPORT.get()


def report(stage: str, done: int, total: int) -> None:
    reporter = _REPORT.get()
    if reporter is not None:
        reporter(stage, done, total)
