"""Runtime: one invoke and one replay, against the bare client on the same server.

An invoke that reuses its thread must cost the same in a store of 10,000 sessions as in
a store of one (the catalog names the thread's session; nothing lists the store). A
replay must cost what the model call costs: the bare ``openai`` client posting the same
body to the same local model server, alternated with it so both see the same load.
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path

import openai
from openai.types.chat import ChatCompletion

from benchmarks._harness import Bench
from benchmarks._stores import shared_store, store_shape
from local_model import LocalModelServer
from replay import Overrides, materialize, replay
from soap_core import Store
from soap_core.runtime import AgenticObject, LLMEndpoint, ModelSettings, Runtime
from tests.peers.openai_stub import OpenAIStub


class Echo(AgenticObject):
    """An object without tools: one model call per invoke."""

    settings = ModelSettings(max_tokens=8, max_iterations=2)


def invoke_independence(bench: Bench, big: Path) -> None:
    """Thread-reuse invokes of one object in each store, alternated (so both see the
    same machine), after one invoke each that creates the thread."""
    rounds = bench.scale(15, 5)
    small = bench.workdir / "store-one"
    small.mkdir(exist_ok=True)
    Store(big).sessions()  # the catalog exists, as in a store in use
    with OpenAIStub([{"content": "ok"}] * (4 * rounds + 8)) as stub:
        endpoint = LLMEndpoint(stub.base_url, model="stub")
        objects = [
            Echo(runtime=Runtime(Store(root), endpoint), object_id="bench-echo") for root in (small, big)
        ]
        times: list[list[float]] = [[], []]
        for echo in objects:
            echo.invoke("hello", thread="bench-thread")
        for n in range(rounds):
            for echo, spent in zip(objects, times, strict=True):
                started = time.perf_counter()
                echo.invoke(f"again {n}", thread="bench-thread")
                spent.append(time.perf_counter() - started)
    small_s, big_s = (statistics.median(t) for t in times)
    sessions = store_shape(bench)["sessions"]
    bench.ratio(
        f"one thread-reuse invoke, store of {sessions:,} sessions",
        big_s,
        small_s,
        1.2,
        baseline_is="the same invoke in a store of one session, alternated with it",
        note=f"{big_s * 1000:.1f} ms vs {small_s * 1000:.1f} ms (scripted HTTP server, median of {rounds}; "
        "both fsync every file they write)",
    )


def _replay_session(bench: Bench, source: Path) -> tuple[Path, str]:
    """A copy of one generated session with 50 contexts (replays accumulate forks)."""
    root = bench.workdir / "store-replay"
    shutil.rmtree(root, ignore_errors=True)
    store = Store(source)
    summary = next(
        s for s in store.sessions() if s.context_files == 1 and s.figures and (s.figures.messages or 0) > 8
    )
    target = root / summary.path.relative_to(store.layout.config_dir)
    shutil.copytree(summary.path, target)
    copy = Store(root)
    session = copy.load_session(summary.path.name)
    context = session.active_context
    for _ in range(49):
        session.add_context(context.side_fork(lambda messages: list(messages)))
    copy.save_session(session)
    return root, summary.path.name


def replay_overhead(bench: Bench, source: Path) -> None:
    root, name = _replay_session(bench, source)
    rounds = bench.scale(6, 2)
    overrides = Overrides(max_tokens=8, temperature=0.0, seed=1)
    with LocalModelServer(deterministic=True, log_path=bench.workdir / "llm.log") as server:
        endpoint = LLMEndpoint(server.base_url, model=server.model_name)
        client = openai.OpenAI(base_url=server.base_url, api_key="not-needed", max_retries=0)
        store = Store(root)
        session = store.load_session(name)
        context = session.active_context
        at = next(i for i, m in enumerate(context.messages) if m.role == "assistant")
        found = materialize(session, context, at)
        request = replay(store, session, found, endpoint, overrides)[0].request  # warms the server
        ours: list[float] = []
        bare: list[float] = []
        for _ in range(rounds):
            started = time.perf_counter()
            client.post("/chat/completions", body=request, cast_to=ChatCompletion)
            bare.append(time.perf_counter() - started)
            session = store.load_session(name)
            found = materialize(session, session.active_context, at)
            started = time.perf_counter()
            runs = replay(store, session, found, endpoint, overrides)
            ours.append(time.perf_counter() - started)
            assert runs[0].error is None, runs[0].error
    contexts = len(Store(root).load_session(name).contexts)
    bench.ratio(
        f"one replay, session of {contexts} contexts",
        statistics.median(ours),
        statistics.median(bare),
        1.05,
        baseline_is="bare `openai` client, same body, same local model server",
        note=f"{statistics.median(ours) * 1000:.0f} ms vs {statistics.median(bare) * 1000:.0f} ms, "
        f"median of {rounds} alternated; the replay includes its fork's save",
    )


def run(bench: Bench) -> None:
    big = shared_store(bench)
    invoke_independence(bench, big)
    replay_overhead(bench, big)
