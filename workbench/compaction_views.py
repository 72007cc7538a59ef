"""What the Compaction page shows, computed without Streamlit.

The strategies live in the ``?strategies=`` query parameter as the library's own specs
(``rolling-tokens:60000:0.5,rolling-messages:40``), so a link reproduces the view and
the same text works on the command line (``soapwb compact --strategy``). The curves,
the comparison table and the lists of dropped messages are built here from the
analysis library's simulations, so a test can compare them with the library directly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

import pandas as pd
import plotly.graph_objects as go

from analysis import (
    DriftRow,
    History,
    RollingMessages,
    RollingTokens,
    Simulation,
    SummarizeOlder,
    parse_strategy,
)
from soap_core import preview

BASELINE = "none"
KINDS = ("rolling-tokens", "rolling-messages", "strip-thinking", "summarize")
"""The strategies a user can pick (the baseline ``none`` is always simulated)."""

TABLE_COLUMNS = ("strategy", "peak tokens", "tokens sent", "compactions", "tokens saved", "drift")
RUN_COLUMNS = ("strategy", "call", "distance", "identical", "fork", "error")
DROPPED_COLUMNS = ("history index", "role", "preview", "tokens", "dropped at call")


@dataclass(frozen=True)
class StrategyChoice:
    """The parsed ``?strategies=``: one valid spec per kind, in order, the specs that
    could not be read, and the ones left out because their kind came earlier."""

    specs: list[str]
    errors: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)

    @property
    def kinds(self) -> list[str]:
        return [kind_of(spec) for spec in self.specs]

    def spec_of(self, kind: str) -> str | None:
        return next((spec for spec in self.specs if kind_of(spec) == kind), None)


def kind_of(spec: str) -> str:
    return spec.split(":")[0]


def parse_strategies_param(text: str | None) -> StrategyChoice:
    """Every comma-separated spec the library accepts, one per kind (the pickers hold
    one of each); bad specs become error lines, since one bad spec in a link should not
    hide the good ones. The baseline ``none`` is always simulated, so it is skipped."""
    choice = StrategyChoice([])
    for spec in (s.strip() for s in (text or "").split(",")):
        if not spec or spec == BASELINE:
            continue
        try:
            parse_strategy(spec)
        except ValueError as exc:
            choice.errors.append(str(exc))
            continue
        if kind_of(spec) in choice.kinds:
            choice.ignored.append(spec)
        else:
            choice.specs.append(spec)
    return choice


def numbers_of(spec: str) -> list[float | int]:
    """The numbers a spec sets, defaults filled in (``rolling-tokens:600`` → 600, 0.5)."""
    strategy = parse_strategy(spec)
    if isinstance(strategy, RollingTokens):
        return [strategy.threshold, strategy.keep]
    if isinstance(strategy, RollingMessages):
        return [strategy.n]
    if isinstance(strategy, SummarizeOlder):
        return [strategy.threshold, strategy.keep_last]
    return []


def strategy_spec(kind: str, numbers: Sequence[float | int]) -> str:
    """The library's spec for ``kind`` with its numbers (``rolling-tokens:600:0.5``)."""
    return ":".join([kind, *(f"{n:g}" if isinstance(n, float) else str(n) for n in numbers)])


def with_baseline(specs: Sequence[str]) -> list[str]:
    """The uncompacted baseline first, then the chosen strategies, as the CLI does."""
    return [BASELINE, *(s for s in specs if s != BASELINE)]


def suggested_numbers(history: History) -> dict[str, list[float | int]]:
    """Numbers that make each strategy act on this session: the library's defaults
    (60,000 tokens, 40 messages) never fire on a small session, which shows nothing."""
    peak = max(call_sizes(history), default=0)
    threshold = max(100, round(peak * 0.6, -2)) if peak else 60_000
    ordinary = sum(1 for item in history.items if not item.special)
    messages = max(2, ordinary // 2)
    return {
        "rolling-tokens": [int(threshold), 0.5],
        "rolling-messages": [messages],
        "strip-thinking": [],
        "summarize": [int(threshold), 4],
    }


def default_specs(history: History) -> list[str]:
    """What the page simulates when the link names no strategies."""
    numbers = suggested_numbers(history)
    return [strategy_spec(kind, numbers[kind]) for kind in ("rolling-tokens", "rolling-messages")]


def curves_figure(simulations: Sequence[Simulation]) -> go.Figure:
    """Every strategy's context size per call on one chart, compactions marked."""
    figure = go.Figure()
    for simulation in simulations:
        calls = [p.call for p in simulation.points]
        figure.add_trace(
            go.Scatter(
                x=calls,
                y=[p.tokens for p in simulation.points],
                customdata=[p.original_tokens for p in simulation.points],
                name=simulation.strategy,
                legendgroup=simulation.strategy,
                mode="lines+markers",
                line={"dash": "dash"} if simulation.strategy == BASELINE else None,
                hovertemplate=(
                    f"{simulation.strategy}<br>call %{{x}}: %{{y}} tokens"
                    "<br>uncompacted %{customdata}<extra></extra>"
                ),
            )
        )
        compacted = [p for p in simulation.points if p.compacted]
        figure.add_trace(
            go.Scatter(
                x=[p.call for p in compacted],
                y=[p.tokens for p in compacted],
                text=[f"dropped {len(p.dropped_now)} messages" for p in compacted],
                name=f"{simulation.strategy} compactions",
                legendgroup=simulation.strategy,
                showlegend=False,
                mode="markers",
                marker={"symbol": "x", "size": 11, "color": "black"},
                hovertemplate=f"{simulation.strategy} compacts before call %{{x}}<br>%{{text}}<extra></extra>",
            )
        )
    figure.update_layout(xaxis_title="call number", yaxis_title="tokens sent (cl100k_base)")
    return figure


def comparison_table(simulations: Sequence[Simulation], drift: Sequence[DriftRow] = ()) -> pd.DataFrame:
    """One row per strategy; drift (the mean distance of the re-run answers from the
    original ones) only where it was measured for exactly these strategies."""
    measured: Mapping[str, float | None] = {row.strategy: row.drift for row in drift}
    rows = [
        (
            s.strategy,
            s.peak_tokens,
            s.tokens_sent,
            s.compactions,
            s.tokens_saved,
            measured.get(s.strategy),
        )
        for s in simulations
    ]
    table = pd.DataFrame.from_records(rows, columns=list(TABLE_COLUMNS))
    return table.astype({"drift": "Float64"})


def drift_runs_table(drift: Sequence[DriftRow]) -> pd.DataFrame:
    """Every drift run: which strategy at which call, how far its answer moved, the fork
    it was saved as, and its error if the model call failed."""
    rows = [
        (run.strategy, run.call, run.distance, run.identical, run.fork_id, run.error)
        for row in drift
        for run in row.runs
    ]
    return pd.DataFrame.from_records(rows, columns=list(RUN_COLUMNS)).astype(
        {"distance": "Float64", "identical": "boolean"}
    )


def drift_errors(drift: Sequence[DriftRow]) -> list[str]:
    """One line per failed drift run, to be shown as an error."""
    return [
        f"drift run {run.strategy} at call {run.call} failed: {run.error}"
        for row in drift
        for run in row.runs
        if run.error
    ]


def dropped_rows(history: History, simulation: Simulation, call: int) -> list[dict[str, object]]:
    """The messages ``simulation`` had dropped by ``call``, in the order it dropped them:
    where each sits in the uncompacted history, its role, a glimpse, its tokens, and the
    call before which it went."""
    position = {item.id: index for index, item in enumerate(history.items)}
    when = {i: p.call for p in simulation.points[: call + 1] for i in p.dropped_now}
    rows: list[dict[str, object]] = []
    for message_id in simulation.dropped_at(call):
        message = history.messages[message_id]
        rows.append(
            {
                "history index": position[message_id],
                "role": message.role,
                "preview": preview(message),
                "tokens": history.items[position[message_id]].tokens,
                "dropped at call": when[message_id],
            }
        )
    return rows


def dropped_table(rows: Sequence[Mapping[str, object]]) -> pd.DataFrame:
    return pd.DataFrame.from_records(list(rows), columns=list(DROPPED_COLUMNS))


def call_sizes(history: History) -> list[int]:
    """The uncompacted size of every call (what the baseline sends)."""
    prefix = [0, *accumulate(item.tokens for item in history.items)]
    return [prefix[cut] for cut in history.calls]


def call_labels(history: History) -> dict[int, str]:
    """Call numbers with the size each call was sent uncompacted, for the pickers."""
    return {number: f"call {number} ({size} tokens)" for number, size in enumerate(call_sizes(history))}


def call_from_param(text: str | None, calls: int) -> int:
    """The ``?call=`` value if it names a call, else the last call (where most is gone)."""
    try:
        call = int(str(text))
    except ValueError:
        return calls - 1
    return call if 0 <= call < calls else calls - 1
