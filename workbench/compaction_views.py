"""What the Compaction page shows, computed without Streamlit.

The strategies live in the ``?strategies=`` query parameter as the library's own specs
(``rolling-tokens:60000:0.5,rolling-messages:40``), so a link reproduces the view and
the same text works on the command line (``soapwb compact --strategy``). The curves,
the comparison table and the lists of dropped messages are built here from the
analysis library's simulations, so a test can compare them with the library directly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd
import plotly.graph_objects as go

from analysis import (
    DriftBand,
    DriftRow,
    DriftRun,
    DriftStep,
    History,
    MessageUse,
    RanWith,
    SimPoint,
    Simulation,
    model_calls,
    parse_strategy,
    verdict_in,
)
from analysis._settings import call_sizes, kind_of, strategy_spec, suggested_numbers
from soap_core import preview

BASELINE = "none"
KINDS = ("rolling-tokens", "rolling-messages", "strip-thinking", "summarize", "least-used")
"""The strategies a user can pick (the baseline ``none`` is always simulated)."""

DRIFT_COLUMNS = ("drift", "noise band", "vs noise")
"""The comparison table's columns a drift run fills."""
TABLE_COLUMNS = ("strategy", "peak tokens", "tokens sent", "compactions", "tokens saved", *DRIFT_COLUMNS)
RUN_COLUMNS = (
    "run",
    "strategy",
    "call",
    "distance",
    "identical",
    "noise at this call",
    "vs noise",
    "fork",
    "error",
)
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


def with_baseline(specs: Sequence[str]) -> list[str]:
    """The uncompacted baseline first, then the chosen strategies, as the CLI does."""
    return [BASELINE, *(s for s in specs if s != BASELINE)]


def default_specs(history: History, ran: RanWith | None = None) -> list[str]:
    """What the page simulates when the link names no strategies: the one the session
    ran with first, where its call log records one, then windows sized to the session."""
    numbers = suggested_numbers(history, ran)
    kinds = list(dict.fromkeys([*([kind_of(ran.spec)] if ran else []), "rolling-tokens", "rolling-messages"]))
    return [strategy_spec(kind, numbers[kind]) for kind in kinds]


CURVE_POINTS = 2_000
"""The most calls a strategy's curve draws. A chart is some 1,000 pixels wide, and three
curves of 50,000 markers each (and a compaction mark at every call of a rolling window)
kept Chromium drawing for half a minute."""


def curve_points(points: Sequence[SimPoint]) -> list[SimPoint]:
    """The calls a curve draws: every one up to :data:`CURVE_POINTS`; beyond, an even
    step with the first and the last, and each compaction's call and the call before it
    while they are few enough (a strategy that compacts at every call gets the step)."""
    if len(points) <= CURVE_POINTS:
        return list(points)
    step = -(-len(points) // CURVE_POINTS)
    keep = {*range(0, len(points), step), len(points) - 1}
    marks = [i for i, p in enumerate(points) if p.compacted]
    if 2 * len(marks) <= CURVE_POINTS:
        keep.update(marks)
        keep.update(i - 1 for i in marks if i > 0)
    return [points[i] for i in sorted(keep)]


MOST_MARKS = 200
"""The most compactions a curve marks: a strategy that compacts at nearly every call
(a rolling window once full) would draw its marks as one black bar over the curves."""


def _compactions(simulation: Simulation) -> int:
    return sum(1 for p in simulation.points if p.compacted)


def curves_note(simulations: Sequence[Simulation]) -> str | None:
    """What the curves leave out, when they leave anything out."""
    notes = []
    total = max((len(s.points) for s in simulations), default=0)
    if total > CURVE_POINTS:
        notes.append(
            f"Each curve draws about {CURVE_POINTS:,} of the {total:,} calls (an even step, with every "
            "compaction and the call before it where a strategy compacts rarely); the lists below "
            "are whole."
        )
    unmarked = [(s.strategy, _compactions(s)) for s in simulations if _compactions(s) > MOST_MARKS]
    notes.extend(
        f"{strategy} compacts at {count:,} calls: too many to mark, the curve shows them."
        for strategy, count in unmarked
    )
    return " ".join(notes) or None


def curves_figure(simulations: Sequence[Simulation]) -> go.Figure:
    """Every strategy's context size per call on one chart, compactions marked; a long
    session's curves at most :data:`CURVE_POINTS` calls each."""
    figure = go.Figure()
    for simulation in simulations:
        points = curve_points(simulation.points)
        figure.add_trace(
            go.Scatter(
                x=[p.call for p in points],
                y=[p.tokens for p in points],
                customdata=[p.original_tokens for p in points],
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
        if _compactions(simulation) > MOST_MARKS:
            continue  # curves_note says so
        compacted = [p for p in points if p.compacted]
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
    calls = [x for trace in figure.data for x in (trace.x or ())]
    if calls and max(calls) - min(calls) <= 10:
        figure.update_xaxes(dtick=1)  # calls are whole: no "call 0.5" tick on a short session
    return figure


def comparison_table(
    simulations: Sequence[Simulation], drift: Sequence[DriftRow] = (), band: DriftBand | None = None
) -> pd.DataFrame:
    """One row per strategy; drift (the mean distance of the re-run answers from the
    original ones) only where it was measured for exactly these strategies, with the
    noise band it is judged against and the verdict."""
    measured: Mapping[str, float | None] = {row.strategy: row.drift for row in drift}
    rows = []
    for s in simulations:
        value = measured.get(s.strategy)
        shown = judged(value, band) if value is not None and band is not None else None
        rows.append(
            (
                s.strategy,
                s.peak_tokens,
                s.tokens_sent,
                s.compactions,
                s.tokens_saved,
                value,
                f"{shown[1]}–{shown[2]}" if shown else None,
                shown[3] if shown else None,
            )
        )
    table = pd.DataFrame.from_records(rows, columns=list(TABLE_COLUMNS))
    return table.astype({"drift": "Float64"})


def judged(value: float, band: DriftBand) -> tuple[str, str, str, str]:
    """(value, low, high, verdict) as text, with as many decimals (2 to 4) as it takes
    for a value outside the band not to print as one of its edges."""
    verdict = band.verdict(value)
    for digits in (2, 3, 4):
        low, high, text = (f"{x:.{digits}f}" for x in (band.low, band.high, value))
        if verdict == "within noise" or text not in (low, high):
            break
    return text, low, high, verdict


def drift_line(row: DriftRow, band: DriftBand | None) -> str:
    """One sentence per strategy: its drift against the noise band, for example
    ``rolling-tokens:600:0.5: drift 0.42, noise band 0.35–0.48: within noise``."""
    if row.drift is None:
        return f"{row.strategy}: drift not measured (no run succeeded)"
    if band is None:
        return f"{row.strategy}: drift {row.drift:.2f}, no noise band to judge it against"
    value, low, high, verdict = judged(row.drift, band)
    return f"{row.strategy}: drift {value}, noise band {low}–{high}: {verdict}"


def band_note(band: DriftBand | None, measured: bool) -> str:
    """What the noise band is, or why there is none."""
    if not measured:
        return ""
    if band is None:
        return (
            "No noise band: it needs two unchanged re-runs with an answer of what the session sent (two "
            "noise samples or more), so the drift figures below cannot be told from the model's own "
            "variation."
        )
    return (
        f"Noise band {band.low:.2f}–{band.high:.2f}: the mean distance from the original answers of each of "
        f"{band.samples} unchanged re-runs of the requests the session really sent at those calls. "
        "A drift inside it is what the model does by itself; beyond it, the strategy changed the answers."
        + (
            " The band has no width: the unchanged runs all landed at the same distance (the model "
            "answered the unchanged calls alike each time, as it does at temperature 0)."
            if band.low == band.high
            else ""
        )
    )


def drift_runs_table(
    results: Sequence[tuple[DriftStep, DriftRun]], band: DriftBand | None = None
) -> pd.DataFrame:
    """Every drift run, the noise samples too: which strategy at which call, how far its
    answer moved, the spread of the unchanged runs at that call, the fork it was saved
    as, and its error if the model call failed."""
    rows = []
    for step, run in results:
        spread = band.call_range(step.call) if band else None
        verdict = verdict_in(run.distance, *spread) if spread and run.distance is not None else None
        rows.append(
            (
                f"noise sample {step.sample}" if step.noise else "strategy",
                run.strategy,
                run.call,
                run.distance,
                run.identical,
                f"{spread[0]:.2f}–{spread[1]:.2f}" if spread else None,
                "" if step.noise else verdict,
                run.fork_id,
                run.error,
            )
        )
    return pd.DataFrame.from_records(rows, columns=list(RUN_COLUMNS)).astype(
        {"distance": "Float64", "identical": "boolean"}
    )


def drift_errors(results: Sequence[tuple[DriftStep, DriftRun]]) -> list[str]:
    """One line per failed drift run, to be shown as an error."""
    return [
        f"drift run {step.label.removeprefix('drift ')} failed: {run.error}"
        for step, run in results
        if run.error
    ]


# ── a measurement: how many model calls, how far it got, stopping it ──────────────

CONFIRM_ABOVE = 10
"""More model calls than this are asked about first (``$SOAPWB_CONFIRM_ABOVE`` sets it)."""


def confirm_above(environ: Mapping[str, str]) -> int:
    """The confirmation limit: ``$SOAPWB_CONFIRM_ABOVE`` when it is a count, else 10."""
    text = environ.get("SOAPWB_CONFIRM_ABOVE", "")
    return int(text) if text.strip().isdigit() else CONFIRM_ABOVE


@dataclass
class DriftJob:
    """One click of "Measure drift": its plan, the runs made so far, and where it stands.

    Kept between script runs. Streamlit starts a new script run on every click without
    waiting for the one under way, which goes on until its call returns: so the calls
    are made under a lock, each is recorded as soon as it returns (its fork is already
    saved), and the newest script run owns the job, an older loop stopping after the
    call it was making. A Stop then waits for that call and counts it."""

    key: tuple[str, tuple[str, ...]]
    """(session uuid, strategy specs) of the measurement."""
    base_url: str
    steps: list[DriftStep]
    results: list[tuple[DriftStep, DriftRun]] = field(default_factory=list)
    status: str = "running"
    """``confirm`` (waiting for the go-ahead), ``running``, ``stopped``, ``cancelled`` or ``done``."""
    seconds: float = 0.0
    """Time spent on the model calls so far."""
    started: bool = False
    """Whether a script run has begun making the calls (one that finds it set and the
    job unfinished was interrupted, and asks before it goes on)."""
    owner: int = 0
    """Which script run may make the next call (the newest that took the job over)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def total_calls(self) -> int:
        return model_calls(self.steps)

    @property
    def made_calls(self) -> int:
        return model_calls([step for step, _ in self.results])

    def pending(self) -> list[DriftStep]:
        return self.steps[len(self.results) :]

    def record(self, step: DriftStep, run: DriftRun, seconds: float) -> None:
        self.results.append((step, run))
        self.seconds += seconds
        if not self.pending():
            self.status = "done"

    def take_over(self) -> int:
        """Make the calling script run the owner; returns its token for :meth:`run_pending`."""
        self.owner += 1
        return self.owner

    def wait_for_call_under_way(self, timeout_s: float) -> bool:
        """Wait until no call is being made (one that was is recorded by then); False if
        it is still going after ``timeout_s``."""
        if not self._lock.acquire(timeout=timeout_s):
            return False
        self._lock.release()
        return True

    def run_pending(
        self, owner: int, run_step: Callable[[DriftStep], DriftRun], after_each: Callable[[], object]
    ) -> None:
        """Make the pending runs one at a time, recording each, while ``owner`` owns the
        job and it is running; ``after_each`` (the page's count) runs after each."""
        self.started = True
        while True:
            with self._lock:
                if self.owner != owner or self.status != "running" or not self.pending():
                    return
                step = self.pending()[0]
                began = time.monotonic()
                run = run_step(step)
                self.record(step, run, time.monotonic() - began)
            after_each()


def new_job(key: tuple[str, tuple[str, ...]], base_url: str, steps: list[DriftStep], limit: int) -> DriftJob:
    """A job that runs at once, or waits for a confirmation above ``limit`` model calls."""
    return DriftJob(key, base_url, steps, status="confirm" if model_calls(steps) > limit else "running")


def plan_note(steps: Sequence[DriftStep]) -> str:
    """How many model calls a plan makes, and where they come from."""
    calls = len(dict.fromkeys(s.call for s in steps))
    strategies = list(dict.fromkeys(s.strategy for s in steps if not s.noise))
    noise = sum(1 for s in steps if s.noise)
    summaries = sum(s.model_calls - 1 for s in steps)
    parts = [
        f"{calls} call{_s(calls)} × {len(strategies)} strateg{'y' if len(strategies) == 1 else 'ies'} "
        f"({', '.join(strategies)}) = {calls * len(strategies)} runs"
    ]
    if noise:
        parts.append(f"{calls} × {noise // max(calls, 1)} unchanged re-runs for the noise band = {noise}")
    if summaries:
        parts.append(f"{summaries} summar{'y' if summaries == 1 else 'ies'} written by the model")
    total = model_calls(steps)
    return f"Measuring drift makes {total} model call{_s(total)}: " + ", plus ".join(parts) + "."


def progress_text(job: DriftJob) -> str:
    """The running count, e.g. ``12 of 36 model calls``, and what runs next."""
    pending = job.pending()
    count = f"{job.made_calls} of {job.total_calls} model calls"
    if not pending:
        return count
    step = pending[0]
    what = f"noise sample {step.sample}" if step.noise else step.strategy
    return f"{count} · next: {what} at call {step.call}"


def paused_note(job: DriftJob) -> str:
    """What a measurement interrupted mid-way says before it goes on."""
    runs = len(job.results)
    return (
        f"Paused after {job.made_calls} of {job.total_calls} model calls: the page was interrupted while "
        f"they ran (a click elsewhere, or Streamlit's Stop). The {runs} run{_s(runs)} made are saved; "
        "continue, or stop here."
    )


def outcome_note(job: DriftJob) -> str:
    """How a measurement ended, with its counts (empty while it runs)."""
    made, total = job.made_calls, job.total_calls
    if job.status == "done":
        return f"Drift measured: {total} model call{_s(total)} in {job.seconds:.0f} s."
    if job.status == "cancelled":
        return f"Not run: the {total} model calls were cancelled before any was made."
    if job.status != "stopped":
        return ""
    if not job.results:
        return f"Stopped before any model call: none of the {total} was made."
    return (
        f"Stopped after {made} of {total} model calls ({job.seconds:.0f} s): the {len(job.results)} "
        f"run{_s(len(job.results))} made are saved in the store as drift forks and counted below; "
        f"{total - made} model call{_s(total - made)} were not made."
    )


def _s(count: int) -> str:
    return "" if count == 1 else "s"


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


USAGE_COLUMNS = ("#", "message", "use", "answers", "leaned on by", "text")


def usage_table(history: History, uses: Sequence[MessageUse]) -> pd.DataFrame:
    """The history's messages the attributed answers saw, the most used first: ``#`` is
    the message's place in the history, ``use`` the largest weight an answer gave it."""
    place = {item.id: number for number, item in enumerate(history.items)}
    rows = [
        (place[u.message_id], u.label, round(u.use, 2), u.answers, u.leaning, u.preview)
        for u in uses
        if u.message_id in place
    ]
    return pd.DataFrame(rows, columns=list(USAGE_COLUMNS))


def usage_note(attributed: int, calls: int, weighed: int) -> str:
    """What the ranking rests on, in a line."""
    if not attributed:
        return (
            f"None of the {calls:,} answers is attributed yet: least-used has nothing to rank by and "
            "drops the oldest messages first, as a rolling window. Attribute some answers below."
        )
    return (
        f"{attributed:,} of {calls:,} answers attributed; {weighed:,} messages weighed by them. "
        "least-used drops first the messages they leaned on least (a message none of them saw counts 0, "
        "the oldest first among equals)."
    )
