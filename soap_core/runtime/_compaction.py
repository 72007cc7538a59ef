"""Compaction hooks: run before every model call, each may replace the active context.

A strategy returns a fork of the context (saved beside its parent, the parent listing
it in ``children``, as sOAP does) or None to leave the context as it is. The system
prompt and tool definitions are always kept, and a tool result never loses its call:
a hook's ``rule`` is the spec and keep rule the lab and ``Context`` share.
"""

from __future__ import annotations

from dataclasses import dataclass

from soap_core._compaction_specs import DEFAULTS, CompactionSpec
from soap_core._context import Context
from soap_core._facts import SUMMARY_PREFIX as SUMMARY_PREFIX
from soap_core._message import Message
from soap_core._parts import TextPart, ToolResultPart, ToolUsePart
from soap_core.runtime._object import Agent
from soap_core.runtime._object import Compaction as Compaction  # the strategies' protocol, named here too


class _Ruled:
    """A hook whose spec and keep rule are its :class:`CompactionSpec`'s (``rule``)."""

    @property
    def rule(self) -> CompactionSpec:
        raise NotImplementedError

    @property
    def spec(self) -> str:
        return str(self.rule)

    def __call__(self, owner: Agent, context: Context) -> Context | None:
        return context.compacted(self.rule)


@dataclass(frozen=True)
class RollingTokenWindow(_Ruled):
    """Over ``threshold`` tokens, keep the newest ``keep`` share of it (the seed's Log
    Analyzer: over 60,000, keep the most recent 30,000)."""

    threshold: int = int(DEFAULTS["rolling-tokens"][0])
    keep: float = float(DEFAULTS["rolling-tokens"][1])

    @property
    def rule(self) -> CompactionSpec:
        return CompactionSpec("rolling-tokens", (self.threshold, float(self.keep)))


@dataclass(frozen=True)
class RollingSequenceWindow(_Ruled):
    """Keep the last ``n`` messages besides the system prompt and tool definitions."""

    n: int = int(DEFAULTS["rolling-messages"][0])

    @property
    def rule(self) -> CompactionSpec:
        return CompactionSpec("rolling-messages", (self.n,))


@dataclass(frozen=True)
class ContextBudget:
    """The default: keep the context plus the answer inside the model's context limit
    less a reserve, by a rolling token window on the budget."""

    spec = "context-budget"

    def __call__(self, owner: Agent, context: Context) -> Context | None:
        settings = owner.settings
        budget = settings.context_limit - settings.context_reserve - settings.max_tokens
        return context.rolling_token_window(max(budget, 0))


def render_for_summary(messages: list[Message]) -> str:
    """A plain transcript of messages, for a summarizer to read."""
    lines = []
    for message in messages:
        for part in message.content:
            if isinstance(part, TextPart):
                lines.append(f"{message.role}: {part.text}")
            elif isinstance(part, ToolUsePart):
                lines.append(f"{message.role} called {part.name}({part.arguments})")
            elif isinstance(part, ToolResultPart):
                lines.append(f"tool result: {part.content}")
    return "\n".join(lines)


@dataclass(frozen=True)
class Summarize(_Ruled):
    """Over ``threshold`` tokens, another agentic object summarises all but the last
    ``keep_last`` messages; the summary replaces them as one user message."""

    summarizer: Agent
    threshold: int = int(DEFAULTS["summarize"][0])
    keep_last: int = int(DEFAULTS["summarize"][1])

    @property
    def rule(self) -> CompactionSpec:
        return CompactionSpec("summarize", (self.threshold, self.keep_last))

    def __call__(self, owner: Agent, context: Context) -> Context | None:
        kept = context.kept_indices(self.rule)
        if kept is None:
            return None
        kept_ids = {context.messages[i].id for i in kept}
        older = [m for m in context.messages if not m.is_special and m.id not in kept_ids]
        summary = self.summarizer.invoke(
            "Summarize this conversation so far in a few sentences, keeping facts, numbers and "
            f"open questions:\n\n{render_for_summary(older)}"
        )

        def replace_older(messages: list[Message]) -> list[Message]:
            specials = [m for m in messages if m.is_special]
            recent = [m for m in messages if not m.is_special and m.id in kept_ids]
            note = Message.create("user", [TextPart(SUMMARY_PREFIX + str(summary))])
            return [*specials, note, *recent]

        return context.transform_fork(replace_older)


def spec_of(strategy: Compaction) -> str:
    """What a call record says of the strategy in force: its spec, or for a hook of the
    user's own (which has no ``spec``) its repr."""
    spec = getattr(strategy, "spec", None)
    return spec if isinstance(spec, str) else repr(strategy)
