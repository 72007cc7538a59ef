"""OpenPoke as a request source for replay (found through the ``soapwb.request_sources``
entry point, so replay never imports the importer).

An imported ``user_message`` or ``agent_message`` is rebuilt as OpenPoke's interaction
agent sent it (:func:`importers.openpoke.materialize_entry`); any other message of an
imported session (a replay's answer) has our own call record, read as for our runtime.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from importers.openpoke._addressing import materialize_at
from importers.openpoke._mapping import is_openpoke_session
from importers.openpoke._materialize import materialize_entry, openpoke_request
from replay import RUNTIME_SOURCE, Materialized
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
        found.source = self.name
        return found

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


REQUEST_SOURCE = OpenPokeSource()
