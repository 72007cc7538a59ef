"""Replay runs rebuilt from the forks a store keeps: written by real replays against the
local model (and one against a port nobody listens on), read back from a fresh load of
the session, grouped into the batches that made them."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from local_model import LocalModelServer
from replay import (
    INTERRUPTED_RUN,
    NOISE_LABEL,
    REPLAY_KEY,
    Overrides,
    ReplayRun,
    SavedRun,
    ToolModes,
    batches_from_saved,
    diff_rerun,
    diff_saved_rerun,
    materialize,
    overrides_from_record,
    replay,
    replay_batches,
    rerun,
    saved_reruns,
    saved_runs,
)
from soap_core import Session, Store, read_calls
from soap_core.runtime import LLMEndpoint, LLMError
from tests.scripted import ScriptedEndpoint
from tests.test_rerun import FIRST_ANSWER, pear_on_the_local_model


@pytest.fixture
def store(workbench_store: Path, tmp_path: Path) -> Store:
    shutil.copytree(workbench_store, tmp_path / "store")
    return Store(tmp_path / "store")


def analyst(store: Store) -> Session:
    [summary] = [s for s in store.sessions() if s.role == "Analyst"]
    return store.load_session(summary.uuid, require_active=False)


def last_user_message(found: Any) -> int:
    return max(i for i, m in enumerate(found.messages) if m.role == "user" and m.text())


class TestRebuiltFromTheStore:
    def test_runs_read_back_after_a_reload_are_the_runs_the_replay_returned(
        self, store: Store, llm_server: LocalModelServer
    ) -> None:
        session = analyst(store)
        found = materialize(session, None, -1)
        edit = Overrides(edits={last_user_message(found): "Count the warnings instead."})
        endpoint = LLMEndpoint(llm_server.base_url)
        made = replay(store, session, found, endpoint, edit, samples=2)
        noise = replay(store, session, found, endpoint, samples=2, label=NOISE_LABEL)

        reloaded = analyst(store)
        saved = saved_runs(reloaded, found.context_id, found.index, message_id=found.message_id)
        by_fork = {s.run.fork_id: s for s in saved}
        for run in [*made, *noise]:
            kept = by_fork[run.fork_id]
            assert kept.run.ok and run.ok and kept.run.output is not None and run.output is not None
            assert kept.run.output.to_dict() == run.output.to_dict()
            assert (kept.run.sample, kept.run.call_id) == (run.sample, run.call_id)
            assert (kept.run.request, kept.run.request_hash) == (run.request, run.request_hash)
            assert (kept.run.usage, kept.run.latency_s) == (run.usage, run.latency_s)
            assert kept.run.overrides == run.overrides
            assert kept.base_url == llm_server.base_url and kept.started_at
        assert [s.label for s in saved[-2:]] == [NOISE_LABEL, NOISE_LABEL]
        assert saved[-4].overrides == edit

        batches = batches_from_saved(saved)
        assert len(batches) == 2  # the store's own replay fork, then this batch
        assert [r.fork_id for r in batches[-1].runs] == [r.fork_id for r in made]
        assert [r.fork_id for r in batches[-1].noise_runs] == [r.fork_id for r in noise]
        assert batches[-1].overrides == edit and batches[-1].base_url == llm_server.base_url
        assert batches[0].overrides.edits and not batches[0].noise_runs

    def test_a_run_whose_endpoint_failed_is_rebuilt_with_its_error(self, store: Store) -> None:
        session = analyst(store)
        found = materialize(session, None, -1)
        failing = ScriptedEndpoint(LLMError("http://127.0.0.1:9/v1", "r", "HTTP error", "500 Server Error"))
        [run] = replay(store, session, found, failing)
        assert not run.ok and run.error and run.saved
        [kept] = [
            s
            for s in saved_runs(analyst(store), found.context_id, found.index)
            if s.run.fork_id == run.fork_id
        ]
        assert not kept.run.ok and kept.run.output is None and kept.run.error == run.error

    def test_only_replays_of_that_message_are_listed(self, store: Store) -> None:
        session = analyst(store)
        found = materialize(session, None, -1)
        [fork_id] = [s.run.fork_id for s in saved_runs(session, found.context_id, found.index)]
        assert saved_runs(session, found.context_id, found.index - 1) == []
        assert saved_runs(session, found.context_id, found.index, message_id="another message") == []
        session.contexts[fork_id].extra[REPLAY_KEY] = {
            **session.contexts[fork_id].extra[REPLAY_KEY],
            "kind": "rerun",
        }
        assert saved_runs(session, found.context_id, found.index) == []  # re-run branches are not replays

    def test_a_fork_without_its_call_record_reads_as_interrupted_or_by_its_last_answer(
        self, store: Store
    ) -> None:
        session = analyst(store)
        found = materialize(session, None, -1)
        [kept] = saved_runs(session, found.context_id, found.index, calls=[])  # no call records at all
        assert kept.run.ok and kept.run.output is not None and kept.run.output.role == "assistant"
        assert kept.base_url == "" and kept.run.request == {}
        fork = session.contexts[kept.run.fork_id]
        del fork.messages[-1]
        [cut] = saved_runs(session, found.context_id, found.index, calls=[])
        assert cut.run.error == INTERRUPTED_RUN

    def test_a_hand_edited_record_is_read_without_raising(self, store: Store) -> None:
        session = analyst(store)
        found = materialize(session, None, -1)
        [kept] = saved_runs(session, found.context_id, found.index)
        record = session.contexts[kept.run.fork_id].extra[REPLAY_KEY]
        record.update(overrides="junk", sample="x", call_id=5, label=["no"], error=7)
        [odd] = saved_runs(session, found.context_id, found.index)
        assert odd.run.overrides == {} and odd.run.sample == 0 and odd.label is None


def saved(
    fork: str, sample: int, overrides: dict[str, Any] | None = None, label: str | None = None
) -> SavedRun:
    run = ReplayRun(fork, f"2026-{fork}", sample, {}, "h", overrides or {})
    return SavedRun(run, label, "http://x/v1", "")


class TestBatches:
    def test_a_batch_ends_where_the_sample_number_starts_again(self) -> None:
        runs = [saved("a", 0), saved("b", 1), saved("c", 0), saved("d", 0), saved("e", 1), saved("f", 2)]
        assert [[s.run.fork_id for s in b] for b in replay_batches(runs)] == [
            ["a", "b"],
            ["c"],
            ["d", "e", "f"],
        ]

    def test_a_batch_ends_where_the_overrides_or_the_label_change(self) -> None:
        runs = [saved("a", 0), saved("b", 1, {"seed": 1}), saved("c", 2, {"seed": 1}, "drift")]
        assert [[s.run.fork_id for s in b] for b in replay_batches(runs)] == [["a"], ["b"], ["c"]]

    def test_unchanged_samples_join_the_batch_they_followed(self) -> None:
        edit = {"edits": {"3": "x"}}
        runs = [
            saved("a", 0, edit),
            saved("n1", 0, label=NOISE_LABEL),
            saved("n2", 1, label=NOISE_LABEL),
            saved("b", 0, edit),
            saved("d", 0, label="drift rolling at call 2"),
        ]
        batches = batches_from_saved(runs)
        assert [([r.fork_id for r in b.runs], [r.fork_id for r in b.noise_runs]) for b in batches] == [
            (["a"], ["n1", "n2"]),
            (["b"], []),
            (["d"], []),
        ]
        assert (
            batches[0].overrides == Overrides(edits={3: "x"})
            and batches[2].label == "drift rolling at call 2"
        )

    def test_unchanged_samples_with_no_batch_before_them_are_a_batch_of_their_own(self) -> None:
        [batch] = batches_from_saved([saved("n1", 0, label=NOISE_LABEL), saved("n2", 1, label=NOISE_LABEL)])
        assert [r.fork_id for r in batch.runs] == ["n1", "n2"] and batch.label == NOISE_LABEL


class TestOverridesRecord:
    def test_overrides_come_back_as_they_were_saved(self) -> None:
        overrides = Overrides(
            model="m",
            temperature=0.5,
            seed=3,
            max_tokens=9,
            system_prompt="Be brief.",
            edits={4: "x"},
            drops=(2, 1),
        )
        assert overrides_from_record(overrides.as_dict()) == Overrides(
            model="m",
            temperature=0.5,
            seed=3,
            max_tokens=9,
            system_prompt="Be brief.",
            edits={4: "x"},
            drops=(1, 2),
        )

    @given(
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
            lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
        )
    )
    def test_any_json_reads_as_some_overrides(self, data: Any) -> None:
        assert isinstance(overrides_from_record(data), Overrides)
        assert isinstance(overrides_from_record({"edits": data, "drops": data, "seed": data}), Overrides)


class TestRerunsRebuilt:
    def test_a_rerun_on_the_local_model_reads_back_with_its_answer_calls_and_diff(
        self, tmp_path: Path, llm_server: LocalModelServer
    ) -> None:
        store, uuid, _ = pear_on_the_local_model(tmp_path, llm_server)
        session = store.load_session(uuid)
        found = materialize(session, None, FIRST_ANSWER)
        result = rerun(store, session, None, FIRST_ANSWER, LLMEndpoint(llm_server.base_url))
        assert result.ok, result.error

        reloaded = store.load_session(uuid)
        [kept] = saved_reruns(reloaded, found.context_id, found.index, message_id=found.message_id)
        assert (kept.result.fork_id, kept.result.branch_id) == (result.fork_id, result.branch_id)
        assert kept.result.answer == result.answer and kept.result.ok
        assert kept.result.calls == result.calls
        assert kept.tools == ToolModes().as_dict() and kept.overrides == Overrides() and kept.started_at
        calls = read_calls(reloaded.directory or Path())
        assert diff_saved_rerun(reloaded, kept.result, calls) == diff_rerun(reloaded, result)
        assert saved_runs(reloaded, found.context_id, found.index) == []  # a re-run is no replay
