"""Verify: every recorded call must be what rematerialization gives, to the hash.

A mismatch means the store no longer says what the model saw (a file was edited, a
writer changed, or materialization is wrong); the report shows where the two requests
differ, as a structured diff.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from deepdiff import DeepDiff

from replay._materialize import CallLog, materialize, sent_prefix
from replay._request import Materialized
from soap_core import CallRecord, Context, Session, SoapError, Store


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


def verify_session(session: Session, *, calls: Sequence[CallRecord] | None = None) -> list[Verification]:
    """Check every recorded call of ``session`` that produced a message.

    ``calls`` is the session's call log when the caller has read it. Each call's hash
    is computed from what it was sent (:func:`replay._materialize.sent_prefix`), which
    extends one running hash from call to call where the source can; only a mismatch
    builds the request, to show where it differs.
    """
    results = []
    log = CallLog.of(calls if calls is not None else session.calls())
    for call in log:
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
            hashed, found = _hash_of(session, context, call.message_id, log)
            if hashed != call.request_hash and found is None:  # to show where: build the request
                found = materialize(session, context, call.message_id, calls=log)
        except (KeyError, SoapError) as exc:
            results.append(Verification(**base, materialized_hash=None, match=False, error=str(exc)))
            continue
        match = hashed == call.request_hash
        differences = (
            request_differences(call.request, found.request) if found is not None and not match else {}
        )
        results.append(Verification(**base, materialized_hash=hashed, match=match, differences=differences))
    return results


def _hash_of(
    session: Session, context: Context, message_id: str, log: CallLog
) -> tuple[str, Materialized | None]:
    """The hash of the request behind ``message_id``, from what it was sent where the
    source can say, else from the request (given with it)."""
    sent = sent_prefix(session, context, message_id, calls=log)
    if sent is not None:
        return sent.request_hash(), None
    found = materialize(session, context, message_id, calls=log)
    return found.request_hash, found


def verify_store(store: Store) -> list[Verification]:
    """Every recorded call of every session; unreadable sessions are reported as errors."""
    results: list[Verification] = []
    for summary in store.sessions():
        try:
            session = store.load_session(summary.ref, require_active=False)
        except SoapError as exc:
            results.append(
                Verification("-", summary.uuid, summary.role, "-", -1, "-", None, False, error=str(exc))
            )
            continue
        results.extend(verify_session(session))
    return results
