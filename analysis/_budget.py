"""Token budgets over time: the context size at every LLM call, and what it was made of.

Calls come from the call log where the runtime recorded one (each rematerialized, so
the system prompt and tools are counted as they were at that call), and are otherwise
reconstructed from the contexts: every assistant message was produced by a call that
saw the messages before it, in the context it was first produced in. Counts use the
messages' cached counts, so a second pass over a session does no tokenization.

A call's context is a prefix of the context it was made from, so each context's sizes
are summed once, from the front, and every call reads its prefix's size off the running
totals (corrected for the specials that read differently at the call): a pass is linear
in the session, not in the sum of its calls' contexts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from replay import CallLog, llm_calls, materialize, sent_prefix, session_calls
from soap_core import (
    CallRecord,
    Context,
    MediaPart,
    Message,
    Session,
    SoapError,
    Store,
    ThinkingPart,
    ToolPart,
    ToolResultPart,
    ToolUsePart,
    app_branch,
)
from soap_core.runtime import invocation_chains

CATEGORIES = (
    "system_prompt",
    "tool_definitions",
    "user",
    "assistant",
    "thinking",
    "tool_calls",
    "tool_results",
    "media",
)


def message_category(message: Message) -> str:
    if message.message_type == "SystemPromptMessage" or message.role == "system":
        return "system_prompt"
    if message.message_type == "ToolDefinitionsMessage":
        return "tool_definitions"
    if message.role == "tool_result":
        return "tool_results"
    return "assistant" if message.role == "assistant" else "user"


_PART_CATEGORIES: tuple[tuple[type, str], ...] = (
    (ThinkingPart, "thinking"),
    (ToolUsePart, "tool_calls"),
    (ToolResultPart, "tool_results"),
    (MediaPart, "media"),
    (ToolPart, "tool_definitions"),
)


def _part_category(message: Message, part: Any) -> str:
    found = (name for kind, name in _PART_CATEGORIES if isinstance(part, kind))
    return next(found, None) or message_category(message)


def makeup(message: Message) -> dict[str, int]:
    """The message's true token count split by kind of content; the parts add up to it."""
    total = message.count_tokens()
    split: dict[str, int] = {}
    for part, tokens in zip(message.content, message.part_token_counts(), strict=True):
        key = _part_category(message, part)
        split[key] = split.get(key, 0) + tokens
    rest = total - sum(split.values())  # the role prefix and list punctuation
    home = message_category(message) if rest >= 0 or not split else max(split, key=lambda k: split[k])
    split[home] = split.get(home, 0) + rest
    return split


def context_makeup(messages: list[Message]) -> dict[str, int]:
    totals = dict.fromkeys(CATEGORIES, 0)
    for message in messages:
        for key, tokens in makeup(message).items():
            totals[key] += tokens
    return totals


@dataclass
class CompactionEvent:
    """A compaction fork between two calls: the context before and what was kept."""

    parent_id: str
    child_id: str
    tokens_before: int
    tokens_after: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CallBudget:
    """The context one LLM call was sent."""

    number: int
    context_id: str
    message_index: int
    message_id: str | None
    timestamp: str | None
    recorded: bool
    tokens: int
    makeup: dict[str, int]
    context_limit: int | None = None
    usage: dict[str, Any] | None = None
    compactions_before: list[CompactionEvent] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["compactions_before"] = [e.as_dict() for e in self.compactions_before]
        return data


class _RunningTotals:
    """Tokens and make-up of every prefix of each context, summed once from the front,
    so that the size of any call's context is a look-up (and, for the specials that
    read differently at the call, a correction), not a sum over its messages."""

    def __init__(self) -> None:
        self._columns: dict[str, tuple[list[int], list[list[int]]]] = {}
        self._corrections: dict[tuple[int, int], tuple[Message, int, dict[str, int]]] = {}

    def _upto(self, context: Context, count: int) -> tuple[list[int], list[list[int]]]:
        tokens, split = self._columns.setdefault(context.id, ([0], [[0] for _ in CATEGORIES]))
        for message in context.messages[len(tokens) - 1 : count]:
            tokens.append(tokens[-1] + message.count_tokens())
            shares = makeup(message)
            for column, key in zip(split, CATEGORIES, strict=True):
                column.append(column[-1] + shares.get(key, 0))
        return tokens, split

    def size(
        self, context: Context, stop: int, substituted: Mapping[int, Message] | None = None
    ) -> tuple[int, dict[str, int]]:
        """Tokens and make-up of ``context.messages[:stop]``, with the messages at the
        indices of ``substituted`` counted as those given instead."""
        count = slice(stop).indices(len(context.messages))[1]
        tokens, split = self._upto(context, count)
        total = tokens[count]
        totals = {key: column[count] for key, column in zip(CATEGORIES, split, strict=True)}
        for index, message in (substituted or {}).items():
            tokens_more, shares_more = self._correction(context.messages[index], message)
            total += tokens_more
            for key, share in shares_more.items():
                totals[key] += share
        return total, totals

    def _correction(self, stored: Message, sent: Message) -> tuple[int, dict[str, int]]:
        """What counting ``sent`` instead of ``stored`` adds (calls with the same hook
        outputs share the rebuilt message, so this is computed once for them)."""
        key = (id(stored), id(sent))
        if key not in self._corrections:
            shares = makeup(sent)
            for category, share in makeup(stored).items():
                shares[category] = shares.get(category, 0) - share
            self._corrections[key] = (sent, sent.count_tokens() - stored.count_tokens(), shares)
        _, tokens, shares = self._corrections[key]
        return tokens, shares


def _copied_tokens(parent: Context, child: Context) -> int:
    """Tokens of what a fork took over from its parent (not what it gained later)."""
    parent_ids = {m.id for m in parent.messages}
    return sum(m.count_tokens() for m in child.messages if m.id in parent_ids)


class _Compactions:
    """Compaction events between calls, each fork's sizes computed once."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._sizes: dict[tuple[str, str], tuple[int, int]] = {}

    def _sizes_of(self, parent: Context, child: Context) -> tuple[int, int]:
        key = (parent.id, child.id)
        if key not in self._sizes:
            self._sizes[key] = (parent.total_token_count(), _copied_tokens(parent, child))
        return self._sizes[key]

    def between(self, previous: str | None, current: str) -> list[CompactionEvent]:
        """The forks from the context of the previous call down to ``current``'s."""
        events: list[CompactionEvent] = []
        context = self.session.contexts.get(current)
        seen = {current}  # origin links read from files may loop
        while (
            context is not None
            and previous is not None
            and context.id != previous
            and context.origin_context_id
            and context.origin_context_id not in seen
        ):
            parent = self.session.contexts.get(context.origin_context_id)
            if parent is None:
                break
            seen.add(parent.id)
            if app_branch(context) is None:  # a branch the app made (LangGraph's) compacts nothing
                events.append(CompactionEvent(parent.id, context.id, *self._sizes_of(parent, context)))
            context = parent
        return list(reversed(events)) if context is not None and context.id == previous else []


def call_budgets(session: Session, *, calls: Sequence[CallRecord] | None = None) -> list[CallBudget]:
    """The context size of every LLM call of ``session``, oldest first.

    ``calls`` is the session's call log when the caller has read it. A pass is linear
    in the session: each context's prefix sizes are summed once, and a recorded call's
    context is read from what it was sent (:func:`replay._materialize.sent_prefix`)
    without rebuilding its request, where its request source can say.
    """
    log = session_calls(session, calls)
    totals = _RunningTotals()
    compactions = _Compactions(session)
    budgets: list[CallBudget] = []
    previous: str | None = None
    for context, index, call in llm_calls(session, log):
        if call is not None:
            tokens, split = _recorded_size(session, context, call, log, totals)
            message_id, stamp = call.message_id, call.started_at or None
            limit, usage = call.context_limit, call.usage
        else:
            tokens, split = totals.size(context, index)
            message_id, stamp = context.messages[index].id, context.messages[index].creation_timestamp
            limit, usage = None, None
        budgets.append(
            CallBudget(
                number=len(budgets),
                context_id=context.id,
                message_index=index,
                message_id=message_id,
                timestamp=stamp,
                recorded=call is not None,
                tokens=tokens,
                makeup=split,
                context_limit=limit,
                usage=usage,
                compactions_before=compactions.between(previous, context.id),
            )
        )
        previous = context.id
    return budgets


def _recorded_size(
    session: Session, context: Context, call: CallRecord, log: CallLog, totals: _RunningTotals
) -> tuple[int, dict[str, int]]:
    """Tokens and make-up of what a recorded call was sent."""
    if call.message_id is None:  # a failed call: what it was sent is still on disk
        return totals.size(context, call.message_index)
    try:
        sent = sent_prefix(session, context, call.message_id, calls=log)
        if sent is not None:
            return totals.size(sent.context, sent.count, sent.substituted)
        messages = materialize(session, context, call.message_id, calls=log).messages
    except SoapError:
        return totals.size(context, call.message_index)
    return sum(m.count_tokens() for m in messages), context_makeup(messages)


@dataclass
class MessageBudget:
    """One message's share of a context."""

    index: int
    role: str
    tokens: int
    cumulative: int
    cached: int | None
    stale: bool
    makeup: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def message_budgets(context: Context) -> list[MessageBudget]:
    rows: list[MessageBudget] = []
    running = 0
    for index, message in enumerate(context.messages):
        running += message.count_tokens()
        rows.append(
            MessageBudget(
                index,
                message.role,
                message.count_tokens(),
                running,
                message.token_count,
                message.token_count_is_stale,
                makeup(message),
            )
        )
    return rows


@dataclass
class SessionSpend:
    """Tokens one session of an invocation chain spent."""

    role: str
    session: str
    depth: int
    calls: int
    prompt_tokens: int
    """Context sizes summed over its calls (cl100k_base)."""
    completion_tokens: int | None
    """As the endpoint reported in usage (None where nothing was recorded)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def chain_budget(
    store: Store, session_ref: str, *, known: Mapping[str, Sequence[CallBudget]] | None = None
) -> list[SessionSpend]:
    """Tokens spent per session along every invocation chain through a session.
    ``known`` holds the :func:`call_budgets` a caller has already computed, by session
    uuid (the Token budget page has its session's): those sessions are not read again."""
    depth_of: dict[str, int] = {}
    role_of: dict[str, str] = {}
    for chain in invocation_chains(store, session_ref):
        for frame in chain.stacks():
            depth_of.setdefault(frame.session, frame.depth)
            role_of[frame.session] = frame.role
    if not depth_of:
        summary = store.find(session_ref)
        depth_of, role_of = {summary.uuid: 0}, {summary.uuid: summary.role}
    rows = []
    for uuid, depth in sorted(depth_of.items(), key=lambda item: item[1]):
        budgets = (known or {}).get(uuid)
        if budgets is None:
            budgets = call_budgets(store.load_session(f"{role_of[uuid]}/{uuid}", require_active=False))
        completions = [b.usage.get("completion_tokens") for b in budgets if b.usage]
        rows.append(
            SessionSpend(
                role_of[uuid],
                uuid,
                depth,
                len(budgets),
                sum(b.tokens for b in budgets),
                sum(c for c in completions if isinstance(c, int)) if completions else None,
            )
        )
    return rows
