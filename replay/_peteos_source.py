"""peteos as a request source: the body its OpenAI adapter built for a stored context.

peteos records no calls, so the request is rebuilt from the context alone: the messages
before the one asked for, through :func:`replay._peteos_body.peteos_body`. What the
context files do not hold comes from the store's ``peteos.json`` (the backend's
``max_tokens`` and ``streaming``) and, in 0.6, from the ``origin`` ("backend:model")
the runner stamps on every part of a model's answer. Where nothing tells (the model of
a 0.5 call, the system prompt of an earlier call), the result's notes say so.

Both generations send through the same adapter (``openaichatbot.py`` is identical in
0.5.8 and 0.6.13); what differs is what they store (0.6 adds ``origin``, ``index`` and
approval keys to parts, which the adapter passes through as it finds them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from replay._materialize import call_site
from replay._peteos_body import DEFAULT_MAX_TOKENS, peteos_body
from replay._request import CallSite, Materialized
from replay._runtime_source import recorded_parameters
from replay._sources import register_source
from soap_core import CallRecord, Context, Message, Session, SoapError, is_marked, locate, read_json

_BODY_KEYS = ("model", "stream", "max_tokens", "messages", "tools")


@dataclass(frozen=True)
class Backend:
    """What ``peteos.json`` says of one backend (``BackendConfig`` defaults applied)."""

    name: str
    streaming: bool = False
    max_tokens: int = DEFAULT_MAX_TOKENS


@dataclass(frozen=True)
class PeteosConfig:
    path: Path | None
    backends: tuple[Backend, ...] = ()
    error: str | None = None


def config_dir_of(session: Session) -> Path | None:
    """CONFIG_DIR of a loaded session: above ``sessions/`` (0.6) or ``agents/<role>/``."""
    if session.directory is None:
        return None
    up = 3 if session.layout == "agents" else 2
    return session.directory.parents[up - 1]


@lru_cache(maxsize=64)
def _read_config(path: Path, _mtime_ns: int) -> PeteosConfig:
    try:
        data = read_json(path)
    except SoapError as exc:
        return PeteosConfig(path, error=str(exc))
    raw = data.get("backends") if isinstance(data, dict) else None
    backends = []
    for entry in raw if isinstance(raw, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            max_tokens = entry.get("max_tokens")
            backends.append(
                Backend(
                    entry["name"],
                    bool(entry.get("streaming", False)),
                    max_tokens if isinstance(max_tokens, int) else DEFAULT_MAX_TOKENS,
                )
            )
    return PeteosConfig(path, tuple(backends))


def peteos_config(session: Session) -> PeteosConfig:
    config_dir = config_dir_of(session)
    path = locate(config_dir).peteos_json if config_dir else None
    if path is None:
        return PeteosConfig(None)
    return _read_config(path, path.stat().st_mtime_ns)


def _origin(message: Message | None) -> tuple[str, str] | None:
    """``(backend, model)`` from the origin peteos 0.6 stamps on each answer part."""
    for part in (message.raw_content() or []) if message is not None else []:
        origin = part.get("origin")
        if isinstance(origin, str) and ":" in origin:
            backend, model = origin.split(":", 1)
            return backend, model
    return None


def _role_model(config_dir: Path | None, role: str) -> str | None:
    """The role's ``model`` when it is a plain name rather than a pattern."""
    if config_dir is None:
        return None
    for roles in (config_dir / "roles", config_dir.parent / "roles"):
        path = roles / role / "config.json"
        if path.is_file():
            try:
                data = read_json(path)
            except SoapError:
                return None
            model = data.get("model") if isinstance(data, dict) else None
            return model if isinstance(model, str) and re.escape(model) == model else None
    return None


def _answer_after(context: Context, index: int) -> Message | None:
    """The answer of the call at ``index``: that message, or for the next call (index
    at the end) the newest answer, which came from the same backend."""
    if index < len(context.messages) and context.messages[index].role == "assistant":
        return context.messages[index]
    return next((m for m in reversed(context.messages[:index]) if m.role == "assistant"), None)


def backend_parameters(session: Session, site: CallSite) -> dict[str, Any]:
    """``model``, ``stream`` and ``max_tokens`` of the body, as far as the files tell."""
    config = peteos_config(session)
    origin = _origin(_answer_after(site.context, site.index))
    model = origin[1] if origin else _role_model(config_dir_of(session), session.role)
    if model is None:
        site.notes.append("the model is not recorded (peteos 0.5 stores no origin): left out of the body")
    if config.error:
        site.notes.append(f"peteos.json unreadable ({config.error}): backend defaults used")
    backend = next((b for b in config.backends if origin and b.name == origin[0]), None)
    if backend is None and len(config.backends) == 1:
        backend = config.backends[0]
    if backend is None:
        where = (
            "no peteos.json beside the store" if config.path is None else "no backend of peteos.json matches"
        )
        site.notes.append(
            f"{where}: stream and max_tokens are peteos's defaults (false, {DEFAULT_MAX_TOKENS})"
        )
        backend = Backend("default")
    return {"model": model, "stream": backend.streaming, "max_tokens": backend.max_tokens}


def _specials_note(site: CallSite) -> None:
    """peteos rewrites the system prompt and tool listing before every call and keeps
    only the last text; for any earlier call that text is a guess."""
    system = site.context.system_prompt
    if system is None or not system.hook_ids:
        return
    later = any(m.role == "assistant" for m in site.context.messages[site.index + 1 :])
    if later:
        site.notes.append(
            "the system prompt and tool listing are the texts of the last call from this context: "
            "peteos does not record which hook outputs an earlier call was sent"
        )


def sent_messages(session: Session, site: CallSite) -> tuple[list[Message], tuple[str, int] | None]:
    """The messages peteos sent for the call at ``site``.

    Normally the context before the message. But peteos's runner takes the context it
    sends *before* its ``before_send_to_chatbot`` hooks run, and its compaction is such a
    hook: when it forks, the call still sends the unreduced parent and the answer is
    appended to the fork. So the first answer in a compaction fork came from the whole
    parent (as saved when the fork became active), not from the fork's messages.
    """
    context, index = site.context, site.index
    prefix: tuple[list[Message], tuple[str, int] | None] = (list(context.messages[:index]), None)
    parent = session.contexts.get(context.origin_context_id or "")
    if parent is None or is_marked(context) or index >= len(context.messages):
        return prefix
    if context.messages[index].role != "assistant":
        return prefix
    in_parent = {m.id for m in parent.messages}
    if context.messages[index].id in in_parent or not all(
        m.id in in_parent for m in context.messages[:index]
    ):
        return prefix
    site.notes.append(
        f"the first answer after peteos's compaction forked context {parent.id}: peteos sent the "
        "unreduced parent (its compaction hook runs after the runner took the context to send); "
        "after an overflow retry it would have sent the fork's messages instead"
    )
    return list(parent.messages), (parent.id, len(parent.messages))


class PeteosSource:
    """Sessions written by peteos of one on-disk generation."""

    def __init__(self, name: str, layout: str) -> None:
        self.name = name
        self.layout = layout

    def claims(self, session: Session) -> bool:
        return session.layout == self.layout

    def materialize(
        self, session: Session, context: Context, index: int, calls: Sequence[CallRecord]
    ) -> Materialized:
        site = call_site(session, context, index, calls)
        if site.call is not None:  # a replay we ran on a peteos session: its record
            parameters = recorded_parameters(site)
        else:
            parameters = backend_parameters(session, site)
            _specials_note(site)
        messages, sent_from = sent_messages(session, site)
        request = self._body(messages, parameters.get("model"), parameters, site.notes)
        parameters = {k: v for k, v in request.items() if k not in ("messages", "tools")}
        return site.materialized(session, request, messages, parameters, self.name, sent_from)

    def build_request(
        self, messages: Sequence[Message], *, model: str | None, parameters: Mapping[str, Any]
    ) -> dict[str, Any]:
        return self._body(messages, model, parameters, [])

    def _body(
        self, messages: Sequence[Message], model: str | None, parameters: Mapping[str, Any], notes: list[str]
    ) -> dict[str, Any]:
        max_tokens = parameters.get("max_tokens", DEFAULT_MAX_TOKENS)
        return peteos_body(
            messages,
            model=model,
            stream=bool(parameters.get("stream", False)),
            max_tokens=max_tokens if isinstance(max_tokens, int) else DEFAULT_MAX_TOKENS,
            generation_config={k: v for k, v in parameters.items() if k not in _BODY_KEYS},
            notes=notes,
        )


PETEOS_05 = PeteosSource("peteos-0.5", "agents")
PETEOS_06 = PeteosSource("peteos-0.6", "sessions")
register_source(PETEOS_05, fallback=True)
register_source(PETEOS_06, fallback=True)
