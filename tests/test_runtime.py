"""The agentic runtime against the real local model: sessions, threads, limits, chains,
the no-circle rule (in this process and across processes), stale flags, compaction."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from local_model import LocalModelServer
from soap_core import Store, request_hash
from soap_core.runtime import (
    ActiveSessionError,
    AgenticObject,
    IterationLimitError,
    LLMEndpoint,
    ModelSettings,
    RollingSequenceWindow,
    RollingTokenWindow,
    Runtime,
    Summarize,
    invocation_chain,
    invocation_chains,
    read_calls,
    read_invocations,
    tool,
)
from soapwb.cli import main
from soapwb.common import terminal_time
from tests.conftest import snapshot

SECRET = "sk-test-SECRET-never-on-disk-4242"
SHORT = ModelSettings(max_tokens=24)


class Counter(AgenticObject):
    system_prompt = "You keep a counter. Use your tools."
    settings = SHORT

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.count = 0

    @tool
    def add(self, amount: int = 1) -> int:
        """Add to the counter and return the new value.

        Args:
            amount: how much to add.
        """
        self.count += int(amount)
        return self.count


class Leaf(AgenticObject):
    settings = SHORT

    @tool
    def note(self, text: str = "") -> str:
        """Write down a note."""
        return "noted"


class Middle(AgenticObject):
    settings = SHORT
    leaf: Leaf

    @tool
    def ask_leaf(self, question: str = "") -> str:
        """Ask the leaf object."""
        return str(self.leaf.invoke(f"Note this: {question}", tool_choice="note", follow_up="none"))


class Top(AgenticObject):
    settings = SHORT
    middle: Middle

    @tool
    def ask_middle(self, question: str = "") -> str:
        """Ask the middle object."""
        return str(self.middle.invoke(f"Ask the leaf: {question}", tool_choice="ask_leaf", follow_up="none"))

    @tool
    def ask_myself(self, question: str = "") -> str:
        """Ask this same object on its main thread."""
        return str(self.invoke(question, thread="main"))


@pytest.fixture
def runtime(tmp_path: Path, llm_server: LocalModelServer) -> Runtime:
    return Runtime(tmp_path / "store", LLMEndpoint(llm_server.base_url, api_key=SECRET))


def sessions_of(runtime: Runtime, role: str) -> list[str]:
    return [s.uuid for s in runtime.store.sessions() if s.role == role]


def test_invoke_starts_a_session_and_a_thread_reuses_it(runtime: Runtime) -> None:
    counter = Counter(runtime=runtime, object_id="counter")
    counter.invoke("Add two to the counter.", thread="t", tool_choice="add", follow_up="none")
    first = sessions_of(runtime, "Counter")
    counter.invoke("Add one more.", thread="t", tool_choice="add", follow_up="none")
    counter.invoke("Something unrelated.", tool_choice="none")
    assert len(first) == 1
    assert len(sessions_of(runtime, "Counter")) == 2  # the thread's session, plus one transient
    session = runtime.store.load_session(first[0])
    users = [m.text() for m in session.active_context.messages if m.role == "user"]
    assert users == ["Add two to the counter.", "Add one more."]
    assert session.thread_id == "t" and not session.is_active
    assert counter.count > 0 and counter.state() == {"count": counter.count}


def test_thread_reuse_survives_a_restart(runtime: Runtime, llm_server: LocalModelServer) -> None:
    Counter(runtime=runtime, object_id="counter").invoke("Hello.", thread="t", tool_choice="none")
    restarted = Runtime(runtime.store.root, LLMEndpoint(llm_server.base_url))
    Counter(runtime=restarted, object_id="counter").invoke("Hello again.", thread="t", tool_choice="none")
    [uuid] = sessions_of(runtime, "Counter")
    assert len(read_invocations(runtime.store.find(uuid).path)) == 2


def test_the_same_thread_on_two_objects_gives_two_sessions(runtime: Runtime) -> None:
    Counter(runtime=runtime, object_id="one").invoke("Hi.", thread="shared", tool_choice="none")
    Counter(runtime=runtime, object_id="two").invoke("Hi.", thread="shared", tool_choice="none")
    summaries = [s for s in runtime.store.sessions() if s.role == "Counter"]
    assert len(summaries) == 2 and {s.thread_id for s in summaries} == {"shared"}


def test_structured_output_returns_a_validated_value(runtime: Runtime) -> None:
    value = Counter(runtime=runtime).invoke(
        "What is six times seven?", output_schema=int, tool_choice="produce_output"
    )
    assert isinstance(value, int) and not isinstance(value, bool)


def test_a_tool_loop_stops_at_the_iteration_limit_with_a_recorded_error(runtime: Runtime) -> None:
    class Looper(Counter):
        settings = ModelSettings(max_tokens=24, max_iterations=3)

    looper = Looper(runtime=runtime)
    with pytest.raises(IterationLimitError, match="iteration limit"):
        looper.invoke("Keep adding.", thread="loop", tool_choice="add", follow_up="add")
    [uuid] = sessions_of(runtime, "Looper")
    session = runtime.store.load_session(uuid)
    assert "iteration limit" in session.state_data["_soapwb_last_error"]
    assert not session.is_active
    [record] = read_invocations(session.directory or Path())
    assert record.outcome == "error" and "IterationLimitError" in (record.error or "")
    assert len(record.calls) == 3 and looper.count >= 3


def test_every_call_is_recorded_with_its_exact_request(runtime: Runtime) -> None:
    Counter(runtime=runtime).invoke("Add one.", tool_choice="add", follow_up="none")
    [uuid] = sessions_of(runtime, "Counter")
    session = runtime.store.load_session(uuid)
    calls = read_calls(session.directory or Path())
    assert len(calls) == 2
    for call in calls:
        assert call.request_hash == request_hash(call.request)
        assert call.base_url == runtime.endpoint.base_url
        assert call.context_id == session.active_context_id
        produced = session.active_context.messages[call.message_index]
        assert produced.id == call.message_id and produced.role == "assistant"
        assert call.usage["completion_tokens"] > 0 and call.latency_s > 0
    assert calls[0].request["tool_choice"] == {"type": "function", "function": {"name": "add"}}
    assert calls[1].request["messages"][-1]["role"] == "tool"


def test_a_three_deep_chain_walks_back_from_the_innermost_session_using_files(runtime: Runtime) -> None:
    top, middle, leaf = Top(runtime=runtime), Middle(runtime=runtime), Leaf(runtime=runtime)
    top.middle, middle.leaf = middle, leaf
    top.invoke("Ask the middle about the weather.", tool_choice="ask_middle", follow_up="none")
    [leaf_session] = sessions_of(runtime, "Leaf")
    fresh = Store(runtime.store.root)  # nothing but the files
    [trace] = invocation_chain(fresh, leaf_session)
    assert [f.role for f in trace.callers] == ["Top", "Middle"]
    assert trace.invocation is not None and trace.invocation.role == "Leaf"
    assert trace.callers[0].caller_session is None  # called from Python
    middle_frame = trace.callers[1]
    top_context = fresh.load_session(middle_frame.caller_session or "").contexts[
        middle_frame.context_id or ""
    ]
    call_site = top_context.messages[middle_frame.message_index or 0]
    assert [u.name for u in call_site.tool_uses()] == ["ask_middle"]
    [down] = invocation_chain(fresh, sessions_of(runtime, "Top")[0])
    assert [(f.role, f.depth) for f in down.callees] == [("Middle", 1), ("Leaf", 2)]
    assert all(f.outcome == "ok" for f in [*down.callees, *trace.callers])


def test_soapwb_trace_prints_the_chain_from_the_files(
    runtime: Runtime, capsys: pytest.CaptureFixture[str]
) -> None:
    top, middle, leaf = Top(runtime=runtime), Middle(runtime=runtime), Leaf(runtime=runtime)
    top.middle, middle.leaf = middle, leaf
    top.invoke("Ask the middle.", tool_choice="ask_middle", follow_up="none")
    [leaf_session] = sessions_of(runtime, "Leaf")
    store_arg = ["--store", str(runtime.store.root)]
    assert main(["trace", leaf_session[:15], *store_arg, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == [c.as_dict() for c in invocation_chains(runtime.store, leaf_session)]
    [chain] = printed  # the chain once, each frame with its depth from the outermost
    assert [(f["role"], f["depth"]) for f in chain["frames"]] == [("Top", 0), ("Middle", 1), ("Leaf", 2)]
    assert chain["traced"] == [chain["frames"][2]["invocation_id"]]
    assert main(["trace", leaf_session, *store_arg]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("chain 1 of 1: 3 invocations, 1 of this session")
    assert lines[1].startswith("    0 Top/") and "called from Python" in lines[1]
    assert lines[2].startswith("    1   Middle/") and "called from Top/" in lines[2]
    assert lines[3].startswith(">   2     Leaf/") and lines[3].endswith("ok")
    start = chain["frames"][0]["started_at"]  # microseconds and an offset in the record
    assert "." in start and f"{terminal_time(start)} .. " in lines[1]  # to the second on the terminal
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d( UTC)? \.\. ", lines[1])


def test_invoking_a_session_up_the_chain_is_refused_and_recorded(runtime: Runtime) -> None:
    top = Top(runtime=runtime, object_id="top")
    top.invoke("Ask yourself.", thread="main", tool_choice="ask_myself", follow_up="none")
    [uuid] = sessions_of(runtime, "Top")
    session = runtime.store.load_session(uuid)
    results = [p.content for m in session.active_context.messages for p in m.tool_results()]
    assert any(str(r).startswith("[REFUSED] Session") and "already active" in str(r) for r in results)
    records = read_invocations(session.directory or Path())
    refused = [r for r in records if r.outcome == "refused"]
    assert len(refused) == 1 and refused[0].parent_invocation_id in {r.id for r in records}
    assert not session.is_active and not (session.directory or Path()).joinpath(".soapwb.lock").read_text()
    with pytest.raises(ActiveSessionError):  # a direct Python caller gets the exception
        from soap_core.runtime._locks import session_lock

        with session_lock(session.directory or Path(), uuid), session_lock(session.directory or Path(), uuid):
            pass


CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from soap_core.runtime import AgenticObject, LLMEndpoint, ModelSettings, Runtime, tool

    class Worker(AgenticObject):
        settings = ModelSettings(max_tokens=16)

        @tool
        def wait_for_release(self, reason: str = "") -> str:
            \"\"\"Wait until released.\"\"\"
            Path(sys.argv[3]).write_text("waiting")
            while not Path(sys.argv[4]).exists():
                time.sleep(0.05)
            return "released"

    runtime = Runtime(sys.argv[1], LLMEndpoint(sys.argv[2]))
    Worker(runtime=runtime, object_id="worker").invoke(
        "Wait.", thread="job", tool_choice="wait_for_release", follow_up="none"
    )
    """
)


def start_worker(runtime: Runtime, tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    script = tmp_path / "worker.py"
    script.write_text(CHILD)
    waiting, release = tmp_path / "waiting", tmp_path / "release"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    child = subprocess.Popen(
        [
            sys.executable,
            str(script),
            str(runtime.store.root),
            runtime.endpoint.base_url,
            str(waiting),
            str(release),
        ],
        env=env,
    )
    deadline = time.monotonic() + 120
    while not waiting.exists():
        assert child.poll() is None, "the worker process ended early"
        assert time.monotonic() < deadline, "the worker never reached its tool"
        time.sleep(0.05)
    return child, release


def worker_class() -> type[AgenticObject]:
    class Worker(AgenticObject):
        settings = ModelSettings(max_tokens=16)

    return Worker


def test_a_session_running_in_another_process_is_refused(runtime: Runtime, tmp_path: Path) -> None:
    child, release = start_worker(runtime, tmp_path)
    try:
        worker = worker_class()(runtime=runtime, object_id="worker")
        with pytest.raises(ActiveSessionError, match=f"held by pid {child.pid}"):
            worker.invoke("Me too.", thread="job", tool_choice="none")
    finally:
        release.write_text("go")
        assert child.wait(timeout=120) == 0
    [uuid] = sessions_of(runtime, "Worker")
    records = read_invocations(runtime.store.find(uuid).path)
    assert sorted(r.outcome for r in records) == ["ok", "refused"]
    worker.invoke("Now it is free.", thread="job", tool_choice="none")  # the lock was released


def test_a_stale_active_flag_of_a_killed_process_is_recognised(runtime: Runtime, tmp_path: Path) -> None:
    child, _ = start_worker(runtime, tmp_path)
    [uuid] = sessions_of(runtime, "Worker")
    assert runtime.store.load_session(uuid).is_active
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)
    worker = worker_class()(runtime=runtime, object_id="worker")
    worker.invoke("Are you there?", thread="job", tool_choice="none")
    records = read_invocations(runtime.store.find(uuid).path)
    latest = max(records, key=lambda r: r.started_at)
    assert latest.outcome == "ok"
    assert latest.stale_owner is not None and latest.stale_owner["pid"] == child.pid
    assert not runtime.store.load_session(uuid).is_active


def compaction_run(runtime: Runtime, strategy: Any, role: str) -> tuple[Any, list[str]]:
    cls = type(role, (Counter,), {"compaction": strategy})
    obj = cls(runtime=runtime, object_id=role)
    for text in ("Add one.", "Add two.", "Add three."):
        obj.invoke(text, thread="c", tool_choice="add", follow_up="none")
    [uuid] = sessions_of(runtime, role)
    session = runtime.store.load_session(uuid)
    forks = [c for c in session.contexts.values() if c.origin_context_id]
    return session, [f.id for f in forks]


def assert_forks_keep_the_specials(session: Any, fork_ids: list[str]) -> None:
    assert fork_ids, "no compaction happened"
    for fork_id in fork_ids:
        fork = session.contexts[fork_id]
        parent = session.contexts[fork.origin_context_id]
        assert fork_id in parent.children
        assert [m.message_type for m in fork.messages[:2]] == [
            "SystemPromptMessage",
            "ToolDefinitionsMessage",
        ]
        results = {p.call_id for m in fork.messages for p in m.tool_results()}
        calls = {u.call_id for m in fork.messages for u in m.tool_uses()}
        assert results <= calls
    assert session.active_context_id in fork_ids


def test_rolling_token_window_compaction_forks_beside_the_parent(runtime: Runtime) -> None:
    session, forks = compaction_run(runtime, RollingTokenWindow(threshold=300, keep=0.7), "TokenWindowed")
    assert_forks_keep_the_specials(session, forks)
    for fork_id in forks:
        fork = session.contexts[fork_id]
        parent = session.contexts[fork.origin_context_id or ""]
        # what the fork kept of its parent (it grows afterwards: the run goes on in it)
        in_parent = {m.id for m in parent.messages}
        kept = sum(m.count_tokens() for m in fork.messages if m.id in in_parent)
        assert kept < parent.total_token_count()


def test_rolling_sequence_window_compaction_keeps_the_last_messages(runtime: Runtime) -> None:
    session, forks = compaction_run(runtime, RollingSequenceWindow(n=4), "SequenceWindowed")
    assert_forks_keep_the_specials(session, forks)
    # each fork starts with the last 4 and then gains at most the answer and its tool result
    # before the next call compacts again
    assert all(len([m for m in session.contexts[f].messages if not m.is_special]) <= 4 + 2 for f in forks)


def test_summarize_compaction_replaces_older_messages_with_another_objects_summary(runtime: Runtime) -> None:
    class Summarizer(AgenticObject):
        settings = ModelSettings(max_tokens=32)
        system_prompt = "You summarize conversations in one sentence."

    summarizer = Summarizer(runtime=runtime)
    session, forks = compaction_run(runtime, Summarize(summarizer, threshold=300, keep_last=2), "Summarized")
    assert_forks_keep_the_specials(session, forks)
    fork = session.contexts[forks[0]]
    assert fork.messages[2].text().startswith("[Summary of the earlier conversation]")
    summarizer_sessions = sessions_of(runtime, "Summarizer")
    assert len(summarizer_sessions) == len(forks)  # one transient summarizer session per compaction
    for uuid in summarizer_sessions:
        [record] = read_invocations(runtime.store.find(uuid).path)
        assert record.caller is not None and record.caller.session == session.uuid


def test_files_written_by_the_runtime_load_without_loss_and_hold_no_api_key(runtime: Runtime) -> None:
    top, middle, leaf = Top(runtime=runtime), Middle(runtime=runtime), Leaf(runtime=runtime)
    top.middle, middle.leaf = middle, leaf
    top.invoke("Ask the middle.", tool_choice="ask_middle", follow_up="none")
    root = runtime.store.root
    before = snapshot(root)
    for blob in before.values():
        assert SECRET.encode() not in blob
    store = Store(root)
    for summary in store.sessions():
        assert summary.error is None
        session = store.load_session(summary.uuid)
        assert not session.load_errors
        for context_id, context in session.contexts.items():
            on_disk = json.loads((summary.path / f"{context_id}.json").read_text())
            assert context.to_dict() == on_disk
        store.save_session(session)
    assert snapshot(root) == before
