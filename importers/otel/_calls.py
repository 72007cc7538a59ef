"""The model calls of a trace, each as the request it sent and the answer it got.

Three ways of tracing a Chat Completions call are read (issue 25), each keeping a
different share of the request:

* **OpenInference** (``openinference.span.kind`` LLM): the whole body is in
  ``input.value`` (mime ``application/json``), the whole response in ``output.value``.
* **GenAI, latest experimental conventions** (``gen_ai.operation.name`` chat, with
  ``gen_ai.input.messages``): the messages as JSON parts in span attributes. Tool-call
  arguments are kept parsed (the argument string is written again with ``json.dumps``),
  a user message whose content was a list is kept with no parts, tool definitions only
  where ``gen_ai.tool.definitions`` is set, parameters only as ``gen_ai.request.*``.
* **GenAI, older conventions** (a chat span without message attributes): the messages are
  log records of the span (``gen_ai.system.message``, ``gen_ai.user.message``,
  ``gen_ai.assistant.message``, ``gen_ai.tool.message``, and ``gen_ai.choice`` for the
  answer). An assistant message with tool calls loses its text in the next call's events;
  the earlier ``gen_ai.choice`` with the same tool-call ids holds it. Tool definitions,
  ``tool_choice`` and most parameters are not recorded.

Nothing missing is made up: each call says what its trace did not keep (``missing``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from importers.otel._otlp import LogRecord, Span, Telemetry

ChatMessage = dict[str, Any]

OPENINFERENCE = "openinference"
GENAI_LATEST = "genai-latest"
GENAI_EVENTS = "genai-events"

_GENAI_PARAMETERS = {
    "gen_ai.request.temperature": "temperature",
    "gen_ai.request.max_tokens": "max_tokens",
    "gen_ai.request.top_p": "top_p",
    "gen_ai.request.seed": "seed",
    "gen_ai.request.frequency_penalty": "frequency_penalty",
    "gen_ai.request.presence_penalty": "presence_penalty",
    "gen_ai.request.stop_sequences": "stop",
    "gen_ai.request.choice.count": "n",
}
_EVENT_ROLES = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}


@dataclass
class Call:
    """One model call of a trace: what it sent (``request``, the messages among it) and
    what it answered (``output``, an assistant message; None when the call failed)."""

    span: Span
    flavour: str
    request: dict[str, Any]
    output: ChatMessage | None
    response: dict[str, Any] | None
    usage: dict[str, int] | None
    missing: list[str] = field(default_factory=list)
    """What of the request the trace did not keep, in words."""

    @property
    def messages(self) -> list[ChatMessage]:
        messages: list[ChatMessage] = self.request.get("messages", [])
        return messages

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        tools: list[dict[str, Any]] | None = self.request.get("tools")
        return tools


def model_calls(telemetry: Telemetry, problems: list[str] | None = None) -> list[Call]:
    """Every model call of ``telemetry``, by start time. A span whose request or answer
    is not shaped as a Chat Completions call is left out, and ``problems`` (if given)
    says which and why."""
    logs: dict[tuple[str, str], list[LogRecord]] = {}
    for record in telemetry.logs:
        logs.setdefault((record.trace_id, record.span_id), []).append(record)
    choices = _choices_by_call_ids(telemetry.logs)
    calls = []
    for span in sorted(telemetry.spans, key=lambda s: (s.start_ns, s.span_id)):
        attributes = span.attributes
        try:
            if attributes.get("openinference.span.kind") == "LLM":
                calls.append(_checked(_openinference(span)))
            elif attributes.get("gen_ai.operation.name") in ("chat", "text_completion"):
                if "gen_ai.input.messages" in attributes:
                    calls.append(_checked(_genai_latest(span)))
                else:
                    records = logs.get((span.trace_id, span.span_id), [])
                    calls.append(_checked(_genai_events(span, records, choices)))
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            if problems is not None:
                problems.append(
                    f"span {span.name!r} ({span.trace_id}/{span.span_id}): left out, not a model call "
                    f"this importer can read ({type(exc).__name__}: {exc})"
                )
    return calls


def _is_message(value: Any) -> bool:
    calls = value.get("tool_calls") if isinstance(value, dict) else None
    return (
        isinstance(value, dict)
        and isinstance(value.get("role", ""), str)
        and (calls is None or (isinstance(calls, list) and all(isinstance(c, dict) for c in calls)))
    )


def _checked(call: Call) -> Call:
    """``call`` when its messages, tools and answer are shaped as Chat Completions has them."""
    if not all(_is_message(m) for m in call.messages):
        raise ValueError("a message of the request is not a chat message")
    if call.tools is not None and not (
        isinstance(call.tools, list) and all(isinstance(t, dict) for t in call.tools)
    ):
        raise ValueError("the request's tools are not a list of tool definitions")
    if call.output is not None and not _is_message(call.output):
        raise ValueError("the answer is not a chat message")
    return call


# -- OpenInference ------------------------------------------------------------------------


def _json(text: Any) -> Any:
    if not isinstance(text, str):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _answer(response: Any) -> ChatMessage | None:
    """The first choice's message of a Chat Completions response, its empty keys left out."""
    if not isinstance(response, dict) or not response.get("choices"):
        return None
    message = response["choices"][0].get("message")
    if not isinstance(message, dict):
        return None
    return {k: v for k, v in message.items() if v not in (None, [], "")} | {"role": "assistant"}


def _usage_of(prompt: Any, completion: Any, total: Any = None) -> dict[str, int] | None:
    if not isinstance(prompt, int) and not isinstance(completion, int):
        return None
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}
    if usage["total_tokens"] is None and isinstance(prompt, int) and isinstance(completion, int):
        usage["total_tokens"] = prompt + completion
    return {k: v for k, v in usage.items() if isinstance(v, int)}


def _flattened_messages(attributes: Mapping[str, Any], prefix: str) -> list[ChatMessage]:
    """``llm.input_messages.{i}.message.role`` / ``.content``: what OpenInference keeps
    when the body itself is not JSON."""
    messages: list[ChatMessage] = []
    i = 0
    while f"{prefix}.{i}.message.role" in attributes:
        message: ChatMessage = {"role": attributes[f"{prefix}.{i}.message.role"]}
        if f"{prefix}.{i}.message.content" in attributes:
            message["content"] = attributes[f"{prefix}.{i}.message.content"]
        messages.append(message)
        i += 1
    return messages


def _openinference(span: Span) -> Call:
    attributes = span.attributes
    body = _json(attributes.get("input.value"))
    missing: list[str] = []
    if not (isinstance(body, dict) and isinstance(body.get("messages"), list)):
        missing.append("the request body (input.value is not a JSON body): messages from llm.input_messages")
        body = {"messages": _flattened_messages(attributes, "llm.input_messages")}
        parameters = _json(attributes.get("llm.invocation_parameters"))
        if isinstance(parameters, dict):
            body.update({k: v for k, v in parameters.items() if k not in ("messages", "tools")})
    response = _json(attributes.get("output.value"))
    output = _answer(response)
    if output is None and "llm.output_messages.0.message.role" in attributes:
        output = _flattened_messages(attributes, "llm.output_messages")[0]
    usage = (response or {}).get("usage") if isinstance(response, dict) else None
    if not isinstance(usage, dict):
        usage = _usage_of(
            attributes.get("llm.token_count.prompt"),
            attributes.get("llm.token_count.completion"),
            attributes.get("llm.token_count.total"),
        )
    return Call(
        span, OPENINFERENCE, body, output, response if isinstance(response, dict) else None, usage, missing
    )


# -- GenAI --------------------------------------------------------------------------------


def _genai_parameters(span: Span) -> dict[str, Any]:
    attributes = span.attributes
    known = {"model": attributes["gen_ai.request.model"]} if "gen_ai.request.model" in attributes else {}
    for key, name in _GENAI_PARAMETERS.items():
        if key in attributes:
            value = attributes[key]
            known[name] = list(value) if isinstance(value, (list, tuple)) else value
    return known


def _genai_usage(span: Span) -> dict[str, int] | None:
    attributes = span.attributes
    return _usage_of(
        attributes.get("gen_ai.usage.input_tokens"), attributes.get("gen_ai.usage.output_tokens")
    )


def _arguments(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _from_parts(role: str, parts: list[Mapping[str, Any]], missing: set[str]) -> ChatMessage:
    """A message of the latest conventions (role and typed parts) as Chat Completions wrote it."""
    texts = [p.get("content", "") for p in parts if p.get("type") == "text"]
    calls = [p for p in parts if p.get("type") == "tool_call"]
    responses = [p for p in parts if p.get("type") == "tool_call_response"]
    if role == "tool" and responses:
        part = responses[0]
        result = part.get("response", part.get("result"))
        return {"role": "tool", "tool_call_id": part.get("id"), "content": _arguments(result)}
    message: ChatMessage = {"role": role}
    if len(texts) == 1:
        message["content"] = texts[0]
    elif texts:
        message["content"] = [{"type": "text", "text": t} for t in texts]
    elif not calls:
        message["content"] = []
        missing.add("list content (a message recorded with no parts)")
    if calls:
        missing.add("tool-call argument strings (kept parsed; written again with json.dumps)")
        message["tool_calls"] = [
            {
                "id": p.get("id"),
                "type": "function",
                "function": {"name": p.get("name"), "arguments": _arguments(p.get("arguments", {}))},
            }
            for p in calls
        ]
    return message


def _genai_latest(span: Span) -> Call:
    attributes = span.attributes
    missing: set[str] = set()
    recorded = _json(attributes.get("gen_ai.input.messages")) or []
    messages = [_from_parts(m.get("role", "user"), m.get("parts", []), missing) for m in recorded]
    instructions = _json(attributes.get("gen_ai.system_instructions"))
    if instructions and not any(m["role"] == "system" for m in messages):
        messages.insert(0, _from_parts("system", instructions, missing))
    body: dict[str, Any] = {**_genai_parameters(span), "messages": messages}
    tools = _json(attributes.get("gen_ai.tool.definitions"))
    if tools:
        body["tools"] = tools
    else:
        missing.add("tool definitions")
    missing.add("tool_choice and parameters other than gen_ai.request.*")
    outputs = _json(attributes.get("gen_ai.output.messages")) or []
    output = _from_parts("assistant", outputs[0].get("parts", []), set()) if outputs else None
    return Call(span, GENAI_LATEST, body, output, None, _genai_usage(span), sorted(missing))


def _call_ids(message: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(str(c.get("id")) for c in message.get("tool_calls") or [])


def _choices_by_call_ids(logs: Iterable[LogRecord]) -> dict[tuple[str, ...], ChatMessage]:
    """Each ``gen_ai.choice`` holding tool calls, by their ids: where an assistant message's
    text is found again when the next call's events dropped it."""
    found: dict[tuple[str, ...], ChatMessage] = {}
    for record in logs:
        message = record.body.get("message") if isinstance(record.body, dict) else None
        if record.event_name == "gen_ai.choice" and isinstance(message, dict) and _call_ids(message):
            found.setdefault(_call_ids(message), message)
    return found


def _event_message(record: LogRecord, choices: Mapping[tuple[str, ...], ChatMessage]) -> ChatMessage:
    body = dict(record.body) if isinstance(record.body, dict) else {"content": record.body}
    role = _EVENT_ROLES[record.event_name]
    if role == "tool":
        return {"role": "tool", "tool_call_id": body.get("id"), "content": body.get("content")}
    message: ChatMessage = {"role": role}
    if role == "assistant" and "content" not in body and _call_ids(body):
        text = choices.get(_call_ids(body), {}).get("content")
        if text is not None:  # the text this message had when the model wrote it
            message["content"] = text
    message.update({k: v for k, v in body.items() if k in ("content", "tool_calls")})
    return message


def _genai_events(
    span: Span, records: list[LogRecord], choices: Mapping[tuple[str, ...], ChatMessage]
) -> Call:
    records = sorted(records, key=lambda r: r.time_ns)  # a stable sort: file order among equal times
    messages = [_event_message(r, choices) for r in records if r.event_name in _EVENT_ROLES]
    answers = [r.body for r in records if r.event_name == "gen_ai.choice" and isinstance(r.body, dict)]
    first = next((a for a in answers if a.get("index", 0) == 0), None)
    output = None
    if first is not None and isinstance(first.get("message"), dict):
        output = {"role": "assistant", **{k: v for k, v in first["message"].items() if k != "role"}}
    missing = ["tool definitions", "tool_choice and parameters other than gen_ai.request.*"]
    if not records:
        missing.insert(0, "the messages (no gen_ai.*.message log records for this span)")
    body = {**_genai_parameters(span), "messages": messages}
    return Call(span, GENAI_EVENTS, body, output, None, _genai_usage(span), missing)
