"""The compaction lab: replay a session's growth call by call under other strategies.

The history is the session's conversation as it grew, before any compaction: the
messages of the active context's lineage, root first, each once. At every call the
model saw a prefix of it. A strategy turns the history into what the model would see
instead; the simulation feeds it the history call by call, without calling the model
and without touching the store, and records the context size, the compactions and
exactly which messages were gone at each call.

Strategies keep their view incrementally (dropping from the old end by the runtime's
rule, which reads only what it drops), so a simulation is linear in the number of
messages. A new strategy can be any function from the view (a list of :class:`Item`) to
the view the model should see.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from replay import llm_calls, session_calls
from soap_core import CallRecord, Context, Message, Session, ThinkingPart
from soap_core._compaction_specs import DEFAULTS, GRAMMAR, CompactionSpec, parse_spec

SUMMARY_ID = "summary"


@dataclass(frozen=True, slots=True)
class Item:
    """One message as the simulation sees it."""

    id: str
    tokens: int
    special: bool = False
    group: int = 0
    """Messages of one group go together: a tool call and its results."""
    thinking: int = 0
    """Tokens of its thinking parts (what strip-thinking saves)."""


@dataclass(frozen=True)
class History:
    """A session's uncompacted history and where each call cut it."""

    items: list[Item]
    calls: list[int]
    """Call k saw ``items[:calls[k]]`` (the message it produced is ``items[calls[k]]``)."""
    messages: dict[str, Message] = field(default_factory=dict)


def _lineage(session: Session) -> list[Context]:
    chain = [session.active_context]
    seen = {chain[0].id}  # by id: comparing contexts compares their whole dicts
    while chain[-1].origin_context_id in session.contexts:
        parent = session.contexts[chain[-1].origin_context_id or ""]
        if parent.id in seen:
            break
        seen.add(parent.id)
        chain.append(parent)
    return list(reversed(chain))


def history_of(session: Session, *, calls: Sequence[CallRecord] | None = None) -> History:
    """The uncompacted history of ``session`` and its calls' cut points.

    The calls are those :func:`analysis.call_budgets` counts (``calls``: the session's
    call log when the caller has read it); only the message each produced matters here,
    so nothing is rematerialized.
    """
    messages: dict[str, Message] = {}
    for context in _lineage(session):
        for message in context.messages:
            messages.setdefault(message.id, message)
    items = list(items_of(list(messages.values())))
    position = {item.id: i for i, item in enumerate(items)}
    log = session_calls(session, calls)
    produced = (
        call.message_id if call is not None else context.messages[index].id
        for context, index, call in llm_calls(session, log)
    )
    cuts = sorted({position[message_id] for message_id in produced if message_id in position})
    return History(items, cuts, messages)


def items_of(messages: Sequence[Message]) -> Iterable[Item]:
    """Items with tool groups: a result message joins the group of the call it answers."""
    group_of_call: dict[str, int] = {}
    group = 0
    for message in messages:
        results = [p.call_id for p in message.tool_results()]
        if results and results[0] in group_of_call:
            item_group = group_of_call[results[0]]
        else:
            group += 1
            item_group = group
        for use in message.tool_uses():
            group_of_call[use.call_id] = item_group
        thinking = sum(
            n
            for p, n in zip(message.content, message.part_token_counts(), strict=True)
            if isinstance(p, ThinkingPart)
        )
        yield Item(message.id, message.count_tokens(), message.is_special, item_group, thinking)


class Strategy:
    """Keeps a view of the history: ``add`` new items, then ``compact`` before a call.

    The view is the specials, then ``items[first:]``, with a running total; ``rule`` (the
    runtime's and ``Context``'s, :meth:`~soap_core._compaction_specs.CompactionSpec.kept`)
    drops whole groups from its old end. The baseline: a rule that drops nothing."""

    rule = CompactionSpec("none")

    @property
    def name(self) -> str:
        return str(self.rule)

    def start(self) -> None:
        self.specials: list[Item] = []
        self.items: list[Item] = []
        self.first = 0
        self.total = 0

    def add(self, item: Item) -> None:
        (self.specials if item.special else self.items).append(item)
        self.total += self.cost(item)

    def cost(self, item: Item) -> int:
        return item.tokens

    def compact(self) -> list[str]:
        """Apply the strategy before a call; the ids it dropped now."""
        start = self.rule.kept(self.items, lambda i: i.group, self.cost, self.total, self.first)
        if start is None:
            return []
        gone, self.first = self.items[self.first : start], start
        self.total -= sum(self.cost(i) for i in gone)
        return [i.id for i in gone]

    def tokens(self) -> int:
        return self.total

    def view(self) -> list[Item]:
        return [*self.specials, *self.items[self.first :]]


class NoCompaction(Strategy):
    """The baseline: the model sees everything."""


@dataclass
class RollingTokens(Strategy):
    """Over ``threshold`` tokens, keep the newest ``keep`` share of it (the seed's rule:
    over 60,000, keep the most recent 30,000). Specials always stay and count, and so
    does the newest message with its tool group, even over the budget."""

    threshold: int = int(DEFAULTS["rolling-tokens"][0])
    keep: float = float(DEFAULTS["rolling-tokens"][1])

    def __post_init__(self) -> None:
        self.rule = CompactionSpec("rolling-tokens", (self.threshold, float(self.keep)))


@dataclass
class RollingMessages(Strategy):
    """Keep the last ``n`` messages besides the specials (fewer rather than split a
    tool call from its results)."""

    n: int = int(DEFAULTS["rolling-messages"][0])

    def __post_init__(self) -> None:
        self.rule = CompactionSpec("rolling-messages", (self.n,))


class StripThinking(Strategy):
    """Thinking parts are never sent again; no message is dropped."""

    rule = CompactionSpec("strip-thinking")

    def cost(self, item: Item) -> int:
        return item.tokens - item.thinking


@dataclass
class SummarizeOlder(Strategy):
    """Over ``threshold``, all but the last ``keep_last`` messages become one summary.
    The simulation cannot ask a model, so it stands in a summary of a quarter of what it
    replaces, at most ``summary_tokens``; drift runs ask the model for the real one."""

    threshold: int = int(DEFAULTS["summarize"][0])
    keep_last: int = int(DEFAULTS["summarize"][1])
    summary_tokens: int = 200

    def __post_init__(self) -> None:
        self.rule = CompactionSpec("summarize", (self.threshold, self.keep_last))

    def compact(self) -> list[str]:
        before = self.total
        gone = super().compact()
        if gone:  # the summary takes the last place the dropped messages held
            size = min(self.summary_tokens, max(1, (before - self.total) // 4))
            self.first -= 1
            self.items[self.first] = Item(SUMMARY_ID, size, group=-1)
            self.total += size
        return [g for g in gone if g != SUMMARY_ID]


@dataclass
class LeastUsed(Strategy):
    """Over ``threshold`` tokens, drop the messages the answers used least until at most
    ``int(threshold * keep)`` are left: ``usage`` holds each message's use (the largest
    weight any attributed answer gave it, :func:`analysis.message_usage`). A tool call
    and its results go together, with the larger use of the two; a message no attributed
    answer saw counts 0, as one they did not lean on; ties go oldest first, so without any
    attribution it is a rolling window. Specials stay, and so does the newest group.

    The groups wait in a heap by (use, age): a simulation pays ``log n`` a message."""

    threshold: int = int(DEFAULTS["least-used"][0])
    keep: float = float(DEFAULTS["least-used"][1])
    usage: Mapping[str, float] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.rule = CompactionSpec("least-used", (self.threshold, float(self.keep)))

    def note(self) -> str:
        """What it drops by, in a line."""
        if not self.usage:
            return (
                f"{self.name}: no answer of this session is attributed yet (soapwb attribute), "
                "so it drops the oldest messages first, as a rolling window"
            )
        return (
            f"{self.name}: drops first the messages its attributed answers leaned on least "
            f"({len(self.usage):,} messages weighed); a message no attributed answer saw counts 0"
        )

    def start(self) -> None:
        super().start()
        self.members: dict[int, list[Item]] = {}
        """The groups still in the view, oldest first, each with its messages."""
        self.use: dict[int, float] = {}
        self.age: dict[int, int] = {}
        self.heap: list[tuple[float, int, int]] = []
        self.gone: set[int] = set()
        self.late: list[str] = []
        """Messages of a dropped group that came after it went (a tool result): dropped
        with the next compaction, never sent without their call."""
        self.newest = 0

    def add(self, item: Item) -> None:
        if item.special:
            super().add(item)
            return
        if item.group in self.gone:
            self.late.append(item.id)
            return
        self.total += item.tokens
        self.newest = item.group
        use = self.usage.get(item.id, 0.0)
        if item.group not in self.members:
            self.members[item.group] = [item]
            self.use[item.group] = use
            self.age[item.group] = len(self.age)
            heapq.heappush(self.heap, (use, self.age[item.group], item.group))
            return
        self.members[item.group].append(item)
        if use > self.use[item.group]:  # the old entry goes stale; the group keeps its age
            self.use[item.group] = use
            heapq.heappush(self.heap, (use, self.age[item.group], item.group))

    def compact(self) -> list[str]:
        dropped, self.late = self.late, []
        if self.total <= self.threshold:
            return dropped
        limit = int(self.threshold * self.keep)
        held: list[tuple[float, int, int]] = []
        while self.total > limit and self.heap:
            use, age, group = heapq.heappop(self.heap)
            if group in self.gone or use != self.use[group]:
                continue  # dropped already, or an entry its group's larger use replaced
            if group == self.newest:
                held.append((use, age, group))  # a model not asked the question is worse
                continue
            self.gone.add(group)
            for member in self.members.pop(group):
                self.total -= member.tokens
                dropped.append(member.id)
        for entry in held:
            heapq.heappush(self.heap, entry)
        return dropped

    def view(self) -> list[Item]:
        return [*self.specials, *(i for members in self.members.values() for i in members)]


@dataclass
class FunctionStrategy(Strategy):
    """A plug-in: any function from the view to the view the model should see."""

    function: Callable[[list[Item]], list[Item]] = lambda view: view
    label: str = "custom"

    @property
    def name(self) -> str:
        return self.label

    def compact(self) -> list[str]:
        before = self.view()
        after = self.function(before)
        kept = {i.id for i in after}
        self.specials = [i for i in after if i.special]
        self.items, self.first = [i for i in after if not i.special], 0
        self.total = sum(self.cost(i) for i in after)
        return [i.id for i in before if i.id not in kept]


def parse_strategy(spec: str, usage: Mapping[str, float] | None = None) -> Strategy:
    """``rolling-tokens:T[:KEEP]``, ``rolling-messages:N``, ``strip-thinking``,
    ``summarize[:T[:KEEP_LAST]]``, ``least-used[:T[:KEEP]]`` or ``none`` (the grammar of
    :mod:`soap_core`'s specs); ``usage`` is what least-used drops by (each message's use)."""
    parsed = parse_spec(spec)
    if parsed.kind == "least-used":
        return LeastUsed(int(parsed.numbers[0]), float(parsed.numbers[1]), dict(usage or {}))
    kinds: dict[str, Callable[..., Strategy]] = {
        "rolling-tokens": RollingTokens,
        "rolling-messages": RollingMessages,
        "summarize": SummarizeOlder,
        "strip-thinking": StripThinking,
        "none": NoCompaction,
    }
    if parsed.kind not in kinds:  # context-budget: the runtime's alone, no lab strategy
        raise ValueError(f"unknown strategy {spec!r}: use {GRAMMAR}")
    return kinds[parsed.kind](*parsed.numbers)


@dataclass(frozen=True, slots=True)
class SimPoint:
    """One call under one strategy."""

    call: int
    tokens: int
    original_tokens: int
    compacted: bool
    dropped_now: list[str]


@dataclass(frozen=True)
class Simulation:
    """A strategy's run over a whole history."""

    strategy: str
    points: list[SimPoint]

    @property
    def peak_tokens(self) -> int:
        return max((p.tokens for p in self.points), default=0)

    @property
    def tokens_sent(self) -> int:
        return sum(p.tokens for p in self.points)

    @property
    def compactions(self) -> int:
        return sum(1 for p in self.points if p.compacted)

    @property
    def tokens_saved(self) -> int:
        return sum(p.original_tokens - p.tokens for p in self.points)

    def dropped_at(self, call: int) -> list[str]:
        """Every message id the strategy had dropped by call ``call``."""
        return [i for p in self.points[: call + 1] for i in p.dropped_now]

    def summary(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "peak_tokens": self.peak_tokens,
            "tokens_sent": self.tokens_sent,
            "compactions": self.compactions,
            "tokens_saved": self.tokens_saved,
        }

    def as_dict(self) -> dict[str, Any]:
        return {**self.summary(), "points": [dataclasses.asdict(p) for p in self.points]}


def simulate_items(
    items: Sequence[Item], calls: Sequence[int], strategies: Sequence[Strategy]
) -> list[Simulation]:
    """Feed ``items`` call by call to each strategy: linear in ``len(items)``."""
    results = []
    for strategy in strategies:
        strategy.start()
        points: list[SimPoint] = []
        fed = 0
        original = 0
        for number, cut in enumerate(calls):
            while fed < cut:
                strategy.add(items[fed])
                original += items[fed].tokens
                fed += 1
            dropped = strategy.compact()
            points.append(SimPoint(number, strategy.tokens(), original, bool(dropped), dropped))
        results.append(Simulation(strategy.name, points))
    return results


def simulate(
    session: Session, strategies: Sequence[Strategy | str], *, calls: Sequence[CallRecord] | None = None
) -> list[Simulation]:
    """The session's growth under each strategy (the store is not touched); ``calls``
    is the session's call log when the caller has read it."""
    history = history_of(session, calls=calls)
    parsed = [parse_strategy(s) if isinstance(s, str) else s for s in strategies]
    return simulate_items(history.items, history.calls, parsed)
