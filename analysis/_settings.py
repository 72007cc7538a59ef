"""The compaction settings a session ran with, as its call log recorded them.

The soapwb runtime writes, with every LLM call, the spec of the compaction strategy in
force (``rolling-tokens:1800:0.5``; records of ``soapwb.call/1`` held its repr, read the
same) and the model's context window as the agentic class declared it. A page that asks
for a threshold starts from these, so that what it draws is what the session ran with;
where the strategy has no token threshold (a window of messages, or the default rule,
whose reserve is not recorded), the context window is the nearest recorded number, and
the note says which it is. A peteos session has no call log, so nothing is known.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from analysis._lab import History
from replay import session_calls
from soap_core import CallRecord, Session
from soap_core._compaction_specs import parse_spec, recorded_spec, spec_text

_SHOWN = 120
"""How much of a strategy's repr a note quotes (a summarizer's repr can be long)."""


@dataclass(frozen=True)
class ThresholdStart:
    """Where a threshold field starts, and why."""

    tokens: int | None
    source: str
    """``compaction`` (the strategy's own threshold), ``context window`` or ``none``."""
    note: str
    """One plain sentence saying where the number comes from."""


def _quoted(text: str) -> str:
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def threshold_start(session: Session, *, calls: Sequence[CallRecord] | None = None) -> ThresholdStart:
    """The compaction threshold ``session`` ran with (its latest call's setting), else the
    model's context window, else nothing; ``calls`` is the call log when already read."""
    log = list(session_calls(session, calls))
    settings = list(dict.fromkeys(c.compaction for c in log if c.compaction))
    latest = settings[-1] if settings else None
    several = (
        f" Its calls ran with {len(settings)} settings; this is the latest." if len(settings) > 1 else ""
    )
    spec = recorded_spec(latest) if latest else None
    if latest and spec is not None and spec.threshold is not None:
        tokens = int(spec.threshold)
        return ThresholdStart(
            tokens,
            "compaction",
            f"Starts at {tokens:,} tokens, the threshold the session ran with: {_quoted(latest)} "
            f"(from its call log).{several}",
        )
    limit = next((c.context_limit for c in reversed(log) if c.context_limit), None)
    if limit is None:
        return ThresholdStart(
            None,
            "none",
            "No compaction setting is recorded for this session (only the soapwb runtime's call log "
            "records one; peteos writes none): type a threshold to draw it.",
        )
    if latest is None:
        why = "the call log records no compaction setting"
    elif spec is not None and spec.kind == "context-budget":
        why = (
            "the session ran with the default rule (compact over the context window less a reserve "
            "and the answer's max_tokens), and the reserve is not recorded"
        )
    else:
        why = f"the session compacted with {_quoted(latest)}, which has no token threshold"
    return ThresholdStart(
        limit,
        "context window",
        f"Starts at the model's context window, {limit:,} tokens (from the call log): {why}.{several}",
    )


@dataclass(frozen=True)
class RanWith:
    """The compaction a session ran with, as the lab's spec and as recorded."""

    spec: str
    recorded: str

    @property
    def note(self) -> str:
        """One line naming it, as the lab's spec (and as recorded, where that differs: an
        old record's repr, a spec written without its defaults)."""
        if self.recorded != self.spec:
            return f"The session ran with {self.recorded} (its call log): {self.spec} here."
        return f"The session ran with {self.spec} (its call log)."


def ran_with(session: Session, *, calls: Sequence[CallRecord] | None = None) -> RanWith | None:
    """The lab's spec (``rolling-tokens:1800:0.5``) for the latest compaction setting of
    the session's call log, where the lab has one (the default rule has none: its reserve
    is not recorded)."""
    settings = [c.compaction for c in session_calls(session, calls) if c.compaction]
    if not settings:
        return None
    spec = recorded_spec(settings[-1])
    if spec is None or spec.kind == "context-budget":  # the lab has no such strategy
        return None
    return RanWith(str(spec), settings[-1])


# -- the numbers a strategy starts from, for a page and the CLI alike ------------------


def kind_of(spec: str) -> str:
    return spec.split(":")[0]


def numbers_of(spec: str) -> list[float | int]:
    """The numbers a spec sets, defaults filled in (``rolling-tokens:600`` → 600, 0.5)."""
    return list(parse_spec(spec).numbers)


def strategy_spec(kind: str, numbers: Sequence[float | int]) -> str:
    """The library's spec for ``kind`` with its numbers (``rolling-tokens:600:0.5``)."""
    return spec_text(kind, list(numbers))


def suggested_numbers(history: History, ran: RanWith | None = None) -> dict[str, list[float | int]]:
    """Numbers that make each strategy act on this session: the library's defaults
    (60,000 tokens, 40 messages) never fire on a small session, which shows nothing.
    The strategy the session ran with (``ran``, from its call log) keeps its own numbers."""
    peak = max(call_sizes(history), default=0)
    threshold = max(100, round(peak * 0.6, -2)) if peak else 60_000
    ordinary = sum(1 for item in history.items if not item.special)
    messages = max(2, ordinary // 2)
    numbers: dict[str, list[float | int]] = {
        "rolling-tokens": [int(threshold), 0.5],
        "rolling-messages": [messages],
        "strip-thinking": [],
        "summarize": [int(threshold), 4],
        "least-used": [int(threshold), 0.5],
    }
    if ran is not None:
        numbers[kind_of(ran.spec)] = numbers_of(ran.spec)
    return numbers


def call_sizes(history: History) -> list[int]:
    """The uncompacted size of every call (what the baseline sends)."""
    prefix = [0, *accumulate(item.tokens for item in history.items)]
    return [prefix[cut] for cut in history.calls]


def session_spec(spec: str, history: History, ran: RanWith | None = None) -> str:
    """``spec`` as the user gave it, or, given as a bare kind (``summarize``), with the
    numbers that make it act on this session (:func:`suggested_numbers`: the session's
    own where it ran with that kind). The library's bare defaults (60,000 tokens) do
    nothing on most sessions."""
    if ":" in spec or spec in ("none", "strip-thinking"):
        return spec
    numbers = suggested_numbers(history, ran)
    return strategy_spec(spec, numbers[spec]) if spec in numbers else spec
