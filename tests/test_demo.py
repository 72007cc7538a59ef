"""The demo store: built once against the real local model, then read back from its files.

Building takes about thirty model calls: about four minutes against the shared
deterministic server (which evaluates prompts a token at a time), so the module builds one
store and every test reads it. The tests use only what is on disk, through soap_core's readers:
what the workbench will see is what is checked.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from demo import DemoSummary, summarize_sessions
from local_model import free_port
from soap_core import SESSION_FILE, Session, SessionSummary, Store, fork_tree
from soap_core.runtime import (
    InvocationRecord,
    read_calls,
    read_invocation,
    read_invocations,
)
from soap_core.runtime._locks import THREAD_LOCKS_DIR
from soapwb.cli import main
from soapwb.demo_commands import format_summary
from tests.demo_store import FAKE_KEY

DEMO_ROLES = {
    "LogAnalyzer",
    "ChunkSummarizer",
    "KeywordExtractor",
    "InteractionAgent",
    "ExecutionAgent",
    "WorkingMemory",
}


@pytest.fixture(scope="module")
def built(demo_build: tuple[Path, DemoSummary]) -> tuple[Store, DemoSummary]:
    return Store(demo_build[0]), demo_build[1]


@pytest.fixture(scope="module")
def store(built: tuple[Store, DemoSummary]) -> Store:
    return built[0]


def sessions_of(store: Store, role: str) -> list[SessionSummary]:
    return [s for s in store.sessions() if s.role == role]


def only_session(store: Store, role: str) -> SessionSummary:
    (summary,) = sessions_of(store, role)
    return summary


def incoming(summary: SessionSummary) -> list[InvocationRecord]:
    """The invocations that ran this session (a caller's copy names another callee)."""
    return [r for r in read_invocations(summary.path) if r.callee.session == summary.uuid]


def load(store: Store, summary: SessionSummary) -> Session:
    return store.load_session(summary.path.name)


# -- what was written ------------------------------------------------------------------


def test_the_run_writes_sessions_for_every_demo_role(store: Store) -> None:
    sessions = store.sessions()
    assert {s.role for s in sessions} == DEMO_ROLES
    assert len(sessions) >= 7
    assert len(sessions_of(store, "ExecutionAgent")) == 2  # one per agent name
    assert not any(s.broken or s.is_active for s in sessions)


def test_every_file_loads_through_the_soap_core_reader(store: Store) -> None:
    checked: set[Path] = set()
    for summary in store.sessions():
        session = load(store, summary)
        assert not session.load_errors
        checked |= {summary.path / SESSION_FILE, *(summary.path / n for n in session.context_files.values())}
        assert len(read_calls(summary.path)) == len(list((summary.path / "calls").glob("*.json")))
        checked |= set((summary.path / "calls").glob("*.json"))
        records = read_invocations(summary.path)
        assert all(read_invocation(summary.path, r.id) == r for r in records)
        checked |= set((summary.path / "invocations").glob("*.json"))
    thread_locks = store.agents_dir / THREAD_LOCKS_DIR  # one lock file per (object, thread): no data
    on_disk = {p for p in store.agents_dir.rglob("*") if p.is_file() and thread_locks not in p.parents}
    assert {p.name for p in on_disk - checked} <= {".soapwb.lock"}
    assert all(p.suffix == ".lock" for p in thread_locks.iterdir())


def test_no_file_holds_the_api_key(built: tuple[Store, DemoSummary]) -> None:
    store, _summary = built
    files = [p for p in store.root.rglob("*") if p.is_file()]
    assert len(files) > 20
    assert not [p for p in files if FAKE_KEY.encode() in p.read_bytes()]


def test_every_invocation_starts_with_the_tool_call_it_was_given(store: Store) -> None:
    forced = 0
    for summary in store.sessions():
        for call in read_calls(summary.path):
            assert call.error is None and call.response is not None
            choice = call.request.get("tool_choice")
            if isinstance(choice, dict):
                forced += 1
                made = call.response["choices"][0]["message"]["tool_calls"]
                assert [c["function"]["name"] for c in made][:1] == [choice["function"]["name"]]
    assert forced >= 20


# -- the features the workbench shows ---------------------------------------------------------


def test_the_analyzer_thread_is_reused_for_every_question(store: Store) -> None:
    analyzer = only_session(store, "LogAnalyzer")
    runs = incoming(analyzer)
    assert len(runs) == 6
    assert {r.thread for r in runs} == {analyzer.thread_id} == {"triage"}
    users = [
        m.text() for c in load(store, analyzer).contexts.values() for m in c.messages if m.role == "user"
    ]
    assert any("db-1" in text for text in users)


def test_an_execution_agent_keeps_its_thread_across_turns(store: Store) -> None:
    reused = [s for s in sessions_of(store, "ExecutionAgent") if len(incoming(s)) >= 2]
    assert [s.thread_id for s in reused] == ["email-search"]
    poke = only_session(store, "InteractionAgent")
    assert len([r for r in incoming(poke) if r.outcome == "ok"]) == 4  # three turns and a report


def test_compaction_forks_the_analyzer_context_by_a_rolling_window(store: Store) -> None:
    session = load(store, only_session(store, "LogAnalyzer"))
    forks = [c for c in session.contexts.values() if c.origin_context_id is not None]
    assert forks
    for fork in forks:
        parent = session.contexts[str(fork.origin_context_id)]
        assert fork.id in parent.children
        assert fork.system_prompt is not None and fork.tool_definitions is not None
        older = [m.id for m in parent.messages if not m.is_special]
        kept = [m.id for m in fork.messages if m.id in set(older)]
        assert kept and kept == older[-len(kept) :]  # the newest messages, and only those
        assert len(kept) < len(older)
    assert session.active_context.origin_context_id is not None
    assert [n.kind for n in fork_tree(session)].count("fork") == len(forks)


def test_compaction_summarises_the_interaction_agent_by_another_object(store: Store) -> None:
    poke = only_session(store, "InteractionAgent")
    session = load(store, poke)
    forks = [c for c in session.contexts.values() if c.origin_context_id is not None]
    assert forks
    notes = [m.text() for c in forks for m in c.messages if m.role == "user"]
    assert any(text.startswith("[Summary of the earlier conversation]") for text in notes)
    for memory in sessions_of(store, "WorkingMemory"):
        (record,) = incoming(memory)
        assert record.caller is not None and record.caller.session == poke.uuid


def test_an_invocation_chain_three_deep_walks_back_from_the_innermost_session(store: Store) -> None:
    innermost = only_session(store, "KeywordExtractor")
    (record,) = incoming(innermost)
    chain = [record]
    while record.parent_invocation_id is not None:
        assert record.caller is not None and record.caller.session is not None
        caller_dir = store.find(record.caller.session).path
        parent = read_invocation(caller_dir, record.parent_invocation_id)
        assert parent is not None and parent.callee.session == record.caller.session
        caller = load(store, store.find(record.caller.session))
        call_site = caller.context(str(record.caller.context_id)).message_by_id(str(record.caller.message_id))
        assert call_site.role == "assistant" and call_site.tool_uses()
        chain.append(parent)
        record = parent
    assert [r.callee.role for r in reversed(chain)] == ["LogAnalyzer", "ChunkSummarizer", "KeywordExtractor"]
    assert chain[-1].caller is None
    assert all(r.outcome == "ok" for r in chain)


def test_the_no_circle_refusal_is_recorded_on_both_sides(store: Store) -> None:
    refused = [r for s in store.sessions() for r in read_invocations(s.path) if r.outcome == "refused"]
    by_id = {r.id: r for r in refused}
    assert len(by_id) == 1
    record = next(iter(by_id.values()))
    assert len(refused) == 2  # one copy with the callee, one with the caller
    poke = only_session(store, "InteractionAgent")
    assert record.callee.role == "InteractionAgent" and record.callee.session == poke.uuid
    assert record.caller is not None and record.caller.role == "ExecutionAgent"
    assert record.error is not None and "already active" in record.error
    agent = load(store, store.find(str(record.caller.session)))
    results = [
        str(part.content)
        for context in agent.contexts.values()
        for message in context.messages
        for part in message.tool_results()
    ]
    assert any(text.startswith("[REFUSED] Session ") for text in results)


def test_the_build_announces_each_step_before_it_runs(built: tuple[Store, DemoSummary]) -> None:
    """``make run`` builds the demo store for minutes on a loaded machine: each step is
    said as it starts, numbered against the whole."""
    from demo.build import ANALYZER_STEPS, POKE_TURNS
    from tests.demo_store import DEMO_PROGRESS

    assert [
        *(
            f"Log Analyzer, question {n} of {len(ANALYZER_STEPS)}: {q}"
            for n, (q, _t) in enumerate(ANALYZER_STEPS, 1)
        ),
        *(
            f"Interaction agent, user turn {n} of {len(POKE_TURNS)} (to {agent}): {text}"
            for n, (text, agent, _t) in enumerate(POKE_TURNS, 1)
        ),
        "Interaction agent: delivering the reports held back during its turns",
    ] == DEMO_PROGRESS


def test_the_summary_is_what_the_files_say(built: tuple[Store, DemoSummary]) -> None:
    store, summary = built
    again = summarize_sessions(
        store, store.sessions(), log_file=summary.log_file, elapsed_s=summary.elapsed_s
    )
    assert again == summary
    assert summary.session_count == len(store.sessions())
    assert summary.chain_depth == 3 and len(summary.refusals) == 1 and summary.fork_count >= 2
    assert summary.reused_threads["LogAnalyzer/triage"] == 6
    assert json.loads(json.dumps(summary.as_dict()))["chain_depth"] == 3
    text = format_summary(summary)
    assert f"sessions written: {summary.session_count} (" in text
    assert "deepest chain: 3: LogAnalyzer/" in text
    assert "refused (no-circle): 1" in text


# -- the command ------------------------------------------------------------------------


def test_soapwb_demo_reports_an_unreachable_model_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    assert main(["demo", "--store", str(tmp_path / "store"), "--base-url", url]) == 1
    *steps, error = capsys.readouterr().err.splitlines()
    assert error.startswith("soapwb: error: LLM call to ")
    [step] = steps
    assert re.fullmatch(r"soapwb demo \[\d+:\d\d\] Log Analyzer, question 1 of \d+: .+", step), step
    assert not (tmp_path / "store").exists()  # the failed first build is not where the workbench looks
    assert (tmp_path / "store.partial" / "demo" / "app.log").exists()  # it stays beside it


def test_a_first_demo_build_is_renamed_into_place_and_names_where_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``make run`` printed ``demo store: .demo-store.partial`` and renamed it after: the
    command builds beside the store itself now and says the store's own name. (The run
    is scripted here; the real build is the demo_store fixture's.)"""
    import demo.build

    def scripted(store_dir: Path, endpoint: object, **_: object) -> DemoSummary:
        (store_dir / "agents" / "Demo").mkdir(parents=True, exist_ok=True)
        return DemoSummary(str(store_dir), "demo/app.log", {}, 0, 0, {}, {}, [], [], [])

    monkeypatch.setattr(demo.build, "build_demo_store", scripted)
    target = tmp_path / "store"
    (tmp_path / "store.partial").mkdir()  # what an interrupted build left
    (tmp_path / "store.partial" / "stale").write_text("x")
    assert main(["demo", "--store", str(target), "--base-url", "http://127.0.0.1:9/v1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"demo store: {target}  (log file demo/app.log, in the store)")
    assert (target / "agents" / "Demo").is_dir() and not (target / "stale").exists()
    assert not (tmp_path / "store.partial").exists()
    assert main(["demo", "--store", str(target), "--base-url", "http://127.0.0.1:9/v1"]) == 0
    assert capsys.readouterr().out.startswith(f"demo store: {target}  ")  # a store already there: added to
    assert not (tmp_path / "store.partial").exists()


def test_soapwb_demo_refuses_a_store_path_that_is_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "not-a-dir"
    target.write_text("")
    assert main(["demo", "--store", str(target), "--base-url", "http://127.0.0.1:9/v1"]) == 1
    err = capsys.readouterr().err
    assert err == f"soapwb: error: {target}: cannot write the demo store: File exists\n"
