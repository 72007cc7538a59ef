"""A sOAP context: messages in display order, anchors, the content map and forks.

Anchors are named end indices that partition the message list: appending at an anchor
inserts the message at that anchor's index and moves it, and every anchor after it, one
place on. Every append and every new anchor takes one value of the mutation counter,
which becomes the message's ``_sequence_number`` (chronological order inside one
context). Forks are new contexts that copy a selection of messages; the parent only
gains the child's id in ``children``.

The rules follow peteos' ``Context`` (see FORMATS.md §1.4-§1.7) with two deliberate
differences in what we write: a fork records the parent's real mutation counter (peteos
stores 0), and ``strip_thinking`` drops emptied messages *and* moves the anchors, so the
file we write is consistent.
"""

from __future__ import annotations

import hashlib
import uuid
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, overload

from soap_core._codec import in_file_order, optional_typed
from soap_core._compaction_specs import CompactionSpec
from soap_core._errors import FormatError
from soap_core._facts import collector_paused
from soap_core._ids import checked_id
from soap_core._jsonio import fingerprint
from soap_core._message import Message
from soap_core._parts import ThinkingPart, ToolPart, ToolResultPart
from soap_core._spans import SpannedMessages, forked_messages
from soap_core._tokens import DEFAULT_ENCODING

Anchor = tuple[str, int]

SYSTEM_PROMPT_ANCHOR = "system_prompt"
TOOLS_ANCHOR = "tools"
MESSAGES_ANCHOR = "messages"
DEFAULT_ANCHORS = (SYSTEM_PROMPT_ANCHOR, TOOLS_ANCHOR, MESSAGES_ANCHOR)
TOOL_RESULT_SUFFIX = ":tool_result"

_KEY_ORDER = (
    "messages",
    "id",
    "content_map",
    "anchor_points",
    "message_sequence",
    "_mutation_counter",
    "children",
    "origin_context_id",
    "parent_mutation_counter",
    "system_prompt_message_id",
    "tool_definitions_message_id",
)
_FORK_KEYS = ("origin_context_id", "parent_mutation_counter")
_SPECIAL_ID_KEYS = ("system_prompt_message_id", "tool_definitions_message_id")


@dataclass(frozen=True)
class WindowDisagreement:
    """The message ids peteos's rolling token window of ``max_tokens`` keeps, by true
    counts and by the cached ones it uses; they differ only where cached counts are stale
    (or missing: peteos caches a count the first time it needs one)."""

    max_tokens: int
    kept_by_true_counts: tuple[str, ...]
    kept_by_cached_counts: tuple[str, ...]

    @property
    def only_by_true(self) -> list[str]:
        cached = set(self.kept_by_cached_counts)  # once: in the condition it was built per id
        return [i for i in self.kept_by_true_counts if i not in cached]

    @property
    def only_by_cached(self) -> list[str]:
        true = set(self.kept_by_true_counts)
        return [i for i in self.kept_by_cached_counts if i not in true]

    @property
    def agree(self) -> bool:
        return self.kept_by_true_counts == self.kept_by_cached_counts


def content_hash(text: str) -> str:
    """The content-map key of a hook output: sha256 of its UTF-8 text."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class ForkSource:
    """The parent a fork's unbuilt messages were copied from, as :meth:`Context.fork`
    made them: which of the parent's messages (``order``, the fork's display order) and
    the sequence number each got."""

    parent_id: str
    parent_signature: str | None
    """The signature of the parent's file when read (the catalog's rows are of it)."""
    order: tuple[int, ...]
    sequence_numbers: tuple[int, ...]

    @property
    def is_prefix(self) -> bool:
        """Whether the fork holds the parent's first messages, in order."""
        return self.order == tuple(range(len(self.order)))


@dataclass(frozen=True)
class _UnreadMessages:
    """The message dicts of a checked context file, and their true token counts."""

    raw: Sequence[Any]
    """A list, or :class:`~soap_core._spans.SpannedMessages` (parsed one by one)."""
    token_counts: Sequence[int]
    encoding: str
    path: str | None = None
    """The file they were read from, named by an error raised while building them."""
    signature: str | None = None
    """The file's signature when read (the catalog's facts about it are keyed by it)."""


class _MessageView(Sequence[Message]):
    """The messages of a context, read-only, each built on first access."""

    def __init__(self, context: Context) -> None:
        self._context = context

    def __len__(self) -> int:
        return self._context.message_count

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            with collector_paused():  # a slice of a long context: as _build_messages
                return [self._context.message_at(i) for i in range(*index.indices(len(self)))]
        return self._context.message_at(index)


class Context:
    """One conversation history; the list order is the order the model saw."""

    def __init__(self, id: str | None = None) -> None:
        self.id = id if id is not None else str(uuid.uuid4())
        self._messages: list[Message] = []
        self._unread: _UnreadMessages | None = None
        self._built: dict[int, Message] = {}
        self.content_map: dict[str, str] = {}
        self.anchor_points: list[Anchor] = []
        self.message_sequence = 0
        self.mutation_counter = 0
        self.children: list[str] = []
        self.origin_context_id: str | None = None
        self.parent_mutation_counter: int | None = None
        self.system_prompt_message_id: str | None = None
        self.tool_definitions_message_id: str | None = None
        self.extra: dict[str, Any] = {}
        self._key_order: tuple[str, ...] = _KEY_ORDER
        self._file_keys: frozenset[str] = frozenset()
        self._saved_fingerprint: bytes | None = None
        self._read_as: tuple[str, dict[str, Any]] | None = None
        self._spliced_rest: bytes | None = None
        """Fingerprint of the file's dict without its messages, as read or last written,
        while the messages are unbuilt spans of that file: a save then compares only
        the rest, and writes the messages' bytes back unchanged (:meth:`splice_source`)."""
        self.written_spans: tuple[str | None, array[int], str] | None = None
        """The signature of the file as read, and the message spans and digest of the
        file a spliced save just wrote in its place (the catalog takes them instead of
        reading the file again)."""
        self.fork_source: ForkSource | None = None
        """Where the unbuilt messages of a fork made by :meth:`fork` came from (the
        catalog copies their rows from the parent's instead of indexing them)."""
        self.saved_children: tuple[str, ...] | None = None
        """``children`` as last read or written (a save merges a fork made elsewhere
        against it: :mod:`soap_core._saves`)."""

    # -- messages, built on first use -----------------------------------------------------

    @property
    def messages(self) -> list[Message]:
        """The messages in display order. A context read from a file the catalog had
        already checked at the same signature builds them on first use."""
        if self._unread is not None:
            self._build_messages()
        return self._messages

    @messages.setter
    def messages(self, messages: list[Message]) -> None:
        self._unread, self._built = None, {}
        self._messages = messages

    @property
    def message_count(self) -> int:
        """``len(messages)`` without building them."""
        return len(self._messages) if self._unread is None else len(self._unread.raw)

    def message_at(self, index: int) -> Message:
        """``messages[index]``, building only that message of an unbuilt context (the
        same object the whole list holds once it is built). For reading: a change to it
        is kept only once :attr:`messages` has been read."""
        unread = self._unread
        if unread is None:
            return self._messages[index]
        if index < 0:
            index += len(unread.raw)
        message = self._built.get(index)
        if message is None:
            if not 0 <= index < len(unread.raw):
                raise IndexError(index)
            self._fingerprint_before_handing_out(unread)
            message = self._build_one(unread, index)
            self._built[index] = message
        return message

    @property
    def message_view(self) -> Sequence[Message]:
        """The messages as a read-only sequence that builds only those it is asked for
        (the page of a 100,000-message context reads fifty)."""
        return self._messages if self._unread is None else _MessageView(self)

    @property
    def read_signature(self) -> tuple[str, str] | None:
        """(file, signature) this context was read from while its messages are unbuilt:
        what the catalog's facts about them are keyed by."""
        unread = self._unread
        if unread is None or unread.path is None or unread.signature is None:
            return None
        return unread.path, unread.signature

    def _fingerprint_before_handing_out(self, unread: _UnreadMessages) -> None:
        """Take the fingerprint of the file's dict before a message built from it can
        change it. Spanned messages are parsed afresh from bytes on every access, so
        theirs can wait until it is needed."""
        if isinstance(unread.raw, list):
            self.saved_fingerprint  # noqa: B018

    @staticmethod
    def _build_one(unread: _UnreadMessages, index: int) -> Message:
        try:
            message = Message.from_dict(unread.raw[index], f"$.messages[{index}]")
        except FormatError as exc:  # the file changed under a signature the catalog trusted
            raise exc.at(unread.path) if exc.path is None and unread.path else exc from None
        message.set_known_token_count(unread.token_counts[index], unread.encoding)
        return message

    @property
    def messages_built(self) -> bool:
        """False while the messages of a context read from a checked file are unbuilt."""
        return self._unread is None

    def _build_messages(self) -> None:
        """Build every message not built yet. The cyclic collector waits meanwhile: the
        messages hold no cycle, and its full passes over the 100,000 new objects of a
        long context took as long as the building itself."""
        unread = self._unread
        assert unread is not None
        self._fingerprint_before_handing_out(unread)
        built = self._built
        with collector_paused():
            messages = [
                built[i] if i in built else self._build_one(unread, i) for i in range(len(unread.raw))
            ]
        self._messages, self._unread, self._built = messages, None, {}

    @property
    def saved_fingerprint(self) -> bytes | None:
        """Digest of the dict this context was last read as or written as (the store
        skips writing a context whose ``to_dict()`` still has it). For a context just
        read it is taken on first need, from the file's dict, which nothing has changed
        before then: the messages are unbuilt and the containers copied."""
        if self._read_as is not None:
            path, data = self._read_as
            spanned = data.get("messages")
            if spanned is not None and not isinstance(spanned, list):  # SpannedMessages: parse them
                data = {**data, "messages": list(spanned)}
            self._saved_fingerprint, self._read_as = fingerprint([path, data]), None
        return self._saved_fingerprint

    @saved_fingerprint.setter
    def saved_fingerprint(self, digest: bytes | None) -> None:
        self._saved_fingerprint, self._read_as = digest, None

    def remember_read_as(self, path: str, data: dict[str, Any], signature: str | None = None) -> None:
        """Note the file ``path`` (at ``signature``) and its parsed dict this context was
        built from; its fingerprint is taken when first needed, not at every read."""
        self._saved_fingerprint, self._read_as = None, (path, data)
        spanned = isinstance(data.get("messages"), SpannedMessages)
        self._spliced_rest = fingerprint({**data, "messages": []}) if spanned else None
        if self._unread is not None:
            self._unread = replace(self._unread, path=path, signature=signature)

    # -- saves that write back the bytes of unchanged messages ---------------------------

    def splice_source(self) -> tuple[memoryview, array[int]] | None:
        """The bytes of the ``messages`` array of the file this context was read from
        (or of a fork's, made from its parent's bytes by :meth:`fork`), when a save can
        write them as they are: the messages are unbuilt spans of those bytes and none
        was handed out (so none changed), and the bytes are what ``json.dumps(indent=2)``
        writes for them (the layout the spans need, ASCII); with their spans in them."""
        unread = self._unread
        if unread is None or self._built or (self._spliced_rest is None and self.fork_source is None):
            return None
        raw = unread.raw
        if not isinstance(raw, SpannedMessages) or not raw.array_is_ascii():
            return None
        return raw.array_bytes(), raw.spans

    def rest_unchanged(self) -> bool:
        """Whether the context without its messages is the file's rest as read or last
        written (fingerprinted with the anchors as the tuples they are: orjson writes a
        tuple as the list the file holds, and a long context has tens of thousands)."""
        return (
            self._spliced_rest is not None
            and fingerprint(self._to_dict([], list(self.anchor_points))) == self._spliced_rest
        )

    def dict_without_messages(self) -> dict[str, Any]:
        """:meth:`to_dict` with an empty ``messages`` array in its place."""
        return self._to_dict([])

    def note_spliced_write(
        self, path: str, rest: dict[str, Any], signature: str | None, spans: array[int], digest: str
    ) -> None:
        """After a save wrote ``rest`` around this context's unchanged messages into
        ``path``: the next save compares with that, and a content comparison (another
        process saved meanwhile) fingerprints the whole of it, messages parsed then."""
        unread = self._unread
        assert unread is not None
        data = {key: unread.raw if key == "messages" else value for key, value in rest.items()}
        self.written_spans = (unread.signature, spans, digest)
        self.remember_read_as(path, data, signature)

    # -- building -----------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        system_prompt: Message | str | None = None,
        tools: Sequence[ToolPart] | Message | None = None,
    ) -> Context:
        """A new root context with the default anchors, as ``Context.create()`` in peteos."""
        context = cls()
        for name in DEFAULT_ANCHORS:
            context.add_anchor(name, 0)
        if system_prompt is not None:
            message = (
                Message.system_prompt(system_prompt) if isinstance(system_prompt, str) else system_prompt
            )
            context.append(message, SYSTEM_PROMPT_ANCHOR)
            context.system_prompt_message_id = message.id
        if tools is not None:
            message = tools if isinstance(tools, Message) else Message.tool_definitions_message(tools)
            context.append(message, TOOLS_ANCHOR)
            context.tool_definitions_message_id = message.id
        return context

    def _take_mutation(self) -> int:
        value = self.mutation_counter
        self.mutation_counter += 1
        return value

    def anchor_index(self, name: str) -> int:
        for anchor_name, index in self.anchor_points:
            if anchor_name == name:
                return index
        raise KeyError(f"context {self.id} has no anchor {name!r}")

    def add_anchor(self, name: str, index: int | None = None, *, after_existing: bool = True) -> None:
        """Add an anchor at ``index`` (default: the end); among equal indices it goes last,
        or first with ``after_existing=False`` (how tool-result anchors precede ``messages``)."""
        if any(existing == name for existing, _ in self.anchor_points):
            raise ValueError(f"context {self.id} already has anchor {name!r}")
        index = len(self.messages) if index is None else index
        if not 0 <= index <= len(self.messages):
            raise ValueError(f"anchor index {index} is outside 0..{len(self.messages)}")
        position = 0
        for position, (_, existing) in enumerate(self.anchor_points):  # noqa: B007
            if existing > index or (existing == index and not after_existing):
                break
        else:
            position = len(self.anchor_points)
        self.anchor_points.insert(position, (name, index))
        self._take_mutation()

    def append(self, message: Message, anchor: str = MESSAGES_ANCHOR) -> Message:
        """Insert ``message`` at ``anchor`` and give it the next sequence number."""
        position = self._anchor_position(anchor)
        index = self.anchor_points[position][1]
        self.messages.insert(index, message)
        self.anchor_points[position:] = [(n, i + 1) for n, i in self.anchor_points[position:]]
        message.sequence_number = self._take_mutation()
        self.message_sequence += 1
        return message

    def _anchor_position(self, anchor: str) -> int:
        """Where ``anchor`` is in :attr:`anchor_points`, looked for from the end: the
        anchors messages go to (``messages``, a new tool result's) are the last ones, so
        a long context's appends stay linear. Names are unique (:meth:`add_anchor`)."""
        anchors = self.anchor_points
        for position in range(len(anchors) - 1, -1, -1):
            if anchors[position][0] == anchor:
                return position
        raise KeyError(f"context {self.id} has no anchor {anchor!r}")

    def append_tool_results(self, assistant: Message, results: Sequence[ToolResultPart]) -> Message:
        """Record the results of an assistant's tool calls the way the sOAP runner does:
        a ``<assistant_id>:tool_result`` anchor before ``messages``, then one
        ``tool_result`` message appended at it."""
        anchor = assistant.id + TOOL_RESULT_SUFFIX
        self.add_anchor(anchor, self.anchor_index(MESSAGES_ANCHOR), after_existing=False)
        return self.append(Message.create("tool_result", results), anchor)

    def record_hook_output(self, output: str) -> str:
        """Keep one dynamic-hook output in the content map (it only grows); return its key."""
        key = content_hash(output)
        self.content_map.setdefault(key, output)
        return key

    # -- reading ------------------------------------------------------------------------

    def message_by_id(self, message_id: str) -> Message:
        for message in self.messages:
            if message.id == message_id:
                return message
        raise KeyError(f"context {self.id} has no message {message_id!r}")

    @property
    def system_prompt(self) -> Message | None:
        return next((m for m in self.message_view if m.message_type == "SystemPromptMessage"), None)

    @property
    def tool_definitions(self) -> Message | None:
        return next((m for m in self.message_view if m.message_type == "ToolDefinitionsMessage"), None)

    def chronological(self) -> list[Message]:
        """Messages by ``_sequence_number``: the order they happened in this context."""
        return sorted(self.messages, key=lambda m: (m.sequence_number is None, m.sequence_number or 0))

    def total_token_count(self, encoding: str = DEFAULT_ENCODING) -> int:
        """Sum of the true counts of all messages, special ones included (from the
        catalog's counts, without building them, while the messages are unbuilt)."""
        unread = self._unread
        if unread is not None and unread.encoding == encoding:
            built = self._built
            return sum(unread.token_counts) + sum(
                m.count_tokens(encoding) - unread.token_counts[i] for i, m in built.items()
            )
        return sum(m.count_tokens(encoding) for m in self.messages)

    def stale_messages(self) -> list[Message]:
        return [m for m in self.messages if m.token_count_is_stale]

    @property
    def is_fork(self) -> bool:
        return self.origin_context_id is not None

    def home_anchor(self, index: int) -> str:
        """The anchor a message at display ``index`` belongs to: the first one past it."""
        for name, end in self.anchor_points:
            if end > index:
                return name
        return MESSAGES_ANCHOR

    # -- forks --------------------------------------------------------------------------

    def fork(self, selected: Iterable[int]) -> Context:
        """A child holding copies of the messages at the selected display indices.

        The child keeps the default anchors plus the home anchor of each selected
        message, in the parent's order; messages are appended in display order at their
        home anchors and renumbered, keeping their ids and cached token counts. The
        parent gains the child's id in ``children`` and nothing else changes in it.

        Linear in the context: the homes come from one pass over the anchors, and the
        child is laid out as those appends would lay it out (each anchor's messages in
        display order, anchor by anchor) without appending one by one. A parent whose
        messages are not built yet stays so: the copies are built from its file.
        """
        indices = sorted(set(selected))
        homes = self._home_anchors(indices)
        wanted = set(DEFAULT_ANCHORS) | set(homes)
        child = Context()
        child.content_map = dict(self.content_map)
        child.origin_context_id = self.id
        child.parent_mutation_counter = self.mutation_counter
        names = [name for name, _ in self.anchor_points if name in wanted]
        names += [name for name in DEFAULT_ANCHORS if name not in names]
        if len(set(names)) != len(names):
            raise ValueError(f"context {self.id} has an anchor twice")
        by_anchor: dict[str, list[int]] = {name: [] for name in names}
        for i, home in zip(indices, homes, strict=True):
            by_anchor[home].append(i)
        sequence = {i: len(names) + rank for rank, i in enumerate(indices)}  # appended in display order
        order = [i for name in names for i in by_anchor[name]]
        if not self._fork_unbuilt(child, order, [sequence[i] for i in order]):
            messages: list[Message] = []
            for i in order:
                message = self._copy_of(i)
                message.sequence_number = sequence[i]
                messages.append(message)
            child._messages = messages
        held = 0
        for name in names:
            held += len(by_anchor[name])
            child.anchor_points.append((name, held))
        child.mutation_counter = len(names) + len(order)  # add_anchor and append each take one
        child.message_sequence = len(order)
        child.system_prompt_message_id = (
            self.system_prompt_message_id if child._holds_message(self.system_prompt_message_id) else None
        )
        child.tool_definitions_message_id = (
            self.tool_definitions_message_id
            if child._holds_message(self.tool_definitions_message_id)
            else None
        )
        self.children.append(child.id)
        return child

    def _home_anchors(self, indices: list[int]) -> list[str]:
        """:meth:`home_anchor` of each of the sorted ``indices``, in one pass over the
        anchors when their ends never decrease (as :meth:`add_anchor` keeps them)."""
        anchors = self.anchor_points
        if any(anchors[k][1] > anchors[k + 1][1] for k in range(len(anchors) - 1)):
            return [self.home_anchor(i) for i in indices]  # out of order (a hand-edited file)
        homes: list[str] = []
        position = 0
        for i in indices:
            while position < len(anchors) and anchors[position][1] <= i:
                position += 1
            homes.append(anchors[position][0] if position < len(anchors) else MESSAGES_ANCHOR)
        return homes

    def _fork_unbuilt(self, child: Context, order: list[int], sequence_numbers: list[int]) -> bool:
        """Give ``child`` the messages ``order`` of this context, renumbered, without
        building them, when they are unbuilt spans of a file: their bytes with the new
        numbers (:func:`~soap_core._spans.forked_messages`), which a save writes as they
        are. A message of them built meanwhile must still be what its bytes say (a change
        to it is copied: the messages are then built). False (build the copies) otherwise."""
        unread = self._unread
        if unread is None or not isinstance(unread.raw, SpannedMessages):
            return False
        for i in order:
            built = self._built.get(i)
            if built is not None and built.to_dict() != unread.raw[i]:
                return False
        forked = forked_messages(unread.raw, order, sequence_numbers)
        if forked is None:
            return False
        counts = unread.token_counts
        child._unread = _UnreadMessages(forked, [counts[i] for i in order], unread.encoding, unread.path)
        child.fork_source = ForkSource(self.id, unread.signature, tuple(order), tuple(sequence_numbers))
        return True

    def _holds_message(self, message_id: str | None) -> bool:
        """Whether a message of this context has the id ``message_id``; unbuilt spans
        are searched as bytes (:meth:`~soap_core._spans.SpannedMessages.holds_id`)."""
        if message_id is None:
            return False
        unread = self._unread
        if unread is not None and isinstance(unread.raw, SpannedMessages) and not self._built:
            return unread.raw.holds_id(message_id)
        return any(m.id == message_id for m in self.message_view)

    def _copy_of(self, index: int) -> Message:
        """A copy of the message at ``index``; built from the file, if the messages are
        not built yet, without building the parent's."""
        unread = self._unread
        if unread is None:
            return self._messages[index].copy()
        built = self._built.get(index)
        if built is not None:
            return built.copy()
        fresh = self._build_one(unread, index)  # spanned: parsed afresh, shares nothing
        return fresh if not isinstance(unread.raw, list) else fresh.copy()

    def _special_indices(self) -> list[int]:
        return [i for i, m in enumerate(self.messages) if m.is_special]

    def fork_insert_sequence(self, start: int | None = None, end: int | None = None) -> Context:
        """Fork with the special messages and every message whose sequence number lies in
        ``[start, end)`` (either bound may be left open)."""

        def inside(m: Message) -> bool:
            seq = m.sequence_number if m.sequence_number is not None else -1
            return (start is None or seq >= start) and (end is None or seq < end)

        chosen = [i for i, m in enumerate(self.messages) if m.is_special or inside(m)]
        return self.fork(chosen)

    def _tool_groups(self) -> list[list[int]]:
        """Non-special display indices grouped so that a tool-result message stays with
        the assistant message whose calls it answers."""
        groups: list[list[int]] = []
        call_owner: dict[str, int] = {}
        for i, message in enumerate(self.messages):
            if message.is_special:
                continue
            owners = {call_owner.get(p.call_id) for p in message.tool_results()} - {None}
            if message.role == "tool_result" and owners:
                first = min(o for o in owners if o is not None)
                for group in groups:
                    if first in group:
                        group.append(i)
                        break
                continue
            for part in message.tool_uses():
                call_owner[part.call_id] = i
            groups.append([i])
        return groups

    def kept_indices(self, spec: CompactionSpec, encoding: str = DEFAULT_ENCODING) -> list[int] | None:
        """Display indices of the non-special messages ``spec`` keeps (its
        :meth:`~CompactionSpec.kept` over the tool groups, oldest first: a tool result
        never stays without its call), or None when it leaves the context as it is."""
        threshold = spec.threshold
        total = 0 if threshold is None else self.total_token_count(encoding)
        if threshold is not None and total <= threshold:
            return None  # before grouping: a context that fits is not built
        groups = self._tool_groups()
        view = [i for g in groups for i in g]
        group = {i: n for n, g in enumerate(groups) for i in g}
        start = spec.kept(view, group.__getitem__, lambda i: self.messages[i].count_tokens(encoding), total)
        return None if start is None else sorted(view[start:])

    def compacted(self, spec: CompactionSpec, encoding: str = DEFAULT_ENCODING) -> Context | None:
        """Fork keeping the special messages and :meth:`kept_indices`; None when ``spec``
        leaves the context as it is."""
        kept = self.kept_indices(spec, encoding)
        return None if kept is None else self.fork(self._special_indices() + kept)

    def recent_indices(self, n: int) -> list[int]:
        """Display indices of the last ``n`` non-special messages, fewer where the n-th
        from the end is a tool result whose call would be cut off."""
        kept = self.kept_indices(CompactionSpec("rolling-messages", (n,)))
        return [i for i, m in enumerate(self.messages) if not m.is_special] if kept is None else kept

    def rolling_sequence_window(self, n: int) -> Context | None:
        """Fork keeping the special messages and :meth:`recent_indices` ``(n)``; None
        when nothing has to go."""
        return self.compacted(CompactionSpec("rolling-messages", (n,)))

    def rolling_token_window(self, max_tokens: int, encoding: str = DEFAULT_ENCODING) -> Context | None:
        """Fork keeping the special messages and the newest that fit with them in
        ``max_tokens``, whole tool groups, the newest group even over it (the
        rolling-tokens rule); None when the whole context already fits."""
        return self.compacted(CompactionSpec("rolling-tokens", (max_tokens, 1)), encoding)

    def peteos_token_window(
        self,
        max_tokens: int,
        encoding: str = DEFAULT_ENCODING,
        *,
        strip_dangling_results: bool = True,
        cached_counts: bool = True,
    ) -> Context | None:
        """``rolling_token_window`` as peteos computes it: with the *cached* counts.

        A message's cached ``token_count`` is used where it has one (stale or not), and
        a message without one gets its true count cached, as peteos's ``count_tokens``
        does, so the fork carries the counts peteos writes. Messages are walked back one
        by one in sequence order (a tool result can lose its call); nothing may be kept
        but the specials. peteos 0.6 then drops tool results whose call is not kept
        (``strip_dangling_results``; 0.5 does not). peteos 0.6.13 does that over a
        ``set``, so which results survive varies from run to run; here the messages are
        taken in display order, which makes the choice deterministic (and keeps every
        result whose call is kept, where 0.6.13 can drop one). None when the
        whole context already fits. ``cached_counts=False`` runs the same walk on true
        counts and caches nothing (to see what stale counts changed).
        """
        if cached_counts:
            for message in self.messages:
                if message.token_count is None:
                    message.record_token_count()

        def cost(i: int) -> int:
            message = self.messages[i]
            return (message.token_count or 0) if cached_counts else message.count_tokens(encoding)

        specials = [i for i in self._special_indices() if self.messages[i].id in self._special_ids()]
        numbered = sorted(
            (m.sequence_number, i)
            for i, m in enumerate(self.messages)
            if i not in specials and m.sequence_number is not None
        )
        if not numbered:
            return None
        cached = [cost(i) for _, i in numbered]
        running = sum(cost(i) for i in specials)
        if running + sum(cached) <= max_tokens:
            return None
        kept = 0
        for count in reversed(cached):
            if running + count > max_tokens:
                break
            running += count
            kept += 1
        start = numbered[len(numbered) - kept][0] if kept else self.mutation_counter
        chosen = sorted(i for seq, i in numbered if start <= seq < self.mutation_counter)
        if strip_dangling_results:
            chosen = self._without_dangling_results(chosen)
        return self.fork(specials + chosen)

    def _special_ids(self) -> set[str]:
        return {i for i in (self.system_prompt_message_id, self.tool_definitions_message_id) if i} or {
            m.id for m in self.messages if m.is_special
        }

    def _without_dangling_results(self, indices: list[int]) -> list[int]:
        """peteos's ``_strip_dangling_tool_results``, over messages in display order. Like
        peteos it forgets the cached count of each result it drops (in this context: the
        count is recomputed when next needed), which shows in the saved parent."""
        seen: set[str] = set()
        kept: list[int] = []
        for i in indices:
            message = self.messages[i]
            seen.update(p.call_id for p in message.tool_uses())
            if any(p.call_id not in seen for p in message.tool_results()):
                message.token_count = None
                continue
            seen.difference_update(p.call_id for p in message.tool_results())
            kept.append(i)
        return kept

    def window_disagreement(self, max_tokens: int, encoding: str = DEFAULT_ENCODING) -> WindowDisagreement:
        """Which messages peteos's rolling token window keeps with the cached counts it
        uses and with true counts: where stale or missing counts change a compaction.
        Works on a copy: this context is not changed."""
        probe = Context.from_dict(self.to_dict())
        by_true = probe.peteos_token_window(max_tokens, encoding, cached_counts=False)
        by_cached = probe.peteos_token_window(max_tokens, encoding)
        everything = [m.id for m in self.messages]
        return WindowDisagreement(
            max_tokens,
            tuple(m.id for m in by_true.messages) if by_true else tuple(everything),
            tuple(m.id for m in by_cached.messages) if by_cached else tuple(everything),
        )

    def strip_thinking(self) -> Context:
        """Fork of everything without thinking parts. Cached token counts are kept (and
        so become stale, as in peteos); messages left empty are dropped and the anchors
        moved back so that they still partition the messages."""
        child = self.fork(range(len(self.messages)))
        for message in child.messages:
            if message.has_thinking():
                message.content = [p for p in message.content if not isinstance(p, ThinkingPart)]
        emptied = [
            i
            for i, m in enumerate(child.messages)
            if m.has_content_key and not m.content and self.messages[i].content
        ]
        for i in reversed(emptied):
            del child.messages[i]
            child.anchor_points = [(n, e - 1 if e > i else e) for n, e in child.anchor_points]
        return child

    def transform_fork(self, transform: Callable[[list[Message]], list[Message]]) -> Context:
        """Fork whose messages are ``transform(copies of all messages)``; for strategies
        that rewrite rather than select (summaries). The result is appended at
        ``messages`` after the default anchors."""
        child = Context()
        child.content_map = dict(self.content_map)
        child.origin_context_id = self.id
        child.parent_mutation_counter = self.mutation_counter
        for name in DEFAULT_ANCHORS:
            child.add_anchor(name, 0)
        for message in transform([m.copy() for m in self.messages]):
            anchor = {
                "SystemPromptMessage": SYSTEM_PROMPT_ANCHOR,
                "ToolDefinitionsMessage": TOOLS_ANCHOR,
            }.get(message.message_type, MESSAGES_ANCHOR)
            child.append(message, anchor)
        child.system_prompt_message_id = child.system_prompt.id if child.system_prompt else None
        child.tool_definitions_message_id = child.tool_definitions.id if child.tool_definitions else None
        self.children.append(child.id)
        return child

    def side_fork(
        self, transform: Callable[[list[Message]], list[Message]] = lambda messages: messages
    ) -> Context:
        """:meth:`transform_fork` that the parent does not list among its ``children``:
        replays and re-runs branch off without changing the parent's file (the fork tree
        finds such forks through ``origin_context_id``)."""
        child = self.transform_fork(transform)
        self.children.remove(child.id)
        return child

    # -- codec --------------------------------------------------------------------------

    @classmethod
    def from_dict(
        cls,
        data: Any,
        *,
        known_token_counts: Sequence[int] | None = None,
        encoding: str = DEFAULT_ENCODING,
        spanned: Sequence[Any] | None = None,
    ) -> Context:
        """Read a context file's dict; FormatError names the JSON path of a bad value.

        ``known_token_counts`` is for a dict already read this way, with these true
        counts, by one who vouches that it is unchanged (the catalog, for a file at the
        signature it indexed): its messages are then built on first use. The dict is
        not copied: it must not change while they are unbuilt. ``spanned`` are the
        file's messages when ``data`` was parsed without them (:mod:`soap_core._spans`)."""
        if not isinstance(data, dict):
            raise FormatError(None, "$", f"a context must be an object, got {type(data).__name__}")
        context_id = checked_id(optional_typed(data, "id", str), "$.id")
        if context_id is None:
            raise FormatError(None, "$", "missing key 'id'")
        context = cls(context_id)
        raw_messages = optional_typed(data, "messages", list) or []
        if spanned is not None:  # the file's messages, cut out of ``data`` (soap_core._spans)
            raw_messages = spanned if known_token_counts is not None else list(spanned)
        if known_token_counts is not None and len(known_token_counts) == len(raw_messages):
            context._unread = _UnreadMessages(raw_messages, known_token_counts, encoding)
        else:
            with collector_paused():  # as _build_messages: 50,000 messages in 0.4 s, not 0.65
                context._messages = [
                    Message.from_dict(m, f"$.messages[{i}]") for i, m in enumerate(raw_messages)
                ]
        context.content_map = dict(optional_typed(data, "content_map", dict) or {})
        context.anchor_points = _anchors(data.get("anchor_points"))
        context.message_sequence = optional_typed(data, "message_sequence", int) or 0
        context.mutation_counter = optional_typed(data, "_mutation_counter", int) or 0
        context.children = list(optional_typed(data, "children", list) or [])
        if not all(isinstance(c, str) for c in context.children):
            raise FormatError(None, "$.children", "expected a list of context ids (strings)")
        for i, child_id in enumerate(context.children):
            checked_id(child_id, f"$.children[{i}]")
        context.origin_context_id = checked_id(
            optional_typed(data, "origin_context_id", str), "$.origin_context_id"
        )
        context.parent_mutation_counter = optional_typed(data, "parent_mutation_counter", int)
        context.system_prompt_message_id = optional_typed(data, "system_prompt_message_id", str)
        context.tool_definitions_message_id = optional_typed(data, "tool_definitions_message_id", str)
        context.extra = {k: v for k, v in data.items() if k not in _KEY_ORDER}
        context._key_order = tuple(data)
        context._file_keys = frozenset(data)
        return context

    def to_dict(self) -> dict[str, Any]:
        if self._built:
            self._build_messages()  # a message built alone may have been changed
        unread = self._unread
        return self._to_dict([m.to_dict() for m in self._messages] if unread is None else list(unread.raw))

    def _to_dict(self, messages: list[Any], anchors: list[Any] | None = None) -> dict[str, Any]:
        values: dict[str, Any] = {
            "messages": messages,
            "id": self.id,
            "content_map": dict(self.content_map),
            "anchor_points": list(map(list, self.anchor_points)) if anchors is None else anchors,
            "message_sequence": self.message_sequence,
            "_mutation_counter": self.mutation_counter,
            "children": list(self.children),
            "origin_context_id": self.origin_context_id,
            "parent_mutation_counter": self.parent_mutation_counter,
            "system_prompt_message_id": self.system_prompt_message_id,
            "tool_definitions_message_id": self.tool_definitions_message_id,
        }
        return in_file_order(
            values,
            self.extra,
            self._key_order,
            _KEY_ORDER,
            self._file_keys,
            self._write_new_key,
        )

    def _write_new_key(self, key: str, value: Any) -> bool:
        """Whether a key the file did not have is added. Fork keys only on forks; a
        context peteos made with ``Session.create()`` has no special-id keys at all, and
        they stay absent while they are null."""
        if key in _FORK_KEYS:
            return self.is_fork
        if key in _SPECIAL_ID_KEYS and self._file_keys:
            return value is not None
        return True

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Context) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"Context(id={self.id!r}, messages={len(self.messages)}, origin={self.origin_context_id!r})"


def _anchors(raw: Any) -> list[Anchor]:
    """Anchors as stored. Indices past the end are accepted: peteos' strip_thinking
    leaves them so."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise FormatError(None, "$.anchor_points", f"expected a list, got {type(raw).__name__}")
    anchors: list[Anchor] = []
    for i, item in enumerate(raw):
        ok = (
            isinstance(item, list)
            and len(item) == 2
            and isinstance(item[0], str)
            and isinstance(item[1], int)
            and not isinstance(item[1], bool)
        )
        if not ok:
            raise FormatError(None, f"$.anchor_points[{i}]", "expected [name, end index]")
        anchors.append((item[0], item[1]))
    return anchors
