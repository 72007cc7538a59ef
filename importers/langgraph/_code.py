"""The app's graph, named as code (``MODULE:ATTR``), imported the way our runtime
rebuilds an agentic object from its class path; and the copy of the database it runs on."""

from __future__ import annotations

import importlib
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from importers._code import import_code
from importers._errors import ImporterError


def load_graph(code: str) -> Any:
    """The compiled graph named by ``MODULE:ATTR``."""
    if ":" not in code:
        raise ImporterError(code, "the graph is named MODULE:ATTR (a module-level compiled graph)")
    try:
        importlib.import_module("langgraph")
    except ImportError:
        raise ImporterError(code, "LangGraph is not installed here: the graph cannot be run") from None
    try:
        found = import_code(code)
    except ValueError:
        raise ImporterError(code, "the graph is named MODULE:ATTR (a module-level compiled graph)") from None
    except (ImportError, AttributeError) as exc:
        raise ImporterError(code, f"cannot import the graph: {exc}") from None
    if not (callable(getattr(found, "invoke", None)) and callable(getattr(found, "copy", None))):
        raise ImporterError(code, f"{type(found).__name__} is not a compiled LangGraph graph")
    return found


def copy_of(db: Path, target: Path) -> Path:
    """A copy of the database at ``target``, made by SQLite's backup from a read-only
    connection: a consistent snapshot (what a write-ahead log holds included) even while
    the app writes, and the user's file is only read."""
    try:
        with (
            closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)) as source,
            closing(sqlite3.connect(target)) as copy,
        ):
            source.backup(copy)
    except sqlite3.Error as exc:
        raise ImporterError(db, f"cannot copy the database: {exc}") from None
    return target
