"""Replay against the real local model: materialize, verify, re-run, fork, diff, noise."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from local_model import LocalModelServer
from replay import (
    Output,
    Overrides,
    batches_from_saved,
    diff_contexts,
    diff_outputs,
    materialize,
    noise_band,
    replay,
    replay_messages,
    request_differences,
    saved_runs,
    verify_store,
)
from soap_core import REPLAY_KEY, Store, fork_tree
from soap_core.runtime import AgenticObject, LLMEndpoint, ModelSettings, Runtime
from soapwb.cli import main
from tests.conftest import CHILD_ID, PARENT_ID, snapshot
from tests.scripted import ScriptedEndpoint, calls, says


class Geographer(AgenticObject):
    system_prompt = "You answer in one short sentence."
    settings = ModelSettings(max_tokens=24)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, llm_server: LocalModelServer) -> Path:
    """A store written by the runtime: one thread, two questions, every call recorded."""
    root = tmp_path_factory.mktemp("recorded") / "store"
    geographer = Geographer(runtime=Runtime(root, LLMEndpoint(llm_server.base_url)), object_id="geo")
    geographer.invoke("What is the capital of France?", thread="quiz")
    geographer.invoke("And the capital of Italy?", thread="quiz")
    return root


@pytest.fixture
def store(recorded: Path, tmp_path: Path) -> Store:
    shutil.copytree(recorded, tmp_path / "store")
    return Store(tmp_path / "store")


def only_session(store: Store) -> Any:
    [summary] = store.sessions()
    return store.load_session(summary.uuid)


def endpoint(server: LocalModelServer) -> LLMEndpoint:
    return LLMEndpoint(server.base_url)


def test_every_recorded_call_rematerializes_to_its_hash(store: Store) -> None:
    results = verify_store(store)
    assert len(results) == 2
    assert all(r.match and r.materialized_hash == r.recorded_hash for r in results)


def test_verify_names_where_an_edited_file_no_longer_matches(store: Store) -> None:
    session = only_session(store)
    path = session.directory / f"{session.active_context_id}.json"
    data = json.loads(path.read_text())
    data["messages"][2]["content"][0]["text"] = "What is the capital of Spain?"
    path.write_text(json.dumps(data, indent=2))
    results = verify_store(store)
    assert [r.match for r in results] == [False, False]
    changed = results[0].differences["values_changed"]
    assert list(changed) == ["root['messages'][1]['content']"]
    assert changed["root['messages'][1]['content']"]["new_value"] == "What is the capital of Spain?"
    assert main(["verify", "--store", str(store.root)]) == 1


def test_a_temperature_zero_replay_reproduces_the_request_and_the_output(
    store: Store, llm_server: LocalModelServer
) -> None:
    session = only_session(store)
    found = materialize(session, None, -1)
    assert found.call is not None and found.request_hash == found.call.request_hash
    [run] = replay(store, session, found, endpoint(llm_server))
    assert run.ok and run.request_hash == found.call.request_hash
    original = session.contexts[found.context_id].messages[found.index]
    assert run.output is not None and run.output.text() == original.text()
    assert diff_outputs(Output.of(original), Output.of(run.output)).identical


def test_replays_are_forks_and_the_original_files_stay_the_same_to_the_byte(
    store: Store, llm_server: LocalModelServer
) -> None:
    before = snapshot(store.root)
    session = only_session(store)
    found = materialize(session, None, 3)
    runs = replay(store, session, found, endpoint(llm_server), Overrides(temperature=0.0), samples=2)
    after = snapshot(store.root)
    assert {k: after[k] for k in before} == before
    added = sorted(set(after) - set(before))
    assert len([k for k in added if "/calls/" in k]) == 2
    assert {Path(k).stem for k in added if "/calls/" not in k} == {r.fork_id for r in runs}
    reloaded = store.load_session(session.uuid)
    nodes = {n.id: n for n in fork_tree(reloaded)}
    for run in runs:
        assert nodes[run.fork_id].kind == "replay" and nodes[run.fork_id].parent_id == found.context_id
        fork = reloaded.contexts[run.fork_id]
        assert fork.extra["soapwb_replay"]["of_index"] == 3 and fork.extra["soapwb_replay"]["overrides"] == {
            "temperature": 0.0
        }
    assert reloaded.active_context_id == session.active_context_id
    assert all(r.match for r in verify_store(store))  # the runs' own calls rematerialize too


def test_an_edited_replay_differs_where_it_was_edited(store: Store, llm_server: LocalModelServer) -> None:
    session = only_session(store)
    found = materialize(session, None, -1)
    edit = Overrides(edits={4: "And the capital of Germany?"})
    [run] = replay(store, session, found, endpoint(llm_server), edit)
    assert run.ok and run.request_hash != found.request_hash
    assert list(request_differences(found.request, run.request)["values_changed"]) == [
        "root['messages'][3]['content']"
    ]
    original = session.contexts[found.context_id].messages[found.index]
    diff = diff_outputs(Output.of(original), Output.of(run.output))
    assert not diff.identical and diff.distance > 0
    assert {op for op, _ in diff.words} >= {"delete", "insert"}
    contexts = diff_contexts(
        session.contexts[found.context_id], store.load_session(session.uuid).contexts[run.fork_id]
    )
    assert contexts.first_divergence == 4 and contexts.turn == 2


def replay_last(store: Store, session: str, server: LocalModelServer) -> list[str]:
    """``soapwb replay`` of the session's last message against ``server``."""
    return ["replay", session, "--at", "-1", "--base-url", server.base_url, "--store", str(store.root)]


def test_samples_give_a_noise_band_and_an_edit_is_placed_against_it(
    store: Store, llm_server: LocalModelServer, capsys: pytest.CaptureFixture[str]
) -> None:
    session = only_session(store)
    argv = replay_last(store, session.uuid, llm_server)
    assert main([*argv, "--samples", "4", "--temperature", "1.0", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    outputs = [Output(r["text"] or "", tuple((n, a) for n, a in r["tool_calls"])) for r in report["runs"]]
    band = noise_band(outputs)
    assert report["noise_band"]["samples"] == 4
    assert report["noise_band"]["agreement_rate"] == band.agreement_rate
    assert report["noise_band"]["distances"] == band.distances and len(band.distances) == 6
    assert all(row["noise"] == "inside" for row in report["runs"])  # by definition of the band
    code = main([*argv, "--edit", "4=Name a famous painter.", "--noise", "2", "--check", "--json"])
    edited = json.loads(capsys.readouterr().out)
    [row] = edited["runs"]
    assert edited["noise_band"]["samples"] == 2
    assert row["noise"] == ("inside" if row["diff"]["distance"] <= edited["threshold"] else "outside")
    assert code == (1 if row["diff"]["distance"] > edited["threshold"] else 0)


def test_a_command_line_batch_reads_back_as_the_page_s_own(
    store: Store, llm_server: LocalModelServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """One replay layer: ``soapwb replay --noise`` makes its unchanged samples as the
    page does, so the page groups them into the same batch as its noise runs."""
    session = only_session(store)
    argv = replay_last(store, session.uuid, llm_server)
    assert main([*argv, "--edit", "4=Name a famous painter.", "--noise", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    found = materialize(session, None, -1)
    reread = store.load_session(session.uuid)
    [batch] = batches_from_saved(saved_runs(reread, found.context_id, found.index))
    assert [r.fork_id for r in batch.runs] == [row["fork_id"] for row in report["runs"]]
    assert [r.fork_id for r in batch.noise_runs] == [row["fork_id"] for row in report["baseline"]]
    assert len(batch.noise_runs) == 2 and batch.overrides.edits == {4: "Name a famous painter."}
    band = batch.band
    assert band is not None and band.as_dict() == report["noise_band"]


def test_a_message_the_model_did_not_write_is_refused_with_the_output_before_it(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    """The request before a tool result or a user message is no call the model got (a
    tool call without its result): replay and rerun name the model output to use instead,
    before any endpoint is asked."""
    session = only_session(store)
    messages = session.active_context.messages
    user = max(i for i, m in enumerate(messages) if m.role == "user")
    output = max(i for i, m in enumerate(messages[:user]) if m.role == "assistant")
    before = snapshot(store.root)
    for command in ("replay", "rerun"):
        argv = [command, session.uuid, "--at", str(user), "--store", str(store.root)]
        assert main([*argv, "--base-url", "http://127.0.0.1:9/v1"]) == 2
        error = capsys.readouterr().err
        assert f"message {user} of context {session.active_context.id} is a user message" in error
        assert f"--at {output})" in error
    assert snapshot(store.root) == before


def test_check_passes_an_unchanged_replay_and_fails_a_changed_one(
    store: Store, llm_server: LocalModelServer, capsys: pytest.CaptureFixture[str]
) -> None:
    session = only_session(store)
    argv = replay_last(store, session.uuid, llm_server)
    assert main([*argv, "--check"]) == 0
    assert main([*argv, "--check", "--edit", "4=What is two plus two?"]) == 1
    assert "check failed: 1 of 1 outputs differ from the original" in capsys.readouterr().out


def test_drop_takes_ranges_and_a_range_past_the_request_is_a_usage_error(
    store: Store, llm_server: LocalModelServer, capsys: pytest.CaptureFixture[str]
) -> None:
    session = only_session(store)
    found = materialize(session, None, -1)
    count = len(found.messages)
    argv = replay_last(store, session.uuid, llm_server)
    assert main([*argv, "--drop", "1-2", "--drop", f"{count - 1}-", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)["runs"]
    fork = store.load_session(session.uuid).contexts[row["fork_id"]]
    assert fork.extra[REPLAY_KEY]["overrides"]["drops"] == [1, 2, count - 1]
    kept = replay_messages(found, Overrides(drops=(1, 2, count - 1)))
    assert [m.text() for m in fork.messages[:-1]] == [m.text() for m in kept]
    assert main([*argv, "--drop", f"3-{count}"]) == 2
    assert f"--drop: '3-{count}': the request has {count} messages" in capsys.readouterr().err


def test_soapwb_diff_compares_runs_and_contexts(
    store: Store, llm_server: LocalModelServer, capsys: pytest.CaptureFixture[str]
) -> None:
    session = only_session(store)
    found = materialize(session, None, -1)
    [same] = replay(store, session, found, endpoint(llm_server))
    [edited] = replay(store, session, found, endpoint(llm_server), Overrides(edits={4: "And of Spain?"}))
    root = ["--store", str(store.root), "--json"]
    assert main(["diff", f"{found.context_id[:8]}@{found.index}", same.fork_id[:8], *root]) == 0
    assert json.loads(capsys.readouterr().out)["identical"] is True
    assert main(["diff", same.fork_id, edited.fork_id, *root]) == 0
    outputs = json.loads(capsys.readouterr().out)
    assert outputs["kind"] == "outputs" and not outputs["identical"]
    assert (
        main(["diff", found.context_id, f"{edited.fork_id}", "--store", str(store.root)]) == 2
    )  # mixed kinds
    capsys.readouterr()


# -- a store written by peteos: no call log --------------------------------------------

PETEOS_TOOLS = ["get_name", "produce_output", "produce_error"]


def test_materializing_the_peteos_fixture_gives_the_body_of_peteoss_adapter(store_copy: Path) -> None:
    """The fixture is peteos-0.5-shaped (no call log): the body is the one
    ``OpenAIChatBot._build_body`` builds; tests/test_peteos_peer.py checks that shape
    against peteos itself."""
    session = Store(store_copy).load_session("3f0c")
    # "You asked me to remember 42.": the first answer in the compaction fork, so peteos
    # sent the unreduced parent (its compaction hook forks after the runner took the context)
    found = materialize(session, None, 5)
    assert found.call is None and found.source == "peteos-0.5" and "model" not in found.request
    assert found.sent_from == (PARENT_ID, 7) and (found.context_id, found.index) == (CHILD_ID, 5)
    assert list(found.request) == ["stream", "max_tokens", "messages", "tools"]
    assert any("model is not recorded" in note for note in found.notes)
    assert found.request["messages"] == [
        {"role": "system", "content": session.active_context.messages[0].text()},
        {"role": "user", "content": "Remember this: the answer is 42."},
        {"role": "assistant", "content": "Got it — the answer is 42. I'll keep that in mind."},
        {"role": "user", "content": "What number did I ask you to remember?"},
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "type": "function",
                    "id": "toolu_01HXk3Vq9pZ2mN7cR4tY8wLb",
                    "function": {"name": "produce_output", "arguments": '{"answer": 42}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_01HXk3Vq9pZ2mN7cR4tY8wLb", "content": ""},
    ]
    assert [t["function"]["name"] for t in found.request["tools"]] == PETEOS_TOOLS
    assert found.request["tools"][1]["function"]["parameters"] == {
        "type": "object",
        "properties": {"answer": {}},
        "required": ["answer"],
    }


def test_a_message_a_fork_copied_is_materialized_from_the_context_it_was_produced_in(
    store_copy: Path,
) -> None:
    session = Store(store_copy).load_session("3f0c")
    found = materialize(session, None, 3)  # the produce_output call, copied into the active fork
    assert found.context_id == "b1d6e0a2-7c3f-4e59-a0b8-2f6d91c4e7a3" and found.index == 5
    users = [m["content"] for m in found.request["messages"] if m["role"] == "user"]
    assert users == ["Remember this: the answer is 42.", "What number did I ask you to remember?"]
    assert any("copied by a fork" in note for note in found.notes)


def test_each_call_is_rematerialized_with_the_system_prompt_and_tools_it_saw(tmp_path: Path) -> None:
    scripted = ScriptedEndpoint(says("plain"), calls("produce_output", '{"answer": 1}'), says("plain again"))
    geographer = Geographer(runtime=Runtime(tmp_path, scripted))  # type: ignore[arg-type]
    geographer.invoke("first", thread="t")
    geographer.invoke("second", thread="t", output_schema=int)
    geographer.invoke("third", thread="t")
    session = only_session(Store(tmp_path))
    on_disk = session.active_context
    assert on_disk.tool_definitions is not None and not on_disk.tool_definitions.content
    results = verify_store(Store(tmp_path))
    assert len(results) == 3 and all(r.match for r in results)
    with_schema = materialize(session, None, 5)  # the produce_output call
    assert [t["function"]["name"] for t in with_schema.request["tools"]] == [
        "produce_output",
        "produce_error",
    ]
    assert "satisfying the following schema" in with_schema.request["messages"][0]["content"]
    assert with_schema.request == scripted.requests[1]


def test_samples_run_concurrently_and_report_progress(store: Store, llm_server: LocalModelServer) -> None:
    session = only_session(store)
    found = materialize(session, None, 3)
    seen: list[tuple[int, int]] = []
    runs = replay(
        store,
        session,
        found,
        endpoint(llm_server),
        samples=3,
        concurrency=2,
        on_progress=lambda d, t: seen.append((d, t)),
    )
    assert seen == [(1, 3), (2, 3), (3, 3)]
    assert [r.sample for r in runs] == [0, 1, 2] and len({r.fork_id for r in runs}) == 3
    assert all(r.ok for r in runs)
