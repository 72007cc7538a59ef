"""The workbench's runs beside the agent's history, never in it (issue 23, point 2).

A re-run writes an invocation into the session's folder (marked ``rerun`` in its
record); Traceback, Object state and ``soapwb trace`` show the agent's own invocations
unless asked for the runs. A replay or re-run that never reached the model (nothing
listening) saves no fork and no record at all.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from replay import continue_branch, materialize, replay, rerun
from soap_core import Session, Store, read_invocations
from soap_core.runtime import LLMEndpoint, LLMError
from soapwb.cli import main
from tests.apptest import open_app_page
from tests.conftest import snapshot
from tests.scripted import ScriptedEndpoint, calls, says
from tests.test_rerun import FIRST_ANSWER, bought


def refused_endpoint() -> LLMEndpoint:
    """An endpoint on a loopback port where nothing listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return LLMEndpoint(f"http://127.0.0.1:{port}/v1", max_retries=0, timeout=5)


def rerun_once(tmp_path: Path) -> tuple[Store, Session, str]:
    """A pantry session with one recorded-mode re-run made by the workbench; the id of the
    re-run's invocation."""
    store, session = bought(tmp_path)
    again = ScriptedEndpoint(calls("add_item", '{"item":"pear"}', "c9"), says("done again"))
    result = rerun(store, session, None, FIRST_ANSWER, again)  # type: ignore[arg-type]
    assert result.ok
    [record] = [r for r in read_invocations(session.directory or Path()) if r.rerun]
    return store, session, record.id


class TestNothingSavedWhenTheModelIsNeverReached:
    def test_a_replay_saves_no_fork_and_no_call_record(self, tmp_path: Path) -> None:
        store, session = bought(tmp_path)
        before = snapshot(store.root)
        found = materialize(session, session.active_context_id, -1)
        [run] = replay(store, session, found, refused_endpoint())
        assert not run.ok and not run.saved
        assert run.error is not None and "connection: " in run.error
        assert snapshot(store.root) == before
        assert run.fork_id not in store.load_session(session.uuid).contexts

    def test_a_replay_that_reached_a_failing_server_keeps_its_fork(self, tmp_path: Path) -> None:
        """The other side of the rule: the server answered (an error), so the run happened."""
        store, session = bought(tmp_path)
        found = materialize(session, session.active_context_id, -1)
        [run] = replay(
            store, session, found, ScriptedEndpoint(LLMError("http://x", "r", "HTTP error", "500"))
        )
        assert not run.ok and run.saved
        assert run.fork_id in store.load_session(session.uuid).contexts

    def test_a_rerun_raises_before_writing_anything(self, tmp_path: Path) -> None:
        store, session = bought(tmp_path)
        before = snapshot(store.root)
        with pytest.raises(LLMError, match=r"connection: .*refused"):
            rerun(store, session, None, FIRST_ANSWER, refused_endpoint())
        assert snapshot(store.root) == before

    def test_a_continue_raises_before_writing_anything(self, tmp_path: Path) -> None:
        store, session = bought(tmp_path)
        before = snapshot(store.root)
        with pytest.raises(LLMError, match="connection: "):
            continue_branch(store, session, session.active_context, "and a plum", refused_endpoint())
        assert snapshot(store.root) == before

    def test_the_replay_command_says_nothing_was_saved(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        store, session = bought(tmp_path)
        before = snapshot(store.root)
        code = main(
            [
                *("replay", session.uuid, "--at", "-1", "--store", str(store.root)),
                *("--retries", "0", "--base-url", refused_endpoint().base_url),
            ]
        )
        out = capsys.readouterr().out
        assert code == 1
        assert "nothing saved: the model was never reached" in out
        assert snapshot(store.root) == before


class TestRunsAreNotTheAgentsHistory:
    def test_object_state_lists_the_agents_invocations_until_asked_for_the_runs(self, tmp_path: Path) -> None:
        store, session, run_id = rerun_once(tmp_path)
        own = [r.id for r in read_invocations(session.directory or Path()) if not r.rerun]
        at = open_app_page(store.root, "object_state", session=session.uuid)
        assert at.dataframe[0].value["invocation"].tolist() == own
        [toggle] = [t for t in at.toggle if t.key == "object_state_runs"]
        assert "(1)" in toggle.label
        toggle.set_value(True).run()
        assert not at.exception
        assert at.dataframe[0].value["invocation"].tolist() == [*own, run_id]
        assert at.query_params["runs"] == "shown"

    def test_traceback_lists_and_opens_on_the_agents_invocations(self, tmp_path: Path) -> None:
        store, session, run_id = rerun_once(tmp_path)
        own = [r.id for r in read_invocations(session.directory or Path()) if not r.rerun]
        at = open_app_page(store.root, "traceback", session=session.uuid)
        assert at.dataframe[0].value["invocation"].tolist() == own
        assert at.query_params["invocation"] in own
        [toggle] = [t for t in at.toggle if t.key == "traceback_runs"]
        toggle.set_value(True).run()
        assert run_id in at.dataframe[0].value["invocation"].tolist()

    def test_a_link_to_a_runs_invocation_shows_the_runs(self, tmp_path: Path) -> None:
        store, session, run_id = rerun_once(tmp_path)
        at = open_app_page(store.root, "traceback", session=session.uuid, invocation=run_id)
        assert not at.error
        assert at.query_params["invocation"] == run_id

    def test_soapwb_trace_hides_the_runs_unless_asked(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        store, session, _ = rerun_once(tmp_path)
        assert main(["trace", session.uuid, "--store", str(store.root)]) == 0
        plain = capsys.readouterr().out
        assert "chain 1 of 1:" in plain and "1 chain of workbench re-runs not shown" in plain
        assert main(["trace", session.uuid, "--store", str(store.root), "--runs"]) == 0
        every = capsys.readouterr().out
        assert "chain 2 of 2:" in every and "not shown" not in every
