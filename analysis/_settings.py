"""The compaction settings a session ran with, as its call log recorded them.

The soapwb runtime writes, with every LLM call, the repr of the compaction strategy in
force (``RollingTokenWindow(threshold=1800, keep=0.5)``) and the model's context window
as the agentic class declared it. A page that asks for a threshold starts from these,
so that what it draws is what the session ran with; where the strategy has no token
threshold (a window of messages, or the default rule, whose reserve is not recorded),
the context window is the nearest recorded number, and the note says which it is.
A peteos session has no call log, so nothing is known.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from analysis._budget import session_calls
from soap_core import CallRecord, Session

_THRESHOLD = re.compile(r"\bthreshold=(\d+)")
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
    found = _THRESHOLD.findall(latest or "")
    if latest and found:
        tokens = int(found[-1])  # a summarizer's repr comes first in Summarize(...)
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
    elif latest.startswith("ContextBudget"):
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


_AS_SPECS = (
    (re.compile(r"RollingTokenWindow\(threshold=(\d+), keep=([0-9.]+)\)"), "rolling-tokens:{0}:{1}"),
    (re.compile(r"RollingSequenceWindow\(n=(\d+)\)"), "rolling-messages:{0}"),
    (re.compile(r"Summarize\(.*threshold=(\d+), keep_last=(\d+)\)"), "summarize:{0}:{1}"),
)
"""The runtime's compaction strategies (their reprs) and the lab's specs for them."""


@dataclass(frozen=True)
class RanWith:
    """The compaction a session ran with, as the lab's spec and as recorded."""

    spec: str
    recorded: str


def ran_with(session: Session, *, calls: Sequence[CallRecord] | None = None) -> RanWith | None:
    """The lab's spec (``rolling-tokens:1800:0.5``) for the latest compaction setting of
    the session's call log, where the lab has one (the default rule has none: its reserve
    is not recorded)."""
    settings = [c.compaction for c in session_calls(session, calls) if c.compaction]
    if not settings:
        return None
    for pattern, spec in _AS_SPECS:
        found = pattern.fullmatch(settings[-1])
        if found:
            numbers = [f"{float(n):g}" if "." in n else n for n in found.groups()]
            return RanWith(spec.format(*numbers), settings[-1])
    return None
