"""Re-running the agent from the Replay page, run headless with AppTest against a real
(scripted) OpenAI-compatible HTTP server."""

from __future__ import annotations

from pathlib import Path

from soap_core import REPLAY_KEY, Store
from tests.apptest import open_app_page
from tests.conftest import snapshot
from tests.peers.openai_stub import OpenAIStub
from tests.test_rerun import FIRST_ANSWER, bought


def click_rerun(at, base_url: str, **areas: str):  # type: ignore[no-untyped-def]
    at.text_input(key="replay_base_url").input(base_url).run()  # the button needs an endpoint
    for label, value in areas.items():
        [area] = [a for a in at.text_area if a.label.startswith(label)]
        area.input(value)
    [button] = [b for b in at.button if b.label == "Re-run the agent"]
    button.click().run()
    assert not at.exception
    return at


def test_the_replay_page_reruns_the_agent_and_shows_both_branches_step_by_step(tmp_path: Path) -> None:
    store, session = bought(tmp_path)
    before = snapshot(store.root)
    at = open_app_page(store.root, "replay", session=session.uuid, message=str(FIRST_ANSWER))
    script = [
        {"tool_calls": [{"id": "c9", "name": "add_item", "arguments": '{"item": "pear"}'}]},
        {"content": "done again"},
    ]
    with OpenAIStub(script) as stub:
        click_rerun(at, stub.base_url)
    texts = [t.value for t in at.text]
    assert 'answer: "done again"' in texts
    assert any("tools: add_item recorded" in t for t in texts)
    assert any(t.startswith("first divergence: turn 2") for t in texts)  # the last answer's words
    [table] = [d.value for d in at.dataframe if "re-run" in d.value.columns]
    assert table["status"].tolist() == ["equal", "changed"]
    assert table["step"].tolist() == ["1", "▶ 2"]  # the first divergence is marked
    assert table["original"].tolist()[0] == 'add_item({"item":"pear"})'
    after = snapshot(store.root)
    assert {k: after[k] for k in before} == before

    later = open_app_page(store.root, "replay", session=session.uuid, message=str(FIRST_ANSWER))  # a reload
    shown = [t.value for t in later.text]
    assert 'answer: "done again"' in shown
    assert any("tools: answered recorded by default" in t for t in shown)  # the modes it ran with
    assert any(t.startswith("first divergence: turn 2") for t in shown)
    [again] = [d.value for d in later.dataframe if "re-run" in d.value.columns]
    assert again["status"].tolist() == ["equal", "changed"]
    assert any(h.value.replace("\\", "").startswith("Re-run 1: nothing changed") for h in later.subheader)
    reloaded = Store(store.root).load_session(session.uuid)
    assert (
        sum(1 for c in reloaded.contexts.values() if c.extra.get(REPLAY_KEY, {}).get("kind") == "rerun") == 1
    )


def test_an_injected_result_from_the_page_goes_into_the_branch(tmp_path: Path) -> None:
    store, session = bought(tmp_path)
    at = open_app_page(store.root, "replay", session=session.uuid, message=str(FIRST_ANSWER))
    script = [
        {"tool_calls": [{"id": "c9", "name": "add_item", "arguments": '{"item": "pear"}'}]},
        {"content": "no room"},
    ]
    with OpenAIStub(script) as stub:
        click_rerun(at, stub.base_url, **{"Injected results": "add_item=the pantry is full"})
        assert stub.bodies[1]["messages"][-1]["content"] == "the pantry is full"
    assert any("add_item injected" in t.value for t in at.text)


def test_a_message_without_an_invocation_record_says_why_it_cannot_be_rerun() -> None:
    fixture = Path(__file__).resolve().parent / "fixtures" / "soap"
    at = open_app_page(fixture, "replay", session="20250611-3f0c", message="5")
    [button] = [b for b in at.button if b.label == "Re-run the agent"]
    assert button.disabled and "needs a session our runtime wrote" in button.help
    assert any("needs a session our runtime wrote" in c.value.replace("\\", "") for c in at.caption)
    modes = [r for r in at.radio if str(r.key).endswith((":tools", ":unserved"))]
    assert modes and all(r.disabled for r in modes)  # the tool modes do not apply either
    assert next(a for a in at.text_area if a.label.startswith("Injected results")).disabled


def test_each_model_output_on_the_context_page_links_to_its_replay_and_rerun(tmp_path: Path) -> None:
    store, session = bought(tmp_path)
    at = open_app_page(store.root, "context", session=session.uuid)
    links = [link.proto for link in at.page_link if link.proto.page == "replay"]
    answers = [i for i, m in enumerate(session.active_context.messages) if m.role == "assistant"]
    assert len(links) == len(answers) == 2
    assert (
        f"message={answers[0]}" in links[0].query_string
        and f"session={session.uuid}" in links[0].query_string
    )
    assert links[0].label == "Replay it, or re-run the agent from here"


def test_a_rerun_branch_is_continued_from_the_page(tmp_path: Path) -> None:
    store, session = bought(tmp_path)
    at = open_app_page(store.root, "replay", session=session.uuid, message=str(FIRST_ANSWER))
    script = [
        {"tool_calls": [{"id": "c9", "name": "add_item", "arguments": '{"item": "pear"}'}]},
        {"content": "done again"},
        {"content": "nothing else"},
    ]
    with OpenAIStub(script) as stub:
        click_rerun(at, stub.base_url)
        [box] = [t for t in at.text_input if t.label.startswith("Continue this branch")]
        box.input("Anything else?")
        [go] = [b for b in at.button if b.label == "Continue"]
        go.click().run()
        assert not at.exception
        assert stub.bodies[-1]["messages"][-1] == {"role": "user", "content": "Anything else?"}
    assert any(t.value == 'continued (1 model calls): "nothing else"' for t in at.text)
    reloaded = Store(store.root).load_session(session.uuid)
    [branch] = [c for c in reloaded.contexts.values() if c.extra.get(REPLAY_KEY, {}).get("kind") == "rerun"]
    assert [m.text() for m in branch.messages[-2:]] == ["Anything else?", "nothing else"]


def test_a_framework_session_reruns_from_the_page_with_the_apps_code_and_a_live_tool(tmp_path: Path) -> None:
    """An Agents SDK import made with --agent: the page offers its code, and the SDK's own
    Runner re-runs from the tool call with the app's real tool (the SDK calls the model and
    the progress bar from threads of its own, which must not break the page)."""
    from importers.agents_sdk import import_agents_sdk
    from tests.peers import agents_app
    from tests.test_agents_import import SCRIPT, drive

    written = drive(tmp_path / "s.db", SCRIPT)
    report = import_agents_sdk(written.db, tmp_path / "store", agent="tests.peers.agents_app:triage")
    at = open_app_page(tmp_path / "store", "replay", session=report.sessions[0].uuid, message="1")
    code = at.text_input(key=next(k for k in at.session_state if str(k).endswith(":code")))
    assert code.value == "tests.peers.agents_app:triage"
    at.radio(key=next(k for k in at.session_state if str(k).endswith(":tools"))).set_value("live")
    counted = len(agents_app.COUNTED)
    script = [
        {"tool_calls": [{"id": "c9", "name": "count_errors", "arguments": '{"pattern": "WARN"}'}]},
        {"content": "There are 3 warnings."},
    ]
    with OpenAIStub(script) as stub:
        click_rerun(at, stub.base_url)
        assert len(stub.bodies) == 2 and stub.bodies[0] == written.bodies[0]  # the SDK's own body
    assert agents_app.COUNTED[counted:] == ["WARN"]  # the app's tool ran
    texts = [t.value for t in at.text]
    assert 'answer: "There are 3 warnings."' in texts and not at.error, [e.value for e in at.error]
