"""A LangGraph ``SqliteSaver`` database, read only: its threads, their checkpoints, and the
messages each checkpoint holds, decoded.

``checkpoints(thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type,
checkpoint, metadata)``: the blob is msgpack (``type`` "msgpack"), its
``channel_values["messages"]`` the whole message list at that step, each langchain message
an extension value (type 5, pydantic v2: module, class name, ``model_dump()`` dict);
``metadata`` is JSON (``source``: input, loop, update or fork; ``step``; ``parents``).

Two decoders give the same :class:`LcMessage` values: LangGraph's own serializer
(``JsonPlusSerializer().loads_typed``) when LangGraph is installed, and a plain ``msgpack``
reader that builds no object (:func:`decode_plain`), so the file imports without LangGraph.
A blob that neither can read is a notice naming the file, thread and checkpoint; the
rest of the thread is imported.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypedDict

import msgpack  # type: ignore[import-untyped]

from importers._errors import ImporterError

Decoder = Literal["langgraph", "msgpack"]

EXT_CONSTRUCTOR_SINGLE_ARG = 0
EXT_CONSTRUCTOR_POS_ARGS = 1
EXT_CONSTRUCTOR_KW_ARGS = 2
EXT_METHOD_SINGLE_ARG = 3
EXT_PYDANTIC_V1 = 4
EXT_PYDANTIC_V2 = 5
EXT_NUMPY_ARRAY = 6
EXT_DELTA_SNAPSHOT = 7

MESSAGE_CLASSES = (
    "HumanMessage",
    "AIMessage",
    "ToolMessage",
    "SystemMessage",
    "ChatMessage",
    "FunctionMessage",
)


class CheckpointMetadata(TypedDict, total=False):
    """LangGraph's own ``CheckpointMetadata``, as its JSON column holds it."""

    source: Literal["input", "loop", "update", "fork"]
    step: int
    parents: dict[str, str]


class LcMessage(TypedDict, total=False):
    """One langchain message as its ``model_dump()`` has it, with its class."""

    lc_class: str
    type: str
    content: Any
    additional_kwargs: dict[str, Any]
    response_metadata: dict[str, Any]
    name: str | None
    id: str | None
    tool_calls: list[dict[str, Any]]
    invalid_tool_calls: list[dict[str, Any]]
    usage_metadata: dict[str, Any] | None
    tool_call_id: str
    status: str
    role: str


@dataclass
class Checkpoint:
    """One row of ``checkpoints``, its blob decoded."""

    thread: str
    namespace: str
    id: str
    parent_id: str | None
    ts: str
    metadata: CheckpointMetadata
    messages: list[LcMessage] | None
    """None where the checkpoint has no ``messages`` channel (the input checkpoint)."""
    children: list[str] = field(default_factory=list)

    @property
    def source(self) -> str:
        return str(self.metadata.get("source", ""))


@dataclass
class Thread:
    """A thread's checkpoints of the root graph (namespace ""), oldest first."""

    thread_id: str
    checkpoints: list[Checkpoint]
    writers: dict[str, str]
    """The node that wrote the messages of a checkpoint (from ``writes``), by its parent's id."""
    subgraph_namespaces: list[str]


# -- decoding ---------------------------------------------------------------------------


def _plain_ext(code: int, data: bytes) -> Any:
    """An extension value without building its object: a model as its dump (with its
    class), a constructor call as its argument, a numpy array as None."""
    if code == EXT_NUMPY_ARRAY:
        return None
    value = msgpack.unpackb(data, ext_hook=_plain_ext, strict_map_key=False, raw=False)
    if code == EXT_DELTA_SNAPSHOT:
        return value
    if code in (EXT_PYDANTIC_V1, EXT_PYDANTIC_V2) and isinstance(value, list | tuple) and len(value) >= 3:
        dumped = value[2]
        return {"__lc_class__": value[1], **dumped} if isinstance(dumped, dict) else dumped
    if code in (EXT_CONSTRUCTOR_SINGLE_ARG, EXT_METHOD_SINGLE_ARG, EXT_CONSTRUCTOR_KW_ARGS):
        return value[2] if isinstance(value, list | tuple) and len(value) >= 3 else value
    if code == EXT_CONSTRUCTOR_POS_ARGS:
        return list(value[2]) if isinstance(value, list | tuple) and len(value) >= 3 else value
    return value


def decode_plain(type_: str, blob: bytes) -> Any:
    """A checkpoint blob read with plain msgpack (or JSON): no LangGraph, no objects built."""
    if type_ == "json":
        return json.loads(blob)
    if type_ != "msgpack":
        raise ValueError(f"blob type {type_!r} cannot be read without LangGraph")
    return msgpack.unpackb(blob, ext_hook=_plain_ext, strict_map_key=False, raw=False)


def _langgraph_loads() -> Callable[[str, bytes], Any]:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    serializer = JsonPlusSerializer()
    return lambda type_, blob: serializer.loads_typed((type_, blob))


def langgraph_installed() -> bool:
    try:
        _langgraph_loads()
    except ImportError:
        return False
    return True


def _lc_message(value: Any) -> LcMessage | None:
    """A decoded message (a langchain object, or the plain reader's dump) as an LcMessage."""
    if isinstance(value, dict) and "__lc_class__" in value:
        dumped = {k: v for k, v in value.items() if k != "__lc_class__"}
        return LcMessage(lc_class=str(value["__lc_class__"]), **dumped)  # type: ignore[typeddict-item]
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return LcMessage(lc_class=type(value).__name__, **dump())  # type: ignore[typeddict-item]
    return None


def _messages(channel_values: Any) -> list[LcMessage] | None:
    if not isinstance(channel_values, dict) or "messages" not in channel_values:
        return None
    raw = channel_values["messages"]
    if not isinstance(raw, list):
        raise ValueError("the messages channel is not a list")
    found = []
    for position, value in enumerate(raw):
        message = _lc_message(value)
        if message is None or message.get("lc_class") not in MESSAGE_CLASSES:
            raise ValueError(f"message {position} is not a langchain message ({type(value).__name__})")
        found.append(message)
    return found


# -- reading ----------------------------------------------------------------------------


@contextmanager
def read_only(path: Path) -> Iterator[sqlite3.Connection]:
    """The database at ``path`` opened read only (``mode=ro``): never written, not even a journal."""
    if not path.is_file():
        raise ImporterError(path, "no such file")
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise ImporterError(path, f"cannot open it as SQLite: {exc}") from None
    with closing(connection):
        yield connection


def _tables(path: Path, connection: sqlite3.Connection) -> set[str]:
    try:
        return {r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as exc:
        raise ImporterError(path, f"not a SQLite database: {exc}") from None


def read_threads(path: Path, notices: list[str], decoder: Decoder | None = None) -> list[Thread]:
    """Every thread of the database at ``path``, its checkpoints decoded by ``decoder``
    (default: LangGraph's serializer when it is installed, else plain msgpack)."""
    if decoder is None:
        decoder = "langgraph" if langgraph_installed() else "msgpack"
    loads = _langgraph_loads() if decoder == "langgraph" else decode_plain
    with read_only(path) as connection:
        if "checkpoints" not in _tables(path, connection):
            raise ImporterError(path, "not a LangGraph checkpoint database (no checkpoints table)")
        try:
            rows = list(
                connection.execute(
                    "SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, "
                    "checkpoint, metadata FROM checkpoints ORDER BY thread_id, checkpoint_id"
                )
            )
            writes = _writers(connection)
        except sqlite3.DatabaseError as exc:
            raise ImporterError(path, f"not a LangGraph checkpoint database: {exc}") from None
    threads: dict[str, Thread] = {}
    for row in rows:
        thread_id, namespace = str(row[0]), str(row[1] or "")
        thread = threads.setdefault(thread_id, Thread(thread_id, [], writes.get(thread_id, {}), []))
        if namespace:
            if namespace not in thread.subgraph_namespaces:
                thread.subgraph_namespaces.append(namespace)
            continue
        checkpoint = _checkpoint(path, row, loads, notices)
        if checkpoint is not None:
            thread.checkpoints.append(checkpoint)
    for thread in threads.values():
        by_id = {c.id: c for c in thread.checkpoints}
        for checkpoint in thread.checkpoints:
            parent = by_id.get(checkpoint.parent_id or "")
            if parent is not None:
                parent.children.append(checkpoint.id)
        if thread.subgraph_namespaces:
            notices.append(
                f"{path}: thread {thread.thread_id}: subgraph checkpoints (namespaces "
                f"{', '.join(sorted(thread.subgraph_namespaces))}) are not imported; the root graph's are"
            )
    return list(threads.values())


def _writers(connection: sqlite3.Connection) -> dict[str, dict[str, str]]:
    """The node whose task wrote ``messages`` after each checkpoint, by thread and checkpoint."""
    names = {r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "writes" not in names:
        return {}
    found: dict[str, dict[str, str]] = {}
    query = "SELECT thread_id, checkpoint_id, task_path FROM writes WHERE checkpoint_ns = '' AND channel = 'messages'"
    for thread_id, checkpoint_id, task_path in connection.execute(query):
        node = str(task_path or "").rpartition(",")[2].strip()
        if node:
            found.setdefault(str(thread_id), {})[str(checkpoint_id)] = node
    return found


def _checkpoint(
    path: Path, row: tuple[Any, ...], loads: Callable[[str, bytes], Any], notices: list[str]
) -> Checkpoint | None:
    thread_id, _, checkpoint_id, parent_id, type_, blob, metadata_raw = row
    where = f"{path}: thread {thread_id}, checkpoint {checkpoint_id}"
    try:
        metadata = json.loads(metadata_raw) if metadata_raw else {}
        if not isinstance(metadata, dict):
            raise ValueError("the metadata is not a JSON object")
        if not isinstance(blob, bytes):
            raise ValueError("the checkpoint blob is missing")
        value = loads(str(type_ or "msgpack"), blob)
        if not isinstance(value, dict):
            raise ValueError("the checkpoint is not a map")
        messages = _messages(value.get("channel_values"))
    except Exception as exc:  # any decoder's failure on a malformed blob: noticed, skipped
        notices.append(f"{where}: cannot be read ({type(exc).__name__}: {exc}); skipped")
        return None
    return Checkpoint(
        str(thread_id),
        "",
        str(checkpoint_id),
        str(parent_id) if parent_id else None,
        str(value.get("ts") or ""),
        CheckpointMetadata(**metadata),  # type: ignore[typeddict-item]
        messages,
    )
