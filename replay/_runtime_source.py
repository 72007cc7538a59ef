"""Our runtime as a request source: it records every call, so the request is rebuilt
from the call's record (the content-map entries the specials were built from, the model
and sampling parameters) with the same :func:`soap_core.chat_request` it sent.

Rebuilding the request at one message costs as much as the request: every message
before it becomes chat messages, and the body is hashed (sha256 of its canonical JSON,
:func:`soap_core.request_hash`). Verify, the budgets and the pages rebuild one message
after another, so each context keeps a :class:`ChatPrefix`: the canonical JSON of
every message's chat messages, serialized once, and running sha256 states over them
that a later call extends from where an earlier one stopped (``copy()`` at each call).
The bytes hashed are those of ``canonical_json(request)``: its keys are sorted, so the
body's keys before ``messages`` come first, then the list, whose JSON is its items' JSON
joined by commas, then the other keys; the specials as they read at the call (the
system prompt is the list's first item) and the parameters pick the running state.
"""

from __future__ import annotations

import hashlib
import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

from replay._materialize import CallLog, call_site
from replay._request import CallSite, Materialized, SentPrefix
from replay._sources import register_source
from soap_core import (
    OBJECT_KEY,
    CallRecord,
    Context,
    Message,
    Part,
    Session,
    TextPart,
    ToolPart,
    chat_message,
    chat_request,
)

ChatMessage = dict[str, Any]

_NOT_PARAMETERS = ("model", "messages", "tools")
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""The encoding of :func:`soap_core.canonical_json` (json.dumps with its arguments)."""
# What _CANONICAL.encode runs for a dict or list, made once: it makes a new one at every
# call, which costs more than encoding many a message.
_ENCODE_ONCE = (
    None
    if c_make_encoder is None
    else c_make_encoder(None, _CANONICAL.default, encode_basestring, None, ":", ",", True, False, True)
)
_STATE = "soapwb"


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
    tools = tool_listing(context.content_map[key])
    if tools is None:
        notes.append(
            "the tool listing of the call in the content map is not a JSON tool list: using the tools on disk"
        )
        return definitions
    rebuilt = definitions.copy()
    rebuilt.content = tools
    return rebuilt


def tool_listing(text: object) -> list[ToolPart] | None:
    """The tools of a ``tool_list`` hook output (a JSON array of ``{name, description,
    parameters}``), None when it is not one: the content map is read from a file."""
    if not isinstance(text, str):
        return None
    try:
        listing = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(listing, list):
        return None
    tools = []
    for item in listing:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            return None
        description, parameters = item.get("description", ""), item.get("parameters", {})
        if not isinstance(description, str) or not isinstance(parameters, dict):
            return None
        tools.append(ToolPart(item["name"], description, parameters))
    return tools


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


def chat_items(chat: Sequence[ChatMessage]) -> bytes:
    """Chat messages as they sit in a request's canonical JSON: their JSON joined by commas."""
    if not chat:
        return b""
    value: Any = chat[0] if len(chat) == 1 else list(chat)
    text = _CANONICAL.encode(value) if _ENCODE_ONCE is None else "".join(_ENCODE_ONCE(value, 0))
    return (text if len(chat) == 1 else text[1:-1]).encode("utf-8", "surrogatepass")


def body_ends(body: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """The canonical JSON of a request body before its messages' items, and after them."""
    before: list[str] = []
    after: list[str] = []
    for key in sorted(body):
        if key != "messages":
            item = f"{_CANONICAL.encode(key)}:{_CANONICAL.encode(body[key])}"
            (before if key < "messages" else after).append(item)
    head = "{" + "".join(f"{item}," for item in before) + '"messages":['
    tail = "]" + "".join(f",{item}" for item in after) + "}"
    return head.encode("utf-8", "surrogatepass"), tail.encode("utf-8", "surrogatepass")


class _RunningHash:
    """sha256 over a body's head and the items of its first ``position`` messages, with
    the items of ``substituted`` (display index → bytes) sent in place of the stored."""

    __slots__ = ("hasher", "position", "started", "substituted")

    def __init__(self, head: bytes, substituted: dict[int, bytes]) -> None:
        self.hasher = hashlib.sha256(head)
        self.position = 0
        self.started = False
        self.substituted = substituted

    def advance(self, items: list[bytes], stop: int) -> None:
        chunk = items[self.position : stop]
        for index, item in self.substituted.items():
            if self.position <= index < stop:
                chunk[index - self.position] = item
        data = b",".join([item for item in chunk if item])
        if data:
            if self.started:
                self.hasher.update(b",")
            self.hasher.update(data)
            self.started = True
        self.position = stop

    def hexdigest(self, tail: bytes) -> str:
        final = self.hasher.copy()
        final.update(tail)
        return final.hexdigest()


class ChatPrefix:
    """One context's messages as request items, each serialized once, and the running
    hashes of the bodies sent from it.

    Entries are checked against the context before use: a message replaced in the list,
    or given new content, role or type, drops what was built from it on (parts are
    immutable values, so the content tuple's identity says whether it changed).
    """

    MAX_RUNNING = 8
    """Running hashes kept (one per head and specials; a session's calls share one or two)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # What each item was built from, in parallel lists (no object per message: a
        # long context makes many, and each would add to the garbage collector's work).
        self.built: list[Message] = []
        self.contents: list[tuple[Part, ...]] = []
        self.roles: list[str] = []
        self.kinds: list[str] = []
        self.items: list[bytes] = []
        self.running: OrderedDict[tuple[bytes, tuple[tuple[int, bytes], ...]], _RunningHash] = OrderedDict()

    def check(self, messages: Sequence[Message], start: int, stop: int) -> None:
        """Forget what was built from the first of ``messages[start:stop]`` that changed."""
        for index in range(start, min(stop, len(self.built))):
            message = messages[index]
            if (
                self.built[index] is not message
                or self.contents[index] is not message.content
                or self.roles[index] != message.role
                or self.kinds[index] != message.message_type
            ):
                self.forget(index)
                return

    def forget(self, start: int) -> None:
        for column in (self.built, self.contents, self.roles, self.kinds, self.items):
            del column[start:]
        for key in [k for k, r in self.running.items() if r.position > start]:
            del self.running[key]

    def extend(self, messages: Sequence[Message], stop: int) -> list[list[ChatMessage]]:
        """Serialize the messages up to ``stop``; the chat messages of those new here."""
        new = []
        for message in messages[len(self.built) : stop]:
            chat = chat_message(message)
            new.append(chat)
            self.built.append(message)
            self.contents.append(message.content)
            self.roles.append(message.role)
            self.kinds.append(message.message_type)
            self.items.append(chat_items(chat))
        return new

    def request_hash(self, head: bytes, tail: bytes, substituted: dict[int, bytes], stop: int) -> str:
        """The hash of ``head``, the items of the first ``stop`` messages (``substituted``
        where given), and ``tail``; extends a running hash where one fits."""
        key = (head, tuple(sorted(substituted.items())))
        running = self.running.get(key)
        if running is None or running.position > stop:
            running = self.running[key] = _RunningHash(head, substituted)
        self.running.move_to_end(key)
        while len(self.running) > self.MAX_RUNNING:
            self.running.popitem(last=False)
        running.advance(self.items, stop)
        return running.hexdigest(tail)


_PREFIXES: dict[int, ChatPrefix] = {}
"""By ``id`` of the context (contexts compare by value, so they are no dict keys); an
entry goes when its context does."""
_PREFIXES_LOCK = threading.Lock()


def _forget_context(key: int) -> None:
    _PREFIXES.pop(key, None)  # no lock: this runs when the context is freed, perhaps inside one


def chat_prefix(context: Context) -> ChatPrefix:
    """The prefix kept for ``context``, for as long as the context lives."""
    key = id(context)
    with _PREFIXES_LOCK:
        prefix = _PREFIXES.get(key)
        if prefix is None:
            prefix = _PREFIXES[key] = ChatPrefix()
            weakref.finalize(context, _forget_context, key)
        return prefix


class _Described:
    """A call site described for our runtime: its parameters and the specials it sent."""

    def __init__(self, source: RuntimeSource, site: CallSite, log: CallLog) -> None:
        self.source = source
        self.site = site
        self.log = log
        self.parameters = recorded_parameters(site)
        specials = log.special_positions(site.context, site.index)
        substituted: dict[int, Message] = {}
        if site.call is not None:
            at_call = self._specials_at_call(site.call)
            for index in specials:
                stored = site.context.messages[index]
                sent = at_call.get(stored.message_type)
                if sent is not None and sent is not stored:
                    substituted[index] = sent
        self.sent = SentPrefix(site, specials, substituted, compute_hash=self.request_hash)

    def _specials_at_call(self, call: CallRecord) -> dict[str, Message | None]:
        """The specials rebuilt from the call's content-map keys, once per pass for each
        set of keys (calls with the same hook outputs share the rebuilt messages)."""
        context = self.site.context
        hooks = tuple(call.system_prompt_hooks) if call.system_prompt_hooks is not None else None
        key = ("specials", context.id, hooks, call.tool_list_hook)
        state = self.log.state(_STATE)
        if key not in state:
            notes: list[str] = []
            state[key] = (
                {
                    "SystemPromptMessage": _system_prompt_at(context, call, notes),
                    "ToolDefinitionsMessage": _tools_at(context, call, notes),
                },
                notes,
            )
        rebuilt: dict[str, Message | None] = state[key][0]
        self.site.notes.extend(state[key][1])
        return rebuilt

    def shell(self) -> dict[str, Any]:
        """The body without the messages' items: what the specials and parameters make."""
        parameters = self.parameters
        return self.source.build_request(
            self.sent.special_messages(), model=parameters.get("model"), parameters=parameters
        )

    def _item(self, message: Message) -> bytes:
        state = self.log.state(_STATE)
        key = ("item", id(message))
        if key not in state:
            state[key] = (message, chat_items(chat_message(message)))  # keeps id(message) unique
        item: bytes = state[key][1]
        return item

    def hash_prefix(self, head: bytes, tail: bytes) -> tuple[str, int, list[list[ChatMessage]]]:
        """The request's hash, where this pass's serializing started, and the chat
        messages serialized now (from that index)."""
        context, count = self.site.context, self.site.index
        prefix = chat_prefix(context)
        # How far this pass has checked the prefix against this context object (held, so
        # that its id names it for as long as the log lives).
        checked: list[Any] = self.log.state(_STATE).setdefault(("checked", id(context)), [0, context])
        with prefix.lock:
            if count > checked[0]:  # earlier calls of this pass checked the messages before
                prefix.check(context.messages, checked[0], count)
                checked[0] = count
            start = len(prefix.built)
            new = prefix.extend(context.messages, count)
            substituted = {
                index: item
                for index, message in self.sent.substituted.items()
                if (item := self._item(message)) != prefix.items[index]
            }
            hashed = prefix.request_hash(head, tail, substituted, count)
        return hashed, start, new

    def request_hash(self) -> str:
        return self.hash_prefix(*body_ends(self.shell()))[0]


class RuntimeSource:
    """Sessions our runtime wrote (and, as the generic default, any recorded call)."""

    name = "soapwb"

    def claims(self, session: Session) -> bool:
        return OBJECT_KEY in session.state_data

    def sent_prefix(
        self, session: Session, context: Context, index: int, calls: Sequence[CallRecord]
    ) -> SentPrefix:
        """What the call was sent, without building the request (see :class:`SentPrefix`)."""
        log = CallLog.of(calls)
        return _Described(self, call_site(session, context, index, log), log).sent

    def materialize(
        self, session: Session, context: Context, index: int, calls: Sequence[CallRecord]
    ) -> Materialized:
        log = CallLog.of(calls)
        described = _Described(self, call_site(session, context, index, log), log)
        shell = described.shell()
        hashed, start, new = described.hash_prefix(*body_ends(shell))
        sent = described.sent
        messages = sent.messages()
        chat: list[ChatMessage] = []
        for position, message in enumerate(messages):
            if position >= start and position not in sent.substituted:
                chat.extend(new[position - start])  # serialized just now: built once
            else:
                chat.extend(chat_message(message))
        request = dict(shell)
        request["messages"] = chat  # the key keeps its place: the body is chat_request's
        return described.site.materialized(
            session, request, messages, described.parameters, self.name, hashed=hashed
        )

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
