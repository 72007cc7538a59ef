"""The request OpenPoke's interaction agent sent when an entry arrived.

OpenPoke never shows the model a role-structured history: every request is the static
system prompt, the interaction tools, and **one** user message of three blocks joined by
a blank line (FORMATS.md §2.5, ``agent.prepare_message_with_history``)::

    <conversation_history>
    {the working memory rendered as a transcript, stripped, or "None"}
    </conversation_history>

    <active_agents>
    {<agent name="..." /> per roster name, html-escaped with quote=True, or "None"}
    </active_agents>

    <new_user_message>          (<new_agent_message> for an agent_message)
    {the entry's text, stripped}
    </new_user_message>

So :func:`materialize_entry` gives a :class:`replay.Materialized` whose ``messages`` are
``[system prompt, the 4 tool definitions, that user message]``; replay sends exactly
those. Its ``request`` is the body OpenPoke posts, key for key and in its order:
``server/openrouter_client/client.py:request_chat_completion`` builds ``{"model",
"messages" (the system prompt first, ``_build_messages``, left out when empty),
"stream": False}`` and adds ``"tools"`` when there are any. Its ``index`` and
``message_id`` name the *output* of the call, as for any materialization: the first
``poke_reply`` or ``wait`` of the turn (None when the turn logged none), so a replay is
compared with what OpenPoke logged.

``<active_agents>`` is the roster as it stood at the entry, rebuilt from the execution
logs and the agents' reports (:mod:`importers.openpoke._roster`). :func:`entry_position` turns an entry number
into a place in a context (the command line's ``--at entry:N``).

Limits, also written into the notes: the system prompt is read from an OpenPoke checkout
(``openpoke_root``, given here or at import time) as it is now, else a clearly marked
placeholder is sent; only the first model call of a turn can be rebuilt, because
OpenPoke does not persist the tool loop's messages; and payloads went through OpenPoke's
lossy backslash-n decoding.
"""

from __future__ import annotations

import ast
import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from importers.openpoke._mapping import (
    EXECUTION_ROLE,
    INCOMING_TAGS,
    OUTPUT_TAGS,
    SOURCE,
    SUMMARY_TAG,
    is_openpoke_session,
    openpoke_meta,
    openpoke_state,
)
from importers.openpoke._memory import WorkingMemoryState, working_memory_at
from importers.openpoke._roster import roster_at
from replay._materialize import MaterializeError
from replay._request import Materialized
from soap_core import Context, Message, Session, TextPart, ToolPart, chat_request, inside, request_hash

OPENPOKE_MODEL = "anthropic/claude-sonnet-4"
PROMPT_PATH = ("agents", "interaction_agent", "system_prompt.md")
TOOLS_PATH = ("agents", "interaction_agent", "tools.py")
PLACEHOLDER_PROMPT = (
    "[OpenPoke system prompt not available: pass --openpoke-root with an OpenPoke checkout "
    "(its server/agents/interaction_agent/system_prompt.md is sent here)]"
)


def _function(name: str, description: str, properties: dict[str, Any], required: list[str]) -> ToolPart:
    return ToolPart(
        name,
        description,
        {"type": "object", "properties": properties, "required": required, "additionalProperties": False},
    )


def _string(description: str) -> dict[str, str]:
    return {"type": "string", "description": description}


INTERACTION_TOOLS: tuple[ToolPart, ...] = (
    _function(
        "send_message_to_agent",
        "Deliver instructions to a specific execution agent. Creates a new agent if the name doesn't "
        "exist in the roster, or reuses an existing one.",
        {
            "agent_name": _string(
                "Human-readable agent name describing its purpose (e.g., 'Vercel Job Offer', 'Email to "
                "Sharanjeet'). This name will be used to identify and potentially reuse the agent."
            ),
            "instructions": _string("Instructions for the agent to execute."),
        },
        ["agent_name", "instructions"],
    ),
    _function(
        "send_message_to_user",
        "Deliver a natural-language response directly to the user. Use this for updates, confirmations, "
        "or any assistant response the user should see immediately.",
        {
            "message": _string(
                "Plain-text message that will be shown to the user and recorded in the conversation log."
            )
        },
        ["message"],
    ),
    _function(
        "send_draft",
        "Record an email draft so the user can review the exact text.",
        {
            "to": _string("Recipient email for the draft."),
            "subject": _string("Email subject for the draft."),
            "body": _string("Email body content (plain text)."),
        },
        ["to", "subject", "body"],
    ),
    _function(
        "wait",
        "Wait silently when a message is already in conversation history to avoid duplicating responses. "
        "Adds a <wait> log entry that is not visible to the user.",
        {
            "reason": _string(
                "Brief explanation of why waiting (e.g., 'Message already sent', 'Draft already created')."
            )
        },
        ["reason"],
    ),
)
"""OpenPoke's interaction tools (``TOOL_SCHEMAS`` in its ``interaction_agent/tools.py``),
used when no checkout is given."""


def render_request_content(transcript: str, roster: list[str], tag: str, text: str) -> str:
    """The single user message of an OpenPoke interaction request."""
    history = transcript.strip() or "None"
    agents = "\n".join(f'<agent name="{html.escape(name or "agent", quote=True)}" />' for name in roster)
    block = "new_agent_message" if tag == "agent_message" else "new_user_message"
    return "\n\n".join(
        [
            f"<conversation_history>\n{history}\n</conversation_history>",
            f"<active_agents>\n{agents or 'None'}\n</active_agents>",
            f"<{block}>\n{text.strip()}\n</{block}>",
        ]
    )


def _in_checkout(root: Path, parts: tuple[str, ...]) -> Path | None:
    """The checkout's file at ``parts`` (under ``server/`` or the root); a file that a
    link leads outside the checkout to is refused, never read."""
    for base in (root / "server", root):
        candidate = base.joinpath(*parts)
        if candidate.is_file():
            if not inside(root, candidate):
                raise MaterializeError(f"{candidate} leads outside the OpenPoke checkout {root}: not read")
            return candidate
    return None


def system_prompt(openpoke_root: str | None, given: bool) -> tuple[str, str]:
    """The interaction agent's system prompt (stripped, as OpenPoke loads it once at
    start-up: ``server/agents/interaction_agent/agent.py:SYSTEM_PROMPT``) and a note
    saying where it came from."""
    if openpoke_root is None:
        return PLACEHOLDER_PROMPT, (
            "system prompt: PLACEHOLDER, not OpenPoke's. [OpenPoke system prompt not available: "
            "pass --openpoke-root]"
        )
    if given and not Path(openpoke_root).is_dir():
        raise MaterializeError(f"OpenPoke checkout {openpoke_root}: no such directory")
    path = _in_checkout(Path(openpoke_root), PROMPT_PATH)
    if path is None:
        problem = f"{openpoke_root} has no server/agents/interaction_agent/system_prompt.md"
        if given:
            raise MaterializeError(f"openpoke_root: {problem}")
        return PLACEHOLDER_PROMPT, f"system prompt: PLACEHOLDER, not OpenPoke's ({problem})"
    try:
        return path.read_text("utf-8").strip(), f"system prompt: read from {path} (as the checkout is now)"
    except (OSError, UnicodeDecodeError) as exc:
        raise MaterializeError(f"{path}: cannot read the system prompt: {exc}") from None


def _schemas_value(node: ast.stmt) -> ast.expr | None:
    """The value assigned to ``TOOL_SCHEMAS`` by this statement, if it is that assignment."""
    targets: list[ast.expr]
    value: ast.expr | None
    if isinstance(node, ast.Assign):
        targets, value = node.targets, node.value
    elif isinstance(node, ast.AnnAssign):
        targets, value = [node.target], node.value
    else:
        return None
    names = [t.id if isinstance(t, ast.Name) else None for t in targets]
    return value if names == ["TOOL_SCHEMAS"] else None


def _tools_from(path: Path) -> list[ToolPart] | None:
    """``TOOL_SCHEMAS`` of a checkout's tools.py, read as a literal (never executed)."""
    try:
        tree = ast.parse(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        value = _schemas_value(node)
        if value is None:
            continue
        try:
            schemas = ast.literal_eval(value)
            return [
                ToolPart(
                    s["function"]["name"], s["function"].get("description", ""), s["function"]["parameters"]
                )
                for s in schemas
            ]
        except (ValueError, TypeError, KeyError, SyntaxError):
            return None
    return None


def interaction_tools(openpoke_root: str | None) -> tuple[list[ToolPart], str]:
    """The tool definitions sent, from the checkout if it has them, and where they came from."""
    path = _in_checkout(Path(openpoke_root), TOOLS_PATH) if openpoke_root else None
    tools = _tools_from(path) if path is not None else None
    if path is not None and tools is not None:
        return tools, f"tools: TOOL_SCHEMAS read from {path}"
    return list(INTERACTION_TOOLS), "tools: the 4 interaction tools as OpenPoke defines them (built in)"


def _root_index(session: Session, context: Context, index: int) -> tuple[Context, int]:
    """The imported root context and the entry's index there (a summary fork holds copies)."""
    root = session.contexts.get(str(openpoke_state(session).get("root_context_id")))
    if root is None:
        raise MaterializeError(f"session {session.uuid}: the imported root context is missing (import again)")
    message_id = context.messages[index].id
    found = next((i for i, m in enumerate(root.messages) if m.id == message_id), None)
    if found is None:
        raise MaterializeError(f"message {index} of context {context.id} is not in the imported log")
    return root, found


def _turn_output(root: Context, index: int) -> tuple[int, str] | None:
    """The first poke_reply or wait of the turn the entry at ``index`` starts."""
    for later in range(index + 1, len(root.messages)):
        meta = openpoke_meta(root.messages[later])
        if meta is None or meta["tag"] in INCOMING_TAGS:
            return None
        if meta["tag"] in OUTPUT_TAGS:
            return later, root.messages[later].id
    return None


def _turn_start(root: Context, entry: int) -> tuple[int, int] | None:
    """(entry index, root display index) of the user_message or agent_message whose turn
    holds the entry ``entry``."""
    found = None
    for position, message in enumerate(root.messages):
        meta = openpoke_meta(message)
        if meta is not None and meta["tag"] in INCOMING_TAGS and isinstance(meta.get("index"), int):
            if meta["index"] > entry:
                break
            found = (int(meta["index"]), position)
    return found


def _refuse(session: Session, context: Context, index: int, meta: dict[str, Any]) -> MaterializeError:
    tag = meta["tag"]
    where = f"message {index} of context {context.id}"
    if session.role == EXECUTION_ROLE:
        return MaterializeError(
            f"{where} is an execution agent's {tag} entry: only the interaction agent's requests can be "
            "rebuilt (materialize a user_message or agent_message of the interaction session)"
        )
    if tag == SUMMARY_TAG:
        return MaterializeError(
            f"{where} is the working memory's conversation_summary: only user_message and agent_message "
            "entries can be materialized (the summary is part of the history OpenPoke sends, not an input "
            "it answered)"
        )
    entry = meta.get("index")
    root = session.contexts.get(str(openpoke_state(session).get("root_context_id")))
    start = _turn_start(root, int(entry)) if root is not None and isinstance(entry, int) else None
    turn = (
        f"; it is part of the turn of entry {start[0]} (message {start[1]} of the root context "
        f"{root.id}): materialize that entry (--at {start[0]})"
        if start is not None and root is not None
        else ""
    )
    return MaterializeError(
        f"{where} is entry {entry}, a {tag}: only user_message and agent_message entries can be "
        f"materialized (OpenPoke builds a request only when one of them arrives{turn})"
    )


OPENPOKE_PARAMETERS: dict[str, Any] = {"model": OPENPOKE_MODEL, "stream": False}
"""What OpenPoke sends besides the messages and tools (``Settings.interaction_agent_model``,
a pydantic default, not read from the environment; ``stream`` fixed in
``request_chat_completion``). A replay sends them too."""


def openpoke_request(
    messages: Sequence[Message],
    *,
    model: str | None = OPENPOKE_MODEL,
    parameters: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The body ``server/openrouter_client/client.py:request_chat_completion`` posts:
    ``model``, ``messages``, ``stream`` (False) and, when there are tools, ``tools``, in
    that order (httpx sends the dict in its order). Other ``parameters`` (a replay's
    ``max_tokens``, say; OpenPoke sends none) follow; None values are left out. The
    signature is a request source's ``build_request``."""
    extra = {k: v for k, v in (parameters or {}).items() if v is not None}
    chat = chat_request(messages, model=model)
    request: dict[str, Any] = {"model": chat["model"]} if "model" in chat else {}
    request["messages"] = chat["messages"]
    request["stream"] = extra.pop("stream", False)
    if chat.get("tools"):
        request["tools"] = chat["tools"]
    request.update({k: v for k, v in extra.items() if k not in ("model", "messages", "tools")})
    return request


def _memory_note(memory: WorkingMemoryState) -> str:
    held = (
        f"entries {memory.entries[0].index}..{memory.entries[-1].index}" if memory.entries else "no entries"
    )
    return f"working memory: {memory.rule} ({held})"


def materialize_entry(
    session: Session, context: Context, index: int, *, openpoke_root: Path | str | None = None
) -> Materialized | None:
    """The OpenPoke request behind the entry at display ``index`` of ``context``; None
    when that is not an imported OpenPoke entry (replay's own materialization applies).

    ``openpoke_root`` (an OpenPoke checkout) overrides the one stored at import time.
    """
    if not is_openpoke_session(session):
        return None
    imported = any(openpoke_meta(m) is not None for m in context.messages)
    if index >= len(context.messages):
        if not imported:
            return None
        raise MaterializeError(
            f"context {context.id} has {len(context.messages)} messages: an OpenPoke request exists only "
            "for an entry that arrived (give the index of a user_message or agent_message)"
        )
    meta = openpoke_meta(context.messages[index])
    if meta is None:
        return None
    if session.role == EXECUTION_ROLE or meta["tag"] not in INCOMING_TAGS:
        raise _refuse(session, context, index, meta)
    root, root_index = _root_index(session, context, index)
    state = openpoke_state(session)
    memory = working_memory_at(session, int(meta["index"]))
    agents = roster_at(session, int(meta["index"]))
    text = context.messages[index].text()
    stored_root = state.get("openpoke_root")
    checkout = stored_root if isinstance(stored_root, str) else None
    if openpoke_root is not None:  # given for this request: it wins over the stored one
        checkout = str(openpoke_root)
    prompt, prompt_note = system_prompt(checkout, given=openpoke_root is not None)
    tools, tools_note = interaction_tools(checkout)
    content = render_request_content(memory.transcript, list(agents.names), meta["tag"], text)
    messages = [
        *([Message.system_prompt(prompt)] if prompt else []),  # client.py:_build_messages: `if system:`
        Message.tool_definitions_message(tools),
        Message.create("user", [TextPart(content)]),
    ]
    request = openpoke_request(messages)
    output = _turn_output(root, root_index)
    notes = [
        f"OpenPoke interaction request at entry {meta['index']} ({meta['tag']}, {meta.get('timestamp')})",
        prompt_note,
        tools_note,
        _memory_note(memory),
        *memory.notes,
        *agents.notes,
        "only the turn's first model call is rebuilt: OpenPoke does not persist its tool loop (up to 8 calls)",
        f"the original output is entry {output[0]}"
        if output
        else "no poke_reply or wait followed this entry",
    ]
    return Materialized(
        session=session.uuid,
        role=session.role,
        context_id=root.id,
        index=output[0] if output else root_index,
        message_id=output[1] if output else None,
        request=request,
        request_hash=request_hash(request),
        messages=messages,
        parameters=dict(OPENPOKE_PARAMETERS),
        notes=notes,
        source=SOURCE,
    )


def _entry_positions(root: Context) -> dict[int, int]:
    """Entry index → display index in the imported root context (the summary excluded)."""
    positions: dict[int, int] = {}
    for position, message in enumerate(root.messages):
        meta = openpoke_meta(message)
        if meta is not None and meta["tag"] != SUMMARY_TAG and isinstance(meta.get("index"), int):
            positions.setdefault(int(meta["index"]), position)
    return positions


def _holds(context: Context) -> str:
    """What a context holds, in entries, for an error message."""
    indices: list[int] = []
    summary = None
    for message in context.messages:
        meta = openpoke_meta(message)
        if meta is None:
            continue
        if meta["tag"] == SUMMARY_TAG:
            summary = meta.get("last_index")
        elif isinstance(meta.get("index"), int):
            indices.append(int(meta["index"]))
    parts = [f"the summary of entries 0..{summary}"] if summary is not None else []
    if indices:
        parts.append(f"entries {min(indices)}..{max(indices)}")
    return " and ".join(parts) if parts else "no log entries (not an imported context)"


def entry_position(session: Session, entry: int, context: Context | None = None) -> tuple[Context, int]:
    """Where log entry ``entry`` of an imported session is: ``(context, display index)``.

    ``entry`` is the entry's index in the log it was imported from (the conversation log,
    or an execution agent's log), counted as OpenPoke counts (``last_index``); negative
    counts from the end of the log. The context is the imported root, or ``context``
    when given, which must then hold that entry (a summary fork holds the summary and
    copies of the entries after it). Raises :class:`MaterializeError` saying which
    entries exist.
    """
    if not is_openpoke_session(session):
        raise MaterializeError(
            f"session {session.uuid} ({session.role}) was not imported from OpenPoke, so it has no log "
            "entries: address a message by its display index or id"
        )
    root = session.contexts.get(str(openpoke_state(session).get("root_context_id")))
    if root is None:
        raise MaterializeError(f"session {session.uuid}: the imported root context is missing (import again)")
    positions = _entry_positions(root)
    if not positions:
        raise MaterializeError(f"session {session.uuid} holds no imported log entries")
    last = max(positions)
    number = entry + last + 1 if entry < 0 else entry
    log = str(openpoke_state(session).get("log", "the log"))
    if number not in positions:
        raise MaterializeError(
            f"no entry {entry}: session {session.uuid} holds entries 0..{last} of {log} "
            f"({len(positions)} entries; negative numbers count from the end)"
        )
    if context is None or context.id == root.id:
        return root, positions[number]
    message_id = root.messages[positions[number]].id
    found = next((i for i, m in enumerate(context.messages) if m.id == message_id), None)
    if found is None:
        raise MaterializeError(
            f"entry {number} is not in context {context.id}, which holds {_holds(context)}; "
            f"the imported root {root.id} holds entries 0..{last} (leave out --context for it; "
            "--at message:N is display index N of this context)"
        )
    return context, found
