"""Traced calls as a request source for replay (found through the
``soapwb.request_sources`` entry point, so replay never imports the importer).

A call is rebuilt from the messages of its context before its answer, each as the trace
had it sent (:func:`importers.otel._messages.sent_form`), with the parameters its record
kept: for OpenInference the whole body that was sent, for the GenAI conventions the
messages exactly and the parameters they record, with a note naming what the trace did
not keep. An edited message (a replay's) is sent as our runtime would send it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from importers.otel._import import SOURCE
from importers.otel._messages import META_KEY, sent_form
from replay import Materialized, MaterializeError, call_site
from soap_core import SOURCE_KEY, CallRecord, Context, Message, Session

_NOT_PARAMETERS = ("model", "messages", "tools")


class OTelSource:
    name = "otel"
    built = "rebuilt from its OpenTelemetry trace"

    def claims(self, session: Session) -> bool:
        return session.state_data.get(SOURCE_KEY) == SOURCE

    def materialize(
        self, session: Session, context: Context, index: int, calls: Sequence[CallRecord]
    ) -> Materialized:
        site = call_site(session, context, index, calls)
        if site.call is None:
            raise MaterializeError(
                f"message {index} of context {context.id} has no traced model call behind it "
                "(only a model's answer has one)"
            )
        parameters = {k: v for k, v in site.call.request.items() if k not in ("messages", "tools")}
        messages = site.context.messages[: site.index]
        request = self.build_request(messages, model=parameters.get("model"), parameters=parameters)
        answer = site.context.messages[site.index] if site.index < len(site.context.messages) else None
        meta = (answer.metadata or {}).get(META_KEY) if answer is not None else None
        missing = meta.get("missing") if isinstance(meta, dict) else None
        if missing:
            site.notes.append(f"the trace did not keep: {'; '.join(missing)}")
        return site.materialized(session, request, list(messages), parameters, self.name)

    def build_request(
        self, messages: Sequence[Message], *, model: str | None, parameters: Mapping[str, Any]
    ) -> dict[str, Any]:
        chat: list[dict[str, Any]] = []
        tools: list[dict[str, Any]] = []
        for message in messages:
            if message.message_type == "ToolDefinitionsMessage":
                tools = sent_form(message)
            else:
                chat.extend(sent_form(message))
        body: dict[str, Any] = {} if model is None else {"model": model}
        body["messages"] = chat
        if tools:
            body["tools"] = tools
        body.update({k: v for k, v in parameters.items() if k not in _NOT_PARAMETERS and v is not None})
        return body


REQUEST_SOURCE = OTelSource()
