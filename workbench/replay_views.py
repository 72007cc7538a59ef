"""What the Replay & diff page shows and sends, computed without Streamlit.

The page turns form values into :class:`replay.Overrides`, groups the runs the store
keeps into the :class:`Batch` each click of Run made, says which settings apply, and
shows diffs as tables and marked text; all of that is here, so a test can compute
exactly what the page should show from the same inputs.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import tzinfo
from typing import Any, Literal

import pandas as pd

from importers.openpoke import EXECUTION_ROLE, is_openpoke_session, openpoke_meta
from replay import (
    Batch,
    BranchDiff,
    ContextDiff,
    Materialized,
    MessageRangeError,
    NoiseBand,
    Output,
    OutputDiff,
    Overrides,
    Reference,
    RerunResult,
    ToolModes,
    Turn,
    built_as,
    counted,
    diff_outputs,
    injected_results,
    inline_call,
    marked_words,
    message_ranges_text,
    parse_message_ranges,
    request_differences,
    row_changes,
    run_output,
    runs_code,
    short_id,
)
from soap_core import Context, Message, Session, SoapError, canonical_json, time_text
from workbench.transcript import STYLES, short_value, speaker

PREVIEW_WIDTH = 60
WORD_COLUMNS = ("op", "words")
RUN_COLUMNS = ("kind", "sample", "fork", "ok", "distance", "identical", "noise band", "error")
CONTEXT_DIFF_COLUMNS = ("a #", "b #", "same", "changes", "a role", "a text", "b role", "b text", "word diff")

VerdictStatus = Literal["match", "mismatch", "unrecorded"]


@dataclass(frozen=True)
class Verdict:
    """Whether the request rebuilt from the files is the one the model was sent."""

    status: VerdictStatus
    call_id: str | None = None
    recorded_hash: str | None = None
    differences: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunSettings:
    """Where and how often to run: the endpoint, samples, workers and unchanged samples."""

    base_url: str
    samples: int = 1
    concurrency: int = 2
    unchanged: int = 0
    """How many unchanged samples measure the noise band (0: no noise band)."""


# ── the pickers ──────────────────────────────────────────────────────────────


def assistant_indices(context: Context) -> list[int]:
    """Display indices of the model outputs of a context: the messages one can replay."""
    return [i for i, m in enumerate(context.messages) if m.role == "assistant"]


OPENPOKE_REQUEST_TAGS = ("user_message", "agent_message")
"""The OpenPoke entries a request is rebuilt for: OpenPoke posts one when such an entry
arrives, and its answer is the turn's poke_reply (``importers.openpoke`` refuses the rest)."""


def replay_candidates(session: Session, context: Context) -> list[int]:
    """Display indices of the messages the page offers to replay.

    A model output, in general. An imported OpenPoke log keeps no requests: its
    interaction agent's requests are rebuilt at the entries it answered (a user_message
    or agent_message), so those are offered, with the outputs of our own replays among
    them; an execution agent's requests cannot be rebuilt at all."""
    if not is_openpoke_session(session):
        return assistant_indices(context)
    if session.role == EXECUTION_ROLE:
        return []
    offered = []
    for index, message in enumerate(context.messages):
        meta = openpoke_meta(message)
        ours = meta is None and message.role == "assistant"  # the answer in a replay's fork
        answered = meta is not None and meta["tag"] in OPENPOKE_REQUEST_TAGS
        if ours or answered:
            offered.append(index)
    return offered


def no_candidates_text(session: Session) -> str:
    """What the page says when a context offers nothing to replay."""
    if is_openpoke_session(session) and session.role == EXECUTION_ROLE:
        return (
            "An OpenPoke execution agent's requests cannot be rebuilt (OpenPoke does not log them): "
            "replay the interaction agent's session at the entry that handed the task over."
        )
    return "This context has no assistant message: there is no model output to replay."


def message_preview(message: Message, width: int = PREVIEW_WIDTH) -> str:
    """One line saying what a message holds: its text, else its tool calls, else its part types."""
    text = " ".join(message.text().split())
    if not text and message.tool_uses():
        text = "calls " + ", ".join(u.name for u in message.tool_uses())
    if not text:
        text = "(" + (", ".join(p.type for p in message.content) or "no content") + ")"
    return short_value(text, width)


def message_label(context: Context, index: int) -> str:
    """How a message is named in the picker: display index and preview."""
    return f"#{index}  {message_preview(context.messages[index])}"


def named_message(indices: Sequence[int], wanted: str | None) -> int | None:
    """The index ``?message=`` names when it is one of ``indices``, else None."""
    digits = (wanted or "").strip().lstrip("-")
    if digits.isascii() and digits.isdigit() and int(wanted or "") in indices:  # "²" is a digit, no int
        return int(wanted or "")
    return None


def answer_after(indices: Sequence[int], wanted: str | None) -> int | None:
    """For a ``?message=`` that names a message which is no model output (a user message
    or a tool result, carried from the Context page or a search hit): the first of
    ``indices`` after it, the model's answer to it; None when it names no index or none follows."""
    digits = (wanted or "").strip()
    if not (digits.isascii() and digits.isdigit()):
        return None
    at = bisect.bisect_right(indices, int(digits))
    return indices[at] if at < len(indices) else None


REPLAYABLE_TRIES = 8
"""How many assistant messages, from the last one back, the page tries to rebuild before
it opens on one it cannot replay (each try materializes a request)."""


@dataclass(frozen=True)
class Opening:
    """The message a page opens on when the URL names none: the last one that can be
    replayed, its request, and the later ones that cannot (with why)."""

    index: int
    found: Materialized | None
    """None when none of the messages tried can be replayed."""
    failures: tuple[tuple[int, str], ...] = ()


def replayable_default(
    indices: Sequence[int],
    materialize_at: Callable[[int], Materialized],
    tries: int = REPLAYABLE_TRIES,
) -> Opening:
    """The last of ``indices`` (not empty) whose request ``materialize_at`` rebuilds, trying
    at most ``tries`` from the end; the last index itself when none of those can be."""
    failures: list[tuple[int, str]] = []
    for index in list(reversed(indices))[:tries]:
        try:
            return Opening(index, materialize_at(index), tuple(failures))
        except SoapError as exc:
            failures.append((index, str(exc)))
    return Opening(indices[-1], None, tuple(failures))


def opening_note(opening: Opening) -> str | None:
    """What the page says when it did not open on the last assistant message."""
    if not opening.failures or opening.found is None:
        return None
    skipped = ", ".join(f"#{i}" for i, _ in opening.failures)
    return (
        f"Opened on message #{opening.index}, the last one whose request can be rebuilt: "
        f"{skipped} cannot be replayed ({opening.failures[0][1]})."
    )


def nothing_replayable(opening: Opening) -> str:
    """What the page says when none of the messages it tried can be replayed."""
    tried = len(opening.failures)
    last = opening.failures[0][1] if opening.failures else "no message was tried"
    which = "the last assistant message" if tried == 1 else f"the last {tried} assistant messages"
    return f"None of {which} of this context can be replayed; message #{opening.index}: {last}"


# ── verification ────────────────────────────────────────────────────────────────────


SOURCE_DESCRIPTIONS = {
    "soapwb": "our runtime's recorded request",
    "peteos-0.5": "the body peteos 0.5's OpenAI adapter builds",
    "peteos-0.6": "the body peteos 0.6's OpenAI adapter builds",
    "openpoke": "the request OpenPoke's interaction agent posts",
    "otel": "the request its OpenTelemetry trace kept: the whole body from OpenInference, the messages from GenAI",
}


def source_line(found: Materialized) -> str:
    """Which framework's request shape the page shows, and where its messages came from."""
    what = SOURCE_DESCRIPTIONS.get(found.source)  # a source's own ``built`` words say enough
    where = (
        f"the {found.sent_from[1]} messages of context {short_id(found.sent_from[0])}"
        if found.sent_from
        else f"context {short_id(found.context_id)} before message #{found.index}, {len(found.messages)} messages"
    )
    built = built_as(found.source)
    return f"{built[0].upper()}{built[1:]}{f' ({what})' if what else ''} from {where}."


REQUEST_HEAD, REQUEST_TAIL = 3, 50
"""The messages of a long request the page shows as JSON: its first (system prompt and
the like) and its last."""


def request_preview(request: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
    """The request as the page shows it, and how many messages that leaves out: all of a
    short one; of a long one, its first :data:`REQUEST_HEAD` and last :data:`REQUEST_TAIL`
    messages, with a string in their place saying how many are between."""
    messages = request.get("messages")
    if not isinstance(messages, list) or len(messages) <= REQUEST_HEAD + REQUEST_TAIL:
        return dict(request), 0
    left_out = len(messages) - REQUEST_HEAD - REQUEST_TAIL
    last = len(messages) - REQUEST_TAIL - 1
    marker = f"… {left_out:,} messages of the body not shown (its positions {REQUEST_HEAD:,} to {last:,}) …"
    shown = [*messages[:REQUEST_HEAD], marker, *messages[-REQUEST_TAIL:]]
    return {**request, "messages": shown}, left_out


def verification_of(found: Materialized) -> Verdict:
    """The rematerialized request against the recorded call, by hash; where they differ."""
    if found.call is None:
        return Verdict("unrecorded")
    recorded = found.call.request_hash
    call_id = found.call.id
    if recorded == found.request_hash:
        return Verdict("match", call_id, recorded)
    differences = request_differences(found.call.request, found.request)
    return Verdict("mismatch", call_id, recorded, differences)


# ── the edit form ───────────────────────────────────────────────────────────────────


def editable_text(message: Message) -> str | None:
    """The text a replay may replace in ``message``, or None when it has no text box.

    This mirrors what :func:`replay.replay_messages` can edit: the text parts (joined as
    ``Message.text`` joins them); an answer that only called tools gets an empty box, so
    words can be put in its mouth. Tool calls and tool results have boxes of their own
    (:func:`editable_calls`, :func:`editable_results`); the system prompt has one box for
    the whole request.
    """
    if message.message_type != "Message":
        return None  # the system prompt: one box below; tool definitions: sent as recorded
    if any(p.type == "text" for p in message.content):
        return message.text()
    return "" if message.role == "assistant" else None


def editable_calls(message: Message) -> list[tuple[str, str]]:
    """Each tool call of ``message``: its name and its arguments, the string the model wrote."""
    return [(u.name, u.arguments) for u in message.tool_uses()]


def editable_results(message: Message) -> list[str]:
    """Each tool result of ``message`` as text (a non-string result as JSON: editing it
    sends the edited text as the result)."""
    return [
        r.content if isinstance(r.content, str) else json.dumps(r.content, ensure_ascii=False)
        for r in message.tool_results()
    ]


def kind_in_words(message: Message) -> str:
    """What a message is, as the transcript names it: ``user``, ``assistant: 2 tool calls``,
    ``tool result (search)``, ``system prompt``, ``tool definitions (4 tools)``; never a
    class name."""
    who = speaker(message)
    label = STYLES[who].label if who != "other" else f"{message.role} message"
    if who == "tools":
        count = len(message.content)
        return f"{label} ({count} tool{'' if count == 1 else 's'}, sent as recorded)"
    calls = message.tool_uses()
    if calls:
        return f"{label}: {len(calls)} tool call{'' if len(calls) == 1 else 's'}"
    names = [r.name for r in message.tool_results() if r.name]
    if who == "tool result" and names:
        return f"{label} ({', '.join(dict.fromkeys(names))})"
    return label


MOST_EDITED = 50
"""The most messages the edit form draws. Each is a text area and a checkbox, and
Streamlit's cost per widget grows with the widgets on the page: a form over all 100,000
messages of a long request never finished drawing."""

EDIT_TAIL = 20
"""The messages a long request's form offers by default: its last ones, the question
and what the model saw just before it answered."""


@dataclass(frozen=True)
class EditWindow:
    """The messages of the request the edit form draws, and why not others asked for."""

    indices: list[int]
    note: str | None = None


def default_edit_window(count: int) -> str:
    """What the "Messages to edit" field starts at: every message of a short request
    (the field is not shown then), the last :data:`EDIT_TAIL` of a long one."""
    return "" if count <= MOST_EDITED else f"{count - EDIT_TAIL}-{count - 1}"


def edit_window(spec: str, count: int) -> EditWindow:
    """The messages the form draws for ``spec`` (numbers and ranges, as
    :func:`replay.parse_message_ranges` reads them) in a request of ``count`` messages:
    all of a short request; else those named, at most :data:`MOST_EDITED`; the default
    window, with why, when the field names none or cannot be read."""
    if count <= MOST_EDITED:
        return EditWindow(list(range(count)))
    tail = parse_message_ranges(default_edit_window(count), count)
    try:
        chosen = parse_message_ranges(spec, count)
    except MessageRangeError as exc:
        return EditWindow(tail, f"{exc}: showing the last {EDIT_TAIL} messages instead.")
    if not chosen:
        return EditWindow(tail, f"No message named: showing the last {EDIT_TAIL}.")
    if len(chosen) > MOST_EDITED:
        shown = chosen[:MOST_EDITED]
        return EditWindow(
            shown,
            f"{len(chosen):,} messages named: the form shows the first {MOST_EDITED} "
            f"({message_ranges_text(shown)}). Drop many at once with the field below.",
        )
    return EditWindow(chosen)


def dropped_by_ranges(spec: str, count: int) -> tuple[list[int], str | None]:
    """The messages the "Drop messages" field names, or none and why it cannot be read."""
    try:
        return parse_message_ranges(spec, count), None
    except MessageRangeError as exc:
        return [], f"Drop messages: {exc}. Nothing was run."


def system_prompt_text(messages: Sequence[Message]) -> str | None:
    """The system prompt the request was built with, or None if it had none."""
    for message in messages:
        if message.message_type == "SystemPromptMessage":
            return message.text()
    return None


def _changed(value: Any, original: Any) -> Any:
    """``value`` when it overrides something; None when empty or equal to the original."""
    if value is None or value == "" or value == original:
        return None
    return value


def overrides_from_form(
    found: Materialized,
    texts: Mapping[int, str],
    drops: Iterable[int],
    system_prompt: str | None,
    model: str,
    temperature: float | None,
    seed: int | None,
    max_tokens: int | None,
    *,
    calls: Mapping[int, Sequence[tuple[str, str]]] | None = None,
    results: Mapping[int, Sequence[str]] | None = None,
) -> Overrides:
    """The overrides the form asks for: only what differs from the materialized request.

    An unchanged text area, an empty parameter field or a value equal to the recorded one
    overrides nothing, so an untouched form reproduces the original call exactly (and its
    runs count as unchanged samples).
    """
    count = len(found.messages)
    edits = {
        index: text
        for index, text in texts.items()
        if 0 <= index < count and text != editable_text(found.messages[index])
    }
    changed_calls = {
        index: list(pairs)
        for index, pairs in (calls or {}).items()
        if 0 <= index < count and list(pairs) != editable_calls(found.messages[index])
    }
    changed_results = {
        index: list(contents)
        for index, contents in (results or {}).items()
        if 0 <= index < count and list(contents) != editable_results(found.messages[index])
    }
    parameters = found.parameters
    return Overrides(
        model=_changed(model.strip(), parameters.get("model")),
        temperature=_changed(
            None if temperature is None else float(temperature), parameters.get("temperature")
        ),
        seed=_changed(None if seed is None else int(seed), parameters.get("seed")),
        max_tokens=_changed(None if max_tokens is None else int(max_tokens), parameters.get("max_tokens")),
        system_prompt=_changed(system_prompt, system_prompt_text(found.messages)),
        edits=edits,
        drops=tuple(sorted(set(drops))),
        tool_calls=changed_calls,
        tool_results=changed_results,
    )


# ── outputs and their diffs ─────────────────────────────────────────────────────────


def original_output(session: Session, found: Materialized) -> Output:
    """What the model answered when the message was made, with the call's usage and latency."""
    origin = session.contexts.get(found.context_id)
    message = origin.messages[found.index] if origin and found.index < len(origin.messages) else None
    call = found.call
    return Output.of(message, call.usage if call else None, call.latency_s if call else None)


def word_table(words: Sequence[tuple[str, str]]) -> pd.DataFrame:
    return pd.DataFrame.from_records(list(words), columns=list(WORD_COLUMNS))


def delta_table(diff: OutputDiff) -> pd.DataFrame:
    """Usage and latency of the second output minus the first, one row per measure."""
    rows: list[tuple[str, float]] = [
        (k.replace("_", " "), float(v)) for k, v in sorted(diff.usage_delta.items())
    ]  # completion_tokens → "completion tokens": labels in words
    if diff.latency_delta_s is not None:
        rows.append(("latency (s)", round(diff.latency_delta_s, 6)))
    return pd.DataFrame.from_records(rows, columns=["measure", "delta"])


# ── a batch of runs and its noise band ─────────────────────────────────────────────


def band_verdict(band: NoiseBand | None, distance: float | None) -> str:
    """'inside' when a distance is within the noise band, 'outside' when beyond it."""
    if band is None or distance is None:
        return "-"
    return "inside" if band.contains(distance) else "outside"


def run_diffs(batch: Batch, original: Output) -> dict[str, OutputDiff]:
    """Each successful run's diff against the original output, by fork id."""
    return {
        r.fork_id: diff_outputs(original, run_output(r)) for r in [*batch.runs, *batch.noise_runs] if r.ok
    }


def run_table(batch: Batch, original: Output) -> pd.DataFrame:
    """One row per run (edited and unchanged): its fork, distance to the original, band."""
    band = batch.band
    diffs = run_diffs(batch, original)
    rows = []
    for kind, runs in (("run", batch.runs), ("unchanged", batch.noise_runs)):
        for run in runs:
            diff = diffs.get(run.fork_id)
            distance = diff.distance if diff else None
            rows.append(
                (
                    kind,
                    run.sample,
                    run.fork_id,
                    run.ok,
                    distance,
                    diff.identical if diff else None,
                    band_verdict(band, distance) if kind == "run" else "-",
                    run.error or "",
                )
            )
    return pd.DataFrame.from_records(rows, columns=list(RUN_COLUMNS))


# ── batches rebuilt from the store ─────────────────────────────────────────────────

MOST_BATCHES_SHOWN = 10
"""The page shows the newest batches of a message; older ones stay in the fork tree."""


def saved_line(batches: int, reruns: int) -> str | None:
    """Under the request: what the store keeps of this message, listed below the form."""
    kept = [counted(n, noun) for n, noun in ((batches, "run"), (reruns, "re-run")) if n]
    if not kept:
        return None
    return f"The store keeps {' and '.join(kept)} of this message, listed below the form."


def _messages(indices: Sequence[int]) -> str:
    """``message #7`` or ``messages #1-#14990, #15001``: runs as ranges, so dropping the
    old history of a long request reads as one item."""
    listed = message_ranges_text(indices)
    return f"message {listed}" if len(indices) == 1 else f"messages {listed}"


def overrides_summary(overrides: Overrides) -> str:
    """What a batch changed, in a few words (model names come from files: quote the
    result through escape_markdown wherever it could be read as Markdown)."""
    changes: list[str] = []
    if overrides.edits:
        changes.append(f"{_messages(sorted(overrides.edits))} edited")
    if overrides.drops:
        changes.append(f"{_messages(sorted(overrides.drops))} dropped")
    if overrides.system_prompt is not None:
        changes.append("system prompt replaced")
    for key in ("model", "temperature", "seed", "max_tokens"):
        if getattr(overrides, key) is not None:
            changes.append(f"{key.replace('_', ' ')} {getattr(overrides, key)}")
    return "; ".join(changes) or "nothing changed (the original request)"


def when_text(started_at: str, zone: tzinfo | None = None) -> str:
    """An ISO 8601 time as a person reads it (to the second, in ``zone``, with its age);
    "" when unknown."""
    return time_text(started_at, zone) if started_at else ""


def batch_title(number: int, batch: Batch) -> str:
    """The heading of a batch: its number, what it changed, and its label when it has one."""
    label = f" ({batch.label})" if batch.label else ""
    return f"Run {number}{label}: {overrides_summary(batch.overrides)}"


def batch_line(batch: Batch, zone: tzinfo | None = None) -> str:
    """When (in ``zone``, with its age), where and how many: the line under a batch's heading."""
    samples = counted(len(batch.runs), "sample")
    noise = f" and {len(batch.noise_runs)} unchanged" if batch.noise_runs else ""
    when = when_text(batch.started_at, zone)
    endpoint = f" against {batch.base_url}" if batch.base_url else ""
    return f"{samples}{noise}{endpoint}" + (f", started {when}" if when else "")


# ── which settings apply ─────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class SettingStates:
    """Why each setting of the run form does not apply now (None: it applies)."""

    concurrency: str | None
    unchanged: str | None
    run: str | None


def setting_states(samples: int, measure_noise: bool, base_url: str) -> SettingStates:
    """Concurrency applies to several calls, K to a noise band being measured, Run to an
    endpoint being known."""
    return SettingStates(
        concurrency=None
        if samples > 1 or measure_noise
        else "One sample makes one call: concurrency applies to several samples.",
        unchanged=None if measure_noise else "Check 'Measure the noise band' to run unchanged samples.",
        run=None if base_url.strip() else "Enter the endpoint's base URL above to run.",
    )


# ── diffing two references ─────────────────────────────────────────────────────────


def output_of_reference(reference: Reference) -> Output:
    """The output a reference names, with the usage and latency of the call that made it."""
    message = reference.message
    usage = latency = None
    if message is not None:
        call = next((c for c in reference.session.calls() if c.message_id == message.id), None)
        if call is not None:
            usage, latency = call.usage, call.latency_s
    return Output.of(message, usage, latency)


def divergence_text(diff: ContextDiff) -> str:
    """Where two contexts part, and how much of them is shared (messages lined up by content)."""
    if diff.first_divergence is None:
        return "The two contexts are the same, message by message."
    summary = f" {diff.summary[0].upper()}{diff.summary[1:]}." if diff.summary else ""
    return f"First divergence at message #{diff.first_divergence} (user turn {diff.turn}).{summary}"


def _number(index: int | None) -> str:
    return "" if index is None else f"#{index}"


def context_diff_table(diff: ContextDiff) -> pd.DataFrame:
    """The rows of a context diff, flat: roles, texts and the word diff where they differ."""

    def side(row: dict[str, Any] | None, key: str) -> str:
        if row is None:
            return ""
        if key == "text" and not row["text"] and row["tool_calls"]:  # a call reads as its call
            return ", ".join(inline_call(str(name), args) for name, args in row["tool_calls"])
        return str(row[key])

    rows = [
        (
            _number(r.get("a_index", r["index"] if r["a"] is not None else None)),
            _number(r.get("b_index", r["index"] if r["b"] is not None else None)),
            r["same"],
            "" if r["same"] else row_changes(r["a"], r["b"]),
            side(r["a"], "role"),
            side(r["a"], "text"),
            side(r["b"], "role"),
            side(r["b"], "text"),
            marked_words(r["words"]),
        )
        for r in diff.rows
    ]
    return pd.DataFrame.from_records(rows, columns=list(CONTEXT_DIFF_COLUMNS))


# ── re-runs ──────────────────────────────────────────────────────────────────────

RERUN_PAIR_COLUMNS = ("step", "status", "original", "re-run", "changes", "tokens Δ", "latency Δ (s)")


def can_rerun(found: Materialized) -> str | None:
    """None when the agent can be re-run from this message, else why not (for the page)."""
    if found.message_id is None:
        return "Re-runs start from a model output; this index is past the last message."
    if runs_code(found.source):
        return None  # the framework's loop with the app's code, or the loop here on the record
    if found.call is None or found.call.invocation_id is None:
        return (
            "Re-running the agent needs a session our runtime wrote (an invocation record to "
            "rebuild the object from); this message has none."
        )
    return None


def rerun_modes(default: str, unserved: str, injections: str) -> ToolModes:
    """The tool modes of the re-run form; ``injections`` holds one NAME=RESULT per line."""
    lines = [line for line in injections.splitlines() if line.strip()]
    return ToolModes(
        "live" if default == "live" else "recorded",
        injected=injected_results(lines),
        unserved="live" if unserved == "live" else "stop",
    )


def _step(turn: Turn | None) -> str:
    if turn is None:
        return ""
    if turn.kind == "tool_call":
        return f"{turn.name}({canonical_json(turn.arguments)})"
    return f"{turn.kind}: {short_value(turn.text or '', 80)}"


def rerun_pairs_table(diff: BranchDiff) -> pd.DataFrame:
    """The two branches step by step, as the page shows them side by side; the first
    divergence is marked ▶ in the step column."""
    rows = [
        (
            f"▶ {number}" if number - 1 == diff.first_divergence else str(number),
            pair.status,
            _step(pair.a),
            _step(pair.b),
            "; ".join([*pair.argument_changes, *pair.result_changes]),
            pair.tokens_delta,
            pair.latency_delta_s,
        )
        for number, pair in enumerate(diff.pairs, start=1)
    ]
    return pd.DataFrame.from_records(rows, columns=list(RERUN_PAIR_COLUMNS))


def tool_modes_text(modes: Mapping[str, Any]) -> str:
    """A re-run's saved tool modes (``ToolModes.as_dict()``) in a few words."""
    default = modes.get("default", "recorded")
    parts = [f"{default} by default"]
    per_tool = modes.get("per_tool")
    if isinstance(per_tool, Mapping) and per_tool:
        parts.append(", ".join(f"{name} {mode}" for name, mode in per_tool.items()))
    injected = modes.get("injected")
    if isinstance(injected, Mapping) and injected:
        parts.append("injected " + ", ".join(str(name) for name in injected))
    if default != "live":
        parts.append(f"calls the record cannot serve: {modes.get('unserved', 'stop')}")
    return "; ".join(parts)


def rerun_lines(result: RerunResult, diff: BranchDiff, modes: Mapping[str, Any] | None = None) -> list[str]:
    """What a re-run came to, in sentences. ``modes`` are the saved tool modes of a re-run
    rebuilt from the store, which does not keep how each call was served."""
    if result.error is not None:
        outcome = f"failed: {result.error}"
    else:
        outcome = f"answer: {json.dumps(result.answer, ensure_ascii=False)}"
        if result.tool_failures:
            outcome = f"{outcome}; but {result.problem}"
    served = ", ".join(f"{t['tool']} {t['how']}" for t in result.tools) or (
        f"answered {tool_modes_text(modes)}" if modes else "no tool calls"
    )
    divergence = (
        f"first divergence: {diff.divergence}" if diff.first_divergence is not None else diff.divergence
    )
    return [
        f"branch {result.branch_id}, {len(result.calls)} model calls; tools: {served}",
        outcome,
        divergence,
        f"branch distance {diff.distance:.3f}",
    ]
