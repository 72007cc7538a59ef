"""OpenPoke as a request source for replay (found through the ``soapwb.request_sources``
entry point, so replay never imports the importer).

An imported ``user_message`` or ``agent_message`` is rebuilt as OpenPoke's interaction
agent sent it (:func:`importers.openpoke.materialize_entry`); any other message of an
imported session (a replay's answer) has our own call record, read as for our runtime.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from importers.openpoke._addressing import materialize_at
from importers.openpoke._mapping import SUMMARY_TAG, is_openpoke_session, openpoke_meta
from importers.openpoke._materialize import entry_position, materialize_entry, openpoke_request
from replay import RUNTIME_SOURCE, Materialized, MaterializeError
from soap_core import CallRecord, Context, Message, Session


class OpenPokeSource:
    name = "openpoke"

    def claims(self, session: Session) -> bool:
        return is_openpoke_session(session)

    def materialize(
        self, session: Session, context: Context, index: int, calls: Sequence[CallRecord]
    ) -> Materialized:
        found = materialize_entry(session, context, index) or RUNTIME_SOURCE.materialize(
            session, context, index, calls
        )
        return dataclasses.replace(found, source=self.name)

    def build_request(
        self, messages: Sequence[Message], *, model: str | None, parameters: Mapping[str, Any]
    ) -> dict[str, Any]:
        return openpoke_request(messages, model=model, parameters=parameters)  # OpenPoke's keys and order

    def materialize_at(
        self, session: Session, context_id: str | None, at: str, *, checkout: Path | None = None
    ) -> Materialized:
        """Plain ``N`` is log entry N (:mod:`importers.openpoke._addressing`); ``checkout``
        an OpenPoke checkout to read the system prompt from."""
        return materialize_at(session, context_id, at, openpoke_root=checkout)

    def message_index(self, session: Session, context: Context, at: str) -> int | None:
        """Plain ``N`` is log entry N, where ``context`` holds it."""
        if not (at.strip().isascii() and at.strip().lstrip("-").isdigit()):
            return None
        try:
            return entry_position(session, int(at), context)[1]
        except MaterializeError:
            return None

    def message_address(self, session: Session, context: Context, index: int) -> str:
        """An imported entry by its number; anything else (the working memory's summary,
        a replay's answer) by its display index, ``message:N``."""
        meta = openpoke_meta(context.message_at(index)) if 0 <= index < context.message_count else None
        if meta is not None and meta["tag"] != SUMMARY_TAG and isinstance(meta.get("index"), int):
            return str(meta["index"])
        return f"message:{index}"


REQUEST_SOURCE = OpenPokeSource()
