"""The Replay & diff page, run headless with AppTest on the peteos fixture and on the
workbench store: it shows the request materialize() rebuilds and its verification, runs
replays against the real local model and keeps them as forks without touching the
original files, and diffs two contexts named in the URL. Stores that a test writes to are
copies, so the session-wide fixtures stay pristine.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from importers.openpoke import SUMMARY_TAG, import_openpoke, openpoke_meta
from local_model import LocalModelServer, free_port
from replay import (
    REPLAY_KEY,
    Batch,
    Output,
    Overrides,
    ReplayRun,
    call_texts,
    diff_contexts,
    diff_outputs,
    marked_words,
    materialize,
    materialize_at,
    noise_band,
    output_sentences,
    output_words,
    overrides_from_record,
    replay,
    replay_messages,
    request_differences,
)
from replay._refs import resolve_reference
from soap_core import Context, Session, SoapError, Store, read_calls
from soap_core.runtime import LLMEndpoint, LLMError
from tests.apptest import open_app_page
from tests.conftest import CHILD_ID, PARENT_ID, SESSION_UUID, SOAP_FIXTURE, edit_json, snapshot
from tests.scripted import ScriptedEndpoint
from tests.workbench_store import XSS
from workbench.replay_views import (
    RunSettings,
    assistant_indices,
    batch_line,
    batch_title,
    divergence_text,
    editable_calls,
    editable_results,
    editable_text,
    kind_in_words,
    message_label,
    named_message,
    nothing_replayable,
    opening_note,
    overrides_from_form,
    overrides_summary,
    replay_candidates,
    replayable_default,
    run_table,
    saved_line,
    setting_states,
    tool_modes_text,
)
from workbench.views import coloured_words, context_label, short_id

APP = Path(__file__).resolve().parents[1] / "app.py"
OPENPOKE_SHORT = Path(__file__).parent / "fixtures" / "openpoke" / "short"
OPENPOKE_LONG = Path(__file__).parent / "fixtures" / "openpoke" / "long"
PAGE = "workbench/pages/replay.py"
ACTIVE = "e7c40f19-2a6b-4d35-8e91-7b03a5c6d2f4"


@pytest.fixture
def writable_store(workbench_store: Path, tmp_path: Path) -> Path:
    """A copy of the workbench store that a test may run replays into."""
    target = tmp_path / "store"
    shutil.copytree(workbench_store, target)
    return target


def open_replay(store: Path, timeout: float = 60, **params: str) -> AppTest:
    """Run the app with ``?store=`` and ``params``, then open the Replay & diff page."""
    at = AppTest.from_file(str(APP), default_timeout=timeout)
    at.query_params["store"] = str(store)
    at.query_params.update(params)
    at.run()
    at.switch_page(PAGE).run()
    assert not at.exception
    return at


def analyst(root: Path) -> Session:
    store = Store(root)
    [summary] = [s for s in store.sessions() if s.role == "Analyst"]
    return store.load_session(summary.uuid, require_active=False)


def texts(at: AppTest) -> list[str]:
    return [element.value for element in at.text]


def markdowns(at: AppTest) -> list[str]:
    return [element.value for element in at.markdown]


def as_shown(text: str) -> str:
    """What st.text shows of ``text``: Streamlit dedents and strips it."""
    return textwrap.dedent(text).strip()


def json_values(at: AppTest) -> list[Any]:
    return [json.loads(element.value) for element in at.json]


def shows_output(at: AppTest, output: Output) -> bool:
    """Whether the page shows the output: its text as text, each tool call as code."""
    codes = [c.value for c in at.code]
    text_shown = not output.text or as_shown(output.text) in texts(at)
    return text_shown and all(call in codes for call in call_texts(output))


def noise_order(noise: list[Context]) -> Any:
    """Sorts fork ids as the page lists unchanged samples: by sample number."""
    sample = {c.id: c.extra[REPLAY_KEY]["sample"] for c in noise}
    return sample.__getitem__


def replay_forks(session: Session) -> list[Context]:
    return [c for c in session.contexts.values() if REPLAY_KEY in c.extra]


def run_page(at: AppTest, base_url: str, **inputs: str) -> AppTest:
    """Type the endpoint (and text-area edits by label), click Run, and wait for the runs."""
    at.text_input(key="replay_base_url").input(base_url).run()  # Run is enabled by an endpoint
    for label, value in inputs.items():
        [area] = [a for a in at.text_area if a.label == label.replace("_", " ")]
        area.input(value)
    [run] = [b for b in at.button if b.label == "Run"]
    run.click().run()
    assert not at.exception
    return at


class TestTheRequest:
    def test_the_fixture_store_shows_the_materialized_request_and_says_no_call_was_recorded(self) -> None:
        at = open_replay(SOAP_FIXTURE, session=SESSION_UUID)
        session = Store(SOAP_FIXTURE).load_session(SESSION_UUID)
        found = materialize(session, ACTIVE, 5)
        assert at.selectbox(key=f"message_picker:{ACTIVE}").value == 5
        assert at.query_params["message"] == "5"
        assert found.request in json_values(at)
        assert f"request hash {found.request_hash}" in texts(at)
        assert any("No recorded call" in info.value for info in at.info)
        assert not at.success

    def test_a_message_of_another_context_is_picked_from_the_url(self) -> None:
        at = open_replay(SOAP_FIXTURE, session=SESSION_UUID, context=PARENT_ID, message="3")
        found = materialize(Store(SOAP_FIXTURE).load_session(SESSION_UUID), PARENT_ID, 3)
        assert found.request in json_values(at)
        parent = Store(SOAP_FIXTURE).load_session(SESSION_UUID).contexts[PARENT_ID]
        assert at.selectbox(key=f"message_picker:{PARENT_ID}").options == [
            message_label(parent, i) for i in assistant_indices(parent)
        ]
        assert at.selectbox(key=f"message_picker:{PARENT_ID}").value == 3

    def test_a_message_that_is_no_model_output_opens_the_models_answer_to_it(self) -> None:
        """A user message or tool result carried from the Context page (or a search hit)
        opens the first model output after it, saying so; no warning."""
        for carried, answer in (("2", 3), ("4", 5)):
            at = open_replay(SOAP_FIXTURE, session=SESSION_UUID, message=carried)
            assert not at.warning and not at.error
            assert at.selectbox(key=f"message_picker:{ACTIVE}").value == answer
            assert at.query_params["message"] == str(answer)
            assert any(
                f"Message {carried} is no model output" in c.value.replace("\\", "") for c in at.caption
            )

    def test_a_message_past_the_last_model_output_is_reported_and_the_last_one_shown(self) -> None:
        at = open_replay(SOAP_FIXTURE, session=SESSION_UUID, message="99")
        assert at.warning
        assert at.selectbox(key=f"message_picker:{ACTIVE}").value == 5

    def test_the_workbench_store_verifies_a_recorded_message(self, workbench_store: Path) -> None:
        session = analyst(workbench_store)
        at = open_replay(workbench_store, session=session.uuid)
        found = materialize(session, session.active_context_id, -1)
        assert found.call is not None and found.call.request_hash == found.request_hash
        [success] = at.success
        assert "matches" in success.value and found.call.id.replace("-", "\\-") in success.value
        assert found.request in json_values(at)

    def test_a_message_a_fork_copied_is_verified_against_its_ancestor_call(
        self, workbench_store: Path
    ) -> None:
        session = analyst(workbench_store)
        active = session.active_context_id
        at = open_replay(workbench_store, session=session.uuid, context=active, message="2")
        found = materialize(session, active, 2)
        assert found.context_id != active
        assert f"note: {found.notes[0]}" in texts(at)
        assert at.success and found.request in json_values(at)

    def test_an_edited_file_shows_a_mismatch_and_where_the_requests_differ(
        self, writable_store: Path
    ) -> None:
        session = analyst(writable_store)
        path = session.directory / session.context_files[session.active_context_id]
        path.write_text(path.read_text().replace('"Count again."', '"Count twice."'))
        session = analyst(writable_store)
        found = materialize(session, session.active_context_id, -1)
        at = open_replay(writable_store, session=session.uuid)
        assert at.error and "Mismatch" in at.error[0].value
        assert found.call is not None
        assert request_differences(found.call.request, found.request) in json_values(at)

    def test_the_edit_form_offers_each_editable_message_prefilled(self, workbench_store: Path) -> None:
        session = analyst(workbench_store)
        at = open_replay(workbench_store, session=session.uuid)
        found = materialize(session, session.active_context_id, -1)
        expected = {
            f"Message {i}": editable_text(m)
            for i, m in enumerate(found.messages)
            if editable_text(m) is not None
        }
        shown = {a.label: a.value for a in at.text_area if a.label.startswith("Message")}
        assert shown == expected
        assert at.text_area(key=f"{found.context_id}:{found.index}:system").value == found.messages[0].text()

    def test_html_in_a_message_is_shown_as_plain_text(self, workbench_store: Path) -> None:
        session = analyst(workbench_store)
        active = session.active_context
        index = next(i for i, m in enumerate(active.messages) if m.role == "assistant" and m.text() == XSS)
        at = open_replay(workbench_store, session=session.uuid, message=str(index))
        assert XSS in texts(at)
        assert not any("<script>" in m.value for m in at.markdown)


def with_an_unsendable_last_request(store: Path) -> None:
    """Two messages appended to the fixture's active context: a tool listing peteos's
    adapter cannot send (a parameter that is a number), then an answer. That answer's
    request cannot be rebuilt; the one before it still can."""
    path = store / "agents" / "HelloPete" / SESSION_UUID / f"{CHILD_ID}.json"

    def append(data: Any) -> None:
        listing = {**data["messages"][2], "id": "a1111111-0000-4000-8000-000000000001", "role": "tool"}
        listing["content"] = [{"type": "tool", "name": "x", "description": "", "parameters": {"p": 5}}]
        answer = {**data["messages"][5], "id": "a1111111-0000-4000-8000-000000000002"}
        data["messages"] += [listing, answer]
        data["anchor_points"] = [[n, 8 if e == 6 else e] for n, e in data["anchor_points"]]

    edit_json(path, append)


class TestOpening:
    def test_the_page_opens_on_the_last_message_it_can_replay(self, store_copy: Path) -> None:
        with_an_unsendable_last_request(store_copy)
        at = open_replay(store_copy, session=SESSION_UUID)
        assert at.selectbox(key=f"message_picker:{ACTIVE}").value == 5
        assert not at.error
        assert any("#7 cannot be replayed" in c.value.replace("\\", "") for c in at.caption)
        found = materialize(Store(store_copy).load_session(SESSION_UUID), ACTIVE, 5)
        assert found.request in json_values(at)

    def test_a_linked_message_that_cannot_be_replayed_says_why(self, store_copy: Path) -> None:
        with_an_unsendable_last_request(store_copy)
        at = open_replay(store_copy, session=SESSION_UUID, message="7")
        [error] = at.error
        shown = error.value.replace("\\", "")
        assert "Message #7 cannot be replayed" in shown and "tool parameter 'p' must be a string" in shown
        assert at.selectbox(key=f"message_picker:{ACTIVE}").value == 7


class TestAnOpenPokeImport:
    """An imported OpenPoke log keeps no requests: they are rebuilt at the entries the
    interaction agent answered, so those are what the page offers and opens on."""

    def test_the_interaction_session_opens_on_its_last_answered_entry(self, tmp_path: Path) -> None:
        report = import_openpoke(OPENPOKE_SHORT, tmp_path / "store")
        session = Store(tmp_path / "store").load_session(report.interaction_session or "")
        context = session.active_context
        offered = replay_candidates(session, context)
        assert offered and all(context.messages[i].role != "assistant" for i in offered)
        at = open_replay(tmp_path / "store", session=session.uuid)
        assert not at.error, [e.value for e in at.error]
        assert at.selectbox(key=f"message_picker:{context.id}").value == offered[-1]
        found = materialize(session, context, offered[-1])
        assert found.source == "openpoke" and found.request in json_values(at)

    def test_message_n_in_a_link_is_log_entry_n_on_both_pages_as_on_the_command_line(
        self, tmp_path: Path
    ) -> None:
        """``?message=`` is read by the session's request source, as ``--at`` is: in the
        working memory's summary fork, log entry N is not display position N."""
        report = import_openpoke(OPENPOKE_LONG, tmp_path / "store")
        session = Store(tmp_path / "store").load_session(report.interaction_session or "")
        context = session.active_context
        index = replay_candidates(session, context)[0]
        meta = openpoke_meta(context.messages[index])
        assert meta is not None
        entry = str(meta["index"])
        assert entry != str(index), "the fixture's summary fork must move display positions"
        replay_page = open_replay(tmp_path / "store", session=session.uuid, context=context.id, message=entry)
        assert not replay_page.error and not replay_page.warning, [w.value for w in replay_page.warning]
        assert replay_page.selectbox(key=f"message_picker:{context.id}").value == index
        assert replay_page.query_params["message"] == entry
        assert materialize_at(session, context.id, entry).request in json_values(replay_page)
        context_page = open_app_page(
            tmp_path / "store", "context", session=session.uuid, context=context.id, message=entry
        )
        marked = f"▶ message {index}, as linked (?message={entry})"
        assert marked in texts(context_page)
        assert context_page.query_params["message"] == entry
        summary = next(
            i for i, m in enumerate(context.messages) if (openpoke_meta(m) or {}).get("tag") == SUMMARY_TAG
        )
        by_position = open_app_page(
            tmp_path / "store",
            "context",
            session=session.uuid,
            context=context.id,
            message=f"message:{summary}",
        )
        assert f"▶ message {summary}, as linked (?message=message:{summary})" in texts(by_position)

    def test_an_execution_session_says_why_nothing_can_be_replayed(self, tmp_path: Path) -> None:
        report = import_openpoke(OPENPOKE_LONG, tmp_path / "store")
        [execution, *_] = report.execution_sessions.values()
        at = open_replay(tmp_path / "store", session=execution)
        assert not at.error
        assert any(
            "execution agent's requests cannot be rebuilt" in i.value.replace("\\", "") for i in at.info
        )


class TestSettingsThatDoNotApply:
    def test_concurrency_and_k_apply_only_to_several_samples_and_a_noise_band(
        self, workbench_store: Path
    ) -> None:
        session = analyst(workbench_store)
        at = open_replay(workbench_store, session=session.uuid)

        def disabled() -> dict[str, bool]:
            return {
                n.label: n.disabled
                for n in at.number_input
                if n.label in ("Concurrency", "Unchanged samples (K)")
            }

        assert disabled() == {"Concurrency": True, "Unchanged samples (K)": True}
        at.number_input(key="replay_samples").set_value(3).run()
        assert disabled() == {"Concurrency": False, "Unchanged samples (K)": True}
        at.number_input(key="replay_samples").set_value(1).run()
        at.checkbox(key="replay_measure_noise").check().run()
        assert disabled() == {"Concurrency": False, "Unchanged samples (K)": False}
        assert not at.exception

    def test_the_reasons_are_the_ones_the_views_give(self) -> None:
        states = setting_states(1, False, "")
        assert states.concurrency and states.unchanged and states.run
        assert setting_states(2, True, "http://x/v1") == type(states)(None, None, None)

    def test_the_unserved_choice_is_off_when_every_tool_runs_live(self, workbench_store: Path) -> None:
        session = analyst(workbench_store)
        at = open_replay(workbench_store, session=session.uuid)
        found = materialize(session, session.active_context_id, -1)
        prefix = f"{found.context_id}:{found.index}"
        assert not at.radio(key=f"{prefix}:unserved").disabled
        at.radio(key=f"{prefix}:tools").set_value("live").run()
        assert at.radio(key=f"{prefix}:unserved").disabled


class TestBadInput:
    def test_without_a_session_it_asks_for_one(self) -> None:
        at = open_replay(SOAP_FIXTURE)
        assert any("Pick a session" in info.value for info in at.info)

    def test_an_unknown_session_offers_the_picker(self) -> None:
        at = open_replay(SOAP_FIXTURE, session="no-such-session")
        assert not at.error and "no\\-such\\-session" in at.warning[0].value

    def test_an_unknown_context_shows_the_active_one_and_says_so(self) -> None:
        at = open_replay(SOAP_FIXTURE, session=SESSION_UUID, context="ffffffff")
        assert not at.error and "ffffffff" in at.warning[0].value
        assert at.query_params["context"] == CHILD_ID

    def test_without_an_endpoint_run_is_disabled_and_says_why(self, writable_store: Path) -> None:
        session = analyst(writable_store)
        at = open_replay(writable_store, session=session.uuid)
        [run] = [b for b in at.button if b.label == "Run"]
        assert run.disabled
        assert any("Enter the endpoint's base URL" in c.value for c in at.caption)
        assert len(replay_forks(analyst(writable_store))) == 1  # only the store's own replay fork
        at.text_input(key="replay_base_url").input("http://127.0.0.1:1/v1").run()
        assert not next(b for b in at.button if b.label == "Run").disabled


class TestRunningAgainstTheLocalModel:
    def test_a_run_is_shown_saved_as_a_fork_and_leaves_the_original_files_alone(
        self, writable_store: Path, llm_server: LocalModelServer
    ) -> None:
        session = analyst(writable_store)
        before = snapshot(writable_store)
        forks_before = {c.id for c in replay_forks(session)}
        at = open_replay(writable_store, timeout=120, session=session.uuid)
        run_page(at, llm_server.base_url)

        after = analyst(writable_store)
        [fork] = [c for c in replay_forks(after) if c.id not in forks_before]
        record = fork.extra[REPLAY_KEY]
        assert record["of_context"] == session.active_context_id and record["overrides"] == {}
        output = fork.messages[-1]
        assert output.role == "assistant"
        assert shows_output(at, Output.of(output))
        assert f"run sample 0  fork {short_id(fork.id)}" in texts(at)
        picker = at.selectbox(key="context_picker").options
        assert any(label.endswith(short_id(fork.id)) for label in picker)  # the cache did not hide the fork
        now = snapshot(writable_store)
        assert {name: now[name] for name in before} == before  # every original file to the byte

        at.run()  # a rerun keeps the runs
        assert f"run sample 0  fork {short_id(fork.id)}" in texts(at)

    def test_an_edited_run_shows_its_diff_against_the_original(
        self, writable_store: Path, llm_server: LocalModelServer
    ) -> None:
        session = analyst(writable_store)
        forks_before = {c.id for c in replay_forks(session)}
        found = materialize(session, session.active_context_id, -1)
        edited = next(
            i for i, m in enumerate(found.messages) if m.role == "user" and m.text() == "Count again."
        )
        at = open_replay(writable_store, timeout=120, session=session.uuid)
        run_page(at, llm_server.base_url, **{f"Message_{edited}": "Say hello to the team."})

        after = analyst(writable_store)
        [fork] = [c for c in replay_forks(after) if c.id not in forks_before]
        assert fork.extra[REPLAY_KEY]["overrides"]["edits"] == {str(edited): "Say hello to the team."}
        assert fork.messages[edited].text() == "Say hello to the team."
        assert {"edits": {str(edited): "Say hello to the team."}} in json_values(at)
        original = after.contexts[found.context_id].messages[found.index]
        a, b = Output.of(original), Output.of(fork.messages[-1])
        diff = diff_outputs(a, b)
        assert coloured_words(output_words(a, b)) in markdowns(at)
        assert "\n".join(f"• {s}" for s in output_sentences(a, b)) in texts(at)
        assert f"distance {diff.distance}  {'identical' if diff.identical else 'different'}" in texts(at)
        [table] = [
            d.value for d in at.dataframe if "fork" in d.value.columns and fork.id in d.value["fork"].tolist()
        ]
        assert table["fork"].tolist() == [fork.id] and table["distance"].tolist() == [diff.distance]

        later = open_replay(writable_store, timeout=120, session=session.uuid)  # a reload: a new session
        assert saved_line(2, 0) in [c.value for c in later.caption]  # the store's own run, and this one
        assert f"run sample 0  fork {short_id(fork.id)}" in texts(later)
        assert coloured_words(output_words(a, b)) in markdowns(later)
        assert {"edits": {str(edited): "Say hello to the team."}} in json_values(later)
        [heading] = [h.value for h in later.subheader if h.value.startswith("Run 2")]
        assert f"#{edited} edited" in heading.replace("\\", "")

    def test_an_edited_tool_result_is_sent_to_the_model_and_kept_in_the_fork(
        self, writable_store: Path, llm_server: LocalModelServer
    ) -> None:
        session = analyst(writable_store)
        forks_before = {c.id for c in replay_forks(session)}
        found = materialize(session, session.active_context_id, -1)
        at_result = max(i for i, m in enumerate(found.messages) if editable_results(m))
        at = open_replay(writable_store, timeout=120, session=session.uuid)
        at.text_input(key="replay_base_url").input(llm_server.base_url).run()
        box = f"{found.context_id}:{found.index}:result:{at_result}:0"
        at.text_area(key=box).input("0 errors: all clear")
        [run] = [b for b in at.button if b.label == "Run"]
        run.click().run()
        assert not at.exception

        after = analyst(writable_store)
        [fork] = [c for c in replay_forks(after) if c.id not in forks_before]
        assert fork.extra[REPLAY_KEY]["overrides"]["tool_results"] == {
            str(at_result): ["0 errors: all clear"]
        }
        [call] = [c for c in read_calls(after.directory) if c.context_id == fork.id]
        sent = [m for m in call.request["messages"] if m.get("role") == "tool"]
        assert any(m.get("content") == "0 errors: all clear" for m in sent), sent  # what the model saw
        assert fork.messages[at_result].tool_results()[0].content == "0 errors: all clear"

    def test_the_noise_band_is_measured_over_unchanged_samples(
        self, writable_store: Path, llm_server: LocalModelServer
    ) -> None:
        session = analyst(writable_store)
        forks_before = {c.id for c in replay_forks(session)}
        at = open_replay(writable_store, timeout=120, session=session.uuid)
        at.checkbox(key="replay_measure_noise").check().run()  # K applies once the box is checked
        [unchanged] = [n for n in at.number_input if n.label == "Unchanged samples (K)"]
        unchanged.set_value(2)
        run_page(at, llm_server.base_url)

        after = analyst(writable_store)
        new = [c for c in replay_forks(after) if c.id not in forks_before]
        noise = [c for c in new if c.extra[REPLAY_KEY].get("label") == "noise band"]
        assert len(new) == 3 and len(noise) == 2
        # nothing was changed: the run itself is a third unchanged sample (the CLI's rule too)
        runs = [c for c in new if c not in noise]
        band = noise_band([Output.of(c.messages[-1]) for c in [*noise, *runs]])
        figures = band.as_dict()
        assert (
            f"noise band over 3 unchanged samples: agreement rate {band.agreement_rate:.0%}, "
            f"distance min {figures['distance_min']} median {figures['distance_median']} "
            f"max {figures['distance_max']}"
        ) in texts(at)
        [table] = [
            d.value
            for d in at.dataframe
            if "noise band" in d.value.columns and runs[0].id in d.value["fork"].tolist()
        ]  # the batch this click made, with its unchanged samples
        assert table["kind"].tolist() == ["run", "unchanged", "unchanged"]
        assert table["fork"].tolist() == [runs[0].id, *sorted((c.id for c in noise), key=noise_order(noise))]
        [run_row] = table[table["kind"] == "run"].to_dict("records")
        assert run_row["noise band"] == ("inside" if band.contains(run_row["distance"]) else "outside")

    def test_a_run_whose_endpoint_failed_is_listed_with_its_error(self, writable_store: Path) -> None:
        session = analyst(writable_store)
        found = materialize(session, session.active_context_id, -1)
        failing = ScriptedEndpoint(LLMError("http://127.0.0.1:9/v1", "r", "HTTP error", "500 Server Error"))
        [run] = replay(Store(writable_store), session, found, failing)
        at = open_replay(writable_store, session=session.uuid)
        [warning] = [w.value for w in at.warning if "failed" in w.value]
        assert "sample 0 failed" in warning.replace("\\", "") and not at.error
        assert f"run sample 0  fork {short_id(run.fork_id)}" in texts(at)

    def test_a_run_clicked_with_the_model_down_says_so_on_the_page(self, writable_store: Path) -> None:
        session = analyst(writable_store)
        before = snapshot(writable_store)
        at = open_replay(writable_store, session=session.uuid)
        run_page(at, f"http://127.0.0.1:{free_port()}/v1")
        [error] = [e.value.replace("\\", "") for e in at.error]
        assert "1 of 1 samples never reached the model, and nothing was saved for them" in error
        assert "connection" in error
        now = snapshot(writable_store)
        assert {name: now[name] for name in before} == before and set(now) == set(before)
        at.run()
        assert not at.error  # said once, not on every later run of the page

    def test_a_run_that_never_reached_the_model_leaves_nothing_to_list(self, writable_store: Path) -> None:
        session = analyst(writable_store)
        found = materialize(session, session.active_context_id, -1)
        nobody = LLMEndpoint(f"http://127.0.0.1:{free_port()}/v1", max_retries=0, timeout=5)
        [run] = replay(Store(writable_store), session, found, nobody)
        assert not run.saved
        at = open_replay(writable_store, session=session.uuid)
        assert run.fork_id not in " ".join(texts(at)) and not at.error


class TestDiffSection:
    def test_two_contexts_from_the_url_show_their_first_divergence(self, workbench_store: Path) -> None:
        session = analyst(workbench_store)
        active = session.active_context_id
        [fork] = replay_forks(session)
        at = open_replay(workbench_store, diff_a=active[:8], diff_b=fork.id)
        diff = diff_contexts(session.contexts[active], fork)
        assert diff.first_divergence is not None
        assert divergence_text(diff) in texts(at)
        assert divergence_text(diff).startswith(
            f"First divergence at message #{diff.first_divergence} (user turn {diff.turn}). "
        )
        [table] = [d.value for d in at.dataframe if "word diff" in d.value.columns]
        assert table["same"].tolist() == [row["same"] for row in diff.rows]

    def test_two_outputs_are_diffed_word_by_word(self, workbench_store: Path) -> None:
        session = analyst(workbench_store)
        active = session.active_context_id
        [fork] = replay_forks(session)
        store = Store(workbench_store)
        a, b = resolve_reference(store, f"{active}@8"), resolve_reference(store, fork.id)
        at = open_replay(workbench_store, diff_a=f"{active}@8", diff_b=fork.id)
        assert coloured_words(output_words(Output.of(a.message), Output.of(b.message))) in markdowns(at)
        assert divergence_text(diff_contexts(a.context, b.context)) in texts(at)

    def test_a_tool_call_against_a_text_answer_is_phrased_never_both_empty(
        self, workbench_store: Path
    ) -> None:
        session = analyst(workbench_store)
        active = session.active_context
        call = max(i for i, m in enumerate(active.messages) if m.role == "assistant" and m.tool_uses())
        [fork] = replay_forks(session)
        at = open_replay(workbench_store, diff_a=f"{active.id}@{call}", diff_b=fork.id)
        a = Output.of(active.messages[call])
        b = Output.of(fork.messages[-1])
        assert a.tool_calls and not a.text and b.text  # the original only calls a tool
        sentences = "\n".join(f"• {s}" for s in output_sentences(a, b, ("A", "B")))
        assert sentences in texts(at) and "tool call 1 count_errors removed (was count_errors())" in sentences
        assert not any("both empty" in t for t in texts(at))
        assert all(call in [c.value for c in at.code] for call in call_texts(a))
        assert [m.value for m in at.markdown if m.value.startswith("**A")]  # the two sides, headed

    def test_the_fixture_contexts_are_diffed(self) -> None:
        at = open_replay(SOAP_FIXTURE, diff_a=PARENT_ID, diff_b=ACTIVE)
        session = Store(SOAP_FIXTURE).load_session(SESSION_UUID)
        diff = diff_contexts(session.contexts[PARENT_ID], session.contexts[ACTIVE])
        assert divergence_text(diff) in texts(at)

    def test_two_contexts_are_picked_from_the_fork_tree_and_kept_in_the_link(
        self, workbench_store: Path
    ) -> None:
        """No typed id: the sides are pickers of the session's contexts, named as the fork
        tree names them; a message number compares the outputs there too."""
        session = analyst(workbench_store)
        active = session.active_context
        [fork] = replay_forks(session)
        at = open_replay(workbench_store, session=session.uuid)
        picker = at.selectbox(key="diff_a_context")
        assert picker.value is None and set(picker.options) == {
            context_label(session, cid) for cid in session.contexts
        }
        assert any("Pick two contexts" in i.value for i in at.info)
        at.selectbox(key="diff_a_context").set_value(active.id).run()
        at.selectbox(key="diff_b_context").set_value(fork.id).run()
        assert (at.query_params["diff_a"], at.query_params["diff_b"]) == (active.id, fork.id)
        assert divergence_text(diff_contexts(active, fork)) in texts(at)
        call = max(i for i, m in enumerate(active.messages) if m.role == "assistant" and m.tool_uses())
        at.text_input(key="diff_a_at").input(str(call)).run()
        assert at.query_params["diff_a"] == f"{active.id}@{call}"
        assert "tool call 1 count_errors removed (was count_errors())" in "\n".join(texts(at))
        again = open_replay(
            workbench_store, session=session.uuid, diff_a=f"{active.id}@{call}", diff_b=fork.id
        )
        assert again.selectbox(key="diff_a_context").value == active.id  # a link fills the pickers
        assert again.text_input(key="diff_a_at").value == str(call)

    def test_each_changed_message_is_also_shown_word_by_word_in_colour(self, workbench_store: Path) -> None:
        session = analyst(workbench_store)
        active = session.active_context
        [fork] = replay_forks(session)
        at = open_replay(workbench_store, session=session.uuid, diff_a=active.id, diff_b=fork.id)
        diff = diff_contexts(active, fork)
        changed = [r for r in diff.rows if not r["same"] and r["a"] and r["b"] and r["words"]]
        assert changed  # the edited message, at least
        shown = markdowns(at)
        assert all(coloured_words(r["words"]) in shown for r in changed)

    def test_a_diff_link_without_a_session_opens_the_session_of_its_contexts(
        self, workbench_store: Path
    ) -> None:
        session = analyst(workbench_store)
        [fork] = replay_forks(session)
        at = open_replay(workbench_store, diff_a=session.active_context_id, diff_b=fork.id)
        assert at.query_params["session"] == session.uuid
        assert at.selectbox(key="diff_b_context").value == fork.id

    def test_an_unknown_reference_is_an_error_and_the_replay_tab_still_works(self) -> None:
        at = open_replay(SOAP_FIXTURE, session=SESSION_UUID, diff_a="zzzz", diff_b=ACTIVE)
        assert any("zzzz" in e.value for e in at.error)
        found = materialize(Store(SOAP_FIXTURE).load_session(SESSION_UUID), ACTIVE, 5)
        assert found.request in json_values(at)


class TestThePlaygroundForm:
    """Every message in words and editable: text, tool calls as name and arguments, tool
    results as text (the form showed class names and collapsed JSON for these)."""

    def test_messages_are_named_in_words_never_by_class(self, workbench_store: Path) -> None:
        session = analyst(workbench_store)
        at = open_replay(workbench_store, session=session.uuid)
        found = materialize(session, session.active_context_id, -1)
        headers = [t for t in texts(at) if t.startswith("#") and "  " in t]
        assert headers[: len(found.messages)] == [
            f"#{i}  {kind_in_words(m)}" for i, m in enumerate(found.messages)
        ]
        shown = " ".join(texts(at))
        assert "SystemPromptMessage" not in shown and "ToolDefinitionsMessage" not in shown
        assert "#0  system prompt" in headers and any("tool call" in h for h in headers)

    def test_each_tool_call_and_tool_result_has_its_own_boxes_prefilled(self, workbench_store: Path) -> None:
        session = analyst(workbench_store)
        at = open_replay(workbench_store, session=session.uuid)
        found = materialize(session, session.active_context_id, -1)
        prefix = f"{found.context_id}:{found.index}"
        for i, message in enumerate(found.messages):
            for k, (name, arguments) in enumerate(editable_calls(message)):
                assert at.text_input(key=f"{prefix}:call:{i}:{k}:name").value == name
                assert at.text_area(key=f"{prefix}:call:{i}:{k}:arguments").value == arguments
            for k, result in enumerate(editable_results(message)):
                assert at.text_area(key=f"{prefix}:result:{i}:{k}").value == result
        assert any(editable_calls(m) for m in found.messages)
        assert any(editable_results(m) for m in found.messages)

    def test_edited_tool_calls_and_results_are_what_the_request_sends(self, workbench_store: Path) -> None:
        session = analyst(workbench_store)
        found = materialize(session, session.active_context_id, -1)
        call_at = next(i for i, m in enumerate(found.messages) if editable_calls(m))
        result_at = next(i for i, m in enumerate(found.messages) if editable_results(m))
        [(name, _)] = editable_calls(found.messages[call_at])[:1]
        overrides = overrides_from_form(
            found,
            {},
            [],
            None,
            "",
            None,
            None,
            None,
            calls={call_at: [(name, '{"level": "warning"}')]},
            results={result_at: ["no errors at all"]},
        )
        assert overrides.tool_calls == {call_at: [(name, '{"level": "warning"}')]}
        assert overrides.tool_results == {result_at: ["no errors at all"]}
        sent = replay_messages(found, overrides)
        assert sent[call_at].tool_uses()[0].arguments == '{"level": "warning"}'
        assert sent[result_at].tool_results()[0].content == "no errors at all"
        assert (
            sent[result_at].tool_results()[0].call_id == found.messages[result_at].tool_results()[0].call_id
        )
        unchanged = overrides_from_form(
            found, {}, [], None, "", None, None, None,
            calls={call_at: editable_calls(found.messages[call_at])},
            results={result_at: editable_results(found.messages[result_at])},
        )  # fmt: skip
        assert unchanged == Overrides()

    def test_an_overridden_tool_call_reads_back_from_the_fork_record(self) -> None:
        overrides = Overrides(tool_calls={4: [("search", '{"q": 1}')]}, tool_results={5: ["x"]})
        assert overrides_from_record(overrides.as_dict()) == overrides


class TestFormValues:
    def test_an_untouched_form_overrides_nothing(self, workbench_store: Path) -> None:
        session = analyst(workbench_store)
        found = materialize(session, session.active_context_id, -1)
        texts_ = {i: t for i, m in enumerate(found.messages) if (t := editable_text(m)) is not None}
        system = found.messages[0].text()
        parameters = found.parameters
        overrides = overrides_from_form(
            found, texts_, [], system, str(parameters["model"]), parameters["temperature"], None, None
        )
        assert overrides == Overrides()

    def test_changed_values_become_overrides(self, workbench_store: Path) -> None:
        session = analyst(workbench_store)
        found = materialize(session, session.active_context_id, -1)
        overrides = overrides_from_form(found, {5: "Hi."}, [3, 3], "Be brief.", " other ", 0.7, 4, 16)
        assert overrides == Overrides(
            model="other",
            temperature=0.7,
            seed=4,
            max_tokens=16,
            system_prompt="Be brief.",
            edits={5: "Hi."},
            drops=(3,),
        )

    def test_word_diffs_are_marked_as_git_marks_them(self) -> None:
        diff = diff_outputs(Output("the cat sat"), Output("the dog sat down"))
        assert marked_words(diff.words) == "the [-cat-] {+dog+} sat {+down+}"

    def test_a_failed_run_has_no_distance(self) -> None:
        failed = ReplayRun("f1", "c1", 0, {}, "h", {}, error="connection refused")
        table = run_table(Batch("http://x/v1", Overrides(), [failed]), Output("a"))
        assert table.to_dict("records") == [
            {
                "kind": "run",
                "sample": 0,
                "fork": "f1",
                "ok": False,
                "distance": None,
                "identical": None,
                "noise band": "-",
                "error": "connection refused",
            }
        ]
        assert RunSettings("u").unchanged == 0


class TestOpeningRule:
    def test_a_message_parameter_names_an_index_only_in_ascii_digits(self) -> None:
        assert named_message([3, 5], " 5 ") == 5
        assert named_message([3, 5], "²") is None and named_message([3, 5], "x") is None
        assert named_message([3, 5], None) is None and named_message([3, 5], "4") is None

    def test_an_odd_message_parameter_is_reported_not_raised(self) -> None:
        at = open_replay(SOAP_FIXTURE, session=SESSION_UUID, message="²")
        assert at.warning and at.selectbox(key=f"message_picker:{ACTIVE}").value == 5

    def test_the_last_message_that_materializes_is_opened_and_the_skipped_ones_named(self) -> None:
        found = materialize(Store(SOAP_FIXTURE).load_session(SESSION_UUID), ACTIVE, 5)

        def rebuild(index: int) -> Any:
            if index > 5:
                raise SoapError(f"message {index} cannot be sent")
            return found

        opening = replayable_default([3, 5, 7, 9], rebuild)
        assert (opening.index, opening.found) == (5, found)
        assert opening.failures == ((9, "message 9 cannot be sent"), (7, "message 7 cannot be sent"))
        assert opening_note(opening) == (
            "Opened on message #5, the last one whose request can be rebuilt: "
            "#9, #7 cannot be replayed (message 9 cannot be sent)."
        )
        assert opening_note(replayable_default([5], rebuild)) is None

    def test_with_nothing_replayable_the_last_message_is_opened_to_say_why(self) -> None:
        def never(index: int) -> Any:
            raise SoapError("no")

        opening = replayable_default(list(range(20)), never, tries=3)
        assert (opening.index, opening.found, len(opening.failures)) == (19, None, 3)
        assert opening_note(opening) is None
        assert nothing_replayable(opening) == (
            "None of the last 3 assistant messages of this context can be replayed; message #19: no"
        )


class TestBatchWords:
    def test_a_batch_is_named_by_what_it_changed_when_and_where(self) -> None:
        batch = Batch(
            "http://127.0.0.1:8080/v1",
            Overrides(temperature=0.7, edits={5: "x", 3: "y"}, drops=(2,)),
            [ReplayRun("f1", "c1", 0, {}, "h", {})],
            [ReplayRun("f2", "c2", 0, {}, "h", {}), ReplayRun("f3", "c3", 1, {}, "h", {})],
            started_at="2026-12-01T18:40:12.123456+00:00",
        )
        assert batch_title(2, batch) == "Run 2: messages #3, #5 edited; message #2 dropped; temperature 0.7"
        line = batch_line(batch)  # ends with its age, which grows
        assert line.startswith(
            "1 sample and 2 unchanged against http://127.0.0.1:8080/v1, started 2026-12-01 18:40:12 UTC ("
        )
        assert line.endswith(" ago)")
        assert batch_title(1, Batch("", Overrides(), [], label="drift none at call 3")) == (
            "Run 1 (drift none at call 3): nothing changed (the original request)"
        )
        assert overrides_summary(Overrides(system_prompt="", model="m", max_tokens=4)) == (
            "system prompt replaced; model m; max tokens 4"
        )

    def test_what_the_store_keeps_is_said_under_the_request(self) -> None:
        assert (
            saved_line(2, 1) == "The store keeps 2 runs and 1 re-run of this message, listed below the form."
        )
        assert saved_line(1, 0) == "The store keeps 1 run of this message, listed below the form."
        assert saved_line(0, 0) is None

    def test_saved_tool_modes_read_as_words(self) -> None:
        assert tool_modes_text(
            {"default": "recorded", "per_tool": {}, "injected": {}, "unserved": "stop"}
        ) == ("recorded by default; calls the record cannot serve: stop")
        assert tool_modes_text(
            {"default": "live", "per_tool": {"search": "recorded"}, "injected": {"a": 1}}
        ) == ("live by default; search recorded; injected a")


def test_every_session_of_the_demo_store_opens_on_a_message_it_can_replay(demo_store: Path) -> None:
    """The issue saw the page open on a red error: on every session of the demo, with no
    message named, it opens without an error (on a replayable message, or saying why
    there is none as a warning)."""
    for summary in Store(demo_store).sessions():
        at = open_replay(demo_store, timeout=120, session=summary.uuid)
        assert not at.error, (summary.role, [e.value for e in at.error])
        assert any(a.label == "Message" for a in at.selectbox) or at.info, summary.role
