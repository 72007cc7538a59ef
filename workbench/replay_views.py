"""What the Replay & diff page shows and sends, computed without Streamlit.

The page turns form values into :class:`replay.Overrides`, keeps each click of Run as a
:class:`Batch`, and shows diffs as tables and marked text; all of that is here, so a
test can compute exactly what the page should show from the same inputs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pandas as pd

from replay import (
    BranchDiff,
    ContextDiff,
    Materialized,
    NoiseBand,
    Output,
    OutputDiff,
    Overrides,
    Reference,
    ReplayRun,
    RerunResult,
    ToolModes,
    Turn,
    diff_outputs,
    injected_results,
    request_differences,
    unchanged_band,
)
from soap_core import Context, Message, Session, canonical_json, read_calls

PREVIEW_WIDTH = 60
WORD_COLUMNS = ("op", "words")
RUN_COLUMNS = ("kind", "sample", "fork", "ok", "distance", "identical", "noise band", "error")
CONTEXT_DIFF_COLUMNS = ("index", "same", "a role", "a text", "b role", "b text", "word diff")

VerdictStatus = Literal["match", "mismatch", "unrecorded"]


@dataclass(frozen=True)
class Verdict:
    """Whether the request rebuilt from the files is the one the model was sent."""

    status: VerdictStatus
    call_id: str | None = None
    recorded_hash: str | None = None
    differences: dict[str, Any] = field(default_factory=dict)


@dataclass
class Batch:
    """One click of Run: the overrides sent, their runs, and the unchanged noise samples."""

    base_url: str
    overrides: Overrides
    runs: list[ReplayRun]
    noise_runs: list[ReplayRun] = field(default_factory=list)


@dataclass(frozen=True)
class RunSettings:
    """Where and how often to run: the endpoint, samples, workers and unchanged samples."""

    base_url: str
    samples: int = 1
    concurrency: int = 2
    unchanged: int = 0
    """How many unchanged samples measure the noise band (0: no noise band)."""


# ── the pickers ──────────────────────────────────────────────────────────────


def names_a_session(wanted: str, uuids: Sequence[str]) -> bool:
    """Whether ``?session=`` names one of ``uuids`` (as the session picker reads it: uuid or prefix)."""
    return any(u == wanted or u.startswith(wanted) for u in uuids)


def assistant_indices(context: Context) -> list[int]:
    """Display indices of the model outputs of a context: the messages one can replay."""
    return [i for i, m in enumerate(context.messages) if m.role == "assistant"]


def message_preview(message: Message, width: int = PREVIEW_WIDTH) -> str:
    """One line saying what a message holds: its text, else its tool calls, else its part types."""
    text = " ".join(message.text().split())
    if not text and message.tool_uses():
        text = "calls " + ", ".join(u.name for u in message.tool_uses())
    if not text:
        text = "(" + (", ".join(p.type for p in message.content) or "no content") + ")"
    return text if len(text) <= width else text[: width - 1] + "…"


def message_label(context: Context, index: int) -> str:
    """How a message is named in the picker: display index and preview."""
    return f"#{index}  {message_preview(context.messages[index])}"


def default_message(indices: Sequence[int], wanted: str | None) -> int | None:
    """The index of ``?message=`` when it names one of ``indices``, else the last one."""
    if wanted is not None and wanted.strip().lstrip("-").isdigit() and int(wanted) in indices:
        return int(wanted)
    return indices[-1] if indices else None


# ── verification ────────────────────────────────────────────────────────────────────


SOURCE_DESCRIPTIONS = {
    "soapwb": "our runtime's recorded request",
    "peteos-0.5": "the body peteos 0.5's OpenAI adapter builds",
    "peteos-0.6": "the body peteos 0.6's OpenAI adapter builds",
    "openpoke": "the request OpenPoke's interaction agent posts",
}


def source_line(found: Materialized) -> str:
    """Which framework's request shape the page shows, and where its messages came from."""
    what = SOURCE_DESCRIPTIONS.get(found.source, f"the request of {found.source}")
    where = (
        f"the {found.sent_from[1]} messages of context {found.sent_from[0]}"
        if found.sent_from
        else f"context {found.context_id} before message #{found.index}, {len(found.messages)} messages"
    )
    return f"Built as {found.source} sends it ({what}) from {where}."


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
    """The text a replay may replace in ``message``, or None when it has none.

    This mirrors what :func:`replay.replay_messages` can edit: the text parts (joined as
    ``Message.text`` joins them), or the content of a single tool result. A non-string
    result is shown as JSON; editing it sends the edited text as the result.
    """
    if message.message_type == "SystemPromptMessage":
        return None  # edited through the system prompt box, once
    if any(p.type == "text" for p in message.content):
        return message.text()
    results = message.tool_results()
    if len(results) == 1:
        content = results[0].content
        return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    return None


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
) -> Overrides:
    """The overrides the form asks for: only what differs from the materialized request.

    An unchanged text area, an empty parameter field or a value equal to the recorded one
    overrides nothing, so an untouched form reproduces the original call exactly (and its
    runs count as unchanged samples).
    """
    edits = {
        index: text
        for index, text in texts.items()
        if 0 <= index < len(found.messages) and text != editable_text(found.messages[index])
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
    )


# ── outputs and their diffs ─────────────────────────────────────────────────────────


def original_output(session: Session, found: Materialized) -> Output:
    """What the model answered when the message was made, with the call's usage and latency."""
    origin = session.contexts.get(found.context_id)
    message = origin.messages[found.index] if origin and found.index < len(origin.messages) else None
    call = found.call
    return Output.of(message, call.usage if call else None, call.latency_s if call else None)


def run_output(run: ReplayRun) -> Output:
    return Output.of(run.output, run.usage, run.latency_s)


def marked_words(words: Sequence[tuple[str, str]]) -> str:
    """A word diff as plain text: ``[-deleted-]`` and ``{+inserted+}``, as git's word diff."""
    marks = {"equal": "{}", "delete": "[-{}-]", "insert": "{{+{}+}}"}
    return " ".join(marks[op].format(text) for op, text in words)


def word_table(words: Sequence[tuple[str, str]]) -> pd.DataFrame:
    return pd.DataFrame.from_records(list(words), columns=list(WORD_COLUMNS))


def delta_table(diff: OutputDiff) -> pd.DataFrame:
    """Usage and latency of the second output minus the first, one row per measure."""
    rows: list[tuple[str, float]] = [(f"usage.{k}", float(v)) for k, v in sorted(diff.usage_delta.items())]
    if diff.latency_delta_s is not None:
        rows.append(("latency_s", round(diff.latency_delta_s, 6)))
    return pd.DataFrame.from_records(rows, columns=["measure", "delta"])


# ── a batch of runs and its noise band ─────────────────────────────────────────────


def batch_noise_band(batch: Batch) -> NoiseBand | None:
    """The noise band of the batch (:func:`replay.unchanged_band`, the command line's rule)."""
    outputs = [run_output(r) for r in batch.runs if r.ok]
    noise = [run_output(r) for r in batch.noise_runs if r.ok]
    return unchanged_band(outputs, noise, batch.overrides)


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
    band = batch_noise_band(batch)
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


def batch_key(root: str, session_uuid: str, found: Materialized) -> str:
    """Where the page keeps the batches of one message between reruns."""
    return f"{root}|{session_uuid}|{found.context_id}|{found.index}"


# ── diffing two references ─────────────────────────────────────────────────────────


def output_of_reference(reference: Reference) -> Output:
    """The output a reference names, with the usage and latency of the call that made it."""
    message = reference.message
    usage = latency = None
    directory = reference.session.directory
    if message is not None and directory is not None:
        call = next((c for c in read_calls(directory) if c.message_id == message.id), None)
        if call is not None:
            usage, latency = call.usage, call.latency_s
    return Output.of(message, usage, latency)


def divergence_text(diff: ContextDiff) -> str:
    if diff.first_divergence is None:
        return "The two contexts are the same, message by message."
    return f"First divergence at message #{diff.first_divergence} (user turn {diff.turn})."


def context_diff_table(diff: ContextDiff) -> pd.DataFrame:
    """The rows of a context diff, flat: roles, texts and the word diff where they differ."""

    def side(row: dict[str, Any] | None, key: str) -> str:
        return "" if row is None else str(row[key])

    rows = [
        (
            r["index"],
            r["same"],
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
    return f"{turn.kind}: {preview_text(turn.text or '')}"


def preview_text(text: str, width: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


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


def rerun_lines(result: RerunResult, diff: BranchDiff) -> list[str]:
    """What a re-run came to, in sentences."""
    outcome = (
        f"answer: {json.dumps(result.answer, ensure_ascii=False)}" if result.ok else f"failed: {result.error}"
    )
    served = ", ".join(f"{t['tool']} {t['how']}" for t in result.tools) or "no tool calls"
    divergence = (
        f"first divergence: {diff.divergence}" if diff.first_divergence is not None else diff.divergence
    )
    return [
        f"branch {result.branch_id}, {len(result.calls)} model calls; tools: {served}",
        outcome,
        divergence,
        f"branch distance {diff.distance:.3f}",
    ]
