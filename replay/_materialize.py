"""Rematerialize the exact request behind any message of any context.

The request the model received when it produced the message at display index ``at``
is: the messages before it in display order, in the context where the call was made
(which, for a message a fork copied, is the ancestor it was first produced in), with
the system prompt and tool definitions *as they were at that call*. Our runtime records
which content-map entries those were built from; for stores written by peteos (no call
log) the texts on disk are the best knowledge there is, and the result says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from soap_core import (
    Context,
    Message,
    Session,
    SoapError,
    TextPart,
    ToolPart,
    chat_request,
    request_hash,
)
from soap_core.runtime import read_calls

_NOT_PARAMETERS = ("model", "messages", "tools")


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
    """Model and sampling parameters (empty where no call was recorded)."""
    call: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "role": self.role,
            "context_id": self.context_id,
            "index": self.index,
            "message_id": self.message_id,
            "request_hash": self.request_hash,
            "recorded_call": self.call["id"] if self.call else None,
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


def recorded_call(calls: list[dict[str, Any]], context: Context, index: int) -> dict[str, Any] | None:
    """The recorded call that produced the message at ``index`` of ``context``."""
    if index >= len(context.messages):
        return None
    message_id = context.messages[index].id
    for call in calls:
        if call.get("context_id") == context.id and call.get("message_id") == message_id:
            return call
    return None


def _system_prompt_at(context: Context, call: dict[str, Any], notes: list[str]) -> Message | None:
    system = context.system_prompt
    keys = call.get("system_prompt_hooks")
    if system is None or keys is None:
        return system
    missing = [k for k in keys if k not in context.content_map]
    if missing or system.static_text is None:
        notes.append(
            "the system prompt's hook outputs are not all in the content map: using the text on disk"
        )
        return system
    rebuilt = system.copy()
    rebuilt.content = [TextPart("\n\n".join([system.static_text, *(context.content_map[k] for k in keys)]))]
    return rebuilt


def _tools_at(context: Context, call: dict[str, Any], notes: list[str]) -> Message | None:
    definitions = context.tool_definitions
    key = call.get("tool_list_hook")
    if definitions is None or key is None:
        return definitions
    if key not in context.content_map:
        notes.append("the tool listing of the call is not in the content map: using the tools on disk")
        return definitions
    rebuilt = definitions.copy()
    listing = json.loads(context.content_map[key])
    rebuilt.content = [
        ToolPart(t["name"], t.get("description", ""), t.get("parameters", {})) for t in listing
    ]
    return rebuilt


def request_messages(
    context: Context, index: int, call: dict[str, Any] | None, notes: list[str]
) -> list[Message]:
    """The messages before ``index`` with the specials as they read at ``call``."""
    messages = list(context.messages[:index])
    if call is None:
        return messages
    specials = {
        "SystemPromptMessage": _system_prompt_at(context, call, notes),
        "ToolDefinitionsMessage": _tools_at(context, call, notes),
    }
    return [specials.get(m.message_type) or m if m.is_special else m for m in messages]


def materialize(
    session: Session,
    context: Context | str | None = None,
    at: int | str = -1,
    *,
    calls: list[dict[str, Any]] | None = None,
) -> Materialized:
    """The request that produced the message at display index (or message id) ``at``.

    ``at`` may equal the number of messages: the request the next call would send.
    ``calls`` is the session's call log when the caller has already read it (reading it
    once per message would make a pass over a session quadratic in file reads).
    """
    if context is None:
        context = session.active_context
    elif isinstance(context, str):
        context = session.context(context)
    index = resolve_index(context, at)
    if session.state_data.get("_soapwb_source") == "openpoke":
        from importers.openpoke import materialize_entry  # here: importers build on replay

        rebuilt = materialize_entry(session, context, index)
        if rebuilt is not None:  # an imported entry: OpenPoke's request, not a role history
            return rebuilt
    notes: list[str] = []
    origin, origin_index = origin_of(session, context, index)
    if origin.id != context.id:
        notes.append(f"message {index} was copied by a fork: the call was made from context {origin.id}")
    if calls is None:
        calls = read_calls(session.directory) if session.directory else []
    call = recorded_call(calls, origin, origin_index)
    if index < len(context.messages) and context.messages[index].role != "assistant":
        notes.append(f"message {index} is a {context.messages[index].role} message, not a model output")
    if call is None:
        notes.append("no recorded call: model and sampling parameters are unknown")
        parameters: dict[str, Any] = {}
    else:
        parameters = {k: v for k, v in call["request"].items() if k not in ("messages", "tools")}
    messages = request_messages(origin, origin_index, call, notes)
    request = chat_request(
        messages,
        model=parameters.get("model"),
        parameters={k: v for k, v in parameters.items() if k not in _NOT_PARAMETERS},
    )
    return Materialized(
        session=session.uuid,
        role=session.role,
        context_id=origin.id,
        index=origin_index,
        message_id=origin.messages[origin_index].id if origin_index < len(origin.messages) else None,
        request=request,
        request_hash=request_hash(request),
        messages=messages,
        parameters=parameters,
        call=call,
        notes=notes,
    )


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
    mine = [
        c for c in calls if c.get("context_id") == context.id and c.get("message_id") and not c.get("replay")
    ]
    history = []
    for call in sorted(mine, key=lambda c: c["message_index"]):
        found = materialize(session, context, call["message_id"], calls=calls)
        system = next((m for m in found.messages if m.message_type == "SystemPromptMessage"), None)
        if system is not None:
            history.append(PromptAtCall(found.index, system.text(), True))
    if not history and context.system_prompt is not None:
        history.append(PromptAtCall(len(context.messages), context.system_prompt.text(), False))
    return history
