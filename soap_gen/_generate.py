"""A deterministic generator of realistic stores, for benchmarks and scale tests.

Benchmarks need stores of a given shape (10,000 sessions, one context of 100,000
messages, forks, invocation chains) that look like what our runtime writes and that are
the same on every run, so that two runs measure the same thing. :func:`generate_store`
writes one from a seed: every uuid, id, timestamp and text comes from
``random.Random``, so the same arguments give the same bytes.

It plays the runtime's part (:mod:`soap_core.runtime._invoke`) without a model: each
session is built turn by turn with the real model classes (a prompt, model calls
answered with tool calls, the results at their ``<id>:tool_result`` anchor, a final
answer or ``produce_output``); compaction forks the active context before a model call;
one object's ``delegate`` tool runs a turn of another object (an invocation chain).
Every model call is recorded with the request :func:`soap_core.chat_request` builds at
that moment and the hook keys replay rebuilds it from, through the runtime's own
``offer_tools``, ``build_system_prompt``, ``open_call`` and ``close_call``, so ``soapwb
verify`` matches every call. Sessions and contexts are written by :meth:`Store.save_session`, records as
:func:`write_call` and :func:`write_invocation` write them (faster, the same bytes: see
:func:`record_text`), once per session when it is complete (the runtime writes the same
final state after every step).

Choices worth knowing:

* **Token counts** are stored where the runtime stores them: on every message, the
  count ``Message.record_token_count`` gives for its final content, taken as a session
  is written (a role's specials and a fork's copies counted once). That is about a
  tenth of the time, so it is on by default; ``token_counts=False`` leaves them out, as
  a model without a context limit would. Usage in recorded responses is an estimate
  (four characters a token): it is the server's count, never cl100k's.
* **Calls of very long contexts**: a call record holds its whole request, so the call
  log of a K-message context takes O(K²) bytes (terabytes at 100,000 messages). Calls
  whose request would hold more than ``call_log_limit`` messages are not recorded, as
  if the call log had been switched off there; invocation records list the recorded
  calls only.
* **Appends** use the runtime's two operations (append at ``messages``, tool results
  at their anchor) in constant time, where :class:`Context`'s general methods scan the
  anchor list (one anchor per tool group: quadratic over a long context); the result is
  the same, which the tests check against ``Context.append``.
* **No fsync, no catalog**: the store's writer fsyncs every file and its folder (two
  waits a file: minutes for 150,000 files on a busy disk) and indexes every saved
  session in the SQLite catalog (reading its files again). A generated store can be
  generated again and the catalog is a cache its first reader builds, so by default the
  files are written the same way but without the fsyncs and without a catalog
  (``fsync=True`` keeps them; while it runs, other writers in this process skip them too).
* **Processes**: once planned, the groups (a chain of sessions each) are independent and
  each has its own rng, so they are shared out over two processes; the files are the
  same for any number. Most of the time left is creating 13 files a session and json's
  indenting encoder (pure Python) writing the contexts.
* **Images** ride in user prompts (text plus a tiny PNG): our runtime's ``invoke`` takes
  text only, but a store must show images.
* The clock is UTC: message timestamps are naive local times, records' are UTC, and
  the two agree.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import multiprocessing
import os
import random
import struct
import uuid
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from soap_core import (
    CALLS_DIR,
    INVOCATIONS_DIR,
    MESSAGES_ANCHOR,
    OBJECT_KEY,
    THREAD_ID_KEY,
    TOOL_RESULT_SUFFIX,
    CallRecord,
    Context,
    InvocationRecord,
    MediaPart,
    Message,
    Part,
    Party,
    Session,
    Store,
    StoreError,
    TextPart,
    ThinkingPart,
    ToolPart,
    ToolResultPart,
    ToolUsePart,
    base64_source,
    canonical_json,
    chat_request,
    count_text,
    dump_json,
    write_text_atomic,
)

# soap_core's private pieces the generator needs (no public name): unsynced writes, the
# text a message's token count is taken of, and the key of an invocation's last error.
from soap_core._jsonio import unsynced_writes
from soap_core._tokens import message_token_text
from soap_core.runtime import ModelSettings, build_system_prompt, close_call, offer_tools, open_call
from soap_core.runtime._invoke import ERROR_KEY

BASE_URL = "http://127.0.0.1:8080/v1"
MAX_ITERATIONS = ModelSettings().max_iterations
"""Model calls of one invocation at most (the runtime's default)."""
DEFAULT_START = datetime(2025, 6, 2, 8, 0, 0)


# -- the summary --------------------------------------------------------------------------


@dataclass(frozen=True)
class GeneratedStore:
    """What :func:`generate_store` wrote (the same for the same arguments)."""

    root: str
    seed: int
    sessions: int
    contexts: int
    """Context files."""
    forked_sessions: int
    """Sessions with more than one context."""
    messages: int
    """Messages in all context files (forks copy messages, so some count twice)."""
    active_messages: int
    """Messages in the active contexts."""
    calls: int
    invocations: int
    """Invocation records (one written into both the callee's and the caller's session)."""
    chains: int
    """Groups of sessions in which one object invoked another."""
    max_chain_depth: int
    """Objects in the longest chain (1: no object invoked another)."""
    files: int
    bytes: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- deterministic ids, clock and text ---------------------------------------------------


class _Ids:
    """Every id the runtime draws from ``uuid4`` or the clock, drawn from the rng."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def uuid4(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def hex(self, digits: int) -> str:
        return f"{self.rng.getrandbits(4 * digits):0{digits}x}"

    def record_id(self, at: datetime) -> str:
        """``new_record_id``'s form: the UTC time, then random bits."""
        return f"{at:%Y%m%dT%H%M%S%f}-{self.hex(8)}"


class _Clock:
    """One group's time: every event moves it on, so timestamps increase."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(microseconds=max(1, round(seconds * 1_000_000)))
        return self.now

    def local(self) -> str:
        """``datetime.now().isoformat()``: naive, as on messages."""
        return self.now.isoformat()

    def utc(self) -> str:
        """``utc_now()``: with the offset, as in records."""
        return self.now.replace(tzinfo=UTC).isoformat()


_VOCABULARY_TEXT = """
the of and to in is that for it as with was on be by at this from or have an are not but
which one all were when we there can more if will would about out up into so what some
other than then them these two may first any like now my such make over our even most
after also did many before must through back years where much your way well down should
because each just those people how too little state good very world still own see men
work long get here between both life being under never day same another know while last
might us great old year off come since against go came right used take three states
himself few house use during without again place around however home small found thought
went say part once general high upon school every better does told nothing end why
called asked later knew point next program city business give group toward young days
let room side social given present several order national possible rather second face
per among form important often things looking early large need big four within felt
along children saw best ever least power development light thing seemed family interest
want members mind country area others done turned although open service certain kind
problem began different door thus help sense means whole matter perhaps itself times law
human line above name example action company hand local show five history whether gave
either act feet across taken past quite anything having seen experience body word half
really week field car words already themselves information tell together shall money
period held keep sure real probably free seems cannot behind question office making
brought whose special major heard problems became study ago moment available known
result street position reason change south board individual job areas society west
close turn community true court force full value front tests deploy queue server client
request response cache index schema table column query latency budget token context
window compaction fork anchor thread session agent tool call error retry timeout merge
branch commit review patch release build pipeline metric trace span config module
package install version upgrade migrate rollback backup restore ticket customer invoice
refund shipment warehouse inventory supplier report summary draft
"""
_VOCABULARY = _VOCABULARY_TEXT.split()


class _Corpus:
    """A fixed text of sentences from the vocabulary, sliced for every text needed:
    slicing is fast, where drawing each word of 100,000 messages is not."""

    SIZE = 1_200_000
    LONGEST = 40_000

    def __init__(self, rng: random.Random) -> None:
        pieces: list[str] = []
        starts: list[int] = []
        length = words = 0
        while length < self.SIZE:
            if starts and rng.random() < 0.18:
                pieces.append("\n\n")
                length += 2
            count = rng.randint(5, 22)
            sentence = " ".join(rng.choices(_VOCABULARY, k=count)).capitalize() + rng.choice(".....?!") + " "
            starts.append(length)
            pieces.append(sentence)
            length += len(sentence)
            words += count
        self.text = "".join(pieces)
        self.starts = [s for s in starts if s < len(self.text) - self.LONGEST]
        self.chars_per_word = len(self.text) / words

    def words(self, rng: random.Random, count: int) -> str:
        """About ``count`` words from a sentence start, cut at a word's end."""
        start = self.starts[rng.randrange(len(self.starts))]
        end = start + min(self.LONGEST - 100, max(1, round(count * self.chars_per_word)))
        cut = self.text.find(" ", end)
        return self.text[start : cut if cut != -1 else end].strip()


def _skewed_words(rng: random.Random, median: float, long_share: float) -> int:
    """Mostly 20-400 words (log-normal around ``median``), now and then a few KB."""
    if rng.random() < long_share:
        return rng.randint(300, 1500)
    return max(3, min(600, round(math.exp(rng.gauss(math.log(median), 0.8)))))


def tiny_png(rgb: tuple[int, int, int], size: int = 4) -> bytes:
    """A valid ``size`` x ``size`` PNG of one colour: an image small enough to inline."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    pixels = (b"\x00" + bytes(rgb) * size) * size
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(pixels, 9))
        + chunk(b"IEND", b"")
    )


# -- the agentic classes the sessions come from -------------------------------------------

_TYPES: dict[str, dict[str, Any]] = {n: {"type": n} for n in ("string", "integer", "number")}


def _tool(name: str, description: str, *params: tuple[str, str | list[str], str]) -> ToolPart:
    """A tool definition as the runtime's ``spec_for`` derives it from a method: each
    param is (name, JSON type or enum values, description); a name ending in ``?`` has
    a default."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for raw_name, kind, text in params:
        param = raw_name.rstrip("?")
        schema = {"enum": kind} if isinstance(kind, list) else dict(_TYPES[kind])
        properties[param] = {**schema, "description": text}
        if not raw_name.endswith("?"):
            required.append(param)
    return ToolPart(name, description, {"type": "object", "properties": properties, "required": required})


@dataclass(frozen=True)
class _RoleSpec:
    """One agentic class: its prompt, tools and model settings, as its calls show them."""

    name: str
    prompt: str
    tools: tuple[ToolPart, ...]
    model: str = "qwen2.5-7b-instruct"
    temperature: float | None = 0.0
    max_tokens: int = 1024
    context_limit: int = 32768
    compaction: str = "context-budget"
    """The strategy's spec, as recorded with each call."""
    reasoning: bool = False
    """Its model writes thinking (sent back as ``reasoning_content``)."""
    date_hook: bool = False
    """A system-prompt hook gives today's date, so the prompt changes from day to day."""
    schema: dict[str, Any] = field(default_factory=lambda: {"type": "string"})
    """The output schema its callers ask for."""
    entry: bool = False
    """Invoked by people (the top of a chain); the others are invoked by objects."""

    @property
    def class_path(self) -> str:
        return f"agents.{self.name.lower()}:{self.name}"


_READ_FILE = _tool("read_file", "Read a file of the repository.", ("path", "string", "The file."))


def _role(name: str, prompt: str, *tools: ToolPart, **settings: Any) -> _RoleSpec:
    return _RoleSpec(name, prompt, tools, **settings)


_SPECS = (
    _role(
        "Coordinator",
        "You are the support coordinator of an online shop. Read each request, look up the "
        "tickets it concerns, hand research or code work to the other agents and answer the "
        "customer politely and briefly. Never promise refunds above 200 EUR without a manager.",
        _tool(
            "search_tickets",
            "Search the ticket system.",
            ("query", "string", "Words to look for."),
            ("limit?", "integer", "How many tickets at most."),
        ),
        _tool(
            "update_ticket",
            "Change a ticket's status and add a note.",
            ("ticket_id", "string", "The ticket."),
            ("status", ["open", "pending", "solved"], "The new status."),
            ("note?", "string", "What was done."),
        ),
        _tool(
            "send_reply",
            "Send a reply to the customer of a ticket.",
            ("ticket_id", "string", "The ticket."),
            ("message", "string", "The reply."),
        ),
        entry=True,
        date_hook=True,
    ),
    _role(
        "Planner",
        "You plan the work of a small software team. Break goals into tasks with estimates, "
        "schedule them and ask other agents for the facts you need.",
        _tool("list_tasks", "List the open tasks of a project.", ("project", "string", "The project.")),
        _tool(
            "create_task",
            "Create a task.",
            ("title", "string", "What is to be done."),
            ("estimate_hours", "number", "The estimate."),
        ),
        _tool(
            "schedule",
            "Put a task on the calendar.",
            ("task_id", "string", "The task."),
            ("date", "string", "ISO date."),
        ),
        entry=True,
        date_hook=True,
        model="llama-3.1-8b-instruct",
        temperature=0.3,
    ),
    _role(
        "Librarian",
        "You answer questions about the library's catalogue, reservations and opening hours.",
        _tool(
            "search_catalog",
            "Search the catalogue.",
            ("query", "string", "Title, author or subject words."),
            ("limit?", "integer", "How many results at most."),
        ),
        _tool("lookup", "Details of one item.", ("isbn", "string", "The ISBN.")),
        _tool(
            "reserve",
            "Reserve an item for a patron.",
            ("item_id", "string", "The item."),
            ("patron", "string", "The patron's card number."),
        ),
        entry=True,
        model="smollm2-1.7b-instruct",
        max_tokens=512,
        context_limit=8192,
        compaction="rolling-messages:40",
    ),
    _role(
        "Researcher",
        "You research questions on the web and report what you found with its sources.",
        _tool(
            "web_search",
            "Search the web.",
            ("query", "string", "The search terms."),
            ("max_results?", "integer", "How many results at most."),
        ),
        _tool("fetch_page", "Fetch a web page as text.", ("url", "string", "The page.")),
        _tool(
            "take_note",
            "Keep a note for later.",
            ("title", "string", "The note's title."),
            ("text", "string", "The note."),
        ),
        model="deepseek-r1-distill-qwen-7b",
        reasoning=True,
        temperature=0.6,
        max_tokens=2048,
        schema={
            "type": "object",
            "properties": {
                "summary": _TYPES["string"],
                "sources": {"type": "array", "items": _TYPES["string"]},
            },
            "required": ["summary", "sources"],
        },
    ),
    _role(
        "CodeWriter",
        "You write and fix Python code in the repository. Read before you write, run the tests "
        "after every change and report what you changed.",
        _READ_FILE,
        _tool(
            "write_file",
            "Replace a file of the repository.",
            ("path", "string", "The file."),
            ("content", "string", "The new content."),
        ),
        _tool("run_tests", "Run the tests.", ("target?", "string", "A test file or folder.")),
        _tool("search_code", "Search the code.", ("pattern", "string", "A regular expression.")),
        model="qwen2.5-coder-7b-instruct",
        reasoning=True,
        max_tokens=4096,
        context_limit=65536,
    ),
    _role(
        "Reviewer",
        "You review changes for bugs, missing tests and unclear names, and give a verdict.",
        _READ_FILE,
        _tool(
            "diff",
            "The diff between two revisions.",
            ("base", "string", "The base revision."),
            ("head", "string", "The revision under review."),
        ),
        _tool(
            "comment",
            "Comment on a line.",
            ("path", "string", "The file."),
            ("line", "integer", "The line."),
            ("text", "string", "The comment."),
        ),
        schema={
            "type": "object",
            "properties": {
                "verdict": {"enum": ["approve", "request_changes"]},
                "comments": _TYPES["integer"],
            },
            "required": ["verdict"],
        },
    ),
    _role(
        "DataAnalyst",
        "You answer questions from the sales database with SQL and explain the numbers.",
        _tool("run_sql", "Run a read-only SQL query.", ("query", "string", "The query.")),
        _tool("describe_table", "The columns of a table.", ("table", "string", "The table.")),
        model="llama-3.1-8b-instruct",
        date_hook=True,
    ),
    _role(
        "Summarizer",
        "You summarize documents and conversations in a few sentences, keeping facts, numbers "
        "and open questions.",
        _tool("count_words", "Count the words of a text.", ("text", "string", "The text.")),
        model="smollm2-1.7b-instruct",
        max_tokens=512,
        context_limit=8192,
    ),
)
_ROLE_NAMES = tuple(spec.name for spec in _SPECS)
_DELEGATE = _tool(
    "delegate",
    "Hand a task to another agent and wait for its answer.",
    ("agent", list(_ROLE_NAMES), "Which agent does the task."),
    ("task", "string", "What the agent is to do, with everything it needs to know."),
)
_ROLES = {spec.name: replace(spec, tools=(*spec.tools, _DELEGATE)) for spec in _SPECS}
"""The roles by name, each with the ``delegate`` tool last."""
_ENTRY_ROLES = tuple(name for name, spec in _ROLES.items() if spec.entry)
_WORKER_ROLES = tuple(name for name, spec in _ROLES.items() if not spec.entry)
_THREAD_TOPICS = ("support", "research", "release", "billing", "onboarding", "incident", "roadmap")
_JSON_RESULT_TOOLS = frozenset({"search_tickets", "web_search", "search_catalog", "run_sql", "list_tasks"})
_TEXT_GOALS = ((2, 4, 6, 8, 10, 12, 14, 16), (30, 30, 20, 11, 4, 2, 2, 1))
"""Messages of a person's turn (even: a turn with an answer) and how often."""
_SCHEMA_GOALS = ((3, 5, 7, 9, 11, 13), (35, 30, 20, 9, 4, 2))
"""Messages of an object's turn (odd: a turn that ends with ``produce_output``)."""
_MAX_GOAL = 2 * MAX_ITERATIONS


# -- appending as the runtime does ---------------------------------------------------------


def append_message(context: Context, message: Message) -> Message:
    """``context.append(message)`` at ``messages``, in constant time when ``messages`` is
    the last anchor and ends the list (always, in contexts the runtime builds)."""
    anchors = context.anchor_points
    end = len(context.messages)
    if not anchors or anchors[-1] != (MESSAGES_ANCHOR, end):
        return context.append(message)
    context.messages.append(message)
    anchors[-1] = (MESSAGES_ANCHOR, end + 1)
    message.sequence_number = context.mutation_counter
    context.mutation_counter += 1
    context.message_sequence += 1
    return message


def append_tool_results(context: Context, assistant: Message, results: Message) -> Message:
    """``Context.append_tool_results`` with the results message made beforehand: the
    anchor goes just before ``messages`` (the assistant message was appended last, so no
    other anchor ends the list) and the results are appended at it."""
    anchors = context.anchor_points
    end = len(context.messages)
    name = assistant.id + TOOL_RESULT_SUFFIX
    if not anchors or anchors[-1] != (MESSAGES_ANCHOR, end) or (len(anchors) > 1 and anchors[-2][1] >= end):
        context.add_anchor(name, context.anchor_index(MESSAGES_ANCHOR), after_existing=False)
        return context.append(results, name)
    anchors.insert(len(anchors) - 1, (name, end))
    context.messages.append(results)
    anchors[-2:] = [(name, end + 1), (MESSAGES_ANCHOR, end + 1)]
    results.sequence_number = context.mutation_counter + 1
    context.mutation_counter += 2
    context.message_sequence += 1
    return results


def estimated_tokens(message: Message) -> int:
    """A server's count of a message, roughly (four characters a token): what usage in
    a response says, which is the server's tokenizer's and never cl100k's."""
    size = 0
    for part in message.content:
        if isinstance(part, TextPart | ThinkingPart):
            size += len(part.text)
        elif isinstance(part, ToolUsePart):
            size += len(part.name) + len(part.arguments)
        elif isinstance(part, ToolResultPart):
            size += len(str(part.content))
        elif isinstance(part, ToolPart):
            size += len(part.description) + 60 * len(part.parameters.get("properties", {}))
        else:
            size += 340  # an image
    return size // 4 + 4


# -- one session being written --------------------------------------------------------------


class _Run:
    """What the sessions of one group share: its rng, clock and texts, and the call-log limit."""

    def __init__(self, rng: random.Random, clock: _Clock, corpus: _Corpus, call_log_limit: int) -> None:
        self.rng = rng
        self.ids = _Ids(rng)
        self.clock = clock
        self.corpus = corpus
        self.call_log_limit = call_log_limit

    def words(self, median: float, long_share: float = 0.04) -> str:
        return self.corpus.words(self.rng, _skewed_words(self.rng, median, long_share))

    def phrase(self, low: int, high: int) -> str:
        return self.corpus.words(self.rng, self.rng.randint(low, high))

    def message(self, role: str, parts: Sequence[Part]) -> Message:
        """``Message.create`` with a drawn id, at the group's time."""
        return Message(role, parts, id=self.ids.uuid4(), creation_timestamp=self.clock.local())

    def thinking(self, spec: _RoleSpec) -> list[Part]:
        """The thinking part of an answer, for a model that thinks, most times."""
        return [ThinkingPart(self.words(45))] if spec.reasoning and self.rng.random() < 0.6 else []


class _LiveSession:
    """One session of one object, built call by call, and the calls recorded beside it."""

    def __init__(
        self,
        run: _Run,
        spec: _RoleSpec,
        object_id: str,
        thread: str | None,
        *,
        schema: dict[str, Any] | None,
        fork_points: list[int],
    ) -> None:
        self.run = run
        self.spec = spec
        self.object_id = object_id
        self.thread = thread
        self.schema = schema
        self.fork_points = fork_points
        """When compaction forks (in messages appended so far)."""
        self.appended = 0
        self.turns = 0
        self.calls: list[CallRecord] = []
        self.tool_list_key: str | None = None
        self.session = Session(spec.name, f"{run.clock.now:%Y%m%d}-{run.ids.uuid4()}")
        self.context = self._new_context()
        self.session.add_context(self.context)
        self.session.active_context_id = self.context.id
        if thread is not None:
            self.session.state_data[THREAD_ID_KEY] = thread
        self.session.state_data[OBJECT_KEY] = object_id
        self.prompt_tokens = sum(estimated_tokens(m) for m in self.context.messages)
        """The active context's size as the server would count it (for usage)."""

    def _new_context(self) -> Context:
        """``Context.create(Message.system_prompt(...), tools)`` with drawn ids."""
        ids, stamp = self.run.ids, self.run.clock.local()
        system = Message(
            "system",
            [TextPart(self.spec.prompt)],
            message_type="SystemPromptMessage",
            static_text=self.spec.prompt,
            id=ids.uuid4(),
            creation_timestamp=stamp,
        )
        tools = Message(
            "tool",
            self.spec.tools,
            message_type="ToolDefinitionsMessage",
            id=ids.uuid4(),
            creation_timestamp=stamp,
        )
        context = Context.create(system, tools)
        context.id = ids.uuid4()
        return context

    def directory(self, store: Store) -> Path:
        return store.session_dir(self.spec.name, self.session.uuid)

    def state(self) -> dict[str, Any]:
        """The object's public state, as ``AgenticObject.state`` records it."""
        return {"handled": self.turns, "thread": self.thread}

    def append(self, message: Message) -> Message:
        self.appended += 1
        self.prompt_tokens += estimated_tokens(message)
        return append_message(self.context, message)

    def append_results(self, answer: Message, results: Sequence[ToolResultPart]) -> Message:
        message = self.run.message("tool_result", results)
        self.appended += 1
        self.prompt_tokens += estimated_tokens(message)
        return append_tool_results(self.context, answer, message)

    # -- before a call ------------------------------------------------------------------

    def refresh_tool_definitions(self) -> None:
        self.tool_list_key = offer_tools(self.context, list(self.spec.tools), self.schema)

    def compact(self) -> None:
        """The compaction fork due before this call, if one is: the role's window of about
        half the context; made active most times, else kept beside (as a re-run keeps one)."""
        if not self.fork_points or self.appended < self.fork_points[0]:
            return
        self.fork_points.pop(0)
        parent = self.context
        if self.spec.compaction == "context-budget":
            child = parent.rolling_token_window(max(1, parent.total_token_count() // 2))
        else:
            child = parent.rolling_sequence_window(max(2, (len(parent.messages) - 2) // 2))
        if child is None:
            return
        fork_id = self.run.ids.uuid4()
        parent.children[parent.children.index(child.id)] = fork_id
        child.id = fork_id
        self.session.add_context(child)
        if self.run.rng.random() < 0.7:
            self.session.set_active_context(child)
            self.context = child
            self.prompt_tokens = sum(estimated_tokens(m) for m in child.messages)

    # -- one model call -----------------------------------------------------------------

    def start_call(self, invocation: InvocationRecord) -> CallRecord | None:
        """Compaction, the specials refreshed, and the call's record with its request
        (None when the request is over the call-log limit)."""
        self.compact()
        context, spec = self.context, self.spec
        date = [f"Today is {self.run.clock.now:%A, %d %B %Y}."] if spec.date_hook else []
        hooks = build_system_prompt(context, lambda: date, self.schema)
        started = self.run.clock.advance(self.run.rng.uniform(0.001, 0.02))
        if len(context.messages) > self.run.call_log_limit:
            return None
        parameters = ModelSettings(temperature=spec.temperature, max_tokens=spec.max_tokens).parameters()
        if context.tool_definitions is not None and context.tool_definitions.content:
            parameters["tool_choice"] = "auto"
        call = open_call(
            self.session,
            context,
            chat_request(context.messages, model=spec.model, parameters=parameters),
            BASE_URL,
            record_id=self.run.ids.record_id(started),
            started_at=self.run.clock.utc(),
            invocation_id=invocation.id,
            system_prompt_hooks=hooks,
            tool_list_hook=self.tool_list_key,
            context_limit=spec.context_limit,
            compaction=spec.compaction,
        )
        invocation.calls.append(call.id)
        return call

    def call_model(self, invocation: InvocationRecord, parts: list[Part]) -> Message:
        """One model call that answered with ``parts``: recorded, and its answer appended."""
        call = self.start_call(invocation)
        prompt_tokens = self.prompt_tokens
        answer = self.run.message("assistant", parts)
        completion = estimated_tokens(answer)
        latency = 0.25 + completion * self.run.rng.uniform(0.01, 0.03)
        answer.creation_timestamp = self.run.clock.advance(latency).isoformat()
        self.append(answer)
        if call is not None:
            response = self.response(answer, prompt_tokens, completion)
            close_call(call, answer, response, round(latency, 6), self.run.clock.utc())
            self.calls.append(call)
        return answer

    def failed_call(self, invocation: InvocationRecord) -> str:
        """A model call that timed out (after the client's retries): recorded with its
        error, which is returned as the invocation's error."""
        call = self.start_call(invocation)
        request_id = call.request_hash if call is not None else self.run.ids.hex(64)
        self.run.clock.advance(3 * 120.0)
        error = f"LLM call to {BASE_URL} (request {request_id[:12]}) failed: timeout: Request timed out."
        if call is not None:
            call.error, call.ended_at = error, self.run.clock.utc()
            self.calls.append(call)
        return f"LLMError: {error}"

    def response(self, answer: Message, prompt_tokens: int, completion: int) -> dict[str, Any]:
        """The Chat Completions response ``assistant_message`` turns into ``answer``, as
        the runtime records it (``model_dump`` of openai's ``ChatCompletion``)."""
        texts = [p.text for p in answer.content if isinstance(p, TextPart)]
        thinking = [p.text for p in answer.content if isinstance(p, ThinkingPart)]
        uses = answer.tool_uses()
        message: dict[str, Any] = {
            "content": "\n\n".join(texts) if texts else None,
            "refusal": None,
            "role": "assistant",
            "annotations": None,
            "audio": None,
            "function_call": None,
            "tool_calls": [
                {"id": u.call_id, "function": {"arguments": u.arguments, "name": u.name}, "type": "function"}
                for u in uses
            ]
            or None,
            **({"reasoning_content": thinking[0]} if thinking else {}),
        }
        choice = {
            "finish_reason": "tool_calls" if uses else "stop",
            "index": 0,
            "logprobs": None,
            "message": message,
        }
        return {
            "id": f"chatcmpl-{self.run.ids.hex(24)}",
            "choices": [choice],
            "created": int(self.run.clock.now.replace(tzinfo=UTC).timestamp()),
            "model": self.spec.model,
            "object": "chat.completion",
            "service_tier": None,
            "system_fingerprint": "b5123-4a1c9d2e",
            "usage": {
                "completion_tokens": completion,
                "prompt_tokens": prompt_tokens,
                "total_tokens": prompt_tokens + completion,
                "completion_tokens_details": None,
                "prompt_tokens_details": None,
            },
        }


# -- invocations: turns of one object, nested where one invokes the next -------------------


@dataclass
class _Level:
    """One object of a chain: its session once it has been invoked, and the next object."""

    spec: _RoleSpec
    object_id: str
    target: int
    """Messages its session's active context is to reach (for a person's session)."""
    forks: list[int]
    session: _LiveSession | None = None
    next: _Level | None = None


@dataclass
class _Ending:
    """How a turn ended: its result, or the error its invocation record gets."""

    result: Any = None
    error: str | None = None


@dataclass
class _Caller:
    """Where an invocation was made from: the caller's session, invocation and answer."""

    session: _LiveSession
    invocation: InvocationRecord
    answer: Message
    index: int


def turn_shape(after_prompt: int, schema: bool) -> tuple[int, str]:
    """Tool steps and ending of a turn that appends ``after_prompt`` messages after its
    prompt. A step is two messages (an answer with tool calls, its results); an answer
    is one, ``produce_output`` two (call and result), ``produce_error`` one (the runtime
    raises before its result is appended), a failed call none: the parity picks the end."""
    if schema:
        if after_prompt % 2 == 0 and after_prompt >= 2:
            return (after_prompt - 2) // 2, "produce_output"
        return max(after_prompt - 1, 0) // 2, "produce_error" if after_prompt % 2 else "failure"
    if after_prompt % 2 == 1:
        return (after_prompt - 1) // 2, "answer"
    return after_prompt // 2, "failure"


class _Chain:
    """Runs the invocations of one group's objects, as ``run_invocation`` records them."""

    def __init__(self, run: _Run, thread: str, store: Store) -> None:
        self.run = run
        self.thread = thread
        """The chain's thread: a person's, and the one every callee is invoked on."""
        self.store = store
        self.sessions: list[_LiveSession] = []
        self.invocations: list[tuple[InvocationRecord, list[Path]]] = []

    def session_of(self, level: _Level, thread: str | None, schema: dict[str, Any] | None) -> _LiveSession:
        if level.session is None:
            level.session = _LiveSession(
                self.run, level.spec, level.object_id, thread, schema=schema, fork_points=level.forks
            )
            self.sessions.append(level.session)
        return level.session

    def invoke(
        self,
        level: _Level,
        prompt: list[Part],
        goal: int,
        *,
        thread: str | None,
        caller: _Caller | None = None,
    ) -> _Ending:
        """One turn of ``level``'s object: ``goal`` messages, its prompt's included."""
        live = self.session_of(level, thread, level.spec.schema if caller else None)
        run = self.run
        record = InvocationRecord(
            id=run.ids.record_id(run.clock.advance(run.rng.uniform(0.001, 0.01))),
            callee=Party(level.spec.name, level.object_id, live.session.uuid),
            caller=None,
            prompt=next(p.text for p in prompt if isinstance(p, TextPart)),
            thread=thread,
            started_at=run.clock.utc(),
            callee_class=level.spec.class_path,
            state_before=live.state(),
        )
        dirs = [live.directory(self.store)]
        if caller is not None:
            upper = caller.session
            record.caller = Party(
                upper.spec.name,
                upper.object_id,
                upper.session.uuid,
                upper.context.id,
                caller.index,
                caller.answer.id,
            )
            record.parent_invocation_id = caller.invocation.id
            dirs.append(upper.directory(self.store))
        live.session.state_data.pop(ERROR_KEY, None)
        live.refresh_tool_definitions()
        live.append(run.message("user", prompt))
        ending = self.turn(live, level, record, goal)
        live.turns += 1
        record.ended_at = run.clock.advance(run.rng.uniform(0.001, 0.01)).replace(tzinfo=UTC).isoformat()
        record.outcome = "ok" if ending.error is None else "error"
        record.result, record.error, record.state_after = ending.result, ending.error, live.state()
        if ending.error is not None:
            live.session.state_data[ERROR_KEY] = ending.error
        self.invocations.append((record, dirs))
        return ending

    def turn(self, live: _LiveSession, level: _Level, record: InvocationRecord, goal: int) -> _Ending:
        """Tool steps, then the ending :func:`turn_shape` gives; a chain's first turn of
        an object passes a task on to the next object, later turns now and then."""
        steps, ending = turn_shape(goal - 1, live.schema is not None)
        for step in range(steps):
            callee = level.next if step == 0 and self.passes_on(live, level) else None
            self.tool_step(live, record, callee)
        if ending == "failure":
            return _Ending(error=live.failed_call(record))
        if ending == "answer":
            parts = [*self.run.thinking(live.spec), TextPart(self.run.words(70))]
            return _Ending(result=live.call_model(record, parts).text())
        return self.produce(live, record, ending)

    def passes_on(self, live: _LiveSession, level: _Level) -> bool:
        """Whether this turn invokes the next object: always the first time, often while
        that object's session is short of its length, now and then after."""
        if level.next is None:
            return False
        below = level.next.session is None or len(level.next.session.context.messages) < level.next.target
        return live.turns == 0 or self.run.rng.random() < (0.6 if below else 0.15)

    def tool_step(self, live: _LiveSession, record: InvocationRecord, callee: _Level | None) -> None:
        """An answer with tool calls, the tools run (``delegate`` invoking ``callee``'s
        object), their results appended at the answer's tool-result anchor."""
        run = self.run
        parts: list[Part] = run.thinking(live.spec)
        if run.rng.random() < 0.4:
            parts.append(TextPart(run.words(20)))
        tools = [t for t in live.spec.tools if t.name != "delegate"]
        uses = [
            self.tool_use(t) for t in run.rng.choices(tools, k=run.rng.choices((1, 2, 3), (70, 22, 8))[0])
        ]
        if callee is not None:
            arguments = json.dumps({"agent": callee.spec.name, "task": run.words(30, long_share=0.0)})
            uses[0] = ToolUsePart(f"call_{run.ids.hex(24)}", "delegate", arguments)
        answer = live.call_model(record, [*parts, *uses])
        caller = _Caller(live, record, answer, len(live.context.messages) - 1)
        results = []
        for use in uses:
            if callee is not None and use.name == "delegate":
                content = self.delegated(caller, json.loads(use.arguments)["task"], callee)
            else:
                run.clock.advance(run.rng.uniform(0.01, 2.0))
                content = self.tool_result(use)
            results.append(ToolResultPart(use.call_id, content))
        live.append_results(answer, results)

    def delegated(self, caller: _Caller, task: str, callee: _Level) -> str:
        """The ``delegate`` tool: a turn of the next object on the chain's thread; what
        the tool returns (``[ERROR] ...`` where the invocation failed, as ``run_one`` says)."""
        goal = self.callee_goal(callee)
        ending = self.invoke(callee, [TextPart(task)], goal, thread=self.thread, caller=caller)
        if ending.error is not None:
            return f"[ERROR] {ending.error}"
        return ending.result if isinstance(ending.result, str) else canonical_json(ending.result)

    def callee_goal(self, callee: _Level) -> int:
        """Messages of an object's turn: its first makes up much of its session's length
        (an invocation runs up to ``MAX_ITERATIONS`` calls), later ones are drawn; odd, as
        a turn that ends with ``produce_output`` is, and room to pass the task on."""
        drawn = self.run.rng.choices(*_SCHEMA_GOALS)[0]
        if callee.session is None:
            first = min(callee.target - 2, _MAX_GOAL - 1)
            drawn = max(drawn, first - (first + 1) % 2, 5 if callee.next is not None else 3)
        elif len(callee.session.context.messages) >= callee.target:
            drawn = 3
        return drawn

    def produce(self, live: _LiveSession, record: InvocationRecord, ending: str) -> _Ending:
        """The end of a turn with an output schema: ``produce_output`` (the value is the
        result) or ``produce_error`` (the runtime raises before any result is appended)."""
        run = self.run
        call_id = f"call_{run.ids.hex(24)}"
        if ending == "produce_error":
            reason = run.phrase(6, 16)
            use = ToolUsePart(call_id, "produce_error", json.dumps({"message": reason}))
            live.call_model(record, [*run.thinking(live.spec), use])
            return _Ending(error=f"InvocationError: {live.spec.name} gave up: {reason}")
        value = self.value_for(live.schema or {"type": "string"})
        use = ToolUsePart(call_id, "produce_output", json.dumps({"answer": value}))
        answer = live.call_model(record, [*run.thinking(live.spec), use])
        live.append_results(answer, [ToolResultPart(call_id, "")])
        return _Ending(result=value)

    def value_for(self, schema: dict[str, Any]) -> Any:
        """A value of one of the roles' output schemas."""
        rng = self.run.rng
        if "enum" in schema:
            return rng.choice(schema["enum"])
        kind = schema.get("type")
        if kind == "object":
            return {name: self.value_for(sub) for name, sub in schema.get("properties", {}).items()}
        if kind == "array":
            return [
                f"https://{self.run.phrase(1, 2).replace(' ', '-').lower()}.example/{i}" for i in range(3)
            ]
        if kind in ("integer", "number"):
            return rng.randint(0, 12)
        return self.run.words(50)

    def tool_use(self, tool: ToolPart) -> ToolUsePart:
        """A call of ``tool``: its required arguments, and each optional one half the time."""
        run = self.run
        required = set(tool.parameters.get("required", ()))
        arguments = {
            name: self.argument(name, schema)
            for name, schema in dict(tool.parameters.get("properties", {})).items()
            if name in required or run.rng.random() < 0.5
        }
        return ToolUsePart(f"call_{run.ids.hex(24)}", tool.name, json.dumps(arguments))

    def argument(self, name: str, schema: dict[str, Any]) -> Any:
        run = self.run
        if "enum" in schema:
            return run.rng.choice(schema["enum"])
        if schema.get("type") == "integer":
            return run.rng.randint(1, 50)
        if schema.get("type") == "number":
            return round(run.rng.uniform(0.5, 16), 1)
        if name in ("path", "target"):
            return f"src/{run.phrase(1, 2).replace(' ', '_').lower()}.py"
        if name in ("content", "text", "message"):
            return run.words(40)
        return run.phrase(2, 8)

    def tool_result(self, use: ToolUsePart) -> str:
        """What a tool returned, as ``run_one`` reports it: text of skewed length, JSON
        rows for the search tools, an error now and then."""
        run = self.run
        if run.rng.random() < 0.03:
            return f"[ERROR] TimeoutError: {run.phrase(4, 12)}"
        if use.name in _JSON_RESULT_TOOLS:
            rows = [
                {"id": run.ids.hex(8), "title": run.phrase(3, 8), "snippet": run.words(25, long_share=0.0)}
                for _ in range(run.rng.randint(1, 8))
            ]
            return canonical_json(rows)
        return run.words(60, long_share=0.05)


# -- groups: one chain of objects and the sessions its turns made --------------------------


@dataclass(frozen=True)
class _GroupPlan:
    index: int
    length: int
    """Objects in the chain."""
    start: datetime
    long_messages: int | None = None


@dataclass(frozen=True)
class _Shape:
    """What every group draws from: the mean size, the fork rate, each role's objects."""

    messages: int
    fork_rate: float
    objects: dict[str, list[str]]


class _Group:
    """One chain of objects (often of one) and the turns a person asks of its top one."""

    def __init__(
        self, plan: _GroupPlan, seed: int, corpus: _Corpus, call_log_limit: int, shape: _Shape, store: Store
    ) -> None:
        self.plan = plan
        self.shape = shape
        self.rng = random.Random(f"{seed}:group:{plan.index}")
        self.run = _Run(self.rng, _Clock(plan.start), corpus, call_log_limit)
        self.chain = _Chain(self.run, f"{self.rng.choice(_THREAD_TOPICS)}-{plan.index:05d}", store)

    def levels(self) -> _Level:
        """The chain's objects: an entry role on top, worker roles below (entry roles
        too, for a chain deeper than there are workers); all distinct."""
        top = self.rng.choice(_ENTRY_ROLES)
        workers = self.rng.sample(_WORKER_ROLES, len(_WORKER_ROLES))
        entries = self.rng.sample([r for r in _ENTRY_ROLES if r != top], len(_ENTRY_ROLES) - 1)
        names = [top, *(workers + entries)[: self.plan.length - 1]]
        chain = []
        for depth, name in enumerate(names):
            target = self.target(depth)
            object_id = self.rng.choice(self.shape.objects[name])
            chain.append(_Level(_ROLES[name], object_id, target, self.forks(depth, target)))
        for upper, lower in itertools.pairwise(chain):
            upper.next = lower
        return chain[0]

    def target(self, depth: int) -> int:
        """An active context's length: gamma-distributed around the mean (a caller gets
        room to pass a task on); exact for the long session."""
        if self.plan.long_messages is not None:
            return self.plan.long_messages
        drawn = max(3, round(self.rng.gammavariate(2.0, self.shape.messages / 2.0)))
        return max(drawn, 6) if depth < self.plan.length - 1 else drawn

    def forks(self, depth: int, target: int) -> list[int]:
        """When compaction forks a session (in messages appended), or never: a person's
        session at a point its turns reach, an object's one within its first calls."""
        if self.plan.long_messages is not None or self.rng.random() >= self.shape.fork_rate:
            return []
        reach = 5 if depth > 0 else max(3, min(target, _MAX_GOAL) - 3)
        points = [self.rng.randint(3, reach)]
        for _ in range(self.rng.choices((0, 1, 2), (65, 25, 10))[0]):
            points.append(points[-1] + self.rng.randint(4, max(5, target // 2)))
        return points

    def generate(self) -> _Chain:
        """A person's turns on the top object until its active context is long enough;
        a person without a thread gets one turn (each transient invoke is a new session)."""
        top = self.levels()
        exact = self.plan.long_messages is not None
        transient = not exact and self.rng.random() < 0.15
        while top.session is None or not transient:
            have = len(top.session.context.messages) if top.session else 2
            if have >= top.target:
                break
            goal = self.person_goal(top.target - have, exact=exact, transient=transient)
            if top.session is None and top.next is not None:
                goal = max(goal, 4)
            self.chain.invoke(top, self.prompt(), goal, thread=None if transient else self.chain.thread)
        return self.chain

    def person_goal(self, remaining: int, *, exact: bool, transient: bool) -> int:
        """Messages of a person's turn: drawn, then fitted to what the session still
        needs: exactly for the long session, else even (a turn with an answer)."""
        goal = min(_MAX_GOAL if transient else self.rng.choices(*_TEXT_GOALS)[0], remaining)
        if not exact:
            return goal + goal % 2
        if remaining - goal == 1:
            return remaining if remaining <= _MAX_GOAL else goal - 1
        return goal

    def prompt(self) -> list[Part]:
        """A person's prompt after some thought: text, now and then with a small image."""
        self.run.clock.advance(self.rng.uniform(3600, 6 * 3600) if self.rng.random() < 0.1 else self.think())
        parts: list[Part] = [TextPart(self.run.words(35))]
        if self.rng.random() < 0.04:
            rgb = (self.rng.randrange(256), self.rng.randrange(256), self.rng.randrange(256))
            parts.append(MediaPart("image", base64_source("image/png", tiny_png(rgb))))
        return parts

    def think(self) -> float:
        return math.exp(self.rng.gauss(math.log(90), 1.0))


def _plan(
    sessions: int, chain_depth: int, long_messages: int | None, rng: random.Random, start: datetime
) -> list[_GroupPlan]:
    """Chain lengths adding up to ``sessions`` (the first chain as deep as asked, half of
    the others single objects), starting at times spread over days."""
    lengths: list[int] = [1] if long_messages is not None else []
    remaining = sessions - len(lengths)
    deepest_planned = chain_depth <= 1
    while remaining > 0:
        if not deepest_planned:
            length, deepest_planned = chain_depth, True
        elif chain_depth <= 1 or rng.random() < 0.5:
            length = 1
        else:
            length = rng.randint(2, chain_depth)
        lengths.append(min(length, remaining))
        remaining -= lengths[-1]
    span = timedelta(days=max(2, min(60, sessions // 250 + 2))).total_seconds()
    offsets = [0.0, *sorted(rng.uniform(0, span) for _ in lengths[1:])]
    return [
        _GroupPlan(i, length, start + timedelta(seconds=offset), long_messages if i == 0 else None)
        for i, (length, offset) in enumerate(zip(lengths, offsets, strict=True))
    ]


# -- writing ----------------------------------------------------------------------------------


_COUNT_IN_TWO = 4000
"""Messages from which a session's counts are taken by two threads."""


class _TokenCounter:
    """Stores on each message the count ``Message.record_token_count`` stores (that of
    its final content), when its group is written. Specials repeat across a role's
    sessions and a fork's copies repeat their originals, so both are counted once; a
    very long session is counted by two threads (tiktoken runs without the GIL)."""

    def __init__(self) -> None:
        self.specials: dict[str, int] = {}

    def record(self, session: Session) -> None:
        originals: dict[str, Message] = {}
        for context in session.contexts.values():
            for message in context.messages:
                if message.is_special:
                    message.token_count = self.special(message)
                else:
                    originals.setdefault(message.id, message)
        counts = dict(zip(originals, self.counts(list(originals.values())), strict=True))
        for context in session.contexts.values():
            for message in context.messages:
                if not message.is_special:
                    message.token_count = counts[message.id]

    def special(self, message: Message) -> int:
        text = message_token_text(message.role, message.raw_content())
        if text not in self.specials:
            self.specials[text] = count_text(text)
        return self.specials[text]

    @staticmethod
    def counts(messages: list[Message]) -> list[int]:
        texts = [message_token_text(m.role, m.raw_content()) for m in messages]
        if len(texts) < _COUNT_IN_TWO:
            return [count_text(t) for t in texts]
        halves = (texts[: len(texts) // 2], texts[len(texts) // 2 :])
        with ThreadPoolExecutor(max_workers=2) as pool:
            first, second = pool.map(lambda part: [count_text(t) for t in part], halves)
        return [*first, *second]


@dataclass(frozen=True)
class _Written:
    """What one group wrote, to add up into the summary: each field but ``depth`` is
    the summary's field of that name, summed over the groups."""

    sessions: int
    contexts: int
    forked_sessions: int
    messages: int
    active_messages: int
    calls: int
    invocations: int
    depth: int


def record_text(value: Any) -> str:
    """``dump_json(value)``, made by orjson where that is the same text: for ASCII data
    without DEL, floats under 1e-4 (json writes those with an exponent) or NaN, which is
    all the generator makes; by ``dump_json`` otherwise. Twenty times faster: records
    are most of a store's bytes, and json's indenting encoder is pure Python."""
    data = orjson.dumps(value, option=orjson.OPT_INDENT_2)
    if data.isascii() and b"\x7f" not in data and b"0.0000" not in data:
        return data.decode("ascii")
    return dump_json(value)


def write_call_record(session_dir: Path, record: CallRecord) -> Path:
    """What :func:`write_call` writes, without its deep copy (``CallRecord.as_dict`` is
    ``asdict``, which copies the whole request) and serialized by :func:`record_text`
    (the tests compare the files)."""
    data = {f.name: getattr(record, f.name) for f in fields(record)}
    path = session_dir / CALLS_DIR / f"{record.id}.json"
    write_text_atomic(path, record_text({"format": data.pop("format"), **data}))
    return path


def write_invocation_record(session_dirs: list[Path], record: InvocationRecord) -> None:
    """What :func:`write_invocation` writes, serialized once by :func:`record_text`."""
    text = record_text(record.as_dict())
    for directory in dict.fromkeys(session_dirs):
        write_text_atomic(directory / INVOCATIONS_DIR / f"{record.id}.json", text)


def _write_group(store: Store, chain: _Chain, depth: int, counter: _TokenCounter | None) -> _Written:
    """Every file of a finished group, through the store's own writers."""
    for live in chain.sessions:
        if counter is not None:
            counter.record(live.session)
        live.session.directory = live.directory(store)
        store.save_session(live.session)
        for call in live.calls:
            write_call_record(live.session.directory, call)
    for record, dirs in chain.invocations:
        write_invocation_record(dirs, record)
    sessions = [live.session for live in chain.sessions]
    return _Written(
        sessions=len(sessions),
        contexts=sum(len(s.contexts) for s in sessions),
        forked_sessions=sum(1 for s in sessions if len(s.contexts) > 1),
        messages=sum(len(c.messages) for s in sessions for c in s.contexts.values()),
        active_messages=sum(len(s.active_context.messages) for s in sessions),
        calls=sum(len(live.calls) for live in chain.sessions),
        invocations=len(chain.invocations),
        depth=depth,
    )


@dataclass(frozen=True)
class _Job:
    """One process's share of the groups, and everything it needs to make them (a
    process rebuilds the rest from the seed)."""

    root: str
    seed: int
    messages: int
    fork_rate: float
    call_log_limit: int
    token_counts: bool
    fsync: bool
    plans: tuple[_GroupPlan, ...]


def _objects(seed: int) -> dict[str, list[str]]:
    """Each role's objects (ids as ``AgenticObject.bind`` makes them)."""
    ids = _Ids(random.Random(f"{seed}:objects"))
    return {role: [f"{role}-{ids.hex(8)}" for _ in range(2)] for role in _ROLE_NAMES}


def _run_job(job: _Job) -> list[_Written]:
    """Generate the job's groups and write each as soon as it is complete (so memory
    holds one group). One thread: the processes share the cores, and threads here would
    mostly trade the GIL back and forth."""
    store = Store(job.root, use_catalog=False)  # a cache its first reader builds (module doc)
    corpus = _Corpus(random.Random(f"{job.seed}:corpus"))
    shape = _Shape(job.messages, job.fork_rate, _objects(job.seed))
    counter = _TokenCounter() if job.token_counts else None
    written = []
    with contextlib.nullcontext() if job.fsync else unsynced_writes():
        for plan in job.plans:
            chain = _Group(plan, job.seed, corpus, job.call_log_limit, shape, store).generate()
            written.append(_write_group(store, chain, plan.length, counter))
    return written


def _in_processes(job: _Job, processes: int) -> list[_Written]:
    """The job split over forked processes (the groups are independent and each has its
    own rng, so the files are the same however they are shared out); in this process
    when there is little to share or no fork."""
    shares = min(processes, len(job.plans) // 32)
    if shares <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return _run_job(job)
    jobs = [replace(job, plans=job.plans[i::shares]) for i in range(shares)]
    with multiprocessing.get_context("fork").Pool(shares) as pool:  # forks before any thread starts
        return [written for part in pool.map(_run_job, jobs) for written in part]


def _check(
    sessions: int, messages: int, fork_rate: float, chain_depth: int, long_messages: int | None
) -> None:
    if sessions < 1:
        raise ValueError("sessions must be at least 1")
    if messages < 3:
        raise ValueError("messages must be at least 3 (system prompt, tool definitions, a prompt)")
    if not 0.0 <= fork_rate <= 1.0:
        raise ValueError("fork_rate must lie in [0, 1]")
    if not 1 <= chain_depth <= len(_ROLE_NAMES):
        raise ValueError(
            f"chain_depth must lie in 1..{len(_ROLE_NAMES)} (a chain's objects have distinct roles)"
        )
    if long_messages is not None and long_messages < 3:
        raise ValueError("long_messages must be at least 3")


def _tree_size(root: Path) -> tuple[int, int]:
    files = size = 0
    for folder, _dirs, names in os.walk(root):
        files += len(names)
        size += sum(os.stat(os.path.join(folder, name)).st_size for name in names)
    return files, size


def generate_store(
    root: Path | str,
    *,
    sessions: int,
    messages: int,
    fork_rate: float,
    chain_depth: int,
    seed: int,
    long_messages: int | None = None,
    token_counts: bool = True,
    call_log_limit: int = 200,
    start: datetime = DEFAULT_START,
    fsync: bool = False,
    processes: int | None = None,
) -> GeneratedStore:
    """Write a new store of ``sessions`` sessions into ``root`` (empty or absent); the
    same arguments write the same bytes.

    ``messages`` is the mean length of an active context (specials included), drawn per
    session; ``fork_rate`` the share of sessions compaction forks; ``chain_depth`` the
    most objects in one invocation chain (1: none invokes another; the first chain is
    that deep); ``long_messages`` makes the first session's active context exactly that
    long (no forks, no chain). ``call_log_limit``, ``token_counts`` and ``fsync``: see
    the module docstring. The groups are shared out over ``processes`` processes (default:
    two where there are two cores); that changes no file.
    """
    _check(sessions, messages, fork_rate, chain_depth, long_messages)
    root = Path(root)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise StoreError(root, "not an empty folder: gen-store writes a new store")
    root.mkdir(parents=True, exist_ok=True)
    plans = _plan(sessions, chain_depth, long_messages, random.Random(f"{seed}:plan"), start)
    job = _Job(str(root), seed, messages, fork_rate, call_log_limit, token_counts, fsync, tuple(plans))
    written = _in_processes(job, processes if processes is not None else min(2, os.cpu_count() or 1))
    files, size = _tree_size(root)
    counts = {f.name: sum(getattr(w, f.name) for w in written) for f in fields(_Written) if f.name != "depth"}
    return GeneratedStore(
        root=str(root),
        seed=seed,
        **counts,
        chains=sum(1 for w in written if w.depth > 1),
        max_chain_depth=max(w.depth for w in written),
        files=files,
        bytes=size,
    )


__all__ = ["DEFAULT_START", "GeneratedStore", "generate_store"]
