"""Rematerialize the exact request behind any message of any context.

The request the model received when it produced the message at display index ``at``
is: the messages before it in display order, in the context where the call was made
(which, for a message a fork copied, is the ancestor it was first produced in), with
the system prompt and tool definitions *as they were at that call*, sent in the shape
the framework that made the call gave it. This module is the generic part; each
framework's shape is a request source (:mod:`replay._sources`): our runtime
(:mod:`replay._runtime_source`), peteos (:mod:`replay._peteos_source`), importers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from replay._sources import source_for
from soap_core import CallRecord, Context, Message, Session, SoapError, read_calls, request_hash


class MaterializeError(SoapError):
    """The message asked for does not exist, or cannot be rematerialized."""


@dataclass
class Materialized:
    """The request behind one message, and where it came from."""

    session: str
    role: str
    context_id: str
    """The context the call was made from (an ancestor, for a message a fork copied)."""
    index: int
    """Display index, in that context, of the message the call produced."""
    message_id: str | None
    request: dict[str, Any]
    request_hash: str
    messages: list[Message]
    """The sOAP messages the request was built from (specials as at that call)."""
    parameters: dict[str, Any]
    """Model and sampling parameters: the body's keys other than messages and tools."""
    call: CallRecord | None = None
    notes: list[str] = field(default_factory=list)
    source: str = "soapwb"
    """The request source that built it (:func:`replay.source_named` gives it back)."""
    sent_from: tuple[str, int] | None = None
    """Where the sent messages were taken from when that is not the first ``index``
    messages of ``context_id``: (context id, how many of its messages)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "role": self.role,
            "context_id": self.context_id,
            "index": self.index,
            "message_id": self.message_id,
            "request_hash": self.request_hash,
            "recorded_call": self.call.id if self.call else None,
            "source": self.source,
            "sent_from": list(self.sent_from) if self.sent_from else None,
            "notes": self.notes,
            "request": self.request,
        }


def resolve_index(context: Context, at: int | str) -> int:
    """A display index from an index or a message id (prefix)."""
    if isinstance(at, int) or (isinstance(at, str) and at.lstrip("-").isdigit()):
        index = int(at)
        if index < 0:
            index += len(context.messages)
        if not 0 <= index <= len(context.messages):
            raise MaterializeError(
                f"context {context.id} has {len(context.messages)} messages; no index {at}"
            )
        return index
    matches = [i for i, m in enumerate(context.messages) if m.id.startswith(at)]
    if len(matches) != 1:
        problem = "several messages" if matches else "no message"
        raise MaterializeError(f"{problem} of context {context.id} match {at!r}")
    return matches[0]


def origin_of(session: Session, context: Context, index: int) -> tuple[Context, int]:
    """Where the message at ``index`` was produced: up the fork chain while the parent
    holds the same message (forks copy messages with their ids)."""
    if index >= len(context.messages):
        return context, index
    message_id = context.messages[index].id
    seen = {context.id}
    while context.origin_context_id in session.contexts and context.origin_context_id not in seen:
        parent = session.contexts[context.origin_context_id]
        found = next((i for i, m in enumerate(parent.messages) if m.id == message_id), None)
        if found is None:
            break
        seen.add(parent.id)
        context, index = parent, found
    return context, index


def recorded_call(calls: Sequence[CallRecord], context: Context, index: int) -> CallRecord | None:
    """The recorded call that produced the message at ``index`` of ``context``."""
    if index >= len(context.messages):
        return None
    message_id = context.messages[index].id
    for call in calls:
        if call.context_id == context.id and call.message_id == message_id:
            return call
    return None


@dataclass
class CallSite:
    """Where the call behind a message was made, and what is known of it."""

    context: Context
    index: int
    call: CallRecord | None
    notes: list[str]

    @property
    def message_id(self) -> str | None:
        return self.context.messages[self.index].id if self.index < len(self.context.messages) else None

    def materialized(
        self,
        session: Session,
        request: dict[str, Any],
        messages: list[Message],
        parameters: dict[str, Any],
        source: str,
        sent_from: tuple[str, int] | None = None,
    ) -> Materialized:
        """The result a source gives for this call site."""
        return Materialized(
            session=session.uuid,
            role=session.role,
            context_id=self.context.id,
            index=self.index,
            message_id=self.message_id,
            request=request,
            request_hash=request_hash(request),
            messages=messages,
            parameters=parameters,
            call=self.call,
            notes=self.notes,
            source=source,
            sent_from=sent_from,
        )


def call_site(session: Session, context: Context, index: int, calls: Sequence[CallRecord]) -> CallSite:
    """The context and index the call behind ``index`` was made at, with its record."""
    notes: list[str] = []
    origin, origin_index = origin_of(session, context, index)
    if origin.id != context.id:
        notes.append(f"message {index} was copied by a fork: the call was made from context {origin.id}")
    if index < len(context.messages) and context.messages[index].role != "assistant":
        notes.append(f"message {index} is a {context.messages[index].role} message, not a model output")
    return CallSite(origin, origin_index, recorded_call(calls, origin, origin_index), notes)


def materialize(
    session: Session,
    context: Context | str | None = None,
    at: int | str = -1,
    *,
    calls: Sequence[CallRecord] | None = None,
) -> Materialized:
    """The request that produced the message at display index (or message id) ``at``.

    ``at`` may equal the number of messages: the request the next call would send. The
    session's request source (:mod:`replay._sources`: our runtime, peteos, OpenPoke, ...)
    builds it as that framework did. ``calls`` is the session's call log when the caller
    has already read it (reading it once per message would make a pass over a session
    quadratic in file reads).
    """
    if context is None:
        context = session.active_context
    elif isinstance(context, str):
        context = session.context(context)
    index = resolve_index(context, at)
    if calls is None:
        calls = read_calls(session.directory) if session.directory else []
    for source in source_for(session):
        found = source.materialize(session, context, index, calls)
        if found is not None:
            return found
    raise MaterializeError(f"no request source can rebuild message {index} of session {session.uuid}")


@dataclass(frozen=True)
class PromptAtCall:
    """The system prompt one call of a context was sent."""

    message_index: int
    """Display index of the message the call produced."""
    text: str
    recorded: bool
    """True where rebuilt from the call's recorded hook outputs; False: the text on disk."""


def system_prompt_history(session: Session, context: Context) -> list[PromptAtCall]:
    """The system prompt as it read at each call made from ``context`` (in order).

    Without a call log only the text on disk is known: the last materialization's.
    """
    calls = read_calls(session.directory) if session.directory else []
    mine = [c for c in calls if c.context_id == context.id and c.message_id and not c.replay]
    history = []
    for call in sorted(mine, key=lambda c: c.message_index):
        found = materialize(session, context, str(call.message_id), calls=calls)
        system = next((m for m in found.messages if m.message_type == "SystemPromptMessage"), None)
        if system is not None:
            history.append(PromptAtCall(found.index, system.text(), True))
    if not history and context.system_prompt is not None:
        history.append(PromptAtCall(len(context.messages), context.system_prompt.text(), False))
    return history
