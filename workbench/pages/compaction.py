"""Compaction page: replay a session's growth under other compaction strategies, side by
side, see what each dropped by a given call, and measure how far the answers drift.

The simulation never touches the store; only "Measure drift" writes, and what it writes
is one labelled replay fork per run (the session's own contexts stay as they were).
Drift is judged against a noise band of unchanged re-runs measured the same way. A
measurement of more than 10 model calls (``$SOAPWB_CONFIRM_ABOVE``) asks first, says
how many it has made as it goes, and can be stopped between two calls; the runs made
before a Stop stay saved and counted.

The strategies are kept in ``?strategies=`` (without one, the strategy the session ran
with comes first, from its call log) and the inspected call in ``?call=``, so a copied
link reproduces the view. Figures and tables come from workbench.compaction_views over
the analysis library.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from analysis import (
    Attribution,
    DriftRunner,
    History,
    RanWith,
    Simulation,
    attribute_calls,
    drift_band,
    drift_plan,
    drift_rows,
    estimate_calls,
    history_of,
    lab_strategies,
    message_usage,
    message_uses,
    model_summarizer,
    parse_strategy,
    ran_with,
    saved_attributions,
    sent_at,
    simulate_items,
)
from analysis._settings import numbers_of, strategy_spec, suggested_numbers
from replay import MessageRangeError, ScoreError, ServerScorer, parse_message_ranges, short_id
from soap_core import SoapError
from soap_core.runtime import LLMEndpoint
from workbench.compaction_views import (
    DRIFT_COLUMNS,
    KINDS,
    DriftJob,
    StrategyChoice,
    band_note,
    call_from_param,
    call_labels,
    comparison_table,
    confirm_above,
    curves_figure,
    curves_note,
    default_specs,
    drift_errors,
    drift_line,
    drift_runs_table,
    dropped_rows,
    dropped_table,
    new_job,
    outcome_note,
    parse_strategies_param,
    paused_note,
    plan_note,
    progress_text,
    usage_note,
    usage_table,
    with_baseline,
)
from workbench.loading import SCOPED, Scope, load_session, show_error_and_stop
from workbench.selection import selected_scope
from workbench.views import blanks_as, escape_markdown, open_store

DRIFT_JOB = "compaction_drift_job"
NOISE_SAMPLES = 2  # unchanged re-runs per call of what the session sent: the fewest that make a band


# The history and the simulations are cached as resources, shared by every rerun rather
# than copied: unpickling them for a 100,000-message session took seconds on every
# click. Nothing here changes what it gets from them (a drift run loads its own copy).


@st.cache_resource(show_spinner="Reading the session's history…", max_entries=8, hash_funcs=SCOPED)
def _history(scope: Scope) -> History:
    return history_of(scope.session)


@st.cache_resource(show_spinner=False, max_entries=16, hash_funcs=SCOPED)
def _attributions(scope: Scope) -> tuple[list[Attribution], list[str]]:
    """The attributions kept beside the session and the errors of those that do not
    read (the scope's key moves with the attributions folder)."""
    errors: list[SoapError] = []
    found = saved_attributions(scope.session, errors=errors)
    return found, [str(e) for e in errors]


@st.cache_resource(show_spinner="Simulating…", max_entries=16, hash_funcs=SCOPED)
def _simulations(scope: Scope, specs: tuple[str, ...]) -> tuple[Simulation, ...]:
    history = _history(scope)
    usage = message_usage(_attributions(scope)[0])
    return tuple(simulate_items(history.items, history.calls, [parse_strategy(s, usage) for s in specs]))


@st.cache_resource(show_spinner=False, max_entries=16, hash_funcs=SCOPED)
def _curves(scope: Scope, specs: tuple[str, ...]) -> go.Figure:
    return curves_figure(_simulations(scope, specs))


@st.cache_data(show_spinner=False, max_entries=16, hash_funcs=SCOPED)
def _ran_with(scope: Scope) -> RanWith | None:
    try:
        return ran_with(scope.session)
    except SoapError:  # an unreadable call log: the counts below say so
        return None


@st.cache_data(show_spinner=False, max_entries=16, hash_funcs=SCOPED)
def _calls_recorded(scope: Scope) -> bool:
    """Whether the calls come from the call log (``CallBudget.recorded``): it has a call,
    not a replay, made in one of the session's contexts."""
    contexts = scope.session.contexts
    return any(not call.replay and call.context_id in contexts for call in scope.session.calls())


def pick_numbers(kind: str, start: list[float | int]) -> str:
    """The number inputs of one strategy kind; returns its spec."""
    if kind in ("rolling-tokens", "least-used"):  # a threshold and the share kept
        left, right = st.columns(2)
        threshold = left.number_input(
            f"{kind.replace('-', ' ')}: threshold", 1, value=int(start[0]), step=100, key=kind + "_t"
        )
        keep = right.number_input("keep share", 0.05, 1.0, float(start[1]), 0.05, key=kind + "_keep")
        return strategy_spec(kind, [int(threshold), float(keep)])
    if kind == "rolling-messages":
        n = st.number_input("rolling messages: keep the last N", 1, value=int(start[0]), key=kind + "_n")
        return strategy_spec(kind, [int(n)])
    if kind == "summarize":
        left, right = st.columns(2)
        threshold = left.number_input(
            "summarize: threshold", 1, value=int(start[0]), step=100, key=kind + "_t"
        )
        keep_last = right.number_input("keep the last N", 0, value=int(start[1]), key=kind + "_keep")
        return strategy_spec(kind, [int(threshold), int(keep_last)])
    return kind


def pick_strategies(scope: Scope, history: History) -> list[str]:
    """The strategies from ``?strategies=`` (else a default sized to this session), as
    pickers; the choice is written back to the URL. Returns the specs, baseline first."""
    given = st.query_params.get("strategies")
    ran = _ran_with(scope)
    choice = (
        parse_strategies_param(given) if given is not None else StrategyChoice(default_specs(history, ran))
    )
    for error in choice.errors:
        st.error(escape_markdown(f"?strategies=: {error}"))
    if choice.ignored:
        st.warning(escape_markdown("one strategy of each kind; left out: " + ", ".join(choice.ignored)))
    suggested = suggested_numbers(history, ran)
    if ran is not None:
        st.text(ran.note)
    kinds = st.multiselect("Strategies", KINDS, default=choice.kinds, key="strategy_kinds")
    specs = []
    for kind in kinds:
        spec = choice.spec_of(kind)
        specs.append(pick_numbers(kind, numbers_of(spec) if spec else suggested[kind]))
    st.query_params["strategies"] = ",".join(specs)
    return with_baseline(specs)


def current_job(uuid: str) -> DriftJob | None:
    """The drift measurement of this session, if one was started here; one left running
    for another session (the user moved on) is stopped, its runs kept."""
    job: DriftJob | None = st.session_state.get(DRIFT_JOB)
    if job is None:
        return None
    if job.key[0] != uuid:
        if job.status in ("confirm", "running"):
            job.status = "stopped"
        return None
    return job


def start_job(scope: Scope, history: History, specs: list[str], calls: list[int]) -> None:
    """Plan the measurement; above the confirmation limit it waits for a go-ahead."""
    noise = int(st.session_state.get("drift_noise", NOISE_SAMPLES))
    simulations = _simulations(scope, tuple(specs))
    usage = message_usage(_attributions(scope)[0])
    strategies = [parse_strategy(s, usage) for s in specs]
    steps = drift_plan(history, strategies, simulations, sorted(calls), noise)
    limit = confirm_above(os.environ)
    st.session_state[DRIFT_JOB] = new_job((scope.session.uuid, tuple(specs)), endpoint_url(), steps, limit)


def endpoint_url() -> str:
    return str(st.session_state.get("drift_endpoint", "")).strip()


def ask_to_confirm(job: DriftJob) -> None:
    """The confirmation of a large measurement: how many model calls, run or cancel."""
    box = st.empty()
    with box.container():
        st.warning(escape_markdown(plan_note(job.steps)))
        buttons = st.container(horizontal=True)
        run = buttons.button(f"Run {job.total_calls} model calls", type="primary", key="drift_confirm")
        cancel = buttons.button("Cancel", key="drift_cancel")
    if run or cancel:
        job.status = "running" if run else "cancelled"
        box.empty()


CALL_WAIT_S = 600.0  # the longest a Stop waits for the model call under way, retries included


def run_job(scope: Scope, job: DriftJob) -> None:
    """The runs still to make, one at a time, with a running count and a Stop button.

    A click anywhere starts a new script run (Streamlit's own Stop ends this one); the
    call under way still returns and is recorded (its fork is saved), and this script
    run, no longer the job's owner, makes no other. The new one stops the measurement
    if the click was on Stop measuring, and otherwise asks whether to go on: nothing
    runs behind the user's back."""
    me = job.take_over()
    if st.button(
        "Stop measuring",
        key="drift_stop",
        help="Stops after the model call under way; the runs made stay saved.",
    ):
        job.status = "stopped"
        with st.spinner("Waiting for the model call under way to return…"):
            job.wait_for_call_under_way(CALL_WAIT_S)
        st.rerun()  # drawn again without the Stop button, with the runs counted
    if job.started:  # an earlier script run was interrupted while it ran
        with st.spinner("Waiting for the model call under way to return…"):
            job.wait_for_call_under_way(CALL_WAIT_S)
        if job.status != "running":
            return
        st.info(escape_markdown(paused_note(job)))
        left = job.total_calls - job.made_calls
        if not st.button(f"Continue: {left} model calls left", key="drift_continue"):
            return
    st.text(plan_note(job.steps))
    bar = st.progress(job.made_calls / job.total_calls, text=progress_text(job))
    try:
        endpoint = LLMEndpoint(job.base_url)
        copy = load_session(scope.root, scope.session.uuid, scope.signature)  # replay adds its forks to it
        store = open_store(scope.root)
        strategies = lab_strategies(copy, job.key[1], store=store)
        runner = DriftRunner(store, copy, strategies, endpoint, model_summarizer(endpoint))
        job.run_pending(
            me, runner.run, lambda: bar.progress(job.made_calls / job.total_calls, text=progress_text(job))
        )
    except (SoapError, ValueError) as exc:
        job.status = "stopped"
        st.error(escape_markdown(f"drift measurement stopped: {exc}"))
        return
    if job.owner == me:
        st.rerun()  # draw the finished table without the Stop button


def show_drift_controls(scope: Scope, history: History, specs: list[str]) -> DriftJob | None:
    """Endpoint, calls, noise samples, the button that measures drift, and the
    measurement under way (confirmation, count, Stop). Returns this session's job."""
    st.subheader("Answer drift")
    st.text(
        "Drift re-runs the chosen calls on a model with what each strategy would have kept, and compares "
        "the answers with the original ones (0 = same answer, 1 = nothing in common). The noise samples "
        "send each call again exactly as the session sent it (its own compaction included): how far their "
        "answers land from the original ones is the noise band a strategy's drift is judged against; none "
        "(the whole history) is one strategy among the others. Every run is saved in the store as a "
        "replay fork labelled 'drift …'; the session's own contexts are not changed."
    )
    base_url = st.text_input(
        "Endpoint base URL", value=os.environ.get("OPENAI_BASE_URL", ""), key="drift_endpoint"
    ).strip()
    labels = call_labels(history)
    left, right = st.columns([3, 1])
    calls = left.multiselect(
        "Calls to re-run", list(labels), format_func=labels.__getitem__, key="drift_calls"
    )
    right.number_input(
        "Noise samples per call",
        0,
        10,
        NOISE_SAMPLES,
        key="drift_noise",
        help="Re-runs of each call exactly as the session sent it; 2 or more give a noise band.",
    )
    job = current_job(scope.session.uuid)
    busy = job is not None and job.status in ("confirm", "running")
    if not base_url:
        st.info("Drift needs a model: enter an OpenAI-compatible endpoint base URL (or set OPENAI_BASE_URL).")
    elif not calls:
        st.info("Pick the calls to re-run.")
    clicked = st.button("Measure drift", disabled=not base_url or not calls or busy, key="measure_drift")
    if clicked and not busy:  # a click sent while a measurement ran does not start another
        start_job(scope, history, specs, calls)
        st.rerun()  # drawn again with the button disabled while it asks or runs
    if job is not None and job.status == "confirm":
        ask_to_confirm(job)
    if job is not None and job.status == "running":
        run_job(scope, job)
    note = outcome_note(job) if job is not None else ""
    if note:
        (st.success if job is not None and job.status == "done" else st.info)(escape_markdown(note))
    return job


def show_drift(simulations: Sequence[Simulation], job: DriftJob | None) -> None:
    """The comparison table, with drift against the noise band where it was measured."""
    results = job.results if job is not None else []
    drift = drift_rows(simulations, results) if results else []
    band = drift_band(results)
    table = comparison_table(simulations, drift, band)
    if table["drift"].isna().all():  # nothing measured yet: no column of blanks
        table = table.drop(columns=list(DRIFT_COLUMNS))
    shown = blanks_as(table, {"drift": "not measured", "noise band": "-", "vs noise": "-"})
    st.dataframe(shown, hide_index=True, key="comparison_table")
    if not results:
        return
    note = band_note(band, measured=True)
    st.text("\n".join([note, *(drift_line(row, band) for row in drift if row.runs)]))
    for line in drift_errors(results):
        st.error(escape_markdown(line))
    st.dataframe(blanks_as(drift_runs_table(results, band), "-"), hide_index=True, key="drift_runs")


@st.cache_resource(show_spinner=False, max_entries=32, hash_funcs=SCOPED)
def _dropped(
    scope: Scope, specs: tuple[str, ...], call: int
) -> tuple[tuple[str, int, pd.DataFrame | None], ...]:
    """Per strategy: its name, how many messages it had dropped by ``call``, and their
    table (a strategy of a long session drops tens of thousands)."""
    history = _history(scope)
    shown = []
    for simulation in _simulations(scope, specs):
        rows = dropped_rows(history, simulation, call)
        shown.append((simulation.strategy, len(rows), dropped_table(rows) if rows else None))
    return tuple(shown)


@st.cache_resource(show_spinner=False, max_entries=16, hash_funcs=SCOPED)
def _usage(scope: Scope) -> tuple[str, pd.DataFrame, bool]:
    """The usage section's line and table, and whether any answer is attributed: once per
    change of the session or its attributions, not at every click."""
    history = _history(scope)
    attributions, _ = _attributions(scope)
    produced = {history.items[cut].id for cut in history.calls if cut < len(history.items)}
    attributed = {a.message_id for a in attributions if a.message_id in produced}
    uses = message_uses(attributions)
    return (
        usage_note(len(attributed), len(history.calls), len(uses)),
        usage_table(history, uses),
        bool(attributed),
    )


MOST_ATTRIBUTED = 50  # answers one click attributes at most (each costs its K ablations' scored requests)


def show_usage(scope: Scope, history: History) -> None:
    """How much the session's answers lean on each message (its kept attributions), and
    the button that attributes more answers: what least-used drops by."""
    st.subheader("What the answers use")
    for error in _attributions(scope)[1]:
        st.error(escape_markdown(error))
    note, table, attributed = _usage(scope)
    st.text(note)
    if not table.empty:
        st.dataframe(table, hide_index=True, key="usage_table")
    with st.expander("Attribute answers", expanded=not attributed):
        st.caption(
            "Each answer is attributed as on the Replay page: random halves of its request are scored on a "
            "model server that can score a given answer (the local model: make run starts one), and a sparse "
            "linear fit gives each message its weight. Results are kept with the session."
        )
        base_url = st.text_input(
            "Scoring endpoint base URL", value=os.environ.get("OPENAI_BASE_URL", ""), key="usage_endpoint"
        ).strip()
        left, right = st.columns([3, 1])
        spec = left.text_input(
            "Answers of calls",
            key="usage_calls",
            placeholder=f"e.g. 3, 10-12 (0 to {len(history.calls) - 1:,})",
            help="Call numbers and ranges, as the curves and the drift table number them.",
        )
        ablations = int(right.number_input("Ablations", 4, 256, 16, step=4, key="usage_ablations"))
        try:
            calls = parse_message_ranges(spec, len(history.calls), noun="call", holder="the session")
        except MessageRangeError as exc:
            st.error(escape_markdown(str(exc)))
            calls = []
        if len(calls) > MOST_ATTRIBUTED:
            st.error(f"{len(calls):,} answers: attribute at most {MOST_ATTRIBUTED} at a time.")
            calls = []
        if calls:
            scored = sum(estimate_calls(sent_at(scope.session, history, c), ablations) for c in calls)
            st.caption(f"{scored:,} scored requests, each about half of its call's request")
        if st.button("Attribute", disabled=not base_url or not calls, key="usage_attribute"):
            run_usage(scope, calls, ablations, base_url)
            st.rerun()  # the records are in the store now: the page reads them back
        if not base_url:
            st.info("Attribution needs a scoring endpoint: the local model server's base URL.")


def run_usage(scope: Scope, calls: list[int], ablations: int, base_url: str) -> None:
    """Attribute the answers of ``calls`` from a fresh load of the session; each result is
    kept as soon as it is made."""
    bar = st.progress(0.0, text="scoring")
    order = {call: n for n, call in enumerate(sorted(calls))}

    def progress(call: int, done: int, total: int) -> None:
        share = (order[call] + done / total) / len(calls)
        bar.progress(share, text=f"call {call}: {done} of {total} requests scored")

    try:
        store, session = scope.writable()
        with ServerScorer(base_url) as scorer:
            scorer.check()
            attribute_calls(store, session, sorted(calls), scorer, ablations=ablations, on_progress=progress)
    except (ScoreError, SoapError, ValueError) as exc:
        show_error_and_stop(exc)


def show_dropped(scope: Scope, history: History, specs: list[str]) -> None:
    """For one call, what every strategy had dropped by then."""
    st.subheader("What each dropped")
    total = len(history.calls)
    call = call_from_param(st.query_params.get("call"), total)
    if total > 1:
        call = st.slider("By call", 0, total - 1, value=call, key="dropped_call")
    else:
        st.text("The session has one call: call 0.")
    st.query_params["call"] = str(call)
    for strategy, count, table in _dropped(scope, tuple(specs), call):
        st.text(f"{strategy}: {count} message{'' if count == 1 else 's'} dropped by call {call}")
        if table is not None:
            st.dataframe(table, hide_index=True, key=f"dropped_{strategy}")


def show_session(scope: Scope) -> None:
    """The pickers, the curves, the table, the drift controls and the dropped lists."""
    try:
        history = _history(scope)
    except SoapError as exc:
        show_error_and_stop(exc)
    if not history.calls:
        st.info("This session's active lineage has no LLM call to simulate.")
        st.stop()
    st.text(
        f"{len(history.items):,} messages in the active context's lineage, {len(history.calls):,} calls: each "
        "strategy is fed them call by call without a model (nothing is written to the store)."
    )
    if not _calls_recorded(scope):
        st.text("No call log: the calls are reconstructed from the contexts (one per assistant message).")
    specs = pick_strategies(scope, history)
    simulations = _simulations(scope, tuple(specs))
    note = curves_note(simulations)
    if note:
        st.caption(note)
    st.plotly_chart(_curves(scope, tuple(specs)), key="curves_chart")
    show_usage(scope, history)
    job = show_drift_controls(scope, history, specs)
    show_drift(simulations, job)
    show_dropped(scope, history, specs)


st.title("Compaction")
page_scope = selected_scope(read_only=True)  # a drift run loads a copy
chosen = page_scope.session
st.text(f"{chosen.role} / {short_id(chosen.uuid)}", help=f"session id {chosen.uuid}")
show_session(page_scope)
