"""Compaction page: replay a session's growth under other compaction strategies, side by
side, see what each dropped by a given call, and measure how far the answers drift.

The simulation never touches the store; only "Measure drift" writes, and what it writes
is one labelled replay fork per run (the session's own contexts stay as they were).
The strategies are kept in ``?strategies=`` and the inspected call in ``?call=``, so a
copied link reproduces the view. Figures and tables come from
workbench.compaction_views over the analysis library.
"""

from __future__ import annotations

import os

import streamlit as st

from analysis import (
    DriftRow,
    History,
    Simulation,
    call_budgets,
    compare,
    history_of,
    model_summarizer,
    parse_strategy,
    simulate_items,
)
from soap_core import Session, SoapError, Store
from soap_core.runtime import LLMEndpoint
from workbench.compaction_views import (
    KINDS,
    StrategyChoice,
    call_from_param,
    call_labels,
    comparison_table,
    curves_figure,
    default_specs,
    drift_errors,
    drift_runs_table,
    dropped_rows,
    dropped_table,
    numbers_of,
    parse_strategies_param,
    strategy_spec,
    suggested_numbers,
    with_baseline,
)
from workbench.loading import chosen_store, load_session, show_error_and_stop
from workbench.selection import selected_session
from workbench.views import StoreSignature, escape_markdown, store_signature

DRIFT_STATE = "compaction_drift"


@st.cache_data(show_spinner="Reading the session's history…", max_entries=16)
def _history(root: str, uuid: str, signature: StoreSignature) -> History:
    return history_of(load_session(root, uuid))


@st.cache_data(show_spinner="Simulating…", max_entries=32)
def _simulations(root: str, uuid: str, specs: tuple[str, ...], signature: StoreSignature) -> list[Simulation]:
    history = _history(root, uuid, signature)
    return simulate_items(history.items, history.calls, [parse_strategy(s) for s in specs])


@st.cache_data(show_spinner=False, max_entries=16)
def _calls_recorded(root: str, uuid: str, signature: StoreSignature) -> bool:
    return any(b.recorded for b in call_budgets(load_session(root, uuid)))


def pick_numbers(kind: str, start: list[float | int]) -> str:
    """The number inputs of one strategy kind; returns its spec."""
    if kind == "rolling-tokens":
        left, right = st.columns(2)
        threshold = left.number_input(
            "rolling tokens: threshold", 1, value=int(start[0]), step=100, key=kind + "_t"
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


def pick_strategies(history: History) -> list[str]:
    """The strategies from ``?strategies=`` (else a default sized to this session), as
    pickers; the choice is written back to the URL. Returns the specs, baseline first."""
    given = st.query_params.get("strategies")
    choice = parse_strategies_param(given) if given is not None else StrategyChoice(default_specs(history))
    for error in choice.errors:
        st.error(escape_markdown(f"?strategies=: {error}"))
    if choice.ignored:
        st.warning(escape_markdown("one strategy of each kind; left out: " + ", ".join(choice.ignored)))
    suggested = suggested_numbers(history)
    kinds = st.multiselect("Strategies", KINDS, default=choice.kinds, key="strategy_kinds")
    specs = []
    for kind in kinds:
        spec = choice.spec_of(kind)
        specs.append(pick_numbers(kind, numbers_of(spec) if spec else suggested[kind]))
    st.query_params["strategies"] = ",".join(specs)
    return with_baseline(specs)


def measure_drift(root: str, uuid: str, specs: list[str], calls: list[int], base_url: str) -> list[DriftRow]:
    """Re-run the chosen calls under every strategy on the endpoint (each run is saved
    as a replay fork labelled "drift …"). A failed model call inside a run is that
    run's error; one that stops the whole comparison (a summary that cannot be written)
    is shown here, and the rest of the page stays."""
    try:
        endpoint = LLMEndpoint(base_url)
        session = load_session(root, uuid)  # a copy: replay adds its forks to it
        strategies = [parse_strategy(s) for s in specs]
        return compare(Store(root), session, strategies, calls, endpoint, model_summarizer(endpoint))
    except (SoapError, ValueError) as exc:
        st.error(escape_markdown(f"drift not measured: {exc}"))
        return []


def drift_for(uuid: str, specs: list[str]) -> list[DriftRow]:
    """The drift measured on this page for exactly this session and these strategies."""
    kept = st.session_state.get(DRIFT_STATE)
    return kept["rows"] if kept and kept["key"] == (uuid, tuple(specs)) else []


def show_drift_controls(root: str, session: Session, history: History, specs: list[str]) -> None:
    """Endpoint, calls and the button that measures drift."""
    st.subheader("Answer drift")
    st.text(
        "Drift re-runs the chosen calls on a model with what each strategy would have kept, and compares "
        "the answers with the original ones (0 = same answer, 1 = nothing in common). Every run is saved "
        "in the store as a replay fork labelled 'drift …'; the session's own contexts are not changed."
    )
    base_url = st.text_input(
        "Endpoint base URL", value=os.environ.get("OPENAI_BASE_URL", ""), key="drift_endpoint"
    ).strip()
    labels = call_labels(history)
    calls = st.multiselect("Calls to re-run", list(labels), format_func=labels.__getitem__, key="drift_calls")
    if not base_url:
        st.info("Drift needs a model: enter an OpenAI-compatible endpoint base URL (or set OPENAI_BASE_URL).")
    elif not calls:
        st.info("Pick the calls to re-run.")
    if st.button("Measure drift", disabled=not base_url or not calls, key="measure_drift"):
        runs = len(calls) * len(specs)
        with st.spinner(f"Re-running {runs} call{'s' if runs > 1 else ''} on {base_url}…"):
            rows = measure_drift(root, session.uuid, specs, calls, base_url)
        st.session_state[DRIFT_STATE] = {"key": (session.uuid, tuple(specs)), "rows": rows}


def show_dropped(history: History, simulations: list[Simulation]) -> None:
    """For one call, what every strategy had dropped by then."""
    st.subheader("What each dropped")
    total = len(history.calls)
    call = call_from_param(st.query_params.get("call"), total)
    if total > 1:
        call = st.slider("By call", 0, total - 1, value=call, key="dropped_call")
    else:
        st.text("The session has one call: call 0.")
    st.query_params["call"] = str(call)
    for simulation in simulations:
        rows = dropped_rows(history, simulation, call)
        st.text(
            f"{simulation.strategy}: {len(rows)} message{'' if len(rows) == 1 else 's'} dropped by call {call}"
        )
        if rows:
            st.dataframe(dropped_table(rows), hide_index=True, key=f"dropped_{simulation.strategy}")


def show_session(root: str, session: Session) -> None:
    """The pickers, the curves, the table, the drift controls and the dropped lists."""
    try:
        history = _history(root, session.uuid, store_signature(root))
    except SoapError as exc:
        show_error_and_stop(exc)
    if not history.calls:
        st.info("This session's active lineage has no LLM call to simulate.")
        st.stop()
    st.text(
        f"{len(history.items)} messages in the active context's lineage, {len(history.calls)} calls: each "
        "strategy is fed them call by call without a model (nothing is written to the store)."
    )
    if not _calls_recorded(root, session.uuid, store_signature(root)):
        st.text("No call log: the calls are reconstructed from the contexts (one per assistant message).")
    specs = pick_strategies(history)
    simulations = _simulations(root, session.uuid, tuple(specs), store_signature(root))
    st.plotly_chart(curves_figure(simulations), key="curves_chart")
    show_drift_controls(root, session, history, specs)
    drift = drift_for(session.uuid, specs)
    st.dataframe(comparison_table(simulations, drift), hide_index=True, key="comparison_table")
    for line in drift_errors(drift):
        st.error(escape_markdown(line))
    if drift:
        st.dataframe(drift_runs_table(drift), hide_index=True, key="drift_runs")
    show_dropped(history, simulations)


st.title("Compaction")
store_root = chosen_store()
chosen = selected_session(store_root)
st.text(f"{chosen.role} / {chosen.uuid}")
show_session(store_root, chosen)
