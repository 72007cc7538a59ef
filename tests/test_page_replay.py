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

from replay import (
    REPLAY_KEY,
    Output,
    Overrides,
    ReplayRun,
    diff_contexts,
    diff_outputs,
    materialize,
    noise_band,
    request_differences,
)
from replay._refs import resolve_reference
from soap_core import Context, Session, Store
from soap_core.runtime.local_model import LocalModelServer
from tests.conftest import PARENT_ID, SESSION_UUID, SOAP_FIXTURE, snapshot
from tests.workbench_store import XSS
from workbench.replay_views import (
    Batch,
    RunSettings,
    assistant_indices,
    divergence_text,
    editable_text,
    marked_words,
    message_label,
    overrides_from_form,
    run_table,
)

APP = Path(__file__).resolve().parents[1] / "app.py"
PAGE = "pages/replay.py"
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


def as_shown(text: str) -> str:
    """What st.text shows of ``text``: Streamlit dedents and strips it."""
    return textwrap.dedent(text).strip()


def json_values(at: AppTest) -> list[Any]:
    return [json.loads(element.value) for element in at.json]


def replay_forks(session: Session) -> list[Context]:
    return [c for c in session.contexts.values() if REPLAY_KEY in c.extra]


def run_page(at: AppTest, base_url: str, **inputs: str) -> AppTest:
    """Type the endpoint (and text-area edits by label), click Run, and wait for the runs."""
    at.text_input(key="replay_base_url").input(base_url)
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

    def test_a_message_that_is_no_model_output_is_reported_and_the_last_one_shown(self) -> None:
        at = open_replay(SOAP_FIXTURE, session=SESSION_UUID, message="2")
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


class TestBadInput:
    def test_without_a_session_it_asks_for_one(self) -> None:
        at = open_replay(SOAP_FIXTURE)
        assert any("Pick a session" in info.value for info in at.info)

    def test_an_unknown_session_is_an_error(self) -> None:
        at = open_replay(SOAP_FIXTURE, session="no-such-session")
        assert at.error and "no\\-such\\-session" in at.error[0].value

    def test_an_unknown_context_is_an_error(self) -> None:
        at = open_replay(SOAP_FIXTURE, session=SESSION_UUID, context="ffffffff")
        assert at.error

    def test_running_without_an_endpoint_is_an_error(self, writable_store: Path) -> None:
        session = analyst(writable_store)
        at = open_replay(writable_store, session=session.uuid)
        [run] = [b for b in at.button if b.label == "Run"]
        run.click().run()
        assert not at.exception
        assert any("No endpoint" in e.value for e in at.error)
        assert len(replay_forks(analyst(writable_store))) == 1  # only the store's own replay fork


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
        assert as_shown(output.text()) in texts(at)
        assert f"run sample 0  fork {fork.id}" in texts(at)
        picker = at.selectbox(key="context_picker").options
        assert any(label.startswith(fork.id) for label in picker)  # the cache did not hide the fork
        now = snapshot(writable_store)
        assert {name: now[name] for name in before} == before  # every original file to the byte

        at.run()  # a rerun keeps the runs
        assert as_shown(output.text()) in texts(at)

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
        diff = diff_outputs(Output.of(original), Output.of(fork.messages[-1]))
        assert as_shown(marked_words(diff.words)) in texts(at)
        assert f"distance {diff.distance}  {'identical' if diff.identical else 'different'}" in texts(at)
        [table] = [d.value for d in at.dataframe if "fork" in d.value.columns]
        assert table["fork"].tolist() == [fork.id] and table["distance"].tolist() == [diff.distance]

    def test_the_noise_band_is_measured_over_unchanged_samples(
        self, writable_store: Path, llm_server: LocalModelServer
    ) -> None:
        session = analyst(writable_store)
        forks_before = {c.id for c in replay_forks(session)}
        at = open_replay(writable_store, timeout=120, session=session.uuid)
        at.checkbox(key="replay_measure_noise").check()
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
        [table] = [d.value for d in at.dataframe if "noise band" in d.value.columns]
        assert table["kind"].tolist() == ["run", "unchanged", "unchanged"]
        [run_row] = table[table["kind"] == "run"].to_dict("records")
        assert run_row["noise band"] == ("inside" if band.contains(run_row["distance"]) else "outside")


class TestDiffSection:
    def test_two_contexts_from_the_url_show_their_first_divergence(self, workbench_store: Path) -> None:
        session = analyst(workbench_store)
        active = session.active_context_id
        [fork] = replay_forks(session)
        at = open_replay(workbench_store, diff_a=active[:8], diff_b=fork.id)
        diff = diff_contexts(session.contexts[active], fork)
        assert diff.first_divergence is not None
        assert f"First divergence at message #{diff.first_divergence} (user turn {diff.turn})." in texts(at)
        [table] = [d.value for d in at.dataframe if "word diff" in d.value.columns]
        assert table["same"].tolist() == [row["same"] for row in diff.rows]

    def test_two_outputs_are_diffed_word_by_word(self, workbench_store: Path) -> None:
        session = analyst(workbench_store)
        active = session.active_context_id
        [fork] = replay_forks(session)
        store = Store(workbench_store)
        a, b = resolve_reference(store, f"{active}@8"), resolve_reference(store, fork.id)
        at = open_replay(workbench_store, diff_a=f"{active}@8", diff_b=fork.id)
        diff = diff_outputs(Output.of(a.message), Output.of(b.message))
        assert as_shown(marked_words(diff.words)) in texts(at)
        assert divergence_text(diff_contexts(a.context, b.context)) in texts(at)

    def test_the_fixture_contexts_are_diffed(self) -> None:
        at = open_replay(SOAP_FIXTURE, diff_a=PARENT_ID, diff_b=ACTIVE)
        session = Store(SOAP_FIXTURE).load_session(SESSION_UUID)
        diff = diff_contexts(session.contexts[PARENT_ID], session.contexts[ACTIVE])
        assert divergence_text(diff) in texts(at)

    def test_an_unknown_reference_is_an_error_and_the_replay_tab_still_works(self) -> None:
        at = open_replay(SOAP_FIXTURE, session=SESSION_UUID, diff_a="zzzz", diff_b=ACTIVE)
        assert any("zzzz" in e.value for e in at.error)
        found = materialize(Store(SOAP_FIXTURE).load_session(SESSION_UUID), ACTIVE, 5)
        assert found.request in json_values(at)


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
