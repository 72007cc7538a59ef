"""Replay and analysis paths on long sessions: materialize, verify, simulate, budgets.

Each path must be linear in the session (issue 12): materializing any message of a
100,000-message context costs about as much as serializing the request it returns
(``json.dumps``, the baseline) once the context's prefix is serialized, verifying costs
the same per call at 31 and at 1,240 calls, and simulating or budgeting four times the
messages takes four times as long. The sessions are built in-process with the model
classes (a runtime session: every answer has its call record), so the figures measure
the paths, not a generator or the disk. Times are CPU times of this process.
"""

from __future__ import annotations

import gc
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from analysis import call_budgets, simulate
from benchmarks._harness import Bench
from replay import materialize, sources, verify_session
from soap_core import (
    OBJECT_KEY,
    CallRecord,
    Context,
    Message,
    Session,
    TextPart,
    ToolPart,
    ToolResultPart,
    ToolUsePart,
    chat_request,
    request_hash,
)
from workbench.token_budget_views import window_choice_table

_WORDS = ["the", "model", "reads", "every", "message", "before", "it", "answers", "café", "東京", "→", "✓"]
_MODEL = "bench-model"
_PARAMETERS = {"max_tokens": 512, "temperature": 0.0, "seed": 7}
_TOOLS = [
    ToolPart("search", "Search the notes.", {"type": "object", "properties": {"q": {"type": "string"}}}),
    ToolPart("read", "Read one note.", {"type": "object", "properties": {"id": {"type": "integer"}}}),
]
_HOOK = "Notes in memory: 12. Today is a Tuesday."


def _text(rng: random.Random, words: int) -> str:
    """Words in paragraphs (a newline is escaped in JSON, as in real answers)."""
    return " ".join(rng.choice(_WORDS) + ("\n\n" if rng.random() < 0.03 else "") for _ in range(words))


def long_session(messages: int, *, seed: int = 7) -> Session:
    """A runtime session whose active context holds ``messages`` messages (the system
    prompt and tool listing first): user questions, answers, and now and then a tool call
    with its result. Messages go straight into the list, as a loaded file gives them."""
    rng = random.Random(seed)
    context = Context.create(Message.system_prompt("You keep notes.", [_HOOK]), list(_TOOLS))
    listing = [
        {"name": t.name, "description": t.description, "parameters": dict(t.parameters)} for t in _TOOLS
    ]
    keys = [context.record_hook_output(_HOOK), context.record_hook_output(json.dumps(listing))]
    context.extra["bench_keys"] = keys  # what record_calls gives each call
    body = context.messages
    while len(body) < messages:
        body.append(Message.create("user", [TextPart(_text(rng, rng.randint(10, 120)))]))
        if rng.random() < 0.15:
            call_id = f"call-{len(body)}"
            body.append(Message.create("assistant", [ToolUsePart(call_id, "search", '{"q":"notes"}')]))
            body.append(Message.create("tool_result", [ToolResultPart(call_id, _text(rng, 60))]))
        body.append(Message.create("assistant", [TextPart(_text(rng, rng.randint(20, 200)))]))
    del body[messages:]
    for number, message in enumerate(body):
        message.sequence_number = number
    context.anchor_points = [(n, i if n != "messages" else len(body)) for n, i in context.anchor_points]
    context.mutation_counter = len(body) + len(context.anchor_points)
    session = Session.create("Bench", context, thread_id="bench")
    session.state_data[OBJECT_KEY] = "bench"
    return session


def record_calls(session: Session, calls: int, *, with_requests: bool = True) -> list[CallRecord]:
    """Call records for the first ``calls`` answers of the active context, as the runtime
    records them (the system prompt's hook keys, the tool listing's key), each with the
    request :func:`soap_core.chat_request` gives for the messages before it. Without
    requests a record keeps only the parameters of its body (what budgets and the lab
    read); building every request of a long session is itself quadratic."""
    context = session.active_context
    hook, listing = context.extra["bench_keys"]
    records: list[CallRecord] = []
    for index, message in enumerate(context.messages):
        if len(records) == calls:
            break
        if message.role != "assistant":
            continue
        sent = context.messages[:index] if with_requests else []
        request = chat_request(sent, model=_MODEL, parameters={**_PARAMETERS, "tool_choice": "auto"})
        records.append(
            CallRecord(
                id=f"call-{len(records):06d}",
                session=session.uuid,
                role=session.role,
                context_id=context.id,
                message_index=index,
                request=request,
                request_hash=request_hash(request),
                message_id=message.id,
                system_prompt_hooks=[hook],
                tool_list_hook=listing,
            )
        )
    return records


@dataclass(frozen=True)
class _Timing:
    seconds: float
    """CPU time of the run."""
    collecting: float
    """Of which in the garbage collector's full collections."""


class _FullCollections:
    """CPU time spent in full (generation 2) collections while it is entered. CPython
    runs one when enough new objects have outlived the young generations, and it walks
    every object of the process, the session included: their number during a pass comes
    in steps (one at 100,000 messages, two at 200,000), so they are told apart from the
    path's own work."""

    def __enter__(self) -> _FullCollections:
        self.seconds, self._started = 0.0, 0.0
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *_: object) -> None:
        gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] == 2 and phase == "start":
            self._started = time.process_time()
        elif info["generation"] == 2:
            self.seconds += time.process_time() - self._started


def _timed(action: Callable[[], object], repeat: int = 1) -> _Timing:
    """The run of least CPU time of ``repeat`` runs of ``action``, each after a collection
    (so that garbage left by earlier figures is not collected on its time). CPU time of
    this process, not the wall clock: on a shared machine, waiting for a core is not the
    path's."""
    best = _Timing(float("inf"), 0.0)
    for _ in range(repeat):
        gc.collect()
        with _FullCollections() as collections:
            started = time.process_time()
            action()
            run = _Timing(time.process_time() - started, collections.seconds)
        best = min(best, run, key=lambda t: t.seconds)
    return best


def _seconds(action: Callable[[], object], repeat: int = 1) -> float:
    return _timed(action, repeat).seconds


def _warm(session: Session) -> Session:
    """Token counts cached, as after the first pass over a session (the lab and the
    budgets read them; tokenizing is not what is measured)."""
    for message in session.active_context.messages:
        message.count_tokens()
        message.part_token_counts()
    return session


def materializing(bench: Bench) -> None:
    size = bench.scale(100_000, 5_000)
    session = long_session(size)
    context = session.active_context
    records = record_calls(session, size, with_requests=False)  # materialize reads their parameters
    early = next(r for r in records if r.message_index >= 10)
    late = records[-1]
    sources()  # the request sources of installed packages are looked up once per process
    at_early = early.message_index
    first_early = _seconds(lambda: materialize(session, context, at_early, calls=records))
    again = _seconds(lambda: materialize(session, context, at_early, calls=records), 5)
    bench.figure(
        f"materialize message {at_early} of a {size:,}-message context",
        again * 1e3,
        "ms",
        "< 1 ms",
        again < 1e-3,
        note=f"the first time in the context: {first_early * 1e3:.2f} ms (issue 12 measured 0.1 ms)",
    )
    cold = _seconds(lambda: materialize(session, context, late.message_index, calls=records))
    found = materialize(session, context, late.message_index, calls=records)
    dumps = _seconds(lambda: json.dumps(found.request), 3)
    hashing = _seconds(lambda: request_hash(found.request), 3)
    bench.ratio(
        f"materialize message {late.message_index:,}, the context's prefix already serialized",
        _seconds(lambda: materialize(session, context, late.message_index, calls=records), 3),
        dumps,
        1.2,
        baseline_is="`json.dumps` of the request it returns",
        note="any position after the first: the messages are checked, the chat messages rebuilt, "
        "the running hash extended",
    )
    bench.ratio(
        f"materialize message {late.message_index:,}, the first in the context",
        cold,
        dumps,
        1.2,
        baseline_is="`json.dumps` of the request it returns",
        note=f"serializes and hashes the whole prefix once: `request_hash` of the same request alone "
        f"takes {hashing / dumps:.2f}x (sorted keys, UTF-8 kept: the stored hashes fix those bytes); "
        f"issue 12 measured 1.8-2.9 s vs 0.96 s",
    )


def verifying(bench: Bench) -> None:
    few, many = 31, bench.scale(1_240, 124)
    per_call, again = {}, {}
    for calls in (few, many):
        session = long_session(calls * 2 + 200)
        records = record_calls(session, calls)
        # The first pass serializes the context; a later one (same objects) only checks it.
        per_call[calls] = _seconds(lambda: verify_session(session, calls=records)) / calls  # noqa: B023
        again[calls] = _seconds(lambda: verify_session(session, calls=records), 3) / calls  # noqa: B023
        assert all(v.match for v in verify_session(session, calls=records))
    bench.figure(
        f"`soapwb verify`, per call, at {many:,} calls",
        per_call[many] * 1e3,
        "ms",
        "≤ 1 ms",
        per_call[many] <= 1e-3,
        note=f"the first pass over the session; {again[many] * 1e3:.3f} ms in a later one. Call records "
        "in memory (reading them costs the same per byte at any size); issue 12 measured 4.2 ms",
    )
    bench.ratio(
        f"`soapwb verify`, per call, {many:,} calls against {few}",
        per_call[many],
        per_call[few],
        1.5,
        baseline_is=f"per call at {few} calls",
        note=f"{per_call[few] * 1e3:.3f} ms at {few}; linear: the same per call (issue 12: 0.43 vs 4.2 ms)",
    )


def _linear(bench: Bench, what: str, timings: dict[int, _Timing]) -> None:
    """Held against linear growth, with half of it again for the memory a larger session
    takes (caches miss more): quadratic would be several times over. Without the full
    collections (see :class:`_FullCollections`); the operations themselves are counted
    in tests/test_linear_paths.py."""
    sizes = sorted(timings)
    small, large = sizes[0], sizes[-1]
    own = {n: t.seconds - t.collecting for n, t in timings.items()}
    in_all = timings[large].seconds / timings[small].seconds
    times = ", ".join(f"{own[n]:.3g} s at {n:,} ({timings[n].seconds:.3g} s in all)" for n in sizes)
    bench.ratio(
        f"{what}, {large:,} messages against {small:,}",
        own[large],
        own[small],
        1.5 * large / small,
        baseline_is=f"{small:,} messages",
        note=f"{times}; linear is {large / small:g}x, quadratic {(large / small) ** 2:g}x. Without the "
        f"garbage collector's full passes over the process (in all: {in_all:.2f}x)",
    )


def _lab_and_budget_timings(size: int) -> tuple[_Timing, _Timing]:
    session = _warm(long_session(size))
    records = record_calls(session, size, with_requests=False)
    strategies = ["rolling-tokens:60000", "rolling-messages:40", "strip-thinking"]
    repeat = 7 if size <= 10_000 else 2
    simulated = _timed(lambda: simulate(session, strategies, calls=records), repeat)
    return simulated, _timed(lambda: call_budgets(session, calls=records), repeat)


def lab_and_budgets(bench: Bench) -> None:
    large = tuple(
        bench.scale(n, n // 25) for n in (50_000, 100_000, 200_000)
    )  # 4x: within the run's 15 minutes
    for sizes in ((1_000, 2_000, 4_000, 8_000), large):
        timings = {size: _lab_and_budget_timings(size) for size in sizes}
        what = "a call recorded for each answer"
        simulated = {n: t[0] for n, t in timings.items()}
        _linear(bench, f"`analysis.simulate`, three strategies, {what}", simulated)
        _linear(bench, f"`analysis.call_budgets`, {what}", {n: t[1] for n, t in timings.items()})


def _window_table_timing(size: int) -> _Timing:
    context = _warm(long_session(size)).active_context
    budget = max(1, context.total_token_count() // 2)
    return _timed(lambda: window_choice_table(context, context.window_disagreement(budget)), 3)


def window_table(bench: Bench) -> None:
    """The Token budget page's rolling-window comparison: the window both ways, then the
    table of the messages it keeps (it once built a set of 50,000 ids per message)."""
    timings = {size: _window_table_timing(size) for size in (1_000, 2_000, 4_000, 8_000)}
    _linear(bench, "the Token budget page's rolling-window table (cached against true counts)", timings)


def run(bench: Bench) -> None:
    materializing(bench)
    verifying(bench)
    lab_and_budgets(bench)
    window_table(bench)
