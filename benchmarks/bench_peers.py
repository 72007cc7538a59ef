"""Side by side with peers: LangGraph's SqliteSaver and simonw's llm logs database.

One generated store (the run's 10,000 sessions of about 20 messages, linked file by
file with their catalog, and beside them one conversation about 10,000 turns long) is
read through our :class:`Store` and written, conversation for conversation, into the
two peers' own databases: a LangGraph ``SqliteSaver`` (a
minimal ``StateGraph`` whose state is the list of messages, one thread per
conversation and one checkpoint per turn) and an ``llm`` logs database (its own
migrations; threads, turns, messages and parts as ``LogStore.log`` writes them). Each
question is then asked of all three in the same run, and each figure is ours / the
peer's (below 1: we are faster). There are no goals: the ratios are context.

A turn is a user message with everything that answers it (model calls, tool results);
the messages before the first user message (the system prompt) belong to the first
turn. The peers hold the messages' texts, tool calls and tool results; tool definitions
go where each peer keeps them (llm: its ``tools`` table; LangGraph: none, a graph's
tools are code), and the few tiny images of the generated prompts are left out.

LangGraph keeps the whole list in every checkpoint with its default channels, which at
10,000 turns would be some 250 GB; the state's messages are therefore a ``DeltaChannel``
(LangGraph's channel for long histories: each checkpoint stores the turn's writes and
every ``SNAPSHOT_FREQUENCY``-th one the whole list). Building a thread through
``update_state`` reads the state back before every write (quadratic: hours for the long
thread), so both peers' databases are written directly: LangGraph's through the saver's
own ``put`` / ``put_writes`` with the rows ``update_state`` writes (the tests check they
read back the same as a thread built with ``update_state``), llm's with its own hashes
and SQL in one transaction. The measured operations are the peers' public ones.

Our fork of the long conversation is measured at an early step and at the last one. Our store's
catalog is brought up to date (it indexes the long conversation; a new store's indexes
every file) in another process while the peers are built; nothing is timed until both
are done.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks._harness import Bench, best_time
from benchmarks._stores import shared_store
from soap_core import (
    Context,
    Message,
    Session,
    Store,
    StoreFollower,
    TextPart,
    ThinkingPart,
    ToolPart,
    ToolResultPart,
    ToolUsePart,
    session_overview,
)
from soap_core._catalog import CATALOG_FILE, is_catalog_file
from soap_core._layout import AGENTS_DIR
from soap_gen import generate_store

SEED = 20250612
MESSAGES = 20
"""Mean messages of a generated conversation (specials included)."""
LONG_MESSAGES = 50_000
"""Messages of the long conversation: about five a turn, so about 10,000 turns."""
SNAPSHOT_FREQUENCY = 1000
"""LangGraph's ``DeltaChannel`` writes the whole list every this many turns (its
default, 100, would write 100 copies of a list growing to 50,000 messages: gigabytes)."""
FORK_STEP = 500
"""The turn the long conversation is forked at (see the fork's figure)."""
READ_SAMPLE = 100
"""Conversations read per timing for "read conversation k" (timer noise at ~1 ms)."""
MODEL = "qwen2.5-7b-instruct"


# -- the conversations, as every party holds them -----------------------------------------


@dataclass(frozen=True)
class Piece:
    """One part of a message as the peers keep it."""

    kind: str
    """``text``, ``reasoning``, ``tool_call`` or ``tool_result``."""
    text: str
    """The text; a tool call's JSON arguments; a tool result's content."""
    call_id: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class PeerMessage:
    id: str
    role: str
    """``system``, ``user``, ``assistant`` or ``tool`` (a tool result)."""
    pieces: tuple[Piece, ...]
    created: str | None


@dataclass
class Conversation:
    """One session's active context, as handed to the peers."""

    uuid: str
    """Our session's uuid; the peers' thread id."""
    messages: list[PeerMessage]
    ends: list[int]
    """Turn k ends before ``messages[ends[k]]``."""
    our_ends: list[int]
    """The same ends as display indices of our context (tool definitions included)."""
    tools: list[ToolPart]

    @property
    def turns(self) -> int:
        return len(self.ends)

    def turn(self, k: int) -> list[PeerMessage]:
        return self.messages[self.ends[k - 1] if k else 0 : self.ends[k]]


def piece_text(piece: Piece) -> str:
    """A piece as :meth:`Message.searchable_text` shows it."""
    return f"{piece.name} {piece.text}" if piece.kind == "tool_call" else piece.text


def conversation_of(session_uuid: str, context: Context) -> Conversation:
    """The conversation of ``context``: every message but the tool definitions, cut
    into turns at each user message."""
    messages: list[PeerMessage] = []
    ends: list[int] = []
    our_ends: list[int] = []
    tools: list[ToolPart] = []
    names: dict[str, str] = {}
    asked = False
    for index, message in enumerate(context.messages):
        if message.message_type == "ToolDefinitionsMessage":
            tools.extend(p for p in message.content if isinstance(p, ToolPart))
            continue
        if message.role == "user":
            if asked:
                ends.append(len(messages))
                our_ends.append(index)
            asked = True
        pieces: list[Piece] = []
        for part in message.content:
            if isinstance(part, TextPart):
                pieces.append(Piece("text", part.text))
            elif isinstance(part, ThinkingPart):
                pieces.append(Piece("reasoning", part.text))
            elif isinstance(part, ToolUsePart):
                names[part.call_id] = part.name
                pieces.append(Piece("tool_call", part.arguments, part.call_id, part.name))
            elif isinstance(part, ToolResultPart):
                name = part.name or names.get(part.call_id, "")
                pieces.append(Piece("tool_result", str(part.content), part.call_id, name))
        role = "tool" if message.role == "tool_result" else message.role
        messages.append(PeerMessage(message.id, role, tuple(pieces), message.creation_timestamp))
    ends.append(len(messages))
    our_ends.append(len(context.messages))
    return Conversation(session_uuid, messages, ends, our_ends, tools)


def our_texts(messages: Iterable[Message]) -> list[tuple[str, str]]:
    """(role, text) of our messages as the peers hold them (tool definitions left out)."""
    return [
        ("tool" if m.role == "tool_result" else m.role, m.searchable_text())
        for m in messages
        if m.message_type != "ToolDefinitionsMessage"
    ]


def peer_texts(messages: Iterable[PeerMessage]) -> list[tuple[str, str]]:
    return [(m.role, "\n".join(piece_text(p) for p in m.pieces)) for m in messages]


def generate(root: Path, *, sessions: int, long_messages: int, seed: int = SEED) -> Any:
    """Our store: ``sessions`` conversations, the first ``long_messages`` long. No call
    log (nothing here reads it; a call record holds its whole request) and no stored
    token counts (the catalog counts them)."""
    return generate_store(
        root,
        sessions=sessions,
        messages=MESSAGES,
        fork_rate=0.0,
        chain_depth=1,
        seed=seed,
        long_messages=long_messages,
        token_counts=False,
        call_log_limit=0,
    )


def link_store(source: Path, target: Path) -> None:
    """``target``: the store ``source`` as hard links (so nothing here can change the
    source's files: our writes replace files, never rewrite them), with a copy of its
    catalog, which names files relative to the store and by signatures the links share."""
    shutil.copytree(
        source,
        target,
        copy_function=os.link,
        ignore=lambda folder, names: [n for n in names if is_catalog_file(Path(folder) / n)],
    )
    catalog = source / CATALOG_FILE
    if catalog.is_file():
        with sqlite3.connect(catalog) as src, sqlite3.connect(target / CATALOG_FILE) as dst:
            src.backup(dst)
        src.close()
        dst.close()


def add_long_conversation(root: Path, scratch: Path, *, long_messages: int, seed: int) -> None:
    """Generate the one long conversation in ``scratch`` and move its session into ``root``."""
    generate(scratch, sessions=1, long_messages=long_messages, seed=seed)
    [session] = [p for p in scratch.glob(f"{AGENTS_DIR}/*/*") if p.is_dir()]
    target = root / session.relative_to(scratch)
    target.parent.mkdir(parents=True, exist_ok=True)
    session.rename(target)
    shutil.rmtree(scratch)


def load_conversations(root: Path) -> list[Conversation]:
    """Every session's active context, read through our Store (listing order)."""
    store = Store(root, use_catalog=False)
    return [conversation_of(s.uuid, store.load_active_context(s)) for s in store.scan_sessions()]


# -- LangGraph ------------------------------------------------------------------------------


def _concat(state: list[Any], writes: list[list[Any]]) -> list[Any]:
    """The messages channel's reducer: the writes appended (batching-invariant, as a
    ``DeltaChannel`` needs; ``add_messages`` would also merge by id)."""
    out = list(state)
    for batch in writes:
        out.extend(batch)
    return out


@dataclass
class LangGraphPeer:
    path: Path
    conn: sqlite3.Connection
    saver: Any
    graph: Any
    configs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Thread id -> the config of each turn's checkpoint (kept for the threads asked about)."""
    build_seconds: float = 0.0

    def state(self, config: dict[str, Any]) -> list[Any]:
        return list(self.graph.get_state(config).values.get("messages", []))

    def close(self) -> None:
        self.conn.close()


def langgraph_graph(saver: Any, snapshot_frequency: int) -> Any:
    """A minimal graph: one node, a state that is only the list of messages."""
    from typing import Annotated, TypedDict

    from langgraph.channels import DeltaChannel
    from langgraph.graph import END, START, StateGraph

    # The functional form: the channel is built here, and this module's annotations are
    # strings that LangGraph could not resolve in a class body.
    state = TypedDict(  # noqa: UP013
        "State", {"messages": Annotated[list, DeltaChannel(_concat, snapshot_frequency=snapshot_frequency)]}
    )

    def answer(_state: Any) -> dict[str, Any]:
        return {}

    builder = StateGraph(state)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=saver)


def langchain_messages(messages: Iterable[PeerMessage]) -> list[Any]:
    """Our messages as LangGraph agents keep them: LangChain message objects."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    out: list[Any] = []
    for m in messages:
        if m.role == "assistant":
            calls = [p for p in m.pieces if p.kind == "tool_call"]
            out.append(
                AIMessage(
                    content="\n".join(p.text for p in m.pieces if p.kind != "tool_call"),
                    tool_calls=[
                        {
                            "name": p.name or "",
                            "args": json.loads(p.text),
                            "id": p.call_id,
                            "type": "tool_call",
                        }
                        for p in calls
                    ],
                    id=m.id,
                )
            )
        elif m.role == "tool":
            first = next((p for p in m.pieces if p.kind == "tool_result"), None)
            out.append(
                ToolMessage(
                    content="\n".join(p.text for p in m.pieces),
                    tool_call_id=first.call_id if first and first.call_id else "",
                    name=first.name if first else None,
                    id=m.id,
                )
            )
        else:
            cls = SystemMessage if m.role == "system" else HumanMessage
            out.append(cls(content="\n".join(p.text for p in m.pieces), id=m.id))
    return out


def langchain_texts(messages: Iterable[Any]) -> list[tuple[str, str]]:
    """(role, text) of LangChain messages, as :func:`our_texts` gives ours."""
    roles = {"system": "system", "human": "user", "ai": "assistant", "tool": "tool"}
    out = []
    for m in messages:
        pieces = [m.content] if m.content or not getattr(m, "tool_calls", None) else []
        pieces += [f"{c['name']} {json.dumps(c['args'])}" for c in getattr(m, "tool_calls", None) or []]
        out.append((roles[m.type], "\n".join(pieces)))
    return out


def write_langgraph_thread(
    saver: Any, thread: str, turns: list[list[Any]], snapshot_frequency: int
) -> list[dict[str, Any]]:
    """One checkpoint per turn through the saver's ``put`` / ``put_writes``: the rows
    ``graph.update_state(config, {"messages": turn}, as_node="answer")`` writes turn
    after turn (a snapshot on the first, then every ``snapshot_frequency``-th; each
    turn's messages saved as a write on the checkpoint it builds on), without reading
    the state back before each write."""
    from langgraph.checkpoint.base.id import uuid6
    from langgraph.checkpoint.serde.types import _DeltaSnapshot

    config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    value: list[Any] = []
    version: str | None = None
    since = 0
    configs = []
    for step, batch in enumerate(turns):
        if step:
            parent_id = config["configurable"]["checkpoint_id"]
            task_id = str(uuid.uuid5(uuid.UUID(parent_id), "__interrupt__"))
            saver.put_writes(config, [("messages", batch)], task_id, "~__interrupt__, 0000000000")
            since += 1
        value.extend(batch)
        version = saver.get_next_version(version, None)
        snapshot = step == 0 or since >= snapshot_frequency
        if snapshot:
            since = 0
        metadata: dict[str, Any] = {"source": "update", "step": step, "parents": {}}
        if since:
            metadata["counters_since_delta_snapshot"] = {"messages": [since, since]}
        checkpoint = {
            "v": 4,
            "ts": datetime.now(UTC).isoformat(),
            "id": str(uuid6(clock_seq=step)),
            "channel_values": {"messages": _DeltaSnapshot(list(value))} if snapshot else {},
            "channel_versions": {"messages": version},
            "versions_seen": {"answer": {}},
            "updated_channels": None,
        }
        config = saver.put(config, checkpoint, metadata, {"messages": version})
        configs.append(config)
    return configs


def open_langgraph(path: Path, snapshot_frequency: int) -> LangGraphPeer:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    return LangGraphPeer(path, conn, saver, langgraph_graph(saver, snapshot_frequency))


def build_langgraph(
    path: Path, conversations: list[Conversation], snapshot_frequency: int, keep: set[str]
) -> LangGraphPeer:
    """The peer's database: a thread per conversation, a checkpoint per turn. The
    configs of the threads in ``keep`` are kept. Written without fsync (as our
    generator writes), then synchronous again for the measurements."""
    started = time.perf_counter()
    peer = open_langgraph(path, snapshot_frequency)
    peer.conn.execute("PRAGMA synchronous=OFF")
    for conversation in conversations:
        turns = [langchain_messages(conversation.turn(k)) for k in range(conversation.turns)]
        configs = write_langgraph_thread(peer.saver, conversation.uuid, turns, snapshot_frequency)
        if conversation.uuid in keep:
            peer.configs[conversation.uuid] = configs
    peer.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    peer.conn.execute("PRAGMA synchronous=FULL")
    peer.build_seconds = time.perf_counter() - started
    return peer


def langgraph_threads(peer: LangGraphPeer) -> list[tuple[Any, ...]]:
    """The distinct threads with their checkpoints and latest checkpoint, by SQL on the
    saver's table (SqliteSaver has no call that lists threads)."""
    return peer.conn.execute(
        "SELECT thread_id, COUNT(*), MAX(checkpoint_id) FROM checkpoints "
        "WHERE checkpoint_ns = '' GROUP BY thread_id"
    ).fetchall()


def langgraph_fork(peer: LangGraphPeer, config: dict[str, Any]) -> dict[str, Any]:
    """Fork at a checkpoint as LangGraph's time-travel docs do: ``update_state`` from
    that checkpoint's config (the state unchanged: no new messages)."""
    return peer.graph.update_state(config, {"messages": []}, as_node="answer")


# -- llm ----------------------------------------------------------------------------------------


def llm_message(message: PeerMessage) -> Any:
    """Our message as an ``llm.parts.Message``."""
    from llm.parts import Message as LlmMessage
    from llm.parts import ReasoningPart, ToolCallPart
    from llm.parts import TextPart as LlmText
    from llm.parts import ToolResultPart as LlmResult

    parts: list[Any] = []
    for p in message.pieces:
        if p.kind == "text":
            parts.append(LlmText(text=p.text))
        elif p.kind == "reasoning":
            parts.append(ReasoningPart(text=p.text))
        elif p.kind == "tool_call":
            parts.append(
                ToolCallPart(name=p.name or "", arguments=json.loads(p.text), tool_call_id=p.call_id)
            )
        else:
            parts.append(LlmResult(name=p.name or "", output=p.text, tool_call_id=p.call_id))
    return LlmMessage(role=message.role, parts=parts)


def llm_texts(messages: Iterable[Any]) -> list[tuple[str, str]]:
    """(role, text) of ``llm`` messages, as :func:`our_texts` gives ours."""
    from llm.parts import ToolCallPart
    from llm.parts import ToolResultPart as LlmResult

    out = []
    for m in messages:
        pieces = []
        for p in m.parts:
            if isinstance(p, ToolCallPart):
                pieces.append(f"{p.name} {json.dumps(p.arguments)}")
            elif isinstance(p, LlmResult):
                pieces.append(p.output)
            else:
                pieces.append(p.text)
        out.append((m.role, "\n".join(pieces)))
    return out


def _part_row(message_hash: str, position: int, part: Any) -> tuple[Any, ...]:
    """A ``parts`` row as ``LogStore._write_part`` makes it (no fragments, no attachments)."""
    payload = part.to_dict()
    kind = payload.pop("type")
    text = payload.pop("text") if kind in ("text", "reasoning") and "text" in payload else None
    return (message_hash, position, kind, payload.get("name"), text, json.dumps(payload) if payload else None)


def _turn_search_row(
    turn: str, before: PeerMessage | None, answer: PeerMessage
) -> tuple[str, str, str] | None:
    """The ``turn_search`` row ``LogStore.log`` derives with ``TURN_SEARCH_INSERT_SQL``
    (the text parts of the prompt if it is a user message, and of the answer), here
    without its query, which scans every part once per turn (quadratic over a build)."""
    prompt = (
        "".join(p.text for p in before.pieces if p.kind == "text") if before and before.role == "user" else ""
    )
    response = "".join(p.text for p in answer.pieces if p.kind == "text")
    return (turn, prompt, response) if prompt or response else None


def _utc(stamp: str | None) -> str:
    return (stamp or datetime.now(UTC).replace(tzinfo=None).isoformat()).replace("T", " ")


def build_llm(path: Path, conversations: list[Conversation]) -> float:
    """The peer's logs database: llm's own migrations, then per conversation a thread,
    its message chain (content-addressed with llm's own hash), one turn per model call
    (each assistant message, its input the chain before it), the turn's tools and
    search row (indexed by llm's FTS triggers), as ``LogStore.log`` writes them, in
    one transaction. Returns seconds."""
    import sqlite_utils
    from llm import Tool
    from llm.logs import message_hash
    from llm.migrations import migrate
    from llm.utils import ensure_tool, monotonic_ulid

    started = time.perf_counter()
    db = sqlite_utils.Database(path)
    migrate(db)
    conn = db.conn
    conn.execute("PRAGMA synchronous=OFF")
    tool_ids: dict[tuple[str, str, str], int] = {}
    threads, messages, parts, turns, turn_tools, searches = [], [], [], [], [], []
    stored: set[str] = set()
    with conn:
        for conversation in conversations:
            ids = []
            for tool in conversation.tools:
                key = (tool.name, tool.description, json.dumps(dict(tool.parameters), sort_keys=True))
                if key not in tool_ids:
                    tool_ids[key] = ensure_tool(
                        db,
                        Tool(
                            name=tool.name, description=tool.description, input_schema=dict(tool.parameters)
                        ),
                    )
                ids.append(tool_ids[key])
            parent: str | None = None
            previous: PeerMessage | None = None
            for message in conversation.messages:
                converted = llm_message(message)
                digest = message_hash(converted, parent)
                if digest not in stored:  # content-addressed: a shared prefix is stored once
                    stored.add(digest)
                    messages.append((digest, parent, converted.role, None))
                    parts.extend(_part_row(digest, i, part) for i, part in enumerate(converted.parts))
                if converted.role == "assistant" and parent is not None:
                    turn = str(monotonic_ulid()).lower()
                    search = _turn_search_row(turn, previous, message)
                    if search is not None:
                        searches.append(search)
                    turns.append(
                        (
                            turn,
                            conversation.uuid,
                            parent,
                            digest,
                            MODEL,
                            None,
                            None,
                            None,
                            None,
                            None,
                            None,
                            None,
                            _utc(message.created),
                            None,
                        )
                    )
                    turn_tools.extend((turn, tool_id, None) for tool_id in ids)
                parent, previous = digest, message
            first_user = next((m for m in conversation.messages if m.role == "user"), None)
            name = peer_texts([first_user])[0][1][:40] if first_user else None
            created = _utc(conversation.messages[0].created if conversation.messages else None)
            threads.append((conversation.uuid, name, parent, None, created))
        conn.executemany(
            "INSERT INTO messages (hash, parent_hash, role, provider_metadata) VALUES (?, ?, ?, ?)",
            messages,
        )
        conn.executemany(
            "INSERT INTO parts (message_hash, position, type, tool_name, text, payload) VALUES (?, ?, ?, ?, ?, ?)",
            parts,
        )
        conn.executemany(
            "INSERT INTO threads (id, name, tip_message_hash, forked_from, datetime_utc) VALUES (?, ?, ?, ?, ?)",
            threads,
        )
        conn.executemany(
            "INSERT INTO turns (id, thread_id, parent_message_hash, tip_message_hash, model, resolved_model, "
            "options_json, schema_id, input_tokens, output_tokens, token_details, duration_ms, datetime_utc, "
            "response_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            turns,
        )
        conn.executemany(
            "INSERT INTO turn_tools (turn_id, tool_id, instance_id) VALUES (?, ?, ?)", turn_tools
        )
        conn.executemany("INSERT INTO turn_search (turn_id, prompt, response) VALUES (?, ?, ?)", searches)
    conn.execute("PRAGMA synchronous=FULL")
    conn.close()
    return time.perf_counter() - started


def open_llm(path: Path) -> Any:
    import sqlite_utils
    from llm.logs import LogStore

    return LogStore(sqlite_utils.Database(path))


def llm_conversations(log: Any) -> list[dict[str, Any]]:
    """The conversations with their turns and times, by SQL on llm's tables (llm has no
    command that lists conversations; ``llm -c`` picks the newest the same way)."""
    return list(
        log.db.query(
            "SELECT threads.id, threads.name, threads.datetime_utc, COUNT(turns.id) AS turns, "
            "MAX(turns.datetime_utc) AS last FROM threads LEFT JOIN turns ON turns.thread_id = threads.id "
            "GROUP BY threads.id ORDER BY threads.id"
        )
    )


def llm_conversation(log: Any, thread: str) -> list[Any]:
    """A conversation's messages through llm's Python API (what ``llm -c`` continues from)."""
    return log.thread_messages(thread)


def llm_logs_rows(log: Any, thread: str) -> list[dict[str, Any]]:
    """The rows ``llm logs --cid`` prints."""
    from llm.logs import merged_log_rows

    return merged_log_rows(log, thread_id=thread)


# -- the run --------------------------------------------------------------------------------


@dataclass
class Setup:
    """Our store and the peers' databases, built from the same conversations."""

    root: Path
    conversations: list[Conversation]
    long: Conversation
    sample: list[Conversation]
    """The short conversations "read conversation k" reads."""
    generate_seconds: float
    load_seconds: float
    catalog_seconds: float
    langgraph: LangGraphPeer | None = None
    langgraph_error: str | None = None
    llm_path: Path | None = None
    llm_seconds: float = 0.0
    llm_error: str | None = None

    def close(self) -> None:
        if self.langgraph is not None:
            self.langgraph.close()

    def remove(self) -> None:
        """Delete our store and the peers' databases."""
        shutil.rmtree(self.root, ignore_errors=True)
        for path in (self.langgraph.path if self.langgraph else None, self.llm_path):
            for file in path.parent.glob(path.name + "*") if path is not None else ():
                file.unlink(missing_ok=True)


def _peer_import_error(check: Callable[[], object]) -> str | None:
    try:
        check()
    except Exception as exc:  # ImportError, or a version without what is used here
        return f"{type(exc).__name__}: {exc}"
    return None


def _check_langgraph() -> None:
    from langgraph.channels import DeltaChannel  # noqa: F401  (langgraph >= 1.1)
    from langgraph.checkpoint.serde.types import _DeltaSnapshot  # noqa: F401
    from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: F401


def _check_llm() -> None:
    import sqlite_utils  # noqa: F401
    from llm.logs import LogStore, merged_log_rows  # noqa: F401  (llm >= 0.30: its message store)


def prepare(
    workdir: Path,
    *,
    sessions: int,
    long_messages: int,
    snapshot_frequency: int = SNAPSHOT_FREQUENCY,
    seed: int = SEED,
    many: Path | None = None,
) -> Setup:
    """Generate our store, warm its catalog, read the conversations through our Store
    and build both peers' databases from them.

    With ``many`` (a store the run already generated and indexed), its conversations
    are taken instead of ``sessions`` new ones: the store is linked file by file with
    its catalog copied, and the long conversation generated beside them."""
    root = workdir / "peers-store"
    started = time.perf_counter()
    if many is None:
        generate(root, sessions=sessions, long_messages=long_messages, seed=seed)
    else:
        link_store(many, root)
        add_long_conversation(root, workdir / "peers-long", long_messages=long_messages, seed=seed)
    generate_seconds = time.perf_counter() - started

    # The catalog is warmed in another process (SQLite, tiktoken and Python beside this
    # process's Python) while the conversations are read and the peers built; nothing is
    # timed until both are done.
    begun = time.perf_counter()
    warming = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from soap_core import Store; Store(sys.argv[1]).sessions()",
            str(root),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        started = time.perf_counter()
        conversations = load_conversations(root)
        load_seconds = time.perf_counter() - started
        long = max(conversations, key=lambda c: c.turns)
        short = [c for c in conversations if c is not long]
        step = max(1, len(short) // READ_SAMPLE)
        sample = short[::step][:READ_SAMPLE]
        setup = Setup(root, conversations, long, sample, generate_seconds, load_seconds, 0.0)
        setup.langgraph_error = _peer_import_error(_check_langgraph)
        if setup.langgraph_error is None:
            path = workdir / "peers-langgraph.sqlite"
            keep = {long.uuid, *(c.uuid for c in sample)}
            setup.langgraph = build_langgraph(path, conversations, snapshot_frequency, keep)
        setup.llm_error = _peer_import_error(_check_llm)
        if setup.llm_error is None:
            setup.llm_path = workdir / "peers-llm.db"
            setup.llm_seconds = build_llm(setup.llm_path, conversations)
    except BaseException:
        warming.kill()  # the process this call started, by its handle
        warming.wait()
        raise
    _out, errors = warming.communicate()
    if warming.returncode != 0:
        raise RuntimeError(f"warming the catalog failed ({warming.returncode}): {errors.strip()[-2000:]}")
    setup.catalog_seconds = time.perf_counter() - begun
    return setup


def _size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*")) / 1e6


def _tree_mb(root: Path) -> float:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _s, files in os.walk(root) for f in files) / 1e6


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3g} ms" if seconds < 10 else f"{seconds:.3g} s"


PEER_GOAL = 1.0
"""Issue 28's goal for reading a conversation and the state at a step: as fast as each peer."""


def _ratio(
    bench: Bench,
    what: str,
    ours: float,
    theirs: float,
    *,
    baseline: str,
    note: str,
    limit: float | None = None,
) -> None:
    """ours / theirs, held against ``≤ limit``x where issue 28 sets one (reading
    conversation k and the state at step k: 1x both peers)."""
    value = ours / theirs if theirs > 0 else math.inf
    goal, met = (f"≤ {limit:g}x", value <= limit) if limit is not None else ("", None)
    bench.figure(
        what, value, "x", goal, met, baseline=baseline, note=f"ours {_ms(ours)}, theirs {_ms(theirs)}; {note}"
    )


def _skipped(bench: Bench, peer: str, error: str) -> None:
    bench.figure(f"{peer}: not measured", math.nan, "", "", None, note=f"cannot import it here ({error})")


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def run(bench: Bench) -> None:
    started = time.perf_counter()
    long_messages = bench.scale(LONG_MESSAGES, 250)
    repeat = 2  # the best of two: the long conversation's reads take seconds
    many = shared_store(bench)
    Store(many).sessions()  # its catalog, indexed once per run (by the pages' section before this one)
    setup = prepare(bench.workdir, sessions=0, long_messages=long_messages, many=many)
    try:
        _measure(bench, setup, repeat)
    finally:
        setup.close()
        setup.remove()  # 2.5 GB of the workdir the next modules share
    bench.figure(
        "the whole comparison (generating, building the peers, measuring, removing)",
        time.perf_counter() - started,
        "s",
        "",
        None,
        note=(
            f"linking the run's store and generating the long conversation {setup.generate_seconds:.0f} s, "
            f"bringing the catalog up to date {setup.catalog_seconds:.0f} s "
            f"(beside reading the conversations {setup.load_seconds:.0f} s and building LangGraph's database "
            f"{setup.langgraph.build_seconds if setup.langgraph else 0:.0f} s and llm's {setup.llm_seconds:.0f} s)"
        ),
    )


def _measure(bench: Bench, setup: Setup, repeat: int) -> None:
    long, sample, lg = setup.long, setup.sample, setup.langgraph
    count = len(setup.conversations)
    store = Store(setup.root)
    shape = (
        f"{count:,} conversations ({sum(len(c.messages) for c in setup.conversations):,} messages); "
        f"the long one {len(long.messages):,} messages in {long.turns:,} turns"
    )
    print(f"  {shape}", flush=True)
    lg_about = f"langgraph {_version('langgraph')}, langgraph-checkpoint-sqlite {_version('langgraph-checkpoint-sqlite')}"
    llm_about = f"llm {_version('llm')}"
    log = open_llm(setup.llm_path) if setup.llm_path is not None else None

    # -- listing
    def ours_list() -> list[dict[str, Any]]:
        return [session_overview(store, s).as_dict() for s in store.sessions()]

    assert len(ours_list()) == count
    ours = best_time(ours_list, repeat)
    listing = (
        f"ours: Store.sessions() with a warm catalog and each row's overview, as `soapwb ls --json` "
        f"(role, uuid, thread, messages, tokens, first and last time); {shape}"
    )
    if lg is not None:
        assert len(langgraph_threads(lg)) == count
        theirs = best_time(lambda: langgraph_threads(lg), repeat)
        _ratio(
            bench,
            "list conversations: ours / LangGraph (SQL)",
            ours,
            theirs,
            baseline=f"SqliteSaver's checkpoints table: thread ids with their checkpoints ({lg_about})",
            note=(
                f"{listing}; SqliteSaver has no call that lists threads (its list(None) reads and deserializes "
                f"every checkpoint of every thread), so the peer is one GROUP BY query"
            ),
        )
    else:
        _skipped(bench, "LangGraph", setup.langgraph_error or "")
    if log is not None:
        assert len(llm_conversations(log)) == count
        theirs = best_time(lambda: llm_conversations(log), repeat)
        _ratio(
            bench,
            "list conversations: ours / llm",
            ours,
            theirs,
            baseline=f"llm's threads with their turns' count and times, one SQL query ({llm_about})",
            note=f"{listing}; llm has no command listing conversations",
        )
        _followed_listing(bench, store, count, theirs, shape, llm_about)
    else:
        _skipped(bench, "llm", setup.llm_error or "")

    # -- the long conversation: the state at step k, a fork at step k
    k = min(long.turns - 1, long.turns // 2 + SNAPSHOT_FREQUENCY // 2)
    at = long.our_ends[k]
    long_about = (
        f"step k = {k:,} of {long.turns:,} turns ({at:,} of our {len(long.our_ends) and long.our_ends[-1]:,} "
        f"messages)"
    )

    read: list[list[Message]] = []

    def ours_state() -> None:
        read[:] = [list(store.load_session(long.uuid).active_context.message_view[:at])]

    ours = best_time(ours_state, repeat)
    state = read[0]
    if lg is not None:
        config = lg.configs[long.uuid][k]
        assert langchain_texts(lg.state(config)) == our_texts(state), (
            "LangGraph's state at k differs from ours"
        )
        theirs = best_time(lambda: lg.state(config), repeat)
        _ratio(
            bench,
            "state at step k of the long conversation: ours / LangGraph",
            ours,
            theirs,
            baseline=f"graph.get_state(config of step k): its last snapshot plus the writes since ({lg_about})",
            note=(
                f"ours: Store.load_session (the rest of the file; its messages are byte spans the catalog "
                f"holds) and the messages up to k built (message_view[:k]); {long_about}; "
                f"LangGraph's snapshot_frequency={SNAPSHOT_FREQUENCY}, k is {k % SNAPSHOT_FREQUENCY} turns past a snapshot"
            ),
            limit=PEER_GOAL,
        )

    # A fork at an early step and at the last one (goal: any step), each saved.
    long_id = store.load_session(long.uuid).active_context_id or ""  # each fork saved is made active
    for f in sorted({min(long.turns - 1, bench.scale(FORK_STEP, long.turns // 2)), long.turns - 1}):
        _fork_at_step(bench, store, long, long_id, lg, f, repeat, lg_about)

    # -- read conversation k of all of them
    def ours_read() -> None:
        for c in sample:
            store.load_session(c.uuid)

    for c in sample:
        assert our_texts(store.load_session(c.uuid).active_context.messages) == peer_texts(c.messages)
    ours = best_time(ours_read, bench.scale(5, 2))
    read_about = (
        f"ours: Store.load_session(uuid) with a warm catalog; {len(sample)} conversations of the {count:,} per timing "
        f"(mean {sum(len(c.messages) for c in sample) / max(1, len(sample)):.0f} messages)"
    )
    if log is not None:
        for c in sample:
            assert llm_texts(llm_conversation(log, c.uuid)) == peer_texts(c.messages), (
                "llm's conversation differs"
            )
        theirs = best_time(lambda: [llm_conversation(log, c.uuid) for c in sample], bench.scale(5, 2))
        _ratio(
            bench,
            "read conversation k: ours / llm (Python API)",
            ours,
            theirs,
            baseline=f"LogStore.thread_messages(id): the thread's chain of messages ({llm_about})",
            note=read_about,
            limit=PEER_GOAL,
        )
        theirs = best_time(lambda: [llm_logs_rows(log, c.uuid) for c in sample], bench.scale(5, 2))
        _ratio(
            bench,
            "read conversation k: ours / `llm logs --cid`",
            ours,
            theirs,
            baseline=f"merged_log_rows(store, thread_id=id), the rows `llm logs --cid` prints ({llm_about})",
            note=read_about,
            limit=PEER_GOAL,
        )
    if lg is not None:
        latest = [{"configurable": {"thread_id": c.uuid}} for c in sample]
        theirs = best_time(lambda: [lg.state(config) for config in latest], bench.scale(5, 2))
        _ratio(
            bench,
            "read conversation k: ours / LangGraph",
            ours,
            theirs,
            baseline=f"graph.get_state(thread's config): its latest state ({lg_about})",
            note=read_about,
            limit=PEER_GOAL,
        )

    # -- sizes, for context
    ours_mb = _tree_mb(setup.root)
    bench.figure("our store", ours_mb, "MB", note=f"{shape}; every file, the catalog and records included")
    if lg is not None:
        bench.figure(
            "LangGraph's database",
            _size_mb(lg.path),
            "MB",
            note=(
                f"built in {lg.build_seconds:.0f} s through SqliteSaver.put/put_writes (update_state per turn "
                f"reads the whole state back first: quadratic); snapshot_frequency={SNAPSHOT_FREQUENCY}"
            ),
        )
        bench.figure(
            "store size: ours / LangGraph's database",
            ours_mb / _size_mb(lg.path),
            "x",
            baseline="LangGraph's database above",
            note="ours: peteos's own JSON files, byte for byte, and the catalog (most of it the trigram index "
            "of every message's text); LangGraph: its checkpoints and writes in SQLite",
        )
    if setup.llm_path is not None:
        bench.figure(
            "llm's logs database",
            _size_mb(setup.llm_path),
            "MB",
            note=f"built in {setup.llm_seconds:.0f} s in one transaction with llm's own hashes and SQL",
        )
        bench.figure(
            "store size: ours / llm's logs database",
            ours_mb / _size_mb(setup.llm_path),
            "x",
            baseline="llm's logs database above",
            note="llm: a row per prompt and response in SQLite, with its full-text search tables",
        )


def _fork_at_step(
    bench: Bench, store: Store, long: Conversation, long_id: str, lg: Any, f: int, repeat: int, lg_about: str
) -> None:
    """Fork the long conversation at turn ``f`` and save it, ours against LangGraph's
    ``update_state`` at the same step."""
    fork_at = long.our_ends[f]
    expected = our_texts(store.load_session(long.uuid).contexts[long_id].messages[:fork_at])
    session = store.load_session(long.uuid)  # its messages unbuilt, as a replay or compaction finds it
    parent = session.contexts[long_id]
    assert session.directory is not None
    long_file = session.directory / session.context_files[long_id]
    split: dict[str, float] = {}

    def ours_fork() -> Session:
        begun = time.perf_counter()
        session.set_active_context(parent.fork(range(fork_at)))
        split["fork"] = time.perf_counter() - begun
        store.save_session(session)
        split["save"] = time.perf_counter() - begun - split["fork"]
        return session

    ours = best_time(ours_fork, bench.scale(3, repeat))
    assert our_texts(store.load_session(long.uuid).active_context.messages) == expected
    if lg is None:
        return
    config = lg.configs[long.uuid][f]
    forked = langgraph_fork(lg, config)
    assert langchain_texts(lg.state(forked)) == expected, "LangGraph's fork differs from ours"
    theirs = best_time(lambda: langgraph_fork(lg, config), repeat)
    last = " (the last)" if f == long.turns - 1 else ""
    bench.ratio(
        f"fork at step {f:,}{last} of the long conversation, saved: ours / LangGraph",
        ours,
        theirs,
        2,
        baseline_is=(
            f"graph.update_state(config of step f, no new messages): reads the state at f and saves it in a "
            f"new checkpoint ({lg_about})"
        ),
        note=(
            f"ours {_ms(ours)}, theirs {_ms(theirs)}; ours: Context.fork(range(f's messages)) made active, then "
            f"Store.save_session of the loaded session: the fork's file (the parent's messages' bytes, each "
            f"renumbered: no message built or dumped), the parent's again for its new child (its messages' "
            f"bytes written from where they were read), session.json, each fsynced and digested, and the "
            f"catalog's rows (the fork's copied from the parent's, its text left to the next search); of which "
            f"the fork {_ms(split['fork'])}, the save {_ms(split['save'])}; {fork_at:,} of "
            f"{long.our_ends[-1]:,} messages ({_size_mb(long_file):.0f} MB), {long.turns:,} turns"
        ),
    )


def _followed_listing(
    bench: Bench, store: Store, count: int, llm_seconds: float, shape: str, about: str
) -> None:
    """The listing of a long-running process (the workbench, ``soapwb follow``) that
    follows the store by file events: it trusts its catalog between them
    (soap_core._trust), against llm's one SQL query."""
    follower = StoreFollower.of(store)
    try:
        store.sessions()  # the walk the trust starts from

        def ours() -> list[tuple[str, int | None, int | None]]:
            rows = Store(store.root).sessions()  # a new Store, as each page run opens one
            return [
                (s.uuid, s.figures.messages if s.figures else None, s.figures.tokens if s.figures else None)
                for s in rows
            ]

        assert len(ours()) == count
        seconds = best_time(ours, 5)
        bench.ratio(
            "list conversations in a long-running process: ours / llm",
            seconds,
            llm_seconds,
            1,
            baseline_is=f"llm's threads with their turns' count and times, one SQL query ({about})",
            note=(
                f"ours {_ms(seconds)}, theirs {_ms(llm_seconds)}; Store.sessions() in a process whose StoreFollower "
                f"watches the store (file events: {follower.watching()}): no walk while no file changed, the "
                f"rows kept while the catalog's generation stands; each row with the active context's "
                f"messages, tokens and times; {shape}"
            ),
        )
    finally:
        follower.stop()
