"""Replay & diff page: the request behind a message, verified, edited, re-run, and diffed.

Every run is saved by the replay library as a fork of the context the call was made
from; the original file is never written. The runs of the shown message are rebuilt
from those forks on every page run (:func:`replay.saved_runs`), so a reload or a shared
link shows them too; the forks show up in the pickers because the cached loaders are
keyed by the store's file signature, which a new fork file changes. Re-runs of the agent
are kept in the session state.

The page reads the session from the shared read-only cache and rebuilds a request once
per state of the store, so a click on a 100,000-message context costs what it draws. A
long request's edit form draws a window of its messages (the last ones, or any named by
number and range) and drops old history by a range; its JSON shows the ends, with the
whole body behind a download.

Outputs are shown side by side, the original on the left and the run on the right, tool
calls as text; their differences are phrased as sentences
(:mod:`replay`, as the command line phrases them), the raw DeepDiff behind an expander.

Message content is shown with st.text, st.code, st.json and st.dataframe only, never as
Markdown or HTML.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import streamlit as st
from streamlit.runtime.scriptrunner import add_script_run_ctx, get_script_run_ctx

from analysis import (
    CHECK_HELP,
    NOISE_RUNS,
    UNITS,
    Check,
    IsolateError,
    Isolation,
    attribute,
    estimate_calls,
    isolate,
    latest_attribution,
    save_attribution,
    save_isolation,
    saved_isolations,
    unit_count,
)
from replay import (
    EMPTY_OUTPUTS,
    FRAMEWORK_CODE_KEY,
    ORIGINAL_AND_RUN,
    Batch,
    BranchDiff,
    CallLog,
    ContextDiff,
    Materialized,
    Output,
    OutputDiff,
    Overrides,
    Reference,
    RegenerateScorer,
    ReplayRun,
    RerunResult,
    SavedRerun,
    SavedRun,
    ScoreError,
    ServerScorer,
    batches_from_saved,
    call_texts,
    continue_branch,
    diff_contexts,
    diff_outputs,
    diff_saved_rerun,
    materialize,
    message_address,
    message_index,
    message_ranges_text,
    output_sentences,
    output_words,
    rerun,
    resolve_reference,
    run_output,
    runs_code,
    saved_reruns,
    saved_runs,
    session_names,
    short_id,
)
from replay import (
    run_batch as replay_batch,
)
from soap_core import Message, Session, SoapError, ToolPart, time_text
from soap_core.runtime import LLMEndpoint
from workbench.attribution_views import heat_strip, isolation_frame, ranked_frame
from workbench.loading import SCOPED, Scope, chosen_store, show_error_and_stop
from workbench.replay_views import (
    EDIT_TAIL,
    MOST_BATCHES_SHOWN,
    MOST_EDITED,
    EditWindow,
    RunSettings,
    answer_after,
    batch_line,
    batch_title,
    can_rerun,
    context_diff_table,
    default_edit_window,
    delta_table,
    divergence_text,
    dropped_by_ranges,
    edit_window,
    editable_calls,
    editable_results,
    editable_text,
    kind_in_words,
    message_label,
    named_message,
    no_candidates_text,
    nothing_replayable,
    opening_note,
    original_output,
    output_of_reference,
    overrides_from_form,
    overrides_summary,
    replay_candidates,
    replayable_default,
    request_preview,
    rerun_lines,
    rerun_modes,
    rerun_pairs_table,
    run_diffs,
    run_table,
    saved_line,
    setting_states,
    source_line,
    system_prompt_text,
    verification_of,
    when_text,
    word_table,
)
from workbench.selection import keep_in_url, selected_context, selected_scope
from workbench.times import viewer_zone
from workbench.views import (
    StoreSignature,
    coloured_words,
    context_label,
    escape_markdown,
    open_store,
    store_signature,
)

RERUNS_KEY = "replay_reruns"
REPLAY_TAB = "Replay"
DIFF_TAB = "Diff two contexts or outputs"


# ── picking and showing the request ────────────────────────────────────────────────


def call_log(session: Session) -> CallLog:
    """The session's call records, read once for this page run."""
    try:
        return CallLog(session.calls())
    except SoapError as exc:
        show_error_and_stop(exc)


# Shared, not copied, like the session: a long context has some 50,000 of each.
@st.cache_resource(show_spinner="Finding the messages to replay…", max_entries=8, hash_funcs=SCOPED)
def _candidates(scope: Scope) -> tuple[int, ...]:
    return tuple(replay_candidates(scope.session, scope.chosen))


@st.cache_resource(show_spinner=False, max_entries=8, hash_funcs=SCOPED)
def _labels(scope: Scope) -> Mapping[int, str]:
    return MappingProxyType({i: message_label(scope.chosen, i) for i in _candidates(scope)})


@st.cache_resource(show_spinner="Rebuilding the request…", max_entries=4, hash_funcs=SCOPED)
def materialized(scope: Scope, index: int) -> Materialized:
    """One request, rebuilt once per state of the store: for a long context, rebuilding
    it is most of what the page costs. Shared by every rerun, like the session: read it,
    never change it (a replay copies the messages it sends)."""
    return materialize(scope.session, scope.chosen, index)


def pick_message(scope: Scope) -> tuple[int, Materialized]:
    """The assistant message of ``?message=`` (:func:`replay.message_index`), else the last one whose
    request can be rebuilt; its display index and materialized request. A message that cannot be replayed
    is said so, with why, and ends the page run (the picker above offers the others)."""
    session, context = scope.session, scope.chosen
    indices = _candidates(scope)
    if not indices:
        st.info(escape_markdown(no_candidates_text(session)))
        st.stop()
    wanted = st.query_params.get("message")  # as the session's request source reads it
    linked = message_index(session, context, wanted) if wanted else None
    linked_text = None if linked is None else str(linked)
    named = named_message(indices, linked_text)
    opening = None
    if named is None and wanted is not None:
        named = answer_after(indices, linked_text)
        if named is not None:
            st.caption(
                escape_markdown(
                    f"Message {wanted} is no model output: showing #{named}, the model's answer to it."
                )
            )
        else:
            st.warning(escape_markdown(f"message {wanted} is not an assistant message of this context"))
    if named is None:
        opening = replayable_default(indices, lambda i: materialized(scope, i))
    default = named if named is not None else opening.index if opening else indices[-1]
    labels = _labels(scope)
    chosen = int(
        st.selectbox(
            "Message",
            indices,
            index=indices.index(default),
            format_func=labels.__getitem__,
            key=f"message_picker:{context.id}",
        )
    )
    st.query_params["message"] = message_address(session, context, chosen)
    if opening is not None and chosen == opening.index:
        if opening.found is None:  # nothing to open on: say why, but as the state of the store
            st.warning(escape_markdown(nothing_replayable(opening)))
            st.stop()
        note = opening_note(opening)
        if note:
            st.caption(escape_markdown(note))
        return chosen, opening.found
    try:
        return chosen, materialized(scope, chosen)
    except SoapError as exc:
        st.error(escape_markdown(f"Message #{chosen} cannot be replayed: {exc}"))
        st.caption("Pick another message above.")
        st.stop()


def show_verification(found: Materialized) -> None:
    """Match, mismatch (with where the requests differ) or no recorded call at all."""
    verdict = verification_of(found)
    if verdict.status == "match":
        st.success(
            escape_markdown(
                f"Verified: the rebuilt request matches recorded call {verdict.call_id} (same hash)."
            )
        )
    elif verdict.status == "mismatch":
        st.error(
            escape_markdown(
                f"Mismatch: the rebuilt request differs from recorded call {verdict.call_id} "
                f"(recorded hash {verdict.recorded_hash})."
            )
        )
        st.json(verdict.differences, expanded=2)
    else:
        st.info(
            "No recorded call for this message (a store written by peteos keeps no call log): "
            "the request is rebuilt from the files; the notes say what they cannot tell."
        )


def show_found(session: Session, found: Materialized) -> None:
    """The materialized request, its hash, notes and verification, and the original answer."""
    st.subheader("Materialized request")
    st.text(f"request hash {found.request_hash}")
    st.text(source_line(found), help=f"context id {(found.sent_from or (found.context_id,))[0]}")
    for note in found.notes:
        st.text(f"note: {note}")
    show_verification(found)
    with st.expander("Request (Chat Completions body)", expanded=False):
        shown, left_out = request_preview(found.request)
        if left_out:
            st.caption(
                f"{left_out:,} of the request's messages are not shown here (a page of JSON that "
                "size would not draw): the download holds the whole body."
            )
        st.json(shown, expanded=2)
        st.download_button(
            "Download the whole request (JSON)",
            data=lambda: json.dumps(found.request, ensure_ascii=False, indent=2),
            file_name=f"request-{found.request_hash[:12]}.json",
            mime="application/json",
            key=f"request_download:{found.context_id}:{found.index}",
        )
    with st.expander("Original output", expanded=False):
        show_output(original_output(session, found))


def show_output(output: Output) -> None:
    """An output's text, then each tool call as its name and one line per argument."""
    if output.text or not output.tool_calls:
        st.text(output.text or "(no text)")
    for text in call_texts(output):
        st.code(text, language=None, wrap_lines=True)


# ── the settings and the edit form ─────────────────────────────────────────────────


@dataclass
class MessageEdits:
    """What the form's boxes hold for one message: its text (None: no text box), its tool
    calls' names and arguments, its tool results, and whether it is dropped."""

    text: str | None = None
    calls: list[tuple[str, str]] = field(default_factory=list)
    results: list[str] = field(default_factory=list)
    dropped: bool = False


def edit_message(prefix: str, index: int, message: Message) -> MessageEdits:
    """One message of the request as a playground shows it: what it is in words, its text
    in a box, each tool call as a name and its arguments, each tool result as text."""
    edits = MessageEdits()
    with st.container(border=True):
        st.text(f"#{index}  {kind_in_words(message)}")
        prefill = editable_text(message)
        if message.message_type == "SystemPromptMessage":
            st.text("(edited in the system prompt box below)")
        elif message.message_type == "ToolDefinitionsMessage":
            st.text(", ".join(p.name for p in message.content if isinstance(p, ToolPart)) or "(no tools)")
        elif prefill is not None:
            edits.text = st.text_area(f"Message {index}", value=prefill, key=f"{prefix}:edit:{index}")
        for number, (name, arguments) in enumerate(editable_calls(message)):
            left, right = st.columns([1, 3])
            edits.calls.append(
                (
                    left.text_input(
                        f"Tool call {number + 1}: name",
                        value=name,
                        key=f"{prefix}:call:{index}:{number}:name",
                    ),
                    right.text_area(
                        f"Tool call {number + 1}: arguments (JSON)",
                        value=arguments,
                        key=f"{prefix}:call:{index}:{number}:arguments",
                        height=68,
                    ),
                )
            )
        for number, result in enumerate(editable_results(message)):
            edits.results.append(
                st.text_area(
                    f"Tool result {number + 1}" if len(message.tool_results()) > 1 else "Tool result",
                    value=result,
                    key=f"{prefix}:result:{index}:{number}",
                )
            )
        if prefill is None and not edits.calls and not edits.results and message.message_type == "Message":
            st.text(
                "(" + (", ".join(p.type for p in message.content) or "no content") + ": sent as recorded)"
            )
        edits.dropped = st.checkbox(f"Drop message {index}", key=f"{prefix}:drop:{index}")
    return edits


def edit_window_input(prefix: str, count: int) -> EditWindow:
    """Which messages of a long request the form draws (a field outside the form, so that
    changing it redraws the boxes); every message of a short one, with no field."""
    if count <= MOST_EDITED:
        return edit_window("", count)
    spec = st.text_input(
        "Messages to edit (numbers and ranges)",
        value=default_edit_window(count),
        key=f"{prefix}:window",
        help=f"At most {MOST_EDITED} are shown, e.g. 0-3, {count - 5}-{count - 1}. "
        "The messages not shown are sent as recorded, unless dropped.",
    )
    window = edit_window(spec, count)
    if window.note:
        st.caption(escape_markdown(window.note))
    return window


def messages_heading(count: int, window: EditWindow) -> str:
    """The edit form's expander label: how many messages, and which are shown."""
    if len(window.indices) == count:
        return f"Messages of the request ({count:,})"
    return f"Messages of the request ({count:,}; {message_ranges_text(window.indices)} shown)"


def parameter_inputs(prefix: str, parameters: dict[str, Any]) -> tuple[str, Any, Any, Any]:
    """Model, temperature, seed and max tokens; empty fields keep the recorded values."""

    def original(key: str) -> str:
        value = parameters.get(key)
        return f"original: {value}" if value is not None else "original: unknown"

    columns = st.columns(4)
    model = columns[0].text_input("Model", key=f"{prefix}:model", placeholder=original("model"))
    temperature = columns[1].number_input(
        "Temperature", value=None, min_value=0.0, max_value=2.0, step=0.1, placeholder=original("temperature")
    )
    seed = columns[2].number_input("Seed", value=None, step=1, placeholder=original("seed"))
    max_tokens = columns[3].number_input(
        "Max tokens", value=None, min_value=1, step=1, placeholder=original("max_tokens")
    )
    return model, temperature, seed, max_tokens


def run_inputs() -> RunSettings:
    """Samples and the noise band of a replay (the endpoint is read by the caller).

    These live outside the edit form, so that a setting that does not apply is disabled
    as soon as the one it depends on changes (widgets inside a form do not rerun)."""
    st.markdown("**Replay this call** (the request above, with the edits below)")
    samples_column, concurrency_column = st.columns(2)
    noise_column, unchanged_column = st.columns(2)
    samples = samples_column.number_input(
        "Samples", min_value=1, max_value=8, value=1, step=1, key="replay_samples"
    )
    with noise_column:
        st.write("")  # lines the box up with the number field beside it
        measure_noise = st.checkbox(
            "Measure the noise band",
            key="replay_measure_noise",
            help="Also run K unchanged samples, to see how much the model varies by itself.",
        )
    states = setting_states(int(samples), measure_noise, base_url="")  # the endpoint: the caller's
    concurrency = concurrency_column.number_input(
        "Concurrency",
        min_value=1,
        max_value=8,
        value=2,
        step=1,
        key="replay_concurrency",
        disabled=states.concurrency is not None,
        help=states.concurrency or "How many samples run at once.",
    )
    unchanged = unchanged_column.number_input(
        "Unchanged samples (K)",
        min_value=2,
        max_value=8,
        value=3,
        step=1,
        key="replay_unchanged",
        disabled=states.unchanged is not None,
        help=states.unchanged or "Samples of the original request, unchanged, for the noise band.",
    )
    return RunSettings("", int(samples), int(concurrency), int(unchanged) if measure_noise else 0)


@dataclass(frozen=True)
class RerunChoice:
    """The re-run part of the form: the tool modes, chosen outside the form (``why_not``
    disables them), and whether its button was clicked."""

    why_not: str | None
    default: str = "recorded"
    unserved: str = "stop"
    injections: str = ""
    clicked: bool = False
    code: str = ""
    """The app's agent or graph (``MODULE:ATTR``) for a framework's session; empty: none."""


def rerun_settings(found: Materialized, prefix: str, stored_code: str) -> RerunChoice:
    """Tool modes of the re-run; all disabled, with the reason, when it cannot run. A
    session another framework wrote takes the app's code (its import's by default)."""
    st.markdown("**Re-run the agent from here** (its whole loop to the end of the turn, as a branch)")
    why_not = can_rerun(found)
    if why_not is not None:
        st.caption(escape_markdown(why_not))
    off = why_not is not None
    code = ""
    if runs_code(found.source):
        code = st.text_input(
            "App code (MODULE:ATTR)",
            value=stored_code,
            key=f"{prefix}:code",
            placeholder="myapp.agents:triage",
            help=(
                f"The app's starting agent or compiled graph: {found.source}'s own loop re-runs it "
                "and its tools can run live. Empty: the loop runs here, tools recorded or injected."
            ),
        ).strip()
    default = st.radio(
        "Tools answer", ["recorded", "live"], horizontal=True, key=f"{prefix}:tools", disabled=off
    )
    unserved = st.radio(
        "A call the record cannot serve",
        ["stop", "live"],
        horizontal=True,
        key=f"{prefix}:unserved",
        disabled=off or default == "live",
        help="Every call runs live: there is nothing for the record to serve." if default == "live" else None,
    )
    injections = st.text_area(
        "Injected results (one NAME=RESULT per line)",
        key=f"{prefix}:inject",
        placeholder="search=[]",
        disabled=off,
        height=68,
    )
    return RerunChoice(why_not, str(default), str(unserved), injections, code=code)


def replay_form(
    found: Materialized, stored_code: str = ""
) -> tuple[bool, Overrides, RunSettings, RerunChoice]:
    """The settings, then the edits and parameters; which button was clicked."""
    prefix = f"{found.context_id}:{found.index}"
    texts: dict[int, str] = {}
    calls: dict[int, list[tuple[str, str]]] = {}
    results: dict[int, list[str]] = {}
    drops: list[int] = []
    st.subheader("Edit and run")
    base_url = st.text_input(
        "Endpoint base URL", value=os.environ.get("OPENAI_BASE_URL", ""), key="replay_base_url"
    )
    replay_column, rerun_column = st.columns(2, gap="large")
    with replay_column, st.container(border=True):
        settings = replace(run_inputs(), base_url=base_url.strip())
    with rerun_column, st.container(border=True):
        again = rerun_settings(found, prefix, stored_code)
    states = setting_states(settings.samples, bool(settings.unchanged), settings.base_url)
    window = edit_window_input(prefix, len(found.messages))
    drop_spec = ""
    # Enter in a box never runs anything: only the buttons do (Ctrl+Enter ran the request).
    with st.form(f"replay_form:{prefix}", enter_to_submit=False):
        st.caption("What to change: Run and Re-run both send the request with these edits.")
        with st.expander(messages_heading(len(found.messages), window), expanded=False):
            for index in window.indices:
                edits = edit_message(prefix, index, found.messages[index])
                if edits.text is not None:
                    texts[index] = edits.text
                if edits.calls:
                    calls[index] = edits.calls
                if edits.results:
                    results[index] = edits.results
                if edits.dropped:
                    drops.append(index)
        if len(found.messages) > MOST_EDITED:
            drop_spec = st.text_input(
                "Drop messages (numbers and ranges)",
                key=f"{prefix}:drop_ranges",
                placeholder=f"e.g. 1-{len(found.messages) - EDIT_TAIL - 1}: send only the last messages",
                help="Left out of the request, as the drop boxes do; a tool call goes with its results.",
            )
        original_prompt = system_prompt_text(found.messages)
        system_prompt = None
        if original_prompt is not None:
            system_prompt = st.text_area("System prompt", value=original_prompt, key=f"{prefix}:system")
        model, temperature, seed, max_tokens = parameter_inputs(prefix, found.parameters)
        run_column, rerun_button_column = st.columns(2, gap="large")
        clicked = run_column.form_submit_button(
            "Run",
            type="primary",
            disabled=states.run is not None,
            help=states.run or "Send this one request again, as many times as Samples says.",
        )
        rerun_clicked = rerun_button_column.form_submit_button(
            "Re-run the agent",
            key=f"{prefix}:rerun",
            disabled=again.why_not is not None or states.run is not None,
            help=again.why_not or states.run or "Run the agent's whole loop again from this message.",
        )
        if states.run is not None:
            st.caption(states.run)
    ranged, problem = dropped_by_ranges(drop_spec, len(found.messages))
    if problem is not None:
        st.error(escape_markdown(problem))
        clicked = rerun_clicked = False
    overrides = overrides_from_form(
        found,
        texts,
        [*drops, *ranged],
        system_prompt,
        model,
        temperature,
        seed,
        max_tokens,
        calls=calls,
        results=results,
    )
    return clicked, overrides, settings, replace(again, clicked=rerun_clicked)


# ── running ────────────────────────────────────────────────────────────────────────


UNSAVED_KEY = "replay_unsaved"


def unsaved_note(runs: list[ReplayRun]) -> str | None:
    """One line for the samples that never reached the model (saved nowhere, so listed
    nowhere else); None when every sample was kept."""
    lost = [r for r in runs if not r.saved]
    if not lost:
        return None
    return (
        f"{len(lost)} of {len(runs)} samples never reached the model, and nothing was saved for them: "
        f"{lost[0].error}"
    )


def run_batch(
    scope: Scope, index: int, overrides: Overrides, settings: RunSettings, shown_hash: str
) -> list[ReplayRun]:
    """Run the replay from a fresh load of the session (the cached copy is never written);
    the runs are saved as forks, which the page reads back. Returns every run made."""
    samples, unchanged, concurrency = settings.samples, settings.unchanged, settings.concurrency
    store, session = scope.writable()
    found = materialize(session, scope.chosen.id, index)
    if found.request_hash != shown_hash:  # the edits were made against the request shown
        st.error("The store changed since this request was shown: look at it again before running.")
        st.stop()
    total = samples + unchanged
    bar = st.progress(0.0, text=f"0 of {total} samples")

    def progress(done: int, _: int) -> None:
        bar.progress(done / total, text=f"{done} of {total} samples")

    batch = replay_batch(
        store,
        session,
        found,
        LLMEndpoint(settings.base_url),
        overrides,
        samples=samples,
        unchanged=unchanged,
        concurrency=concurrency,
        on_progress=progress,
    )
    return [*batch.runs, *batch.noise_runs]


# ── showing runs ───────────────────────────────────────────────────────────────────


def show_output_diff(diff: OutputDiff, a: Output, b: Output, names: tuple[str, str]) -> None:
    """What differs in sentences, the word diff of the whole outputs (tool calls as text),
    the raw DeepDiff of the tool calls for experts, and the usage deltas."""
    st.markdown(f"**How {escape_markdown(names[1])} differs from {escape_markdown(names[0])}**")
    st.text("\n".join(f"• {sentence}" for sentence in output_sentences(a, b, names)))
    st.text(f"distance {diff.distance}  {'identical' if diff.identical else 'different'}")
    st.caption(
        escape_markdown(
            f"Word by word, tool calls as text: [-only in {names[0]}-] (red), {{+only in {names[1]}+}} (green)"
        )
    )
    st.markdown(coloured_words(output_words(a, b)) or escape_markdown(EMPTY_OUTPUTS))
    with st.expander("Word runs", expanded=False):
        st.dataframe(word_table(output_words(a, b)), hide_index=True)
    if diff.tool_calls:
        with st.expander("Raw tool-call diff (DeepDiff)", expanded=False):
            st.json(diff.tool_calls, expanded=2)
    deltas = delta_table(diff)
    if not deltas.empty:
        st.caption(escape_markdown(f"Usage and latency: {names[1]} minus {names[0]}"))
        st.dataframe(deltas, hide_index=True)


def side_by_side(a: Output, b: Output, titles: tuple[str, str]) -> None:
    """Two outputs in two columns, ``a`` on the left."""
    left, right = st.columns(2)
    for column, output, title in ((left, a, titles[0]), (right, b, titles[1])):
        with column:
            st.markdown(f"**{escape_markdown(title)}**")
            show_output(output)


def show_run(scope: Scope, run: ReplayRun, original: Output, diff: OutputDiff | None, kind: str) -> None:
    with st.container(border=True):
        if not run.saved:
            st.text(f"{kind} sample {run.sample}: nothing saved, the model was never reached")
            st.warning(escape_markdown(f"sample {run.sample} failed: {run.error}"))
            return
        st.text(f"{kind} sample {run.sample}  fork {short_id(run.fork_id)}", help=f"fork id {run.fork_id}")
        st.page_link(
            "workbench/pages/context.py",
            label="Open the fork",
            icon=":material/arrow_forward:",
            query_params={"store": scope.root, "session": scope.session.uuid, "context": run.fork_id},
        )
        if not run.ok:
            st.warning(escape_markdown(f"sample {run.sample} failed: {run.error}"))  # a run of the past
            return
        output = run_output(run)
        side_by_side(original, output, ("Original", f"This run (sample {run.sample})"))
        if diff is not None:
            show_output_diff(diff, original, output, ORIGINAL_AND_RUN)


def show_batch(scope: Scope, number: int, batch: Batch, original: Output) -> None:
    st.subheader(escape_markdown(batch_title(number, batch)))
    st.text(batch_line(batch, viewer_zone()))
    with st.expander("Overrides sent", expanded=False):
        st.json(batch.overrides.as_dict() or {"overrides": "none (the original request)"}, expanded=1)
    st.dataframe(run_table(batch, original), hide_index=True)
    band = batch.band
    if band is not None:
        figures = band.as_dict()
        st.text(
            f"noise band over {band.samples} unchanged samples: agreement rate {band.agreement_rate:.0%}, "
            f"distance min {figures['distance_min']} median {figures['distance_median']} "
            f"max {figures['distance_max']}"
        )
        st.json(figures, expanded=False)
    elif batch.noise_runs:
        st.warning(
            "Fewer than two unchanged samples succeeded: there is no noise band (a spread needs a pair)."
        )
    diffs = run_diffs(batch, original)
    for run in batch.runs:
        show_run(scope, run, original, diffs.get(run.fork_id), "run")
    for run in batch.noise_runs:
        show_run(scope, run, original, diffs.get(run.fork_id), "unchanged")


def show_saved_runs(scope: Scope, found: Materialized, saved: list[SavedRun]) -> None:
    """The runs of this message the store keeps, newest batch first."""
    batches = batches_from_saved(saved)
    if not batches:
        return
    st.header("Runs of this message")
    original = original_output(scope.session, found)
    shown = list(enumerate(batches, start=1))[-MOST_BATCHES_SHOWN:]
    for number, batch in reversed(shown):
        show_batch(scope, number, batch, original)
    if len(batches) > len(shown):
        st.caption(
            f"{len(batches) - len(shown)} older runs of this message are not shown here; "
            "their forks are in the fork tree."
        )


def show_replay(scope: Scope) -> None:
    """The Replay tab: pick, verify, edit, run, and the runs saved for this message."""
    scope = selected_context(scope)
    session = scope.session
    calls = call_log(session)
    index, found = pick_message(scope)
    show_found(session, found)
    runs = saved_runs(session, found.context_id, found.index, message_id=found.message_id, calls=calls)
    reruns = saved_reruns(session, found.context_id, found.index, message_id=found.message_id, calls=calls)
    kept = saved_line(len(batches_from_saved(runs)), len(reruns))
    if kept:
        st.caption(kept)
    clicked, overrides, settings, again = replay_form(
        found, str(session.state_data.get(FRAMEWORK_CODE_KEY) or "")
    )
    fresh: dict[str, RerunResult] = st.session_state.setdefault(RERUNS_KEY, {})
    if again.clicked:
        if not settings.base_url:
            st.error("No endpoint: enter the base URL of an OpenAI-compatible server.")
            st.stop()
        result = run_rerun(scope, found, overrides, settings, again)
        fresh[result.fork_id] = result
        st.rerun()  # the branch is in the store now: the page reads it back with the rest
    show_saved_reruns(scope, reruns, calls, fresh, settings.base_url)
    if clicked:
        if not settings.base_url:
            st.error("No endpoint: enter the base URL of an OpenAI-compatible server.")
            st.stop()
        try:
            made = run_batch(scope, index, overrides, settings, found.request_hash)
        except SoapError as exc:
            show_error_and_stop(exc)
        unsaved = unsaved_note(made)
        if unsaved:
            st.session_state[UNSAVED_KEY] = unsaved  # said after the rerun: nothing in the store says it
        st.rerun()  # the new forks change the store signature: the page reads them afresh
    note = st.session_state.pop(UNSAVED_KEY, None)
    if note:
        st.error(escape_markdown(note))
    show_saved_runs(scope, found, runs)
    show_attribution(scope, index, found, settings.base_url)
    show_isolations(scope, index, found, settings)


# ── why this answer: attribution ─────────────────────────────────────────────────────

ATTRIBUTION_ABOUT = (
    "Random halves of the request's messages (or, by Unit, of their parts or sentences) are removed; the "
    "answer's log-probability under each such request (teacher-forced on the local model, which scores a "
    "given answer) fits a sparse linear model whose weights say how much the answer leans on each "
    "(ContextCite). "
    "The top-k drop and the LDS say how far to trust it: see the README's Reading attribution scores."
)


def show_attribution(scope: Scope, index: int, found: Materialized, base_url: str) -> None:
    """The newest attribution of this answer (heat strip, ranked list, trust figures) and
    the button that makes a new one; it is saved with the session."""
    st.header("Why this answer")
    answer = scope.session.contexts[found.context_id].messages[found.index : found.index + 1]
    if not answer or answer[0].role != "assistant":
        st.caption("Attribution is for a model answer: pick one above.")
        return
    st.caption(ATTRIBUTION_ABOUT)
    prefix = f"{found.context_id}:{found.index}"
    latest = latest_attribution(scope.session, found.context_id, found.index)
    with st.container(horizontal=True, vertical_alignment="bottom"):
        ablations = int(st.number_input("Ablations", 4, 256, 16, step=4, key=f"attribute_k:{prefix}"))
        unit = st.selectbox(
            "Unit",
            UNITS,
            index=UNITS.index(latest.unit) if latest is not None and latest.unit in UNITS else 0,
            key=f"attribute_unit:{prefix}",
            help="What is taken out: whole messages; each text part and tool result; or each sentence. "
            "A tool call, the tool definitions and an image stay whole.",
        )
        method = st.radio(
            "Scoring",
            list(SCORING_METHODS),
            format_func=SCORING_METHODS.__getitem__,
            horizontal=True,
            key=f"attribute_method:{prefix}",
            help="A hosted chat API gives no log-probability of a given answer: regenerate-and-compare "
            "sends each request again and compares the new answer with this one (coarser, and noisy: "
            f"{NOISE_RUNS} unchanged re-runs measure its noise band).",
        )
        clicked = st.button("Attribute", key=f"attribute:{prefix}")
    noisy = method == "regenerate"
    count = unit_count(found, unit)
    calls = estimate_calls(found, ablations, noisy, unit)
    st.caption(
        f"{calls} {'model calls' if noisy else 'scored requests'}, each about half of this request "
        f"(a random half of its {count:,} {unit}s), on {base_url or 'no endpoint yet'}"
        + (
            f". Fewer ablations than {unit}s leave the fit underdetermined: {2 * count:,} or more is safer"
            if ablations < count
            else ""
        )
    )
    if clicked:
        if not base_url:
            st.error("No endpoint: enter the base URL of the local model server above.")
            st.stop()
        run_attribution(scope, index, found.request_hash, ablations, base_url, noisy, unit)
        st.rerun()  # the record is in the store now: the page reads it back
    if latest is None:
        st.info("No attribution of this answer yet.")
        return
    st.markdown(escape_markdown(latest.summary()[:1].upper() + latest.summary()[1:] + "."))
    st.plotly_chart(heat_strip(latest), key=f"heat:{prefix}")
    st.dataframe(ranked_frame(latest), hide_index=True)
    st.caption(escape_markdown(latest.trust()))
    k = latest.fitted_on
    st.caption(
        escape_markdown(
            f"{k} ablations of {latest.unit}s, {latest.calls} scored requests in {latest.seconds:.0f} s on {latest.endpoint} "
            f"({latest.method}), {time_text(latest.created_at)}"
        )
    )


SCORING_METHODS = {
    "score": "log-probability (local model)",
    "regenerate": "regenerate and compare (any endpoint, weaker)",
}


def run_attribution(
    scope: Scope,
    index: int,
    shown_hash: str,
    ablations: int,
    base_url: str,
    noisy: bool = False,
    unit: str = "message",
) -> None:
    """Attribute from a fresh load of the session and save the result beside it."""
    store, session = scope.writable()
    found = materialize(session, scope.chosen.id, index)
    if found.request_hash != shown_hash:
        st.error("The store changed since this request was shown: look at it again before running.")
        st.stop()
    bar = st.progress(0.0, text="scoring the whole request")

    def progress(done: int, total: int) -> None:
        bar.progress(done / total, text=f"{done} of {total} requests scored")

    try:
        with RegenerateScorer(LLMEndpoint(base_url)) if noisy else ServerScorer(base_url) as scorer:
            scorer.check()
            result = attribute(session, found, scorer, ablations=ablations, unit=unit, on_progress=progress)
        save_attribution(store, session, result)
    except (ScoreError, SoapError) as exc:
        show_error_and_stop(exc)


ISOLATE_ABOUT = (
    "Runs the request again with parts of it removed, split by delta debugging (ddmin) in the order "
    "of the answer's latest attribution, until it finds a smallest set of messages whose removal flips "
    "the check (with 'keep': whose presence alone keeps the usual result). The unchanged runs first "
    "say what the check usually says and how often it flips by chance. Every run is a replay fork "
    "labelled 'isolate'; the result is kept with the session."
)
ISOLATIONS_SHOWN = 5


@st.cache_data(show_spinner=False, max_entries=32, hash_funcs=SCOPED)
def answer_isolations(scope: Scope, context_id: str, index: int) -> tuple[list[Isolation], list[str]]:
    """The isolations kept for this answer, newest first, and the errors of unreadable
    records (the scope's key moves with the store's files: an isolation adds forks)."""
    errors: list[SoapError] = []
    found = [
        i
        for i in saved_isolations(scope.session, errors=errors)
        if (i.context_id, i.index) == (context_id, index)
    ]
    return found[::-1], [str(e) for e in errors]


def show_isolations(scope: Scope, index: int, found: Materialized, settings: RunSettings) -> None:
    """The smallest part of the request that flips a check on the answer: the form that
    runs ``isolate`` and the isolations kept for this answer, each with its runs."""
    answer = scope.session.contexts[found.context_id].messages[found.index : found.index + 1]
    if not answer or answer[0].role != "assistant":
        return
    st.subheader("The smallest cause: isolate")
    st.caption(ISOLATE_ABOUT)
    prefix = f"{found.context_id}:{found.index}"
    with st.container(horizontal=True, vertical_alignment="bottom"):
        check_text = st.text_input(
            "Check", key=f"isolate_check:{prefix}", help=CHECK_HELP, placeholder="contains:TEXT"
        )
        noise = int(st.number_input("Unchanged runs", 1, 10, 3, key=f"isolate_noise:{prefix}"))
        keep = st.toggle(
            "keep", key=f"isolate_keep:{prefix}", help="find the smallest part that alone keeps the check"
        )
        clicked = st.button("Isolate", key=f"isolate:{prefix}", disabled=not check_text.strip())
    if clicked:
        run_isolation(scope, index, found.request_hash, check_text, noise, keep, settings)
        st.rerun()  # the record and the forks are in the store now
    kept, errors = answer_isolations(scope, found.context_id, found.index)
    for error in errors:
        st.error(escape_markdown(error))
    for made in kept[:ISOLATIONS_SHOWN]:
        show_isolation(made)
    if len(kept) > ISOLATIONS_SHOWN:
        st.caption(f"{len(kept) - ISOLATIONS_SHOWN} older isolations of this answer are kept and not shown")


def show_isolation(made: Isolation) -> None:
    """One kept isolation: what it found, what it took, and every run."""
    with st.container(border=True):
        st.text(made.summary()[:1].upper() + made.summary()[1:] + ".")
        disagreed = sum(1 for t in made.noise if t.holds is not None and t.holds != made.usual)
        st.caption(
            escape_markdown(
                f"{made.calls} model calls ({len(made.noise)} unchanged, of which {disagreed} disagreed: "
                f"{made.chance:.0%} by chance; {len(made.trials)} with parts removed), against {made.one_by_one} "
                f"for one-by-one removal; split in the order of {made.ordered_by}; {time_text(made.created_at)}"
            )
        )
        st.dataframe(isolation_frame(made), hide_index=True, key=f"isolation:{made.id}")


def run_isolation(
    scope: Scope, index: int, shown_hash: str, check_text: str, noise: int, keep: bool, settings: RunSettings
) -> None:
    """Isolate from a fresh load of the session and keep the result beside it."""
    try:
        check = Check.parse(check_text.strip())
    except IsolateError as exc:
        st.error(escape_markdown(str(exc)))
        st.stop()
    if not settings.base_url:
        st.error("No endpoint: enter the base URL of a model server above.")
        st.stop()
    status = st.empty()

    def progress(runs: int) -> None:
        status.text(f"isolating: {runs} model calls made")

    try:
        store, session = scope.writable()
        found = materialize(session, scope.chosen.id, index)
        if found.request_hash != shown_hash:
            st.error("The store changed since this request was shown: look at it again before running.")
            st.stop()
        max_tokens = found.parameters.get("max_tokens") or 256
        result = isolate(
            store,
            session,
            found,
            LLMEndpoint(settings.base_url),
            check,
            keep=keep,
            noise=noise,
            base=Overrides(max_tokens=int(max_tokens)),
            on_progress=progress,
        )
        save_isolation(store, session, result)
    except SoapError as exc:
        show_error_and_stop(exc)


def run_rerun(
    scope: Scope, found: Materialized, overrides: Overrides, settings: RunSettings, again: RerunChoice
) -> RerunResult:
    """The re-run from a fresh load of the session (the cached copy is never written)."""
    try:
        store, session = scope.writable()
        modes = rerun_modes(again.default, again.unserved, again.injections)
        bar = st.progress(0.0, text="Re-running the agent: no model call yet")
        page_run = get_script_run_ctx()

        def step(done: int) -> None:  # the limit is the agent's; its callees add steps of their own
            if get_script_run_ctx(suppress_warning=True) is None:  # a framework's own thread
                add_script_run_ctx(threading.current_thread(), page_run)
            bar.progress(min(1.0, done / (done + 1)), text=f"Re-running the agent: {done} model calls")

        result = rerun(
            store,
            session,
            found.context_id,
            found.index,
            LLMEndpoint(settings.base_url),
            overrides=overrides,
            tools=modes,
            on_step=step,
            code=again.code,
        )
        bar.progress(1.0, text=f"Re-ran the agent: {len(result.calls)} model calls")
        return result
    except SoapError as exc:
        show_error_and_stop(exc)


def show_saved_reruns(
    scope: Scope,
    saved: list[SavedRerun],
    calls: CallLog,
    fresh: dict[str, RerunResult],
    base_url: str,
) -> None:
    """The re-runs of the agent from this message the store keeps, newest first. A re-run
    made in this browser session also says how each tool call was served (``fresh``)."""
    if not saved:
        return
    st.header("Re-runs of the agent from this message")
    numbered = list(enumerate(saved, start=1))
    for number, kept in reversed(numbered[-MOST_BATCHES_SHOWN:]):
        result = fresh.get(kept.result.fork_id, kept.result)  # the run's own account, when it was here
        try:
            diff = diff_saved_rerun(scope.session, result, calls)
        except (KeyError, SoapError) as exc:
            st.error(escape_markdown(f"re-run {number} (fork {short_id(kept.result.fork_id)}): {exc}"))
            continue
        show_rerun(number, kept, result, diff)
        continue_form(scope, result, base_url)
    if len(numbered) > MOST_BATCHES_SHOWN:
        st.caption(
            f"{len(numbered) - MOST_BATCHES_SHOWN} older re-runs are not shown; they are in the fork tree."
        )


def show_rerun(number: int, kept: SavedRerun, result: RerunResult, diff: BranchDiff) -> None:
    """One re-run: how it ended, what answered its tools, and its branch beside the original."""
    st.subheader(escape_markdown(f"Re-run {number}: {overrides_summary(kept.overrides)}"))
    when = when_text(kept.started_at, viewer_zone())
    if kept.label or when:
        st.text(", ".join(x for x in (kept.label and f"label {kept.label}", when and f"started {when}") if x))
    lines = rerun_lines(result, diff, kept.tools if not result.tools else None)
    if result.ok:
        st.text(lines[1])
    else:
        st.error(escape_markdown(lines[1]))
    for failure in result.tool_failures:  # each tool call that failed, as the model was told
        st.text(f"tool call failed: {failure.get('role')}.{failure.get('tool')}({failure.get('arguments')})")
        st.code(str(failure.get("result", "")), language=None)
    for line in (lines[0], *lines[2:]):
        st.text(line)
    st.dataframe(rerun_pairs_table(diff), hide_index=True, key=f"rerun_pairs:{result.branch_id}")


CONTINUED_KEY = "replay_continued"


def continue_form(scope: Scope, result: RerunResult, base_url: str) -> None:
    """A new user message at the end of the re-run's branch, and the agent's turn on it
    (tools live: a new turn has no record); each turn is shown under the branch."""
    turns: dict[str, list[RerunResult]] = st.session_state.setdefault(CONTINUED_KEY, {})
    with st.form(f"continue:{result.branch_id}"):
        text = st.text_input(
            "Continue this branch: what the user says next", key=f"continue_text:{result.branch_id}"
        )
        clicked = st.form_submit_button("Continue")
    if clicked and text.strip():
        if not base_url:
            st.error("No endpoint: enter the base URL of an OpenAI-compatible server above.")
            st.stop()
        latest = (turns.get(result.branch_id) or [result])[-1].branch_id
        try:
            store, session = scope.writable()
            with st.spinner("The agent's turn…"):
                turn = continue_branch(
                    store, session, session.contexts[latest], text.strip(), LLMEndpoint(base_url)
                )
        except SoapError as exc:
            show_error_and_stop(exc)
        turns.setdefault(result.branch_id, []).append(turn)
    for turn in turns.get(result.branch_id, []):
        answer = json.dumps(turn.answer, ensure_ascii=False) if turn.ok else f"failed: {turn.problem}"
        st.text(f"continued ({len(turn.calls)} model calls): {answer}")


# ── the diff tab ───────────────────────────────────────────────────────────────────


@st.cache_data(show_spinner="Finding the context…", max_entries=16)
def _reference(root: str, ref: str, signature: StoreSignature) -> Reference:
    return resolve_reference(open_store(root), ref)


DIFF_PARAMS = ("diff_a", "diff_b")
WHOLE = "the whole context"


def _own_part(session: Session, ref: str) -> tuple[str, str] | None:
    """``ref`` as (context id, index) when it names a context of ``session``; None when
    it names another session's, or nothing."""
    context_ref, _, index = ref.partition("@")
    if not context_ref:
        return None
    hits = [cid for cid in session.contexts if cid.startswith(context_ref)]
    return (hits[0], index) if len(hits) == 1 else None


def reference_picker(session: Session, side: str, param: str) -> str:
    """One side of the diff: a context of this session picked from its fork tree, and a
    message of it (its output), or a reference typed for any session of the store. Kept in
    ``?diff_a=`` / ``?diff_b=`` as the reference it makes (``CONTEXT`` or ``CONTEXT@INDEX``)."""
    saved = [n.id for n in session_names(session).nodes if n.id in session.contexts]
    picked, at, typed = f"{param}_context", f"{param}_at", f"{param}_typed"
    if picked not in st.session_state:  # first run of this page: from the link
        linked = st.query_params.get(param, "")
        own = _own_part(session, linked) if linked else None
        st.session_state[picked] = own[0] if own else None
        st.session_state[at] = own[1] if own else ""
        st.session_state[typed] = linked if linked and own is None else ""
    context_id = st.selectbox(
        f"{side}: context",
        saved,
        format_func=lambda cid: context_label(session, cid),
        key=picked,
        placeholder="Pick a context from the fork tree",
    )
    index = st.text_input(
        f"{side}: at message",
        key=at,
        placeholder=f"empty: {WHOLE}; a number: its output at that message",
        help="A message's number as the Context page shows it: the output there is compared too.",
    ).strip()
    with st.expander(f"{side}: from another session"):
        other = st.text_input(
            "Context id or prefix, optionally @index",
            key=typed,
            help="Any context of this store; this takes the place of the pick above.",
        ).strip()
    ref = other or (f"{context_id}@{index}" if context_id and index else context_id or "")
    keep_in_url(param, ref or None)
    return ref


def show_diff(scope: Scope) -> None:
    """Two contexts side by side; and their outputs when both references name one.

    Errors end this tab only (st.error and return, not st.stop), so that a bad reference
    never hides the Replay tab.
    """
    session = scope.session
    columns = st.columns(2)
    with columns[0]:
        a_ref = reference_picker(session, "A", "diff_a")
    with columns[1]:
        b_ref = reference_picker(session, "B", "diff_b")
    if not a_ref or not b_ref:
        st.info(
            "Pick two contexts to compare them; give a message number to compare their outputs there too."
        )
        return
    try:
        a, b = _reference(scope.root, a_ref, scope.signature), _reference(scope.root, b_ref, scope.signature)
    except SoapError as exc:
        st.error(escape_markdown(str(exc)))
        return
    st.text(f"A: {_side_text(a)}")
    st.text(f"B: {_side_text(b)}")
    if a.names_output and b.names_output:
        st.subheader("Outputs")
        a_output, b_output = output_of_reference(a), output_of_reference(b)
        side_by_side(a_output, b_output, (f"A: {_output_name(a)}", f"B: {_output_name(b)}"))
        show_output_diff(diff_outputs(a_output, b_output), a_output, b_output, ("A", "B"))
    elif a.names_output or b.names_output:
        st.text("Only one side names an output (a message number, or a replay run): comparing contexts only.")
    st.subheader("Contexts")
    diff = diff_contexts(a.context, b.context)
    st.text(divergence_text(diff))
    st.dataframe(
        context_diff_table(diff),
        hide_index=True,
        column_config={"changes": st.column_config.TextColumn(width="large")},
    )
    show_changed_words(diff)


MOST_WORD_ROWS = 40  # changed messages shown word by word below the table; the table holds them all


def show_changed_words(diff: ContextDiff) -> None:
    """Each message that differs on both sides, word by word in red and green (a table
    cell can only hold the plain marks)."""
    changed = [
        r for r in diff.rows if not r["same"] and r["a"] is not None and r["b"] is not None and r["words"]
    ]
    if not changed:
        return
    with st.expander(f"Changed messages, word by word ({len(changed)})", expanded=len(changed) <= 3):
        for row in changed[:MOST_WORD_ROWS]:
            st.caption(
                escape_markdown(
                    f"A #{row['a_index']} {row['a']['role']} · B #{row['b_index']} {row['b']['role']}"
                )
            )
            st.markdown(coloured_words(row["words"]))
        if len(changed) > MOST_WORD_ROWS:
            st.caption(f"{len(changed) - MOST_WORD_ROWS} more in the table above.")


def _output_name(ref: Reference) -> str:
    """A side's output named as the fork tree names its context: ``main, message 6``."""
    name = session_names(ref.session).names.get(ref.context.id) or short_id(ref.context.id)
    return f"{name}, message {ref.index}" if ref.index is not None else f"{name}, its answer"


def _side_text(ref: Reference) -> str:
    where = context_label(ref.session, ref.context.id)
    at = f", its output at message {ref.index}" if ref.index is not None else ""
    return f"{where}{at} ({ref.session.role} / {short_id(ref.session.uuid)})"


def session_of_the_link(root: str) -> None:
    """A diff link without ``?session=`` (an older or hand-made one) opens the session
    of its first reference, instead of a picker that hides the diff."""
    if st.query_params.get("session"):
        return
    for param in DIFF_PARAMS:
        ref = st.query_params.get(param)
        if ref:
            try:
                st.query_params["session"] = _reference(root, ref, store_signature(root)).session.uuid
            except SoapError:
                continue
            return


st.title("Replay & diff")
store_root = chosen_store()
wants_diff = any(st.query_params.get(p) for p in DIFF_PARAMS)
if wants_diff:
    session_of_the_link(store_root)
page_scope = selected_scope(read_only=True)
replay_tab, diff_tab = st.tabs([REPLAY_TAB, DIFF_TAB], default=DIFF_TAB if wants_diff else REPLAY_TAB)
with diff_tab:
    show_diff(page_scope)
with replay_tab:
    show_replay(page_scope)
