"""Suites: lists of recorded calls to send again, and the sessions a query selects.

A suite file is JSON Lines (or one JSON list) of entries, each naming one model answer
as ``soapwb replay`` takes it::

    {"session": "Analyst/20250602-7e97b92b-...", "context": "1d811993-...", "at": 3}

``session`` is any SESSION reference (``ROLE/FOLDER`` names it even where uuids
repeat); ``context`` is optional (default: the active context); ``at`` is what
``--at`` takes (a display index, ``entry:N``, ``message:N`` or a message id).
:func:`suite_entries` writes one entry per recorded call of the sessions given, so
``soapwb suite --sessions all > suite.jsonl`` records a store's calls as a suite.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soap_core import FormatError, SessionSummary, SoapError, Store, search_store

SEARCH_LIMIT = 1_000_000
"""Every hit of a text query: the selection wants all sessions that match."""


@dataclass(frozen=True)
class SuiteEntry:
    """One recorded call of a suite: its session, context (None: the active one) and
    the ``--at`` address of the answer."""

    session: str
    at: str
    context: str | None = None

    def as_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"session": self.session}
        if self.context is not None:
            entry["context"] = self.context
        entry["at"] = int(self.at) if self.at.lstrip("-").isdigit() else self.at
        return entry


def read_suite(path: Path) -> list[SuiteEntry]:
    """The entries of a suite file (JSON Lines, or a JSON list); FormatError naming the
    file and line for anything else."""
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        raise SoapError(f"{path}: cannot read the suite: {exc.strerror or exc}") from None
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise FormatError(path, "$", f"not JSON: {exc}") from None
        if not isinstance(items, list):
            raise FormatError(path, "$", "a suite is a JSON list or JSON Lines of entries")
        return [_entry(item, path, f"entry {n}") for n, item in enumerate(items, start=1)]
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise FormatError(path, f"line {number}", f"not JSON: {exc}") from None
        entries.append(_entry(item, path, f"line {number}"))
    return entries


def _entry(item: Any, path: Path, where: str) -> SuiteEntry:
    if not isinstance(item, dict) or not isinstance(item.get("session"), str) or "at" not in item:
        raise FormatError(path, where, 'a suite entry is {"session": REF, "at": N} (and "context": ID)')
    context = item.get("context")
    if context is not None and not isinstance(context, str):
        raise FormatError(path, where, "context must be a context id")
    return SuiteEntry(item["session"], str(item["at"]), context)


def write_suite(entries: Iterable[SuiteEntry]) -> str:
    """Entries as JSON Lines (the text of a suite file)."""
    return "".join(json.dumps(e.as_dict(), ensure_ascii=False) + "\n" for e in entries)


def select_sessions(store: Store, query: str) -> list[SessionSummary]:
    """The sessions ``--sessions QUERY`` names, in the store's order: ``all`` (or ``*``)
    for every session, ``role:NAME`` for one role's, else those with a message containing
    the text, as ``soapwb search`` finds them."""
    summaries = store.sessions()
    if query in ("all", "*"):
        return summaries
    if query.startswith("role:"):
        return [s for s in summaries if s.role == query.removeprefix("role:")]
    hits = {(h.role, h.session) for h in search_store(store, query, limit=SEARCH_LIMIT)}
    return [s for s in summaries if (s.role, s.uuid) in hits]


def suite_entries(store: Store, sessions: Iterable[SessionSummary]) -> list[SuiteEntry]:
    """One entry for every recorded call that produced an answer in ``sessions``, in
    log order; the replays' own calls are left out (they are not the agent's)."""
    entries = []
    for summary in sessions:
        session = store.load_session(summary.ref, require_active=False)
        for call in session.calls():
            if call.message_id is not None and call.replay is None and call.error is None:
                entries.append(SuiteEntry(summary.ref, str(call.message_index), call.context_id))
    return entries


def by_session(entries: Iterable[SuiteEntry]) -> dict[str, list[SuiteEntry]]:
    """The entries grouped by session, in the order each session first appears: one
    partition each, so that only one worker ever writes a session's files."""
    groups: dict[str, list[SuiteEntry]] = {}
    for entry in entries:
        groups.setdefault(entry.session, []).append(entry)
    return groups
