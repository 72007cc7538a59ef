"""Answer drift: would the model have answered the same under another compaction strategy?

At chosen calls, the history each strategy would have kept is sent to the model again
(through replay, so every run is saved as a labelled fork) and its answer compared
with the answer the model really gave. Summaries are written by a real agentic object.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from analysis._lab import (
    History,
    Simulation,
    Strategy,
    StripThinking,
    SummarizeOlder,
    history_of,
    simulate_items,
)
from replay import Endpoint, Output, diff_outputs, materialize, replay
from soap_core import Message, Session, SoapError, Store, TextPart, ThinkingPart
from soap_core.runtime import AgenticObject, LLMEndpoint, ModelSettings, Runtime
from soap_core.runtime._compaction import SUMMARY_PREFIX, render_for_summary

Summarizer = Callable[[list[Message]], str]


class ConversationSummarizer(AgenticObject):
    """Writes the summary that replaces older messages."""

    system_prompt = "You summarize conversations in two or three sentences, keeping facts and numbers."
    settings = ModelSettings(max_tokens=96)


@functools.cache
def _scratch_store() -> str:
    """One folder per process for the summarizer's own sessions (kept out of the user's store)."""
    return tempfile.mkdtemp(prefix="soapwb-summaries-")


def model_summarizer(endpoint: LLMEndpoint) -> Summarizer:
    """A summarizer object on the given endpoint, keeping its own sessions out of the store."""
    scratch = _scratch_store()
    writer = ConversationSummarizer(runtime=Runtime(scratch, endpoint))

    def summarize(messages: list[Message]) -> str:
        return str(writer.invoke("Summarize this conversation:\n\n" + render_for_summary(messages)))

    return summarize


@dataclass
class DriftRun:
    strategy: str
    call: int
    distance: float | None
    identical: bool | None
    fork_id: str
    error: str | None = None


@dataclass
class DriftRow:
    """One line of the comparison table."""

    strategy: str
    peak_tokens: int
    tokens_sent: int
    compactions: int
    tokens_saved: int
    drift: float | None
    """Mean distance of its answers from the original ones (None: not measured)."""
    runs: list[DriftRun] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def view_messages(
    history: History, simulation: Simulation, strategy: Strategy, call: int, summarizer: Summarizer | None
) -> list[Message]:
    """What ``strategy`` would have sent at ``call``, as messages."""
    cut = history.calls[call]
    dropped = set(simulation.dropped_at(call))
    kept = [history.messages[i.id] for i in history.items[:cut] if i.id not in dropped]
    if isinstance(strategy, StripThinking):
        stripped = []
        for message in kept:
            copy = message.copy()
            copy.content = [p for p in message.content if not isinstance(p, ThinkingPart)]
            stripped.append(copy)
        return stripped
    if isinstance(strategy, SummarizeOlder) and dropped:
        gone = [history.messages[i] for i in (i.id for i in history.items[:cut]) if i in dropped]
        text = summarizer(gone) if summarizer else "(no summarizer)"
        note = Message.create("user", [TextPart(SUMMARY_PREFIX + text)])
        specials = [m for m in kept if m.is_special]
        return [*specials, note, *(m for m in kept if not m.is_special)]
    return kept


def compare(
    store: Store,
    session: Session,
    strategies: Sequence[Strategy],
    drift_at: Sequence[int] = (),
    endpoint: Endpoint | None = None,
    summarizer: Summarizer | None = None,
) -> list[DriftRow]:
    """The comparison table; with ``drift_at`` and an endpoint, answers are re-run."""
    history = history_of(session)
    simulations = simulate_items(history.items, history.calls, strategies)
    rows = []
    for strategy, simulation in zip(strategies, simulations, strict=True):
        runs = [
            _drift_run(store, session, history, simulation, strategy, call, endpoint, summarizer)
            for call in drift_at
            if endpoint is not None
        ]
        measured = [r.distance for r in runs if r.distance is not None]
        rows.append(
            DriftRow(**simulation.summary(), drift=statistics.mean(measured) if measured else None, runs=runs)
        )
    return rows


def _drift_run(
    store: Store,
    session: Session,
    history: History,
    simulation: Simulation,
    strategy: Strategy,
    call: int,
    endpoint: Endpoint | None,
    summarizer: Summarizer | None,
) -> DriftRun:
    assert endpoint is not None
    if not 0 <= call < len(history.calls):
        raise ValueError(f"call {call} does not exist: the session has {len(history.calls)} calls")
    produced = history.items[history.calls[call]].id
    context = next(c for c in session.contexts.values() if any(m.id == produced for m in c.messages))
    found = materialize(session, context, produced)
    try:
        messages = view_messages(history, simulation, strategy, call, summarizer)
    except SoapError as exc:  # the summary could not be written: this run fails, not the table
        return DriftRun(strategy.name, call, None, None, "", f"summary not written: {exc}")
    variant = dataclasses.replace(found, messages=messages, notes=[*found.notes, f"strategy {strategy.name}"])
    [run] = replay(store, session, variant, endpoint, label=f"drift {strategy.name} at call {call}")
    if not run.ok:
        return DriftRun(strategy.name, call, None, None, run.fork_id, run.error)
    original = session.contexts[found.context_id].messages[found.index]
    diff = diff_outputs(Output.of(original), Output.of(run.output))
    return DriftRun(strategy.name, call, diff.distance, diff.identical, run.fork_id)
