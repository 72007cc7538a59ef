"""Verify: every recorded call must be what rematerialization gives, to the hash.

A mismatch means the store no longer says what the model saw (a file was edited, a
writer changed, or materialization is wrong); the report shows where the two requests
differ, as a structured diff.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from deepdiff import DeepDiff

from replay._materialize import materialize
from soap_core import Session, SoapError, Store, read_calls


@dataclass
class Verification:
    """One recorded call checked against its rematerialization."""

    call_id: str
    session: str
    role: str
    context_id: str
    message_index: int
    recorded_hash: str
    materialized_hash: str | None
    match: bool
    differences: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def request_differences(recorded: dict[str, Any], materialized: dict[str, Any]) -> dict[str, Any]:
    """Where two requests differ, as JSON-ready deepdiff output (paths like root['messages'][2])."""
    diff = DeepDiff(recorded, materialized, verbose_level=2)
    return diff.to_dict() if diff else {}


def verify_session(session: Session) -> list[Verification]:
    """Check every recorded call of ``session`` that produced a message."""
    results = []
    calls = read_calls(session.directory) if session.directory else []
    for call in calls:
        if call.message_id is None:
            continue  # a failed call produced nothing to rematerialize
        base: dict[str, Any] = {
            "call_id": call.id,
            "session": session.uuid,
            "role": session.role,
            "context_id": call.context_id,
            "message_index": call.message_index,
            "recorded_hash": call.request_hash,
        }
        try:
            context = session.contexts[call.context_id]
            found = materialize(session, context, call.message_id, calls=calls)
        except (KeyError, SoapError) as exc:
            results.append(Verification(**base, materialized_hash=None, match=False, error=str(exc)))
            continue
        match = found.request_hash == call.request_hash
        differences = {} if match else request_differences(call.request, found.request)
        results.append(
            Verification(**base, materialized_hash=found.request_hash, match=match, differences=differences)
        )
    return results


def verify_store(store: Store) -> list[Verification]:
    """Every recorded call of every session; unreadable sessions are reported as errors."""
    results: list[Verification] = []
    for summary in store.sessions():
        try:
            session = store.load_session(summary.path.name, require_active=False)
        except SoapError as exc:
            results.append(
                Verification("-", summary.uuid, summary.role, "-", -1, "-", None, False, error=str(exc))
            )
            continue
        results.extend(verify_session(session))
    return results
