"""What the Token budget page shows, computed without Streamlit.

The page lays out a figure and three tables; all four are built here from the
library's budgets (``analysis.call_budgets``, ``message_budgets``, ``chain_budget``),
so a test can build the same figure and compare it with what the page sent to the
browser, number for number.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from analysis import CATEGORIES, CallBudget, CompactionEvent, MessageBudget, SessionSpend, ThresholdStart
from replay import short_id
from soap_core import Context, WindowDisagreement

CONTEXT_LIMIT_TRACE = "context limit"
THRESHOLD_TRACE = "compaction threshold"
COMPACTION_TRACE = "compaction"
TOTAL_TRACE = "total"
CHART_CALLS = 2_000
"""The most calls the per-call chart draws at an even step: a chart is some 1,000 pixels
wide, and 50,000 calls of eight layers made a figure Chromium took seconds to draw."""


def category_label(category: str) -> str:
    """A make-up category in words, as legends and column headings show it: ``tool
    definitions``, not ``tool_definitions``."""
    return category.replace("_", " ")


CALL_COLUMNS = (
    "call",
    "timestamp",
    "context",
    "message index",
    "recorded",
    "tokens",
    *(category_label(c) for c in CATEGORIES),
    "context limit",
    "compactions before",
)
MESSAGE_COLUMNS = (
    "index",
    "role",
    "tokens",
    "cumulative",
    "cached",
    "stale",
    *(category_label(c) for c in CATEGORIES),
)
CHAIN_COLUMNS = ("depth", "role", "session", "calls", "prompt tokens", "completion tokens")


def calls_source_note(budgets: Sequence[CallBudget]) -> str:
    """Where the calls come from, because reconstructed calls miss what only a log knows
    (the exact request, the context limit, the usage)."""
    if not budgets:
        return "This session has no LLM calls: no assistant message and no call log."
    recorded = sum(1 for b in budgets if b.recorded)
    if recorded == len(budgets):
        return f"{len(budgets):,} calls, from the call log the runtime recorded."
    if recorded == 0:
        return (
            f"{len(budgets):,} calls, reconstructed from the contexts: this session has no call log "
            "(peteos writes none), so each call is the context before an assistant message, "
            "and the context limit and usage are not known."
        )
    return f"{len(budgets):,} calls: {recorded:,} from the call log, {len(budgets) - recorded:,} reconstructed from the contexts."


def compaction_label(event: CompactionEvent) -> str:
    """One compaction as ``before → after`` tokens, with the fork it made."""
    return f"{event.tokens_before} → {event.tokens_after} tokens (fork {short_id(event.parent_id)} → {short_id(event.child_id)})"


def shown_categories(budgets: Sequence[CallBudget]) -> list[str]:
    """The categories with any tokens at any call, in the library's order: empty layers
    would only crowd the legend."""
    return [c for c in CATEGORIES if any(b.makeup.get(c, 0) for b in budgets)]


def context_limits(budgets: Sequence[CallBudget]) -> list[int | None]:
    """The context limit recorded at each call (None where the call log says nothing)."""
    return [b.context_limit for b in budgets]


def shares(budget: CallBudget, categories: Sequence[str]) -> list[float]:
    """Each category's share of the call's tokens (0 for an empty call)."""
    return [budget.makeup.get(c, 0) / budget.tokens if budget.tokens else 0.0 for c in categories]


def chart_calls(budgets: Sequence[CallBudget]) -> list[CallBudget]:
    """The calls the chart draws: every one up to :data:`CHART_CALLS`; beyond, an even
    step through them, with the first and the last, and each compaction's call and the
    call before it, so that every drop shows at its height."""
    if len(budgets) <= CHART_CALLS:
        return list(budgets)
    step = -(-len(budgets) // CHART_CALLS)
    last = len(budgets) - 1
    return [
        b
        for i, b in enumerate(budgets)
        if i % step == 0
        or i == last
        or b.compactions_before
        or (i < last and budgets[i + 1].compactions_before)
    ]


def chart_note(budgets: Sequence[CallBudget], drawn: Sequence[CallBudget]) -> str | None:
    """What the chart leaves out, when it leaves anything out."""
    if len(drawn) == len(budgets):
        return None
    return (
        f"The chart draws {len(drawn):,} of the {len(budgets):,} calls (an even step, with every "
        "compaction and the call before it); the table below lists every call."
    )


def _makeup_traces(budgets: Sequence[CallBudget], shown: Sequence[str]) -> list[go.Scatter]:
    """One stacked layer per category. The chart's hover is unified over a call, so
    each layer gives one line of the whole make-up: its tokens and its share."""
    split = [shares(b, shown) for b in budgets]
    return [
        go.Scatter(
            x=[b.number for b in budgets],
            y=[b.makeup.get(category, 0) for b in budgets],
            name=category_label(category),
            mode="lines",
            stackgroup="makeup",
            customdata=[
                [b.makeup.get(category, 0), round(s[index], 6)] for b, s in zip(budgets, split, strict=True)
            ],
            hovertemplate=f"{category_label(category)}: %{{customdata[0]:,}} tokens "
            "(%{customdata[1]:.1%})<extra></extra>",
        )
        for index, category in enumerate(shown)
    ]


def _total_trace(budgets: Sequence[CallBudget]) -> go.Scatter:
    """An invisible line along the top of the stack whose hover line heads the make-up:
    the call's total, its time and its context."""
    return go.Scatter(
        x=[b.number for b in budgets],
        y=[b.tokens for b in budgets],
        name=TOTAL_TRACE,
        mode="lines",
        line={"width": 0},
        showlegend=False,
        customdata=[
            [html.escape(b.timestamp or "unknown time"), html.escape(short_id(b.context_id))] for b in budgets
        ],
        hovertemplate=(
            "<b>call %{x}: %{y:,} tokens</b> · %{customdata[0]} · context %{customdata[1]}<extra></extra>"
        ),
    )


def _compaction_trace(budgets: Sequence[CallBudget]) -> go.Scatter:
    compacted = [b for b in budgets if b.compactions_before]
    return go.Scatter(
        x=[b.number for b in compacted],
        y=[b.tokens for b in compacted],
        name=COMPACTION_TRACE,
        mode="markers",
        marker={"symbol": "x", "size": 12, "color": "black"},
        text=["<br>".join(html.escape(compaction_label(e)) for e in b.compactions_before) for b in compacted],
        hovertemplate="compaction before call %{x}: %{text}<extra></extra>",
    )


def _line(name: str, numbers: list[int], values: Sequence[int | None], line: dict[str, str]) -> go.Scatter:
    return go.Scatter(
        x=numbers,
        y=list(values),
        name=name,
        mode="lines",
        line=line,
        hovertemplate=f"{name}: %{{y:,}} tokens<extra></extra>",
    )


def budget_figure(budgets: Sequence[CallBudget], threshold: int | None = None) -> go.Figure:
    """The context of every call, its make-up stacked; the context limit (where the call
    log recorded it) and the compaction threshold as lines; each call that followed a
    compaction marked, with the sizes before and after. Hovering a call shows its whole
    make-up at once (``x unified``): the total, then every layer with its share. Of
    many calls it draws :func:`chart_calls`."""
    drawn = chart_calls(budgets)
    figure = go.Figure(
        [_total_trace(drawn), *_makeup_traces(drawn, shown_categories(budgets))] if budgets else []
    )
    numbers = [b.number for b in drawn]
    limits = context_limits(drawn)
    if any(limit is not None for limit in limits):
        figure.add_trace(_line(CONTEXT_LIMIT_TRACE, numbers, limits, {"dash": "dash", "color": "red"}))
    if threshold is not None and numbers:
        figure.add_trace(
            _line(THRESHOLD_TRACE, numbers, [threshold] * len(numbers), {"dash": "dot", "color": "orange"})
        )
    compaction = _compaction_trace(budgets)
    figure.add_trace(compaction)
    for number in compaction.x:
        figure.add_vline(x=number, line_dash="dot", line_color="grey")
    figure.update_layout(
        xaxis_title="call number",
        yaxis_title="tokens (cl100k_base)",
        hovermode="x unified",
        legend_traceorder="normal",
    )
    if numbers and numbers[-1] - numbers[0] <= 10:
        figure.update_xaxes(dtick=1)  # calls are whole: no "call 0.5" tick on a short session
    return figure


def call_table(budgets: Sequence[CallBudget]) -> pd.DataFrame:
    """One row per call: when, which context, its size and make-up, and the compactions
    that happened just before it."""
    rows = [
        (
            b.number,
            b.timestamp,
            b.context_id,
            b.message_index,
            b.recorded,
            b.tokens,
            *(b.makeup.get(c, 0) for c in CATEGORIES),
            b.context_limit,
            "; ".join(compaction_label(e) for e in b.compactions_before),
        )
        for b in budgets
    ]
    table = pd.DataFrame.from_records(rows, columns=list(CALL_COLUMNS))
    return table.astype({"context limit": "Int64"})


def message_table(rows: Sequence[MessageBudget]) -> pd.DataFrame:
    """One row per message of a context; ``cached`` is the count stored in the file and
    ``stale`` says it disagrees with the true count, so a stale file is seen at once."""
    records = [
        (
            r.index,
            r.role,
            r.tokens,
            r.cumulative,
            r.cached,
            r.stale,
            *(r.makeup.get(c, 0) for c in CATEGORIES),
        )
        for r in rows
    ]
    table = pd.DataFrame.from_records(records, columns=list(MESSAGE_COLUMNS))
    return table.astype({"cached": "Int64"})


def stale_note(rows: Sequence[MessageBudget]) -> str | None:
    """A line naming the messages whose cached token count is stale, if any."""
    stale = [r for r in rows if r.stale]
    if not stale:
        return None
    listed = ", ".join(f"#{r.index} (cached {r.cached}, true {r.tokens})" for r in stale)
    return f"{len(stale)} stale cached token count{'s' if len(stale) > 1 else ''}: {listed}"


def chain_label(spend: SessionSpend) -> str:
    """How a session of the chain is named on the bar chart's axis."""
    return f"{spend.depth:+d} {spend.role} / {spend.session[:17]}"


def chain_figure(chain: Sequence[SessionSpend]) -> go.Figure:
    """Prompt tokens per session along the invocation chain, callers first."""
    figure = go.Figure(
        go.Bar(
            x=[chain_label(s) for s in chain],
            y=[s.prompt_tokens for s in chain],
            customdata=[[s.session, s.calls] for s in chain],
            hovertemplate="%{customdata[0]}<br>%{customdata[1]} calls<br>%{y} prompt tokens<extra></extra>",
            name="prompt tokens",
        )
    )
    figure.update_layout(xaxis_title="depth, role / session", yaxis_title="prompt tokens (summed over calls)")
    return figure


def chain_table(chain: Sequence[SessionSpend]) -> pd.DataFrame:
    """The chain's sessions with their calls and tokens."""
    rows = [(s.depth, s.role, s.session, s.calls, s.prompt_tokens, s.completion_tokens) for s in chain]
    table = pd.DataFrame.from_records(rows, columns=list(CHAIN_COLUMNS))
    return table.astype({"completion tokens": "Int64"})


def chain_note(chain: Sequence[SessionSpend]) -> str:
    """What the chain covers, because a chain of one may mean no records were written."""
    if len(chain) <= 1:
        return (
            "The chain is this session alone: it called no other object and none called it, "
            "or no invocation records exist (peteos writes none)."
        )
    return f"{len(chain)} sessions along the invocation chains through this session (depth 0 is this one)."


def threshold_note(start: ThresholdStart, given: int | None, typed: int | None) -> str:
    """Where the threshold drawn comes from: the link, the session's own setting, or the user."""
    if typed is None:
        if start.tokens is None:
            return start.note
        return f"No threshold drawn (the field is empty); {_recorded(start)}."
    if typed == start.tokens:
        return start.note
    origin = "from the link (?threshold=)" if typed == given else "typed here"
    recorded = f"; {_recorded(start)}" if start.tokens is not None else ""
    return f"Threshold {typed:,} tokens {origin}{recorded}."


def _recorded(start: ThresholdStart) -> str:
    if start.source == "compaction":
        return f"the session ran with a threshold of {start.tokens:,} tokens"
    return f"the session's calls had a context window of {start.tokens:,} tokens"


def threshold_from_param(text: str | None) -> int | None:
    """The ``?threshold=`` value as a positive token count; anything else draws no line."""
    try:
        value = int(str(text).strip())
    except ValueError:
        return None
    return value if value > 0 else None


WINDOW_COLUMNS = ("index", "role", "cached count", "true count", "kept (true counts)", "kept (cached counts)")


def window_choice_table(context: Context, choice: WindowDisagreement) -> pd.DataFrame:
    """The messages whose fate depends on which counts a rolling token window uses (all
    non-special messages when the two agree, so the table is never a mystery)."""
    by_true, by_cached = set(choice.kept_by_true_counts), set(choice.kept_by_cached_counts)
    agree = choice.agree  # once: it compares the two tuples whole
    rows = [
        (i, m.role, m.token_count, m.count_tokens(), m.id in by_true, m.id in by_cached)
        for i, m in enumerate(context.messages)
        if not m.is_special and (agree or (m.id in by_true) != (m.id in by_cached))
    ]
    table = pd.DataFrame.from_records(rows, columns=list(WINDOW_COLUMNS))
    return table.astype({"cached count": "Int64"})


def window_choice_note(choice: WindowDisagreement) -> str:
    """One sentence on where true and cached (peteos's) counts part ways."""
    if choice.agree:
        return (
            f"A rolling token window of {choice.max_tokens:,} tokens keeps the same "
            f"{len(choice.kept_by_true_counts)} messages with true and with cached counts."
        )
    return (
        f"A rolling token window of {choice.max_tokens:,} tokens chooses differently: "
        f"{len(choice.only_by_cached)} message(s) kept only with peteos's cached counts, "
        f"{len(choice.only_by_true)} only with true counts (stale or missing counts decide it)."
    )
