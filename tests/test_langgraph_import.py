"""LangGraph checkpoints in (issue 26), checked against the real thing: the databases are
written by LangGraph 1.2 itself (``tests/peers/langgraph_driver.py`` running the app
``tests/peers/langgraph_app.py``) against the scripted server, whose recorded bodies are
the ground truth; the re-runs run LangGraph again, on a copy of the database."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from analysis import call_budgets
from importers import ImporterError
from importers.langgraph import import_langgraph, read_threads
from local_model import LocalModelServer
from replay import Overrides, ToolModes, materialize, rerun
from soap_core import Session, Store, app_branch, canonical_json, fork_tree
from soap_core.runtime import LLMEndpoint
from tests.peers import langgraph_app
from tests.peers.local_proxy import LocalProxy
from tests.peers.openai_stub import OpenAIStub, completion

PEERS = Path(__file__).resolve().parent / "peers"
GRAPH = "tests.peers.langgraph_app:graph"
TOOL_CALL = {"tool_calls": [{"id": "call_1", "name": "count_errors", "arguments": '{"pattern": "ERROR"}'}]}
SCRIPT = [
    TOOL_CALL,
    {"content": "There are 3 errors."},
    {"content": "There are 2 warnings."},
    {"content": "There are 5 errors."},
]


@dataclass(frozen=True)
class Written:
    db: Path
    bodies: list[dict[str, Any]]


def drive(db: Path, base_url: str, scenario: str) -> None:
    done = subprocess.run(
        [sys.executable, str(PEERS / "langgraph_driver.py"), base_url, str(db), scenario],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"the driver failed:\n{done.stdout}\n{done.stderr}"


def write(db: Path, script: list[dict[str, Any]], scenario: str) -> Written:
    with OpenAIStub(script) as stub:
        drive(db, stub.base_url, scenario)
        assert stub.snapshot()["exhausted"] == 0
        return Written(db, stub.bodies)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    """A thread with a tool loop, a fork replacing the question and a fork replacing the
    tool's result (sharing the first call)."""
    return write(tmp_path_factory.mktemp("graph") / "c.db", SCRIPT, "two-forks")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def imported(tmp_path: Path, written: Written, **options: Any) -> tuple[Store, Session]:
    report = import_langgraph(written.db, tmp_path / "store", **options)
    assert report.notices == [] and len(report.sessions) == 1
    store = Store(tmp_path / "store")
    return store, store.load_session(report.sessions[0].uuid)


def requests(session: Session) -> list[dict[str, Any]]:
    return [materialize(session, c.context_id, c.message_index).request for c in session.calls()]


def as_set(values: list[Any]) -> list[str]:
    return sorted(canonical_json(v) for v in values)


# -- import ------------------------------------------------------------------------------


def test_every_call_rematerializes_its_messages_exactly_from_the_file_alone_on_every_branch(
    tmp_path: Path, written: Written
) -> None:
    _, session = imported(tmp_path, written)
    built = requests(session)
    assert len(built) == len(written.bodies) == 4
    # everything after the system prompt, which the file does not hold
    assert as_set([b["messages"] for b in built]) == as_set([b["messages"][1:] for b in written.bodies])
    assert all(b["model"] == "smollm2" for b in built)
    found = materialize(session, session.calls()[0].context_id, session.calls()[0].message_index)
    assert found.source == "langgraph" and any("system prompt, the bound tools" in n for n in found.notes)


def test_the_whole_body_is_exact_with_the_apps_graph_and_the_database_is_not_written(
    tmp_path: Path, written: Written
) -> None:
    before = digest(written.db)
    _, session = imported(tmp_path, written, graph=GRAPH)
    assert as_set(requests(session)) == as_set(written.bodies)
    assert digest(written.db) == before
    assert langgraph_app.TOOL_CALLS == []  # building a body runs no tool


def test_the_update_forks_show_in_the_fork_tree_with_the_shared_call_once(
    tmp_path: Path, written: Written
) -> None:
    _, session = imported(tmp_path, written)
    nodes = fork_tree(session)
    assert [n.kind for n in nodes] == ["root", "fork", "fork"]
    main = session.contexts[nodes[0].id]
    question, tool_result = (session.contexts[n.id] for n in nodes[1:])
    assert [m.role for m in main.messages] == ["user", "assistant", "tool_result", "assistant"]
    assert question.messages[0].text() == "How many warnings?" and len(question.messages) == 2
    # the tool-result fork shares the question and the first call's answer (same ids)
    assert [m.id for m in tool_result.messages[:2]] == [m.id for m in main.messages[:2]]
    assert tool_result.messages[2].tool_results()[0].content == "5"
    assert tool_result.messages[3].text() == "There are 5 errors."
    by_context: dict[str, int] = {}
    for call in session.calls():
        by_context[call.context_id] = by_context.get(call.context_id, 0) + 1
    assert by_context == {main.id: 2, question.id: 1, tool_result.id: 1}  # the shared call once
    # the app's branches, not compactions: the token budget shows none between the calls
    assert [app_branch(c) for c in (main, question, tool_result)] == [
        None,
        {"framework": "langgraph", "how": "update"},
        {"framework": "langgraph", "how": "update"},
    ]
    assert [b.compactions_before for b in call_budgets(session)] == [[]] * 4


def test_both_decoders_read_the_same_messages_from_the_real_database(written: Written) -> None:
    notices: list[str] = []
    by_langgraph = read_threads(written.db, notices, "langgraph")
    by_msgpack = read_threads(written.db, notices, "msgpack")
    assert notices == []
    pairs = list(zip(by_langgraph[0].checkpoints, by_msgpack[0].checkpoints, strict=True))
    assert len(pairs) == 9  # input, 4 of the loop, 2 of each fork
    assert all(a.messages == b.messages and a.metadata == b.metadata for a, b in pairs)
    assert sum(len(a.messages or []) for a, _ in pairs) == 20


def test_an_import_with_either_decoder_writes_the_same_store(tmp_path: Path, written: Written) -> None:
    import_langgraph(written.db, tmp_path / "a", decoder="langgraph")
    import_langgraph(written.db, tmp_path / "b", decoder="msgpack")
    files_a = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.json"))
    files_b = sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*.json"))
    assert files_a == files_b and len(files_a) >= 8
    assert all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files_a)


def test_a_second_import_writes_nothing(tmp_path: Path, written: Written) -> None:
    first = import_langgraph(written.db, tmp_path / "store")
    second = import_langgraph(written.db, tmp_path / "store")
    assert first.changed and first.sessions[0].calls_added == 4
    assert not second.changed and second.sessions[0].status == "unchanged"


def test_a_grown_database_appends_only_its_new_messages_and_calls(tmp_path: Path, written: Written) -> None:
    db = tmp_path / "grown.db"
    shutil.copyfile(written.db, db)
    store_dir = tmp_path / "store"
    first = import_langgraph(db, store_dir)
    session_dir = store_dir / "agents" / "langgraph" / first.sessions[0].uuid
    old = {p: p.read_bytes() for p in (session_dir / "calls").rglob("*.json")}
    assert len(old) == 4
    before = Store(store_dir).load_session(first.sessions[0].uuid)
    known = {c.id for c in before.calls()}
    with OpenAIStub([{"content": "There are 4 warnings."}]) as stub:
        drive(db, stub.base_url, "grow")
        grown_body = stub.bodies[0]
    second = import_langgraph(db, store_dir)
    report = second.sessions[0]
    assert (report.calls_added, report.messages_added) == (1, 2)
    after = Store(store_dir).load_session(first.sessions[0].uuid)
    for context_id, context in before.contexts.items():
        assert [m.id for m in after.contexts[context_id].messages[: len(context.messages)]] == [
            m.id for m in context.messages
        ]
    assert all(path.read_bytes() == data for path, data in old.items())
    new = [c for c in after.calls() if c.id not in known]
    assert len(new) == 1
    assert (
        materialize(after, new[0].context_id, new[0].message_index).request["messages"]
        == grown_body["messages"][1:]
    )


def test_a_malformed_blob_is_a_notice_naming_the_file_thread_and_checkpoint(
    tmp_path: Path, written: Written
) -> None:
    db = tmp_path / "broken.db"
    shutil.copyfile(written.db, db)
    with sqlite3.connect(db) as connection:
        [(checkpoint_id,)] = connection.execute(
            "SELECT checkpoint_id FROM checkpoints ORDER BY checkpoint_id DESC LIMIT 1"
        )
        connection.execute(
            "UPDATE checkpoints SET checkpoint = ? WHERE checkpoint_id = ?",
            (b"\xc1\xff not msgpack", checkpoint_id),
        )
    for decoder in ("langgraph", "msgpack"):
        report = import_langgraph(db, tmp_path / f"store-{decoder}", decoder=decoder)  # type: ignore[arg-type]
        [notice] = report.notices
        assert str(db) in notice and "thread t1" in notice and checkpoint_id in notice
        assert report.sessions[0].calls == 3  # the rest imported


def test_a_database_that_is_not_langgraphs_is_refused_naming_the_file(tmp_path: Path) -> None:
    db = tmp_path / "other.db"
    with sqlite3.connect(db) as connection:
        connection.execute("CREATE TABLE agent_messages (id INTEGER)")
    with pytest.raises(ImporterError, match="not a LangGraph checkpoint database") as raised:
        import_langgraph(db, tmp_path / "store")
    assert raised.value.path == db
    (tmp_path / "junk.db").write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(ImporterError) as junk:
        import_langgraph(tmp_path / "junk.db", tmp_path / "store")
    assert junk.value.path == tmp_path / "junk.db"


def test_a_graph_that_cannot_be_imported_is_a_clear_error(tmp_path: Path, written: Written) -> None:
    with pytest.raises(ImporterError, match="cannot import the graph"):
        import_langgraph(written.db, tmp_path / "store", graph="tests.peers.no_such_app:graph")


# -- re-runs with LangGraph itself ---------------------------------------------------------


def rerun_on_stub(
    store: Store, session: Session, script: list[dict[str, Any]], **options: Any
) -> tuple[Any, list[dict[str, Any]], Session]:
    """Re-run from the main line's first answer against a stub playing ``script``."""
    main = fork_tree(session)[0].id
    with OpenAIStub(script) as stub:
        result = rerun(store, session, main, 1, LLMEndpoint(stub.base_url, max_retries=0), **options)
        bodies = stub.bodies
    return result, bodies, store.load_session(session.uuid)


def test_a_rerun_with_the_graph_and_recorded_tools_sends_the_original_bodies_again(
    tmp_path: Path, written: Written
) -> None:
    before = digest(written.db)
    calls_before = list(langgraph_app.TOOL_CALLS)
    store, session = imported(tmp_path, written, graph=GRAPH)
    result, bodies, reloaded = rerun_on_stub(store, session, SCRIPT[:2])
    assert result.ok and result.answer == "There are 3 errors."
    assert bodies == written.bodies[:2]  # LangGraph built the same two requests again
    assert [t["how"] for t in result.tools] == ["recorded"] and calls_before == langgraph_app.TOOL_CALLS
    branch = reloaded.contexts[result.branch_id]
    assert [m.role for m in branch.messages] == ["user", "assistant", "tool_result", "assistant"]
    assert branch.messages[2].tool_results()[0].content == "3"
    recorded = {c.id: c for c in reloaded.calls()}
    assert [recorded[c].request for c in result.calls] == written.bodies[:2]
    assert digest(written.db) == before  # the user's database is never written
    # the branch's calls rematerialize: the whole body, its messages from the branch
    last = recorded[result.calls[-1]]
    assert materialize(reloaded, last.context_id, last.message_index).request == bodies[1]


def test_an_injected_tool_result_reaches_the_model_in_the_rerun(tmp_path: Path, written: Written) -> None:
    store, session = imported(tmp_path, written, graph=GRAPH)
    tools = ToolModes(injected={"count_errors": "7"})
    result, bodies, reloaded = rerun_on_stub(store, session, SCRIPT[:2], tools=tools)
    assert result.ok and [t["how"] for t in result.tools] == ["injected"]
    assert bodies[1]["messages"][-1] == {"content": "7", "role": "tool", "tool_call_id": "call_1"}
    assert reloaded.contexts[result.branch_id].messages[2].tool_results()[0].content == "7"


def test_a_live_tool_rerun_calls_the_apps_own_function(tmp_path: Path, written: Written) -> None:
    store, session = imported(tmp_path, written, graph=GRAPH)
    calls_before = len(langgraph_app.TOOL_CALLS)
    result, bodies, _ = rerun_on_stub(store, session, SCRIPT[:2], tools=ToolModes(default="live"))
    assert result.ok and [t["how"] for t in result.tools] == ["live"]
    assert langgraph_app.TOOL_CALLS[calls_before:] == ["ERROR"]
    assert bodies[1]["messages"][-1]["content"] == "3"


def test_an_edited_rerun_runs_the_graph_from_a_state_holding_the_edit(
    tmp_path: Path, written: Written
) -> None:
    before = digest(written.db)
    store, session = imported(tmp_path, written, graph=GRAPH)
    edit = Overrides(edits={0: "How many criticals?"})
    result, bodies, reloaded = rerun_on_stub(store, session, [{"content": "None."}], overrides=edit)
    assert result.ok and result.answer == "None."
    assert bodies[0]["messages"][:2] == [
        {"content": "You analyse logs.", "role": "system"},
        {"content": "How many criticals?", "role": "user"},
    ]
    assert [m.text() for m in reloaded.contexts[result.branch_id].messages] == [
        "How many criticals?",
        "None.",
    ]
    assert digest(written.db) == before


def test_a_recorded_rerun_stops_at_a_tool_call_the_original_never_made(
    tmp_path: Path, written: Written
) -> None:
    store, session = imported(tmp_path, written, graph=GRAPH)
    calls_before = len(langgraph_app.TOOL_CALLS)
    other = {"tool_calls": [{"id": "call_9", "name": "count_errors", "arguments": '{"pattern": "WARN"}'}]}
    result, bodies, reloaded = rerun_on_stub(store, session, [other, {"content": "unused"}])
    assert (
        result.error is not None
        and result.error.startswith("RerunStopped")
        and "count_errors" in result.error
    )
    assert len(bodies) == 1 and len(langgraph_app.TOOL_CALLS) == calls_before
    branch = reloaded.contexts[result.branch_id]
    assert [m.role for m in branch.messages] == ["user", "assistant"]  # the call that asked, recorded


# -- on the deterministic local model ---------------------------------------------------------


def tool_call_first(body: dict[str, Any], number: int) -> dict[str, Any] | None:
    """The scripted tool call for a request ending with the user's question (the small
    model's own tool calls are unreliable); every other request goes to the local model."""
    return completion(TOOL_CALL, body["model"], number) if body["messages"][-1]["role"] == "user" else None


def test_a_rerun_on_the_local_model_repeats_the_answer_with_recorded_tools_and_diverges_with_an_injected_one(
    tmp_path: Path, llm_server: LocalModelServer
) -> None:
    db = tmp_path / "local.db"
    with LocalProxy(llm_server.base_url, tool_call_first) as endpoint:
        drive(db, endpoint.base_url, "local")
        original_bodies = list(endpoint.bodies)
        assert len(original_bodies) == 2 and original_bodies[1]["temperature"] == 0.0
        before = digest(db)
        report = import_langgraph(
            db, tmp_path / "store", graph="tests.peers.langgraph_app:deterministic_graph"
        )
        store = Store(tmp_path / "store")
        session = store.load_session(report.sessions[0].uuid)
        main = fork_tree(session)[0].id
        original = session.contexts[main].messages[3].text()
        assert original.strip()  # the local model's own words
        assert requests(session) == original_bodies  # the whole body, built by the graph
        recorded = rerun(store, session, main, 1, LLMEndpoint(endpoint.base_url, timeout=300))
        injected = rerun(
            store,
            store.load_session(session.uuid),
            main,
            1,
            LLMEndpoint(endpoint.base_url, timeout=300),
            tools=ToolModes(
                injected={"count_errors": "The log file could not be opened: permission denied."}
            ),
        )
        bodies = endpoint.bodies[2:]
    assert recorded.ok and recorded.answer == original  # the same answer again
    assert bodies[:2] == original_bodies  # LangGraph built the very same requests
    assert injected.ok and injected.answer != original  # the model saw another result
    assert "permission denied" in bodies[3]["messages"][-1]["content"]
    reloaded = store.load_session(session.uuid)
    diverged = reloaded.contexts[injected.branch_id].messages
    assert [m.role for m in diverged] == ["user", "assistant", "tool_result", "assistant"]
    assert (
        diverged[1].tool_uses()[0].arguments == '{"pattern": "ERROR"}'
        and diverged[3].text() == injected.answer
    )
    assert digest(db) == before


def test_every_recorded_call_verifies_against_its_rematerialization_with_and_without_the_graph(
    tmp_path: Path, written: Written
) -> None:
    from replay import verify_store

    for name, options in (("alone", {}), ("graph", {"graph": GRAPH})):
        store, session = imported(tmp_path / name, written, **options)
        if name == "graph":
            result, _, session = rerun_on_stub(store, session, SCRIPT[:2])
            assert result.ok
        results = verify_store(store)
        assert len(results) == (4 if name == "alone" else 6)
        assert all(r.match for r in results), [r for r in results if not r.match]


def test_without_the_code_a_rerun_rebuilds_each_request_from_the_graphs_records(
    tmp_path: Path, written: Written
) -> None:
    """A session imported with the graph keeps each call's whole body: a re-run without
    the code (recorded and injected tools, as for peteos) sends the original bodies."""
    from replay import FRAMEWORK_CODE_KEY

    store, session = imported(tmp_path, written, graph=GRAPH)
    del session.state_data[FRAMEWORK_CODE_KEY]
    store.save_session(session)
    result, bodies, _ = rerun_on_stub(store, store.load_session(session.uuid), SCRIPT[:2])
    assert result.ok and result.answer == "There are 3 errors."
    assert bodies == written.bodies[:2]


def test_the_file_alone_path_needs_neither_langchain_nor_langgraph(tmp_path: Path, written: Written) -> None:
    """With LangGraph and langchain unimportable, the import reads the blobs with plain
    msgpack and every call still rematerializes as ChatOpenAI sent it."""
    script = f"""
import importlib.abc, json, sys
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("langgraph", "langchain_core", "langchain_openai", "langchain"):
            raise ImportError(f"{{name}} is not installed here")
        return None
sys.meta_path.insert(0, Absent())
from importers.langgraph import import_langgraph
from replay import materialize
from soap_core import Store
report = import_langgraph({str(written.db)!r}, {str(tmp_path / "store")!r})
store = Store({str(tmp_path / "store")!r})
session = store.load_session(report.sessions[0].uuid)
built = [materialize(session, c.context_id, c.message_index).request for c in session.calls()]
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("langgraph", "langchain_core", "langchain_openai"))
print(json.dumps({{"decoder": report.decoder, "built": built, "loaded": loaded}}))
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["decoder"] == "msgpack" and out["loaded"] == []
    assert as_set([b["messages"] for b in out["built"]]) == as_set(
        [b["messages"][1:] for b in written.bodies]
    )


def test_a_subgraphs_checkpoints_are_noticed_not_silently_dropped(tmp_path: Path, written: Written) -> None:
    db = tmp_path / "sub.db"
    shutil.copyfile(written.db, db)
    with sqlite3.connect(db) as connection:
        connection.execute(
            "INSERT INTO checkpoints SELECT thread_id, 'inner:1', checkpoint_id, parent_checkpoint_id, type, "
            "checkpoint, metadata FROM checkpoints"
        )
    report = import_langgraph(db, tmp_path / "store")
    [notice] = report.notices
    assert "thread t1" in notice and "inner:1" in notice and "not imported" in notice
    assert report.sessions[0].calls == 4


def test_soapwb_import_langgraph_reports_the_thread_and_remembers_the_graph(
    tmp_path: Path, written: Written, capsys: pytest.CaptureFixture[str]
) -> None:
    from replay import FRAMEWORK_CODE_KEY
    from soapwb.cli import main

    store = tmp_path / "store"
    assert (
        main(["import", "langgraph", str(written.db), "--graph", GRAPH, "--store", str(store), "--json"]) == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["graph"] == GRAPH and report["changed"]
    [session] = report["sessions"]
    assert (session["thread"], session["contexts"], session["calls"]) == ("t1", 3, 4)
    assert main(["import", "langgraph", str(written.db), "--store", str(store)]) == 0
    text = capsys.readouterr().out
    assert "unchanged" in text and "thread 't1'" in text and "nothing changed (already imported)" in text
    assert Store(store).load_session(session["uuid"]).state_data[FRAMEWORK_CODE_KEY] == GRAPH


# -- the pages on a LangGraph session ---------------------------------------------------------


def test_the_pages_open_on_a_langgraph_session_and_the_fork_tree_draws_its_branches(
    tmp_path: Path, written: Written
) -> None:
    from tests.apptest import PAGES, open_app_page

    store, session = imported(tmp_path, written, graph=GRAPH)
    result, _, session = rerun_on_stub(store, session, SCRIPT[:2])
    nodes = fork_tree(session)
    assert [n.kind for n in nodes] == ["root", "fork", "fork", "replay"]  # the re-run hangs off main
    assert nodes[3].parent_id == nodes[0].id and nodes[3].id == result.branch_id
    at = open_app_page(store.root, "fork_tree", session=session.uuid)
    [chart] = at.get("plotly_chart")
    drawn = {
        cid
        for trace in json.loads(chart.proto.spec)["data"]
        if trace.get("name") in ("root", "fork", "replay", "replay run")
        for [cid] in trace["customdata"]
    }
    assert drawn == {n.id for n in nodes}
    for page in PAGES:
        opened = open_app_page(store.root, page, session=session.uuid, context=nodes[0].id, message="3")
        assert not opened.exception and not opened.error, (page, [e.value for e in opened.error])


def test_the_graph_given_at_a_later_import_rebuilds_the_calls_recorded_without_it(
    tmp_path: Path, written: Written
) -> None:
    from replay import verify_store

    store_dir = tmp_path / "store"
    import_langgraph(written.db, store_dir)
    later = import_langgraph(written.db, store_dir, graph=GRAPH)
    assert (later.sessions[0].calls_rebuilt, later.sessions[0].calls_added) == (4, 0) and later.changed
    session = Store(store_dir).load_session(later.sessions[0].uuid)
    assert as_set(requests(session)) == as_set(written.bodies)
    assert all(v.match for v in verify_store(Store(store_dir)))
    again = import_langgraph(written.db, store_dir, graph=GRAPH)
    assert not again.changed and again.sessions[0].calls_rebuilt == 0


def test_each_answer_names_the_node_that_wrote_it(tmp_path: Path, written: Written) -> None:
    _, session = imported(tmp_path, written)
    main = session.contexts[fork_tree(session)[0].id]
    assert [(m.metadata or {})["langgraph"].get("node") for m in main.messages] == [
        "__start__",
        "model",
        "tools",
        "model",
    ]


def test_a_rerun_with_the_graph_sends_the_model_and_temperature_it_was_given(
    tmp_path: Path, written: Written
) -> None:
    store, session = imported(tmp_path, written, graph=GRAPH)
    changed = Overrides(model="other-model", temperature=0.25)
    result, bodies, _ = rerun_on_stub(store, session, SCRIPT[:2], overrides=changed)
    assert result.ok and len(bodies) == 2
    for sent, original in zip(bodies, written.bodies[:2], strict=True):
        assert (sent["model"], sent["temperature"]) == ("other-model", 0.25)
        assert {k: v for k, v in sent.items() if k not in ("model", "temperature")} == {
            k: v for k, v in original.items() if k != "model"
        }


def test_a_rerun_with_the_graph_works_on_the_threads_forks_and_on_a_rerun_branch(
    tmp_path: Path, written: Written
) -> None:
    store, session = imported(tmp_path, written, graph=GRAPH)
    _, question, tool_result = (n.id for n in fork_tree(session))
    by_body = {canonical_json(b): b for b in written.bodies}
    for context, index, reply in ((question, 1, SCRIPT[2]), (tool_result, 3, SCRIPT[3])):
        with OpenAIStub([reply]) as stub:
            result = rerun(
                store, store.load_session(session.uuid), context, index, LLMEndpoint(stub.base_url)
            )
            [body] = stub.bodies
        assert result.ok and result.answer == reply["content"]
        assert canonical_json(body) in by_body  # the fork's own call, built again
    first, _, _ = rerun_on_stub(store, store.load_session(session.uuid), SCRIPT[:2])
    with OpenAIStub([SCRIPT[1]]) as stub:  # from the re-run branch's last answer
        again = rerun(store, store.load_session(session.uuid), first.branch_id, 3, LLMEndpoint(stub.base_url))
        assert stub.bodies == [written.bodies[1]]
    assert again.ok and again.answer == "There are 3 errors."


def test_a_tool_call_the_tool_node_refuses_is_a_tool_failure_of_the_rerun(
    tmp_path: Path, written: Written
) -> None:
    store, session = imported(tmp_path, written, graph=GRAPH)
    bad = {"tool_calls": [{"id": "call_7", "name": "count_errors", "arguments": "{}"}]}  # no pattern
    result, bodies, _ = rerun_on_stub(
        store, session, [bad, {"content": "Sorry."}], tools=ToolModes(default="live")
    )
    assert result.error is None and not result.ok and result.answer == "Sorry."
    [failure] = result.tool_failures
    assert (failure["tool"], failure["arguments"]) == ("count_errors", "{}") and "pattern" in failure[
        "result"
    ]
    assert bodies[1]["messages"][-1]["tool_call_id"] == "call_7"


# -- the messages as ChatOpenAI sends them, without langchain -----------------------------------


def test_the_messages_are_sent_as_langchain_openai_itself_converts_them() -> None:
    """Our langchain-free conversion against ``_convert_message_to_dict`` (through
    ``_get_request_payload``, as ChatOpenAI builds the body) on every kind of message."""
    from langchain_core.messages import AIMessage, ChatMessage, HumanMessage, SystemMessage, ToolMessage
    from langchain_openai import ChatOpenAI

    from importers.langgraph._checkpoints import LcMessage
    from importers.langgraph._messages import chat_openai_form, message_of, sent_form

    messages = [
        SystemMessage("Be brief.", id="s"),
        HumanMessage("Hi ü", name="ann", id="h"),
        HumanMessage(
            [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
            ],
            id="m",
        ),
        AIMessage("", tool_calls=[{"name": "f", "args": {"q": "ü", "n": [1, 2]}, "id": "c1"}], id="a1"),
        ToolMessage([{"type": "text", "text": "r", "extra": 1}], tool_call_id="c1", name="f", id="t1"),
        AIMessage(
            "Let me check.",
            tool_calls=[{"name": "g", "args": {}, "id": "c2"}],
            invalid_tool_calls=[{"name": "h", "args": "{bad", "id": "c3", "error": None}],
            id="a2",
        ),
        ToolMessage("done", tool_call_id="c2", id="t2", status="error"),
        AIMessage([{"type": "text", "text": "Fine."}, {"type": "reasoning_content", "text": "hm"}], id="a3"),
        ChatMessage("odd", role="developer", id="d"),
    ]
    model = ChatOpenAI(model="m", api_key="not-a-key")
    truth = model._get_request_payload(messages)["messages"]
    dumped = [cast(LcMessage, {"lc_class": type(m).__name__, **m.model_dump()}) for m in messages]
    assert [chat_openai_form(m) for m in dumped] == truth
    assert [w for m in dumped for w in sent_form(message_of(m))] == truth  # through the sOAP messages


def test_an_edited_message_is_sent_as_chatopenai_would_send_the_edited_langchain_message() -> None:
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_openai import ChatOpenAI

    from importers.langgraph._checkpoints import LcMessage
    from importers.langgraph._messages import message_of, sent_form
    from soap_core import TextPart, ToolResultPart

    call = AIMessage("", tool_calls=[{"name": "f", "args": {"q": "x"}, "id": "c1"}], id="a1")
    result = ToolMessage("3", tool_call_id="c1", name="f", id="t1")
    answer, tool = (
        message_of(cast(LcMessage, {"lc_class": type(m).__name__, **m.model_dump()})) for m in (call, result)
    )
    answer.content = [TextPart("Counting."), *answer.tool_uses()]
    tool.content = [ToolResultPart("c1", "7")]
    edited = [
        AIMessage("Counting.", tool_calls=[{"name": "f", "args": {"q": "x"}, "id": "c1"}], id="a1"),
        ToolMessage("7", tool_call_id="c1", name="f", id="t1"),
    ]
    truth = ChatOpenAI(model="m", api_key="not-a-key")._get_request_payload(edited)["messages"]
    assert [*sent_form(answer), *sent_form(tool)] == truth


def test_a_graph_with_async_nodes_builds_the_bodies_and_reruns_through_ainvoke(
    tmp_path: Path, written: Written
) -> None:
    store, session = imported(tmp_path, written, graph="tests.peers.langgraph_app:async_graph")
    assert as_set(requests(session)) == as_set(written.bodies)
    calls_before = len(langgraph_app.TOOL_CALLS)
    result, bodies, _ = rerun_on_stub(store, session, SCRIPT[:2])
    assert result.ok and bodies == written.bodies[:2] and [t["how"] for t in result.tools] == ["recorded"]
    live, _, _ = rerun_on_stub(
        store, store.load_session(session.uuid), SCRIPT[:2], tools=ToolModes(default="live")
    )
    assert live.ok and [t["how"] for t in live.tools] == ["live"]  # served once, then run
    assert langgraph_app.TOOL_CALLS[calls_before:] == ["ERROR"]
