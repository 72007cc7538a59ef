"""Re-running the agent from a message: the loop logic against a scripted endpoint, and
one reproduction against the real local model."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from local_model import LocalModelServer
from replay import RerunError, ToolModes, materialize, rerun
from soap_core import REPLAY_KEY, Session, Store, read_calls, read_invocations
from soap_core.runtime import AgenticObject, LLMEndpoint, Runtime
from tests.conftest import snapshot
from tests.rerun_agents import Pantry
from tests.scripted import ScriptedEndpoint, calls, says

FIRST_ANSWER = 3  # system, tools, user, then the model's first output


def bought(tmp_path: Path, *answers: dict) -> tuple[Store, Session]:  # type: ignore[type-arg]
    """A pantry session: 'buy a pear' -> add_item(pear) -> '1 items' -> the last answer."""
    endpoint = ScriptedEndpoint(calls("add_item", '{"item": "pear"}'), *(answers or (says("done"),)))
    pantry = Pantry(runtime=Runtime(tmp_path / "store", endpoint), object_id="pantry")  # type: ignore[arg-type]
    pantry.invoke("buy a pear", thread="t")
    store = pantry.runtime.store
    return store, store.load_session(store.sessions()[0].uuid)


def pear_on_the_local_model(tmp_path: Path, server: LocalModelServer) -> tuple[Store, str, object]:
    """A pantry session on the real model, and its answer: add_item forced first, the
    answer through produce_output (as the demo does: with tool_choice "auto" after a tool
    result the small model's server can generate until the client's timeout)."""
    pantry = Pantry(runtime=Runtime(tmp_path / "store", LLMEndpoint(server.base_url)), object_id="p")
    answer = pantry.invoke(
        "Add a pear to the pantry.",
        thread="t",
        output_schema=str,
        tool_choice="add_item",
        follow_up="produce_output",
    )
    store = pantry.runtime.store
    return store, store.sessions()[0].uuid, answer


def rerun_argv(store: Store, uuid: str, base_url: str) -> list[str]:
    return ["rerun", uuid, "--at", str(FIRST_ANSWER), "--store", str(store.root), "--base-url", base_url]


def rerun_record(session: Session, result_fork: str) -> dict:  # type: ignore[type-arg]
    [record] = [r for r in read_invocations(session.directory or Path()) if r.rerun]
    assert record.rerun is not None and record.rerun["of_index"] == FIRST_ANSWER
    return {"state_before": record.state_before, "state_after": record.state_after, "fork": result_fork}


def test_a_recorded_mode_rerun_serves_the_recorded_result_and_touches_nothing(tmp_path: Path) -> None:
    store, session = bought(tmp_path)
    before = snapshot(store.root)
    again = ScriptedEndpoint(calls("add_item", '{"item":"pear"}', "c9"), says("done again"))
    steps: list[int] = []
    result = rerun(store, session, None, FIRST_ANSWER, again, on_step=steps.append)  # type: ignore[arg-type]
    assert result.ok and result.answer == "done again" and steps == [1, 2]
    assert result.tools == [{"tool": "add_item", "arguments": '{"item":"pear"}', "how": "recorded"}]
    after = snapshot(store.root)
    assert {k: after[k] for k in before} == before, "the original files changed"
    reloaded = store.load_session(session.uuid)
    branch = reloaded.contexts[result.branch_id]
    assert [m.role for m in branch.messages] == [
        "system",
        "tool",
        "user",
        "assistant",
        "tool_result",
        "assistant",
    ]
    assert branch.messages[4].tool_results()[0].content == "1 items"
    assert (
        branch.extra[REPLAY_KEY]["kind"] == "rerun"
        and result.branch_id not in reloaded.active_context.children
    )
    assert reloaded.active_context_id == session.active_context_id
    record = rerun_record(reloaded, result.fork_id)
    assert record["state_before"] == record["state_after"] == {"items": []}  # the tool did not run
    assert len(result.calls) == 2 and all(
        c.context_id == result.branch_id
        for c in read_calls(session.directory or Path())
        if c.id in result.calls
    )


def test_the_reruns_first_request_is_the_original_one(tmp_path: Path) -> None:
    store, session = bought(tmp_path)
    again = ScriptedEndpoint(calls("add_item", '{"item": "pear"}', "c9"), says("done"))
    rerun(store, session, None, FIRST_ANSWER, again)  # type: ignore[arg-type]
    original = materialize(session, None, FIRST_ANSWER)
    assert again.requests[0] == original.request


def test_an_injected_result_stands_in_for_the_tool(tmp_path: Path) -> None:
    store, session = bought(tmp_path)
    again = ScriptedEndpoint(calls("add_item", '{"item": "pear"}', "c9"), says("no pears"))
    modes = ToolModes(injected={"add_item": "out of stock"})
    result = rerun(store, session, None, FIRST_ANSWER, again, tools=modes)  # type: ignore[arg-type]
    branch = store.load_session(session.uuid).contexts[result.branch_id]
    assert branch.messages[4].tool_results()[0].content == "out of stock"
    assert result.tools[0]["how"] == "injected"
    assert "out of stock" in again.requests[1]["messages"][-1]["content"]


def test_a_call_recorded_mode_cannot_serve_stops_the_rerun_naming_both_calls(tmp_path: Path) -> None:
    store, session = bought(tmp_path)
    again = ScriptedEndpoint(calls("add_item", '{"item": "fig"}', "c9"), says("never asked"))
    result = rerun(store, session, None, FIRST_ANSWER, again)  # type: ignore[arg-type]
    assert not result.ok and result.error is not None
    assert 'recorded mode cannot serve add_item({"item":"fig"})' in result.error
    assert 'the original\'s next call was add_item({"item":"pear"})' in result.error
    assert len(again.requests) == 1


def test_a_call_recorded_mode_cannot_serve_runs_live_when_asked(tmp_path: Path) -> None:
    store, session = bought(tmp_path)
    again = ScriptedEndpoint(calls("add_item", '{"item": "fig"}', "c9"), says("a fig"))
    result = rerun(store, session, None, FIRST_ANSWER, again, tools=ToolModes(unserved="live"))  # type: ignore[arg-type]
    assert result.ok and result.answer == "a fig"
    record = rerun_record(store.load_session(session.uuid), result.fork_id)
    assert record["state_after"] == {"items": ["fig"]}  # the real method ran on the rebuilt object


def test_an_edited_message_goes_into_the_branch_and_the_original_keeps_its_text(tmp_path: Path) -> None:
    from replay import Overrides

    store, session = bought(tmp_path)
    again = ScriptedEndpoint(calls("add_item", '{"item": "plum"}', "c9"), says("a plum"))
    result = rerun(
        store,
        session,
        None,
        FIRST_ANSWER,
        again,
        overrides=Overrides(edits={2: "buy a plum"}),
        tools=ToolModes(default="live"),  # type: ignore[arg-type]
    )
    assert result.ok and again.requests[0]["messages"][-1]["content"] == "buy a plum"
    reloaded = store.load_session(session.uuid)
    assert reloaded.active_context.messages[2].text() == "buy a pear"
    assert reloaded.contexts[result.branch_id].messages[2].text() == "buy a plum"


def test_an_object_a_live_tool_invokes_runs_in_a_branch_of_its_own_session(tmp_path: Path) -> None:
    """The grocer's thread session gains a copy of its context for the re-run's turn; its
    files stay as they were, and the next real turn on that thread goes on from the
    original, not from the branch."""
    from tests.rerun_agents import Grocer

    endpoint = ScriptedEndpoint(calls("ask_grocer", '{"question": "pears?"}'), says("yes"), says("ok"))
    pantry = Pantry(runtime=Runtime(tmp_path / "store", endpoint), object_id="pantry")  # type: ignore[arg-type]
    pantry.invoke("ask about pears", thread="t")
    store = pantry.runtime.store
    session = next(store.load_session(s.uuid) for s in store.sessions() if s.role == "Pantry")
    grocer_summary = next(s for s in store.sessions() if s.role == "Grocer")
    before = snapshot(store.root)
    again = ScriptedEndpoint(
        calls("ask_grocer", '{"question": "plums?"}', "c9"), says("no plums"), says("none")
    )
    result = rerun(store, session, None, FIRST_ANSWER, again, tools=ToolModes(default="live"))  # type: ignore[arg-type]
    assert result.ok and result.answer == "none", result.error
    after = snapshot(store.root)
    assert {k: after[k] for k in before} == before, "a session's existing files changed"
    grocer = store.load_session(grocer_summary.uuid)
    [branch] = [
        c for c in grocer.contexts.values() if c.extra.get(REPLAY_KEY, {}).get("kind") == "rerun-callee"
    ]
    assert [m.text() for m in branch.messages if m.role in ("user", "assistant")][-2:] == [
        "plums?",
        "no plums",
    ]
    assert grocer.active_context_id == grocer_summary.active_context_id
    records = [r for r in read_invocations(grocer_summary.path) if r.rerun]
    assert records and records[0].callee.context_id == branch.id and records[0].caller is not None
    assert records[0].caller.session == session.uuid  # the chain leads back to the re-run
    later = Grocer(runtime=Runtime(store.root, ScriptedEndpoint(says("fresh"))), object_id="grocer")  # type: ignore[arg-type]
    assert later.invoke("and now?", thread="shop") == "fresh"
    active = store.load_session(grocer_summary.uuid).active_context
    assert [m.text() for m in active.messages if m.role == "user"] == ["pears?", "and now?"]


def test_a_class_defined_inside_a_function_cannot_be_rebuilt_and_says_why(tmp_path: Path) -> None:
    class Local(AgenticObject):
        pass

    endpoint = ScriptedEndpoint(says("hi"))
    local = Local(runtime=Runtime(tmp_path / "store", endpoint))  # type: ignore[arg-type]
    local.invoke("hello")
    store = local.runtime.store
    session = store.load_session(store.sessions()[0].uuid)
    with pytest.raises(RerunError, match="cannot be imported"):
        rerun(store, session, None, 3, ScriptedEndpoint(says("x")))  # type: ignore[arg-type]


def test_a_peteos_session_reruns_with_recorded_tools_and_peteoss_body_but_never_live(
    store_copy: Path,
) -> None:
    """No code to rebuild: the loop runs on the requests the session's source builds
    (peteos's body), tools answer from the record; live tools are refused up front."""
    store = Store(store_copy)
    session = store.load_session("3f0c")
    before = snapshot(store_copy)
    with pytest.raises(RerunError, match="code is not here to run: its tools cannot run live"):
        rerun(store, session, None, 5, ScriptedEndpoint(says("x")), tools=ToolModes(default="live"))  # type: ignore[arg-type]
    endpoint = ScriptedEndpoint(says("You asked me to remember 42."))
    result = rerun(store, session, None, 5, endpoint)  # type: ignore[arg-type]
    assert result.ok and result.answer == "You asked me to remember 42." and len(result.calls) == 1
    found = materialize(session, None, 5)
    assert endpoint.requests[0] == {**found.request, "model": "scripted"}
    assert list(endpoint.requests[0])[:4] == ["model", "stream", "max_tokens", "messages"]  # peteos's order
    after = snapshot(store_copy)
    assert {k: after[k] for k in before} == before
    [call] = [c for c in read_calls(session.directory or Path()) if c.id == result.calls[0]]
    assert call.request == endpoint.requests[0] and call.replay is not None and call.replay["kind"] == "rerun"


def test_an_openpoke_import_reruns_with_recorded_tools_and_refuses_live_ones(tmp_path: Path) -> None:
    """OpenPoke persists no tool traffic, so recorded mode has nothing to serve: a tool
    call stops the branch and says so; an answer without tools goes through."""
    from importers.openpoke import import_openpoke

    fixtures = Path(__file__).resolve().parent / "fixtures" / "openpoke" / "short"
    import_openpoke(fixtures, tmp_path / "store")
    store = Store(tmp_path / "store")
    summary = next(s for s in store.sessions() if s.role == "OpenPokeInteraction")
    session = store.load_session(summary.uuid)
    with pytest.raises(RerunError, match="cannot run live"):
        rerun(store, session, None, 0, ScriptedEndpoint(says("x")), tools=ToolModes(default="live"))  # type: ignore[arg-type]
    endpoint = ScriptedEndpoint(calls("send_message_to_user", '{"message": "morning!"}'))
    stopped = rerun(store, session, None, 0, endpoint)  # type: ignore[arg-type]
    assert not stopped.ok and "recorded mode cannot serve send_message_to_user" in (stopped.error or "")
    assert endpoint.requests[0]["stream"] is False  # OpenPoke's body, from its source
    plain = rerun(store, store.load_session(summary.uuid), None, 0, ScriptedEndpoint(says("morning!")))  # type: ignore[arg-type]
    assert plain.ok and plain.answer == "morning!"
    injected = rerun(
        store,
        store.load_session(summary.uuid),
        None,
        0,
        ScriptedEndpoint(calls("send_message_to_user", '{"message": "hi"}'), says("sent")),  # type: ignore[arg-type]
        tools=ToolModes(injected={"send_message_to_user": {"status": "success"}}),
    )
    assert injected.ok and injected.tools[0]["how"] == "injected"


def test_an_unchanged_rerun_against_the_local_model_reproduces_the_run(
    tmp_path: Path, llm_server: LocalModelServer
) -> None:
    """Temperature 0 on the deterministic server: the same first request (by hash), the
    same tool call served from the record, the same answer."""
    store, uuid, original_answer = pear_on_the_local_model(tmp_path, llm_server)
    session = store.load_session(uuid)
    before = snapshot(store.root)
    result = rerun(store, session, None, FIRST_ANSWER, LLMEndpoint(llm_server.base_url))
    assert result.ok, result.error
    assert [t["how"] for t in result.tools] == ["recorded"] * len(result.tools) and result.tools
    assert result.answer == original_answer
    reloaded = store.load_session(session.uuid)
    original, branch = reloaded.active_context, reloaded.contexts[result.branch_id]
    assert [(u.name, u.parsed_arguments()) for m in branch.messages for u in m.tool_uses()] == [
        (u.name, u.parsed_arguments()) for m in original.messages for u in m.tool_uses()
    ]
    calls_by_id = {c.id: c for c in read_calls(session.directory or Path())}
    first_original = materialize(reloaded, original, FIRST_ANSWER).call
    assert first_original is not None
    assert calls_by_id[result.calls[0]].request_hash == first_original.request_hash
    after = snapshot(store.root)
    assert {k: after[k] for k in before} == before


def test_a_log_analyzer_session_of_the_demo_reruns_from_its_first_answer_without_touching_it(
    demo_store: Path, tmp_path: Path, llm_server: LocalModelServer
) -> None:
    """The demo's analyzer is rebuilt from its record (its rebuild() reads the log path
    from the state); in recorded mode its tools answer from the record, and a call the
    record cannot serve stops the branch with a clear message. Either way the session's
    files stay as they were and the branch holds the original prefix."""
    copy = tmp_path / "store"
    shutil.copytree(demo_store, copy)
    store = Store(copy)
    summary = next(s for s in store.sessions() if s.role == "LogAnalyzer")
    session = store.load_session(summary.uuid)
    context = session.active_context
    first = next(i for i, m in enumerate(context.messages) if m.role == "assistant")
    before = snapshot(copy)
    result = rerun(store, session, context, first, LLMEndpoint(llm_server.base_url, timeout=300))
    assert result.ok or "recorded mode cannot serve" in (result.error or ""), result.error
    after = snapshot(copy)
    assert {k: after[k] for k in before} == before
    branch = store.load_session(session.uuid).contexts[result.fork_id]
    origin = store.load_session(session.uuid).contexts[materialize(session, context, first).context_id]
    prefix = materialize(session, context, first).messages
    assert [m.id for m in branch.messages[: len(prefix)]] == [m.id for m in prefix]
    assert origin.id == branch.origin_context_id
    assert result.calls, "the re-run made no model call"


def test_soapwb_rerun_reports_the_branch_its_first_divergence_and_checks_it(
    tmp_path: Path, llm_server: LocalModelServer
) -> None:
    """The command line over the same functions: an unchanged re-run passes --check, an
    edited one (a melon instead of a pear: the deterministic model adds a melon) diverges
    at the tool call, says so and fails --check."""
    from soapwb.cli import main

    store, uuid, _ = pear_on_the_local_model(tmp_path, llm_server)
    common = rerun_argv(store, uuid, llm_server.base_url)
    assert main([*common, "--check"]) == 0
    edited = [
        *common,
        "--edit",
        "2=Add a melon and a lemon to the pantry.",
        "--unserved",
        "live",
        "--check",
        "--json",
    ]
    import contextlib
    import io
    import json

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(edited)
    report = json.loads(out.getvalue())
    assert report["ok"], report["error"]
    assert code == 1 and report["diff"]["first_divergence"] == 0 and report["diff"]["distance"] > 0
    assert "the re-run called add_item(item='melon')" in report["diff"]["divergence"]
    assert [t["how"] for t in report["tools"]] == ["live (not recorded)"]
    assert store.load_session(uuid).active_context.messages[2].text() == "Add a pear to the pantry."


def test_a_conversation_goes_on_from_a_rerun_branch_and_from_an_original_context(tmp_path: Path) -> None:
    """Continue appends a user message and runs the agent's turn: in a re-run branch in
    place, elsewhere in a copy, so the original context never changes."""
    from replay import continue_branch

    store, session = bought(tmp_path)
    before = snapshot(store.root)
    first = rerun(
        store,
        session,
        None,
        FIRST_ANSWER,
        ScriptedEndpoint(calls("add_item", '{"item": "pear"}', "c9"), says("a pear")),
    )  # type: ignore[arg-type]
    assert first.ok
    session = store.load_session(session.uuid)
    on = continue_branch(
        store,
        session,
        session.contexts[first.branch_id],
        "and a fig?",
        ScriptedEndpoint(calls("add_item", '{"item": "fig"}', "c10"), says("a fig too")),  # type: ignore[arg-type]
    )
    assert on.ok and on.answer == "a fig too" and on.branch_id == first.branch_id and len(on.calls) == 2
    branch = store.load_session(session.uuid).contexts[first.branch_id]
    assert [m.text() for m in branch.messages if m.role == "user"] == ["buy a pear", "and a fig?"]
    assert (
        branch.messages[-2].tool_results()[0].content == "1 items"
    )  # live, from the recorded state (no pear)
    fresh = store.load_session(session.uuid)
    elsewhere = continue_branch(
        store, fresh, fresh.active_context, "anything else?", ScriptedEndpoint(says("no"))
    )  # type: ignore[arg-type]
    assert elsewhere.ok and elsewhere.branch_id != fresh.active_context_id
    copied = store.load_session(session.uuid).contexts[elsewhere.branch_id]
    assert copied.origin_context_id == fresh.active_context_id and copied.messages[-1].text() == "no"
    after = snapshot(store.root)
    assert {k: after[k] for k in before} == before


def test_soapwb_continue_goes_on_from_a_rerun_branch_over_http(tmp_path: Path) -> None:
    """The command line against a real (scripted) OpenAI-compatible server: the branch
    gains the new user message and the agent's answer; the session's files stay."""
    import contextlib
    import io
    import json

    from soapwb.cli import main
    from tests.peers.openai_stub import OpenAIStub

    store, session = bought(tmp_path)
    first = rerun(
        store,
        session,
        None,
        FIRST_ANSWER,
        ScriptedEndpoint(calls("add_item", '{"item": "pear"}', "c9"), says("ok")),
    )  # type: ignore[arg-type]
    before = {k: v for k, v in snapshot(store.root).items() if first.branch_id not in k}
    with OpenAIStub([{"content": "nothing else"}]) as stub:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(
                [
                    "continue",
                    first.branch_id[:8],
                    "Anything else?",
                    "--store",
                    str(store.root),
                    "--base-url",
                    stub.base_url,
                    "--json",
                ]
            )
        assert code == 0, out.getvalue()
        assert stub.bodies[0]["messages"][-1] == {"role": "user", "content": "Anything else?"}
    report = json.loads(out.getvalue())
    assert report["answer"] == "nothing else" and report["branch_id"] == first.branch_id
    branch = store.load_session(session.uuid).contexts[first.branch_id]
    assert [m.text() for m in branch.messages[-2:]] == ["Anything else?", "nothing else"]
    after = snapshot(store.root)
    assert {k: after[k] for k in before} == before


def test_soapwb_rerun_with_a_noise_band_passes_an_unchanged_rerun_and_fails_an_edited_one(
    tmp_path: Path, llm_server: LocalModelServer
) -> None:
    """Two unchanged re-runs measure the spread (on the deterministic server: none); the
    unchanged re-run lies inside it, the edited one outside, and --check says so."""
    import contextlib
    import io
    import json

    from soapwb.cli import main

    store, uuid, _ = pear_on_the_local_model(tmp_path, llm_server)
    common = rerun_argv(store, uuid, llm_server.base_url)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*common, "--noise", "2", "--check"]) == 0
    assert "inside the noise band of 2 unchanged re-runs (up to 0.000)" in out.getvalue()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(
            [
                *common,
                "--edit",
                "2=Add a melon and a lemon to the pantry.",
                "--unserved",
                "live",
                "--noise",
                "2",
                "--check",
                "--json",
            ]
        )
    report = json.loads(out.getvalue())
    assert code == 1 and report["noise_band"]["samples"] == 2 and report["diff"]["distance"] > 0
    labelled = [
        c
        for c in store.load_session(uuid).contexts.values()
        if c.extra.get("soapwb_replay", {}).get("label") == "noise"
    ]
    assert len(labelled) == 4
    assert main(["rerun", uuid, "--at", "3", "--store", str(store.root), "--noise", "1"]) == 2


def test_a_thread_a_rerun_opened_for_a_callee_is_not_that_threads_session_later(tmp_path: Path) -> None:
    from tests.rerun_agents import Grocer

    pantry = Pantry(
        runtime=Runtime(tmp_path / "store", ScriptedEndpoint(says("nothing to do"))), object_id="pantry"
    )  # type: ignore[arg-type]
    pantry.invoke("hello", thread="t")
    store = pantry.runtime.store
    session = store.load_session(store.sessions()[0].uuid)
    again = ScriptedEndpoint(calls("ask_grocer", '{"question": "figs?"}'), says("figs!"), says("asked"))
    result = rerun(store, session, None, FIRST_ANSWER, again, tools=ToolModes(default="live"))  # type: ignore[arg-type]
    assert result.ok, result.error
    [made] = [s for s in store.sessions() if s.role == "Grocer"]
    assert store.read_session_file(made.role, made.path).state_data.get("_soapwb_rerun") is True
    later = Grocer(runtime=Runtime(store.root, ScriptedEndpoint(says("hi"))), object_id="grocer")  # type: ignore[arg-type]
    later.invoke("hello grocer", thread="shop")
    assert len([s for s in store.sessions() if s.role == "Grocer"]) == 2  # a session of its own


def test_a_log_analyzer_rerun_reproduces_its_tool_calls_and_its_callee_chain(
    tmp_path: Path, llm_server: LocalModelServer
) -> None:
    """The demo's 3-deep chain (analyzer -> chunk summarizer -> keyword extractor) on the
    deterministic server: an unchanged re-run from the analyzer's first answer, with its
    summarize_chunk tool live, calls the same tools with the same arguments at every
    level, in new sessions and branches, and changes no file that was there."""
    from demo.build import write_sample_log
    from demo.log_analyzer import LogAnalyzer

    log = write_sample_log(tmp_path / "app.log")
    runtime = Runtime(tmp_path / "store", LLMEndpoint(llm_server.base_url, timeout=300))
    analyzer = LogAnalyzer(log, runtime=runtime, object_id="analyzer")
    analyzer.ask(
        "Summarise lines 181 to 188 of the log, where the errors start.", first_tool="summarize_chunk"
    )
    store = runtime.store
    roles = {s.role for s in store.sessions()}
    assert {"LogAnalyzer", "ChunkSummarizer", "KeywordExtractor"} <= roles

    def tool_calls(role: str, in_rerun: bool) -> list[tuple[str, object]]:
        """Every tool call of ``role``'s sessions: the original run's, or the re-run's
        (its branches, and the sessions it opened)."""
        found = []
        for summary in store.sessions():
            if summary.role != role:
                continue
            session = store.load_session(summary.uuid)
            opened_by_rerun = bool(session.state_data.get("_soapwb_rerun"))
            for context in session.contexts.values():
                if (opened_by_rerun or REPLAY_KEY in context.extra) == in_rerun:
                    found += [(u.name, u.parsed_arguments()) for m in context.messages for u in m.tool_uses()]
        return sorted(found, key=repr)

    original = {
        role: tool_calls(role, False) for role in ("LogAnalyzer", "ChunkSummarizer", "KeywordExtractor")
    }
    assert all(original.values()), original  # every level of the chain called its tools
    session = next(store.load_session(s.uuid) for s in store.sessions() if s.role == "LogAnalyzer")
    before = snapshot(store.root)
    result = rerun(
        store,
        session,
        None,
        FIRST_ANSWER,
        runtime.endpoint,
        tools=ToolModes(per_tool={"summarize_chunk": "live"}),
    )
    assert result.ok, result.error
    assert {t["tool"]: t["how"] for t in result.tools} == {"summarize_chunk": "live"}
    rerun_calls = {role: tool_calls(role, True) for role in original}
    assert rerun_calls == original
    after = snapshot(store.root)
    assert {k: after[k] for k in before} == before


def test_the_trace_of_a_rerun_marks_its_frames_and_follows_its_callee(tmp_path: Path) -> None:
    from soap_core.runtime import invocation_chain
    from workbench.traceback_views import stack_table

    endpoint = ScriptedEndpoint(calls("ask_grocer", '{"question": "pears?"}'), says("yes"), says("ok"))
    pantry = Pantry(runtime=Runtime(tmp_path / "store", endpoint), object_id="pantry")  # type: ignore[arg-type]
    pantry.invoke("ask about pears", thread="t")
    store = pantry.runtime.store
    session = next(store.load_session(s.uuid) for s in store.sessions() if s.role == "Pantry")
    again = ScriptedEndpoint(calls("ask_grocer", '{"question": "plums?"}', "c9"), says("no"), says("none"))
    assert rerun(store, session, None, FIRST_ANSWER, again, tools=ToolModes(default="live")).ok  # type: ignore[arg-type]
    traces = invocation_chain(store, session.uuid)
    [traced] = [t for t in traces if t.invocation is not None and t.invocation.rerun == "rerun"]
    assert [f.role for f in traced.callees] == ["Grocer"] and traced.callees[0].rerun == "rerun-callee"
    table = stack_table(traced, {})
    assert [o.endswith("ok (re-run)") for o in table["outcome"]] == [True, True]


def test_soapwb_rerun_samples_k_branches_and_reports_each(tmp_path: Path) -> None:
    import contextlib
    import io
    import json

    from soapwb.cli import main
    from tests.peers.openai_stub import OpenAIStub

    store, session = bought(tmp_path)
    pear = {"tool_calls": [{"id": "c9", "name": "add_item", "arguments": '{"item": "pear"}'}]}
    with OpenAIStub([pear, {"content": "done"}, pear, {"content": "done, again"}]) as stub:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(
                [
                    "rerun",
                    session.uuid,
                    "--at",
                    "3",
                    "--samples",
                    "2",
                    "--check",
                    "--json",
                    "--store",
                    str(store.root),
                    "--base-url",
                    stub.base_url,
                ]
            )
    report = json.loads(out.getvalue())
    assert [r["answer"] for r in report["runs"]] == ["done", "done, again"]
    assert [r["beyond"] for r in report["runs"]] == [
        False,
        True,
    ] and code == 1  # the second reworded its answer
    assert len({r["branch_id"] for r in report["runs"]}) == 2


def test_an_injected_result_changes_what_the_local_model_answers_next(
    tmp_path: Path, llm_server: LocalModelServer
) -> None:
    """On the deterministic server a recorded-mode re-run gives the original answer; the
    same re-run with the tool's result injected gives another (the model reads results)."""
    store, uuid, original = pear_on_the_local_model(tmp_path, llm_server)
    recorded = rerun(store, store.load_session(uuid), None, FIRST_ANSWER, LLMEndpoint(llm_server.base_url))
    full = ToolModes(injected={"add_item": "ERROR: the pantry is full, nothing was added"})
    injected = rerun(
        store, store.load_session(uuid), None, FIRST_ANSWER, LLMEndpoint(llm_server.base_url), tools=full
    )
    assert recorded.ok and injected.ok, (recorded.error, injected.error)
    assert recorded.answer == original
    assert injected.answer != original
    assert [t["how"] for t in injected.tools] == ["injected"]


def test_an_openpoke_import_reruns_against_the_local_model_with_openpokes_body(
    tmp_path: Path, llm_server: LocalModelServer
) -> None:
    from importers.openpoke import import_openpoke
    from replay import Overrides

    fixtures = Path(__file__).resolve().parent / "fixtures" / "openpoke" / "short"
    import_openpoke(fixtures, tmp_path / "store")
    store = Store(tmp_path / "store")
    summary = next(s for s in store.sessions() if s.role == "OpenPokeInteraction")
    before = snapshot(tmp_path / "store")
    endpoint = LLMEndpoint(llm_server.base_url, timeout=120, max_retries=0)
    result = rerun(
        store, store.load_session(summary.uuid), None, 0, endpoint, overrides=Overrides(max_tokens=32)
    )
    assert result.ok or "recorded mode cannot serve" in (result.error or ""), result.error
    [call] = [c for c in read_calls(summary.path) if c.id == result.calls[0]]
    assert list(call.request)[:3] == ["model", "messages", "stream"] and call.request["stream"] is False
    assert call.response is not None
    after = snapshot(tmp_path / "store")
    assert {k: after[k] for k in before} == before


def test_soapwb_rerun_and_replay_show_progress_on_stderr_quiet_with_json_unless_asked(
    tmp_path: Path, llm_server: LocalModelServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """A command that calls a model says what it calls and counts the calls on stderr;
    with --json it is quiet (a script reads stdout), unless --progress asks for it."""
    from soapwb.cli import main

    store, uuid, _ = pear_on_the_local_model(tmp_path, llm_server)
    common = rerun_argv(store, uuid, llm_server.base_url)
    capsys.readouterr()
    assert main([*common, "--json"]) == 0
    assert capsys.readouterr().err == ""
    assert main([*common, "--json", "--progress"]) == 0
    err = capsys.readouterr().err
    assert f"re-running Pantry from message {FIRST_ANSWER} of " in err and llm_server.base_url in err
    assert "re-run 1/1: 1 model calls" in err and "re-run 1/1: done\n" in err
    replayed = ["replay", uuid, "--at", str(FIRST_ANSWER), "--store", str(store.root), "--base-url"]
    assert main([*replayed, llm_server.base_url, "--samples", "2", "--json", "--progress"]) == 0
    err = capsys.readouterr().err
    assert "replaying message 3 of " in err and "2 runs" in err and "2/2 runs\n" in err
    assert main([*replayed, llm_server.base_url, "--json"]) == 0
    assert capsys.readouterr().err == ""
