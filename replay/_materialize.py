"""Rematerialize the exact request behind any message of any context.

The request the model received when it produced the message at display index ``at``
is: the messages before it in display order, in the context where the call was made
(which, for a message a fork copied, is the ancestor it was first produced in), with
the system prompt and tool definitions *as they were at that call*, sent in the shape
the framework that made the call gave it. This module is the generic part; each
framework's shape is a request source (:mod:`replay._sources`): our runtime
(:mod:`replay._runtime_source`), peteos (:mod:`replay._peteos_source`), importers.

A pass over many messages of a session (verify, the budgets, the system prompt at each
call) reads the call log once into a :class:`CallLog`, which also keeps the lookups that
would otherwise scan the log or a context at every message; and where the pass needs
less than the whole request it asks for a :class:`SentPrefix`, which describes what a
call was sent without building it. Both keep such a pass linear in the session.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast, overload

from replay._request import CallSite, Materialized, SentPrefix
from replay._sources import DescribingSource, source_for
from soap_core import CallRecord, Context, Session, SoapError, is_marked


class MaterializeError(SoapError):
    """The message asked for does not exist, or cannot be rematerialized."""


class CallLog(Sequence[CallRecord]):
    """One session's call records, read once for a pass over many of its messages.

    Besides the records, in order, it keeps what such a pass would otherwise rebuild at
    every message: the record behind each (context, message), where each message id sits
    in each context (the fork chain is walked by id), and which messages of a context
    are special. Request sources keep their own per-pass state in :meth:`state`. All of
    it assumes the session does not change while the log is in use: read a new log
    after changing it. Pass a log wherever ``calls`` is asked for; a plain list works
    too, at the cost of one scan of it per message.
    """

    def __init__(self, records: Iterable[CallRecord] = ()) -> None:
        self.records: Sequence[CallRecord] = records if isinstance(records, Sequence) else list(records)
        self._produced: dict[tuple[str, str], CallRecord] | None = None
        self._first: dict[str, dict[str, int]] = {}
        self._sorted_ids: dict[str, tuple[list[str], list[int]]] = {}
        self._scanned: set[str] = set()
        self._asked = False
        self._specials: dict[str, tuple[list[int], list[int]]] = {}
        self._state: dict[str, dict[Any, Any]] = {}

    @classmethod
    def of(cls, calls: Sequence[CallRecord]) -> CallLog:
        """``calls`` itself when it is a log already, else a log over it."""
        return calls if isinstance(calls, CallLog) else cls(calls)

    @overload
    def __getitem__(self, index: int) -> CallRecord: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[CallRecord]: ...

    def __getitem__(self, index: int | slice) -> CallRecord | Sequence[CallRecord]:
        return self.records[index]

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[CallRecord]:
        return iter(self.records)

    def produced(self, context: Context, index: int) -> CallRecord | None:
        """The first record of a call from ``context`` that produced its message ``index``."""
        if index >= len(context.messages):
            return None
        key = (context.id, context.messages[index].id)
        if self._produced is None:
            if not self._asked:  # the first question scans, as a log asked once should
                self._asked = True
                return next((c for c in self.records if (c.context_id, c.message_id) == key), None)
            self._produced = {}
            for call in self.records:
                if call.message_id is not None:
                    self._produced.setdefault((call.context_id, call.message_id), call)
        return self._produced.get(key)

    def position(self, context: Context, message_id: str) -> int | None:
        """The display index of the first message of ``context`` with ``message_id``."""
        first = self._first.get(context.id)
        if first is None:
            first = {}
            for index, message in enumerate(context.messages):
                first.setdefault(message.id, index)
            self._first[context.id] = first
        return first.get(message_id)

    def matching(self, context: Context, prefix: str, most: int = 2) -> list[int]:
        """Display indices of the messages whose id starts with ``prefix`` (up to ``most``).

        The first lookup in a context scans it (a log used once, by one materialize,
        costs no more than before); later ones search its ids, sorted once."""
        index = self._sorted_ids.get(context.id)
        if index is None:
            if context.id not in self._scanned:
                self._scanned.add(context.id)
                return [i for i, m in enumerate(context.messages) if m.id.startswith(prefix)][:most]
            pairs = sorted((m.id, i) for i, m in enumerate(context.messages))
            index = ([p[0] for p in pairs], [p[1] for p in pairs])
            self._sorted_ids[context.id] = index
        ids, positions = index
        found: list[int] = []
        at = bisect_left(ids, prefix)  # the ids with this prefix follow each other from here
        while at < len(ids) and ids[at].startswith(prefix) and len(found) < most:
            found.append(positions[at])
            at += 1
        return sorted(found)

    def special_positions(self, context: Context, stop: int) -> list[int]:
        """Display indices below ``stop`` of the special messages (system prompt, tool
        definitions); the context is scanned only as far as asked."""
        positions, scanned = self._specials.setdefault(context.id, ([], [0]))
        for index in range(scanned[0], stop):
            if context.messages[index].is_special:
                positions.append(index)
        scanned[0] = max(scanned[0], stop)
        return positions[: bisect_left(positions, stop)]

    def state(self, owner: str) -> dict[Any, Any]:
        """A dict ``owner`` (a request source) keeps for as long as this log is used."""
        return self._state.setdefault(owner, {})


def resolve_index(context: Context, at: int | str, *, calls: CallLog | None = None) -> int:
    """A display index from an index or a message id (prefix); ``calls``, a pass's log,
    finds the id without scanning the context."""
    if isinstance(at, int) or (isinstance(at, str) and at.lstrip("-").isdigit()):
        index = int(at)
        if index < 0:
            index += len(context.messages)
        if not 0 <= index <= len(context.messages):
            raise MaterializeError(
                f"context {context.id} has {len(context.messages)} messages; no index {at}"
            )
        return index
    if calls is not None:
        matches = calls.matching(context, at)
    else:
        matches = [i for i, m in enumerate(context.messages) if m.id.startswith(at)]
    if len(matches) != 1:
        problem = "several messages" if matches else "no message"
        raise MaterializeError(f"{problem} of context {context.id} match {at!r}")
    return matches[0]


def origin_of(
    session: Session, context: Context, index: int, *, calls: CallLog | None = None
) -> tuple[Context, int]:
    """Where the message at ``index`` was produced: up the fork chain while the parent
    holds the same message (forks copy messages with their ids). ``calls``, a pass's
    log, finds the message in each parent without scanning it."""
    if index >= len(context.messages):
        return context, index
    message_id = context.messages[index].id
    seen = {context.id}
    while context.origin_context_id in session.contexts and context.origin_context_id not in seen:
        parent = session.contexts[context.origin_context_id]
        if calls is not None:
            found = calls.position(parent, message_id)
        else:
            found = next((i for i, m in enumerate(parent.messages) if m.id == message_id), None)
        if found is None:
            break
        seen.add(parent.id)
        context, index = parent, found
    return context, index


def call_site(session: Session, context: Context, index: int, calls: Sequence[CallRecord]) -> CallSite:
    """The context and index the call behind ``index`` was made at, with its record."""
    log = CallLog.of(calls)
    notes: list[str] = []
    origin, origin_index = origin_of(session, context, index, calls=log)
    if origin.id != context.id:
        notes.append(f"message {index} was copied by a fork: the call was made from context {origin.id}")
    if index < len(context.messages) and context.messages[index].role != "assistant":
        notes.append(f"message {index} is a {context.messages[index].role} message, not a model output")
    return CallSite(origin, origin_index, log.produced(origin, origin_index), notes)


def _context_of(session: Session, context: Context | str | None) -> Context:
    if context is None:
        return session.active_context
    if isinstance(context, str):
        return session.context(context)
    return context


def _log_of(session: Session, calls: Sequence[CallRecord] | None) -> CallLog:
    return CallLog.of(calls if calls is not None else session.calls())


def materialize(
    session: Session,
    context: Context | str | None = None,
    at: int | str = -1,
    *,
    calls: Sequence[CallRecord] | None = None,
) -> Materialized:
    """The request that produced the message at display index (or message id) ``at``.

    ``at`` may equal the number of messages: the request the next call would send. The
    session's request source (:mod:`replay._sources`: our runtime, peteos, OpenPoke, ...)
    builds it as that framework did. ``calls`` is the session's call log when the caller
    has already read it (reading it once per message would make a pass over a session
    quadratic in file reads); a :class:`CallLog` also keeps the lookups from message to
    message.
    """
    context = _context_of(session, context)
    log = _log_of(session, calls)
    index = resolve_index(context, at, calls=log)
    for source in source_for(session):
        found = source.materialize(session, context, index, log)
        if found is not None:
            return found
    raise MaterializeError(f"no request source can rebuild message {index} of session {session.uuid}")


def sent_prefix(
    session: Session,
    context: Context | str | None = None,
    at: int | str = -1,
    *,
    calls: Sequence[CallRecord] | None = None,
) -> SentPrefix | None:
    """What the call behind ``at`` was sent, described (see :class:`SentPrefix`); None
    where the session's source builds its requests otherwise (peteos, OpenPoke's own
    entries): :func:`materialize` then gives the messages and the request."""
    context = _context_of(session, context)
    log = _log_of(session, calls)
    index = resolve_index(context, at, calls=log)
    for source in source_for(session):
        # Only the first source that claims the session is asked: materialize would be
        # answered by it. One that cannot describe the call leaves it to materialize.
        describe = getattr(source, "sent_prefix", None)  # a DescribingSource
        return cast(DescribingSource, source).sent_prefix(session, context, index, log) if describe else None
    return None


@dataclass(frozen=True)
class PromptAtCall:
    """The system prompt one call of a context was sent."""

    message_index: int
    """Display index of the message the call produced."""
    text: str
    recorded: bool
    """True where rebuilt from the call's recorded hook outputs; False: the text on disk."""


def system_prompt_history(session: Session, context: Context) -> list[PromptAtCall]:
    """The system prompt as it read at each call made from ``context`` (in order).

    Without a call log only the text on disk is known: the last materialization's.
    """
    calls = CallLog(session.calls())
    mine = [c for c in calls if c.context_id == context.id and c.message_id and not c.replay]
    history = []
    for call in sorted(mine, key=lambda c: c.message_index):
        at = str(call.message_id)
        sent = sent_prefix(session, context, at, calls=calls)
        if sent is not None:
            index, specials = sent.count, sent.special_messages()
        else:
            found = materialize(session, context, at, calls=calls)
            index, specials = found.index, found.messages
        system = next((m for m in specials if m.message_type == "SystemPromptMessage"), None)
        if system is not None:
            history.append(PromptAtCall(index, system.text(), True))
    if not history and context.system_prompt is not None:
        history.append(PromptAtCall(context.message_count, context.system_prompt.text(), False))
    return history


# -- a session's model calls ---------------------------------------------------------------


def _reconstructed_calls(session: Session, log: CallLog) -> list[tuple[Context, int]]:
    """(context, index) of every assistant message, in the context it was produced in."""
    found: dict[tuple[str, int], tuple[Context, int]] = {}
    for context in session.contexts.values():
        if is_marked(context):
            continue
        for index, message in enumerate(context.messages):
            if message.role == "assistant":
                origin, at = origin_of(session, context, index, calls=log)
                found.setdefault((origin.id, at), (origin, at))
    return sorted(found.values(), key=lambda item: item[0].messages[item[1]].creation_timestamp or "")


def llm_calls(session: Session, log: CallLog) -> list[tuple[Context, int, CallRecord | None]]:
    """(context, message index, call record) per call, oldest first: the recorded ones
    (``log``, replays left out), else reconstructed from the contexts (record None)."""
    if not log:
        return [(context, index, None) for context, index in _reconstructed_calls(session, log)]
    return [
        (session.contexts[c.context_id], c.message_index, c) for c in log if c.context_id in session.contexts
    ]


def session_calls(session: Session, calls: Sequence[CallRecord] | None = None) -> CallLog:
    """The session's call log without replays (read from its folder unless given)."""
    return CallLog([c for c in (calls if calls is not None else session.calls()) if not c.replay])
