"""Re-invoke the model from any message, as it was or changed, and keep each run as a fork.

A run's fork holds exactly the messages that were sent (edits, drops and a replaced
system prompt applied), then the model's answer, so rematerializing the fork gives the
request of the run. The fork records its origin and the overrides in the context's
``soapwb_replay`` key and its call in ``calls/`` like any other call. The original
context is never written: the fork is not added to its ``children`` (the fork tree
finds replays through ``origin_context_id``), so its file stays the same to the byte.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, Protocol

from replay._diff import NoiseBand, Output, noise_band
from replay._request import Materialized
from replay._sources import source_named
from soap_core import (
    BranchMark,
    Context,
    Message,
    Part,
    Session,
    SoapError,
    Store,
    TextPart,
    ToolResultPart,
    ToolUsePart,
    new_record_id,
    request_hash,
    set_mark,
    utc_now,
    write_call,
)
from soap_core.runtime import Completion, LLMError, assistant_message, close_call, open_call


class Endpoint(Protocol):
    base_url: str
    model: str

    def complete(self, request: dict[str, Any]) -> Completion: ...


@dataclass(frozen=True)
class Overrides:
    """What a replay changes; empty means: reproduce the original call."""

    model: str | None = None
    temperature: float | None = None
    seed: int | None = None
    max_tokens: int | None = None
    system_prompt: str | None = None
    edits: Mapping[int, str] = field(default_factory=dict)
    """Display index → new text for that message (text, or a tool result's content)."""
    drops: Sequence[int] = ()
    """Display indices of messages to leave out (a tool call goes with its results)."""
    tool_calls: Mapping[int, Sequence[tuple[str, str]]] = field(default_factory=dict)
    """Display index → the name and arguments of each tool call of that message, in
    order; the arguments are sent as typed (a JSON string, as the model wrote it)."""
    tool_results: Mapping[int, Sequence[str]] = field(default_factory=dict)
    """Display index → the new content of each tool result of that message, in order."""

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for key in ("model", "temperature", "seed", "max_tokens", "system_prompt"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        if self.edits:
            data["edits"] = {str(k): v for k, v in sorted(self.edits.items())}
        if self.drops:
            data["drops"] = sorted(self.drops)
        if self.tool_calls:
            data["tool_calls"] = {
                str(k): [{"name": name, "arguments": arguments} for name, arguments in calls]
                for k, calls in sorted(self.tool_calls.items())
            }
        if self.tool_results:
            data["tool_results"] = {str(k): list(v) for k, v in sorted(self.tool_results.items())}
        return data

    @property
    def changes_messages(self) -> bool:
        return bool(
            self.edits or self.drops or self.tool_calls or self.tool_results or self.system_prompt is not None
        )

    @property
    def edited_messages(self) -> list[int]:
        """The display indices whose text, tool calls or tool results are edited."""
        return sorted({*self.edits, *self.tool_calls, *self.tool_results})


@dataclass
class ReplayRun:
    """One sample of a replay: its fork, request and outcome."""

    fork_id: str
    call_id: str
    sample: int
    request: dict[str, Any]
    request_hash: str
    overrides: dict[str, Any]
    output: Message | None = None
    response: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    latency_s: float | None = None
    error: str | None = None
    saved: bool = True
    """False for a run that never reached the model (the connection failed): it saves no
    fork and no call record, so the fork tree does not grow by runs that made no call."""

    @property
    def ok(self) -> bool:
        return self.error is None and self.output is not None

    def as_dict(self) -> dict[str, Any]:
        return {
            "fork_id": self.fork_id,
            "call_id": self.call_id,
            "sample": self.sample,
            "request_hash": self.request_hash,
            "overrides": self.overrides,
            "ok": self.ok,
            "error": self.error,
            "saved": self.saved,
            "text": self.output.text() if self.output else None,
            "tool_calls": [[u.name, u.parsed_arguments()] for u in self.output.tool_uses()]
            if self.output
            else [],
            "output": self.output.to_dict() if self.output else None,
            "usage": self.usage,
            "latency_s": self.latency_s,
        }


def _edit(message: Message, text: str, index: int) -> Message:
    changed = message.copy()
    if any(isinstance(p, TextPart) for p in message.content) or (message.role == "assistant" and text):
        kept = [p for p in message.content if not isinstance(p, TextPart)]
        changed.content = [TextPart(text), *kept]  # an answer that only called tools may get words
    elif len(message.tool_results()) == 1:
        [result] = message.tool_results()
        changed.content = [ToolResultPart(result.call_id, text, result.name)]
    else:
        raise SoapError(f"message {index} has no text to edit (parts: {[p.type for p in message.content]})")
    return changed


def _edit_parts(
    message: Message, index: int, kind: type[ToolUsePart] | type[ToolResultPart], new: Sequence[Any]
) -> Message:
    """``message`` with its tool calls (or tool results), in order, replaced by ``new``:
    (name, arguments) pairs, or result contents. Call ids stay, so calls and results
    still pair up."""
    found = [p for p in message.content if isinstance(p, kind)]
    noun = "tool calls" if kind is ToolUsePart else "tool results"
    if len(found) != len(new):
        raise SoapError(f"message {index} has {len(found)} {noun}, not {len(new)}")
    replacements = iter(new)
    changed = message.copy()
    parts: list[Part] = []
    for part in message.content:
        if isinstance(part, ToolUsePart) and kind is ToolUsePart:
            name, arguments = next(replacements)
            parts.append(ToolUsePart(part.call_id, name, arguments))
        elif isinstance(part, ToolResultPart) and kind is ToolResultPart:
            parts.append(ToolResultPart(part.call_id, next(replacements), part.name))
        else:
            parts.append(part)
    changed.content = parts
    return changed


def dropped_with_pairs(messages: Sequence[Message], drops: Sequence[int]) -> set[int]:
    """The indices to leave out, widened so no tool call loses its result or vice versa.

    One pass for the call ids of the dropped messages, one for the messages that share
    any of them: dropping the first 15,000 messages of a long request is linear."""
    out = set(drops)
    ids: set[str] = set()
    for index in out:
        if not 0 <= index < len(messages):
            raise SoapError(f"cannot drop message {index}: the request has {len(messages)} messages")
        ids.update(_call_ids(messages[index]))
    if ids:
        out.update(i for i, message in enumerate(messages) if not ids.isdisjoint(_call_ids(message)))
    return out


def _call_ids(message: Message) -> set[str]:
    return {p.call_id for p in message.tool_uses()} | {p.call_id for p in message.tool_results()}


MIN_BAND_SAMPLES = 2
"""A spread needs a pair: with fewer unchanged samples there is no band."""


def unchanged_band(
    outputs: list[Output], noise_outputs: list[Output], overrides: Overrides
) -> NoiseBand | None:
    """The noise band of a batch of runs, by one rule for the command line and the page.

    With noise runs (sent with no override at all), the band is theirs, and the runs'
    own outputs join them when the runs changed nothing either. Without, the runs are the
    samples when they changed no message (several samples of one request, at the
    parameters asked for). Below two samples there is no band: one sample would pass for
    a band of width zero and put every other run outside it."""
    if noise_outputs:
        samples = [*noise_outputs, *(outputs if not overrides.as_dict() else [])]
    else:
        samples = [] if overrides.changes_messages else list(outputs)
    return noise_band(samples) if len(samples) >= MIN_BAND_SAMPLES else None


def replay_messages(found: Materialized, overrides: Overrides) -> list[Message]:
    """The messages a replay sends: the materialized ones with the overrides applied."""
    messages = [m.copy() for m in found.messages]
    for index in overrides.edited_messages:
        if not 0 <= index < len(messages):
            raise SoapError(f"cannot edit message {index}: the request has {len(messages)} messages")
        if index in overrides.edits:
            messages[index] = _edit(messages[index], overrides.edits[index], index)
        if index in overrides.tool_calls:
            messages[index] = _edit_parts(messages[index], index, ToolUsePart, overrides.tool_calls[index])
        if index in overrides.tool_results:
            messages[index] = _edit_parts(
                messages[index], index, ToolResultPart, overrides.tool_results[index]
            )
    if overrides.system_prompt is not None:
        for i, message in enumerate(messages):
            if message.message_type == "SystemPromptMessage":
                messages[i] = message.copy()
                messages[i].content = [TextPart(overrides.system_prompt)]
    gone = dropped_with_pairs(found.messages, overrides.drops)
    return [m for i, m in enumerate(messages) if i not in gone]


def replay_parameters(
    found: Materialized, overrides: Overrides, endpoint: Endpoint
) -> tuple[str, dict[str, Any]]:
    """Model and sampling parameters: the recorded ones, then the overrides."""
    parameters = {k: v for k, v in found.parameters.items() if k != "model"}
    for key in ("temperature", "seed", "max_tokens"):
        if getattr(overrides, key) is not None:
            parameters[key] = getattr(overrides, key)
    model = overrides.model or found.parameters.get("model") or endpoint.model
    return model, parameters


def branch_fork(
    session: Session, found: Materialized, messages: list[Message], mark: BranchMark, *, add: bool = True
) -> Context:
    """A side fork of the context ``found`` came from, holding ``messages`` (copies) and
    the run's ``mark``; the original context is not changed. ``add=False`` leaves it
    out of the session until its run has reached the model."""
    fork = session.contexts[found.context_id].side_fork(lambda _: [m.copy() for m in messages])
    set_mark(fork, mark)
    if add:
        session.add_context(fork)
    return fork


def replay(
    store: Store,
    session: Session,
    found: Materialized,
    endpoint: Endpoint,
    overrides: Overrides | None = None,
    *,
    samples: int = 1,
    concurrency: int = 2,
    on_progress: Callable[[int, int], None] | None = None,
    label: str | None = None,
) -> list[ReplayRun]:
    """Run the request behind ``found`` again, ``samples`` times, each saved as a fork.

    Failures of the endpoint (after the client's retries) become failed runs with
    their error; nothing already saved changes. ``label`` names the experiment in the
    fork's record (the compaction lab labels its drift runs).
    """
    overrides = overrides or Overrides()
    messages = replay_messages(found, overrides)
    model, parameters = replay_parameters(found, overrides, endpoint)
    request = source_named(found.source).build_request(messages, model=model, parameters=parameters)
    runs: list[ReplayRun] = []
    forks: dict[str, tuple[Context, BranchMark]] = {}
    for sample in range(samples):
        call_id = new_record_id()
        mark = BranchMark(
            "replay",
            found.context_id,
            found.index,
            found.message_id,
            label=label,
            overrides=overrides.as_dict(),
            sample=sample,
            call_id=call_id,
        )
        fork = branch_fork(session, found, messages, mark, add=False)
        forks[fork.id] = fork, mark
        runs.append(ReplayRun(fork.id, call_id, sample, request, request_hash(request), overrides.as_dict()))
    done = 0
    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, samples))) as pool:
        futures = {pool.submit(_complete, endpoint, request): run for run in runs}
        for future in as_completed(futures):
            run = futures[future]
            _finish(store, session, *forks[run.fork_id], endpoint, run, future.result())
            done += 1
            if on_progress is not None:
                on_progress(done, samples)
    return sorted(runs, key=lambda r: r.sample)


def _complete(
    endpoint: Endpoint, request: dict[str, Any]
) -> tuple[Completion | None, LLMError | None, str, str]:
    started = utc_now()
    try:
        return endpoint.complete(request), None, started, utc_now()
    except LLMError as exc:
        return None, exc, started, utc_now()


def never_reached(error: LLMError) -> bool:
    """Whether a failed call never reached the model: no connection was made (after the
    client's retries), so nothing was sent and there is no run to keep."""
    return error.kind == "connection"


def _finish(
    store: Store,
    session: Session,
    fork: Context,
    mark: BranchMark,
    endpoint: Endpoint,
    run: ReplayRun,
    outcome: tuple[Completion | None, LLMError | None, str, str],
) -> None:
    """Keep the run's fork (with the answer, or the error) and its call record; a run
    that never reached the model keeps neither, only its error in ``run``."""
    completion, failure, started, ended = outcome
    error = str(failure) if failure is not None else None
    if failure is not None and never_reached(failure):
        run.error, run.saved = error, False
        return
    call = open_call(
        session,
        fork,
        run.request,
        endpoint.base_url,
        record_id=run.call_id,
        started_at=started,
        hashed=run.request_hash,
        ended_at=ended,
        replay=mark.as_dict(),
    )
    if completion is not None:
        try:
            answer = assistant_message(completion.response)
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            error = f"malformed response: {type(exc).__name__}: {exc}"
        else:
            fork.append(answer).record_token_count()
            close_call(call, answer, completion.response, completion.latency_s, ended)
            run.output, run.response = answer, call.response
            run.usage, run.latency_s = call.usage, call.latency_s
    if error is not None:
        run.error = call.error = error
        set_mark(fork, mark.failed(error))
    session.add_context(fork)
    store.save_session(session)
    write_call(store.folder_of(session), call)
