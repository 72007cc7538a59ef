"""Our runtime as a request source: it records every call, so the request is rebuilt
from the call's record (the content-map entries the specials were built from, the model
and sampling parameters) with the same :func:`soap_core.chat_request` it sent."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from replay._materialize import CallSite, Materialized, call_site
from replay._sources import register_source
from soap_core import (
    OBJECT_KEY,
    CallRecord,
    Context,
    Message,
    Session,
    TextPart,
    ToolPart,
    chat_request,
)

_NOT_PARAMETERS = ("model", "messages", "tools")


def _system_prompt_at(context: Context, call: CallRecord, notes: list[str]) -> Message | None:
    system = context.system_prompt
    keys = call.system_prompt_hooks
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


def _tools_at(context: Context, call: CallRecord, notes: list[str]) -> Message | None:
    definitions = context.tool_definitions
    key = call.tool_list_hook
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
    context: Context, index: int, call: CallRecord | None, notes: list[str]
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


def recorded_parameters(site: CallSite) -> dict[str, Any]:
    """The recorded call's body less messages and tools; empty (and a note) without one."""
    if site.call is None:
        site.notes.append("no recorded call: model and sampling parameters are unknown")
        return {}
    return {k: v for k, v in site.call.request.items() if k not in ("messages", "tools")}


class RuntimeSource:
    """Sessions our runtime wrote (and, as the generic default, any recorded call)."""

    name = "soapwb"

    def claims(self, session: Session) -> bool:
        return OBJECT_KEY in session.state_data

    def materialize(
        self, session: Session, context: Context, index: int, calls: Sequence[CallRecord]
    ) -> Materialized:
        site = call_site(session, context, index, calls)
        parameters = recorded_parameters(site)
        messages = request_messages(site.context, site.index, site.call, site.notes)
        request = self.build_request(messages, model=parameters.get("model"), parameters=parameters)
        return site.materialized(session, request, messages, parameters, self.name)

    def build_request(
        self, messages: Sequence[Message], *, model: str | None, parameters: Mapping[str, Any]
    ) -> dict[str, Any]:
        return chat_request(
            messages,
            model=model,
            parameters={k: v for k, v in parameters.items() if k not in _NOT_PARAMETERS},
        )


RUNTIME_SOURCE = RuntimeSource()
register_source(RUNTIME_SOURCE)
