"""How contexts, replay runs and sessions are named and grouped: the functions behind
every picker, the fork tree's nodes and its table (``replay._names``,
``workbench.fork_tree_views``, ``workbench.views``), on sessions built in memory."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay import change_phrases, replay_runs, session_names
from soap_core import REPLAY_KEY, Context, FormatError, Message, Session, SessionOverview, TextPart, read_mark
from workbench.fork_tree_views import RUN_KIND, node_table, tree_items, tree_layout
from workbench.views import (
    context_label,
    error_first,
    fork_tree_lines,
    load_error_line,
    session_heading,
    session_label,
    store_relative,
)

MINUTE_1 = "20260102T140500000000-aaaaaaaa"
MINUTE_2 = "20260102T150700000000-bbbbbbbb"
SHOWN_1 = datetime(2026, 1, 2, 14, 5, tzinfo=UTC).astimezone().strftime("%Y-%m-%d %H:%M")
SHOWN_2 = datetime(2026, 1, 2, 15, 7, tzinfo=UTC).astimezone().strftime("%Y-%m-%d %H:%M")
"""The call ids' UTC times as the pages show them: in local time, like message times."""


def base_session(messages: int = 4) -> tuple[Session, Context, Context]:
    """A root of ``messages`` messages and its compaction fork, which is active."""
    root = Context.create("You help.")
    for i in range(messages):
        root.append(Message.create("user" if i % 2 == 0 else "assistant", [TextPart(f"m{i}")]))
    session = Session.create("Analyst", root)
    fork = root.fork(range(len(root.messages)))
    session.set_active_context(fork)
    return session, root, fork


def add_replay(session: Session, parent: Context, record: dict[str, Any]) -> Context:
    """A side fork of ``parent`` carrying ``record``, as ``replay.replay`` saves one."""
    fork = parent.side_fork()
    fork.append(Message.create("assistant", [TextPart("again")]))
    fork.extra[REPLAY_KEY] = record
    session.add_context(fork)
    return fork


def add_run(session: Session, parent: Context, samples: int, call_time: str, **record: Any) -> list[Context]:
    """One batch of samples, as one ``replay`` call makes them: numbered from 0, their call
    ids made in that order."""
    made = []
    for sample in range(samples):
        call_id = call_time[:-8] + f"{sample:08d}"
        full = {"of_context": parent.id, "of_index": 3, "overrides": {}, **record, "sample": sample}
        made.append(add_replay(session, parent, {**full, "call_id": call_id}))
    return made


class TestNamesByPlace:
    def test_the_active_context_is_main_the_first_root_and_others_numbered_forks(self) -> None:
        session, root, fork = base_session()
        other = root.fork([0, 1])
        session.add_context(other)
        names = session_names(session).names
        assert names[fork.id] == "main"
        assert names[root.id] == "root"
        assert names[other.id] == "fork 1"

    def test_a_picker_label_leads_with_name_and_size_and_ends_with_a_short_id(self) -> None:
        session, root, fork = base_session()
        assert context_label(session, fork.id) == f"main · 5 messages · active · {fork.id[:8]}"
        assert context_label(session, root.id) == f"root · 5 messages · {root.id[:8]}"

    def test_the_tree_lines_lead_with_names_when_given_them(self) -> None:
        session, root, fork = base_session()
        named = session_names(session)
        lines = fork_tree_lines(named.nodes, shown_id=fork.id, names=named.names)
        assert lines[0] == f"- root  root, 5 messages  {root.id[:8]}"
        assert lines[1].startswith("    - main  fork, 5 messages  [active]")
        assert lines[1].endswith(f"{fork.id[:8]}  <- shown")

    def test_names_follow_a_change_of_the_session(self) -> None:
        session, root, fork = base_session()
        assert session_names(session).names[fork.id] == "main"
        session.active_context_id = root.id
        assert session_names(session).names[root.id] == "main"
        assert session_names(session).names[fork.id] == "fork 1"


class TestRuns:
    def test_the_samples_of_one_replay_are_one_run_and_the_same_replay_again_another(self) -> None:
        session, _, main = base_session()
        first = add_run(session, main, 3, MINUTE_1, overrides={"temperature": 0.9})
        second = add_run(session, main, 2, MINUTE_2, overrides={"temperature": 0.9})
        runs = replay_runs(session)
        assert [run.fork_ids for run in runs] == [tuple(c.id for c in first), tuple(c.id for c in second)]
        names = session_names(session)
        assert names.run_names[first[0].id] == f"replay of main@3: temperature 0.9 (3 samples) · {SHOWN_1}"
        assert names.run_names[second[0].id] == f"replay of main@3: temperature 0.9 (2 samples) · {SHOWN_2}"
        assert names.names[first[1].id] == f"replay of main@3: temperature 0.9 · {SHOWN_1} · sample 2 of 3"

    def test_runs_of_different_settings_are_apart_and_need_no_time(self) -> None:
        session, _, main = base_session()
        hot = add_run(session, main, 3, MINUTE_1, overrides={"temperature": 0.9})
        edit = add_run(session, main, 1, MINUTE_1, overrides={"edits": {"3": "Count again."}})
        names = session_names(session)
        assert names.run_names[hot[0].id] == "replay of main@3: temperature 0.9 (3 samples)"
        assert names.run_names[edit[0].id] == "replay of main@3: edit of message 3"
        assert names.names[edit[0].id] == "replay of main@3: edit of message 3"

    def test_a_label_leads_and_an_unchanged_replay_says_so(self) -> None:
        session, _, main = base_session()
        noise = add_run(session, main, 2, MINUTE_1, label="noise band")
        drift = add_run(session, main, 1, MINUTE_1, label="drift keep-last at call 2")
        plain = add_run(session, main, 1, MINUTE_2)
        names = session_names(session)
        assert names.run_names[noise[0].id] == "noise band: replay of main@3 (2 samples)"
        assert names.run_names[drift[0].id] == "drift keep-last at call 2: replay of main@3"
        assert names.run_names[plain[0].id] == "replay of main@3: unchanged"

    def test_a_rerun_counts_runs_and_names_its_tool_modes(self) -> None:
        session, _, main = base_session()
        record = {"kind": "rerun", "of_context": main.id, "of_index": 3, "overrides": {}}
        tools = {"default": "live", "per_tool": {}, "injected": {"search": "x"}, "unserved": "stop"}
        forks = [add_replay(session, main, {**record, "tools": tools, "label": "noise"}) for _ in range(2)]
        names = session_names(session)
        assert (
            names.run_names[replay_runs(session)[0].id]
            == "noise: re-run of main@3: tools live, search injected (2 runs)"
        )
        assert {names.run_of[f.id].id for f in forks} == {replay_runs(session)[0].id}

    def test_failed_forks_are_counted(self) -> None:
        session, _, main = base_session()
        forks = add_run(session, main, 2, MINUTE_1)
        forks[1].extra[REPLAY_KEY]["error"] = "timeout"
        assert (
            session_names(session).run_names[forks[0].id]
            == "replay of main@3: unchanged (2 samples, 1 failed)"
        )

    def test_every_kind_of_override_reads_as_words(self) -> None:
        record = {
            "overrides": {
                "edits": {"12": "x", "3": "y"},
                "drops": [5],
                "system_prompt": "Be brief.",
                "model": "qwen-0.5b",
                "temperature": 0.2,
                "seed": 7,
                "max_tokens": 64,
            }
        }
        assert change_phrases(read_mark(record)) == [
            "edit of messages 3, 12",
            "dropped message 5",
            "system prompt",
            "model qwen-0.5b",
            "temperature 0.2",
            "seed 7",
            "max tokens 64",
        ]

    def test_a_record_of_the_wrong_shape_still_names_its_fork(self) -> None:
        session, _, main = base_session()
        odd = add_replay(session, main, {"of_context": 42, "of_index": "x", "overrides": [1], "sample": "s"})
        assert session_names(session).names[odd.id].startswith("replay of")

    def test_a_replay_of_a_replay_fork_names_its_origin(self) -> None:
        session, _, main = base_session()
        [sample] = add_run(session, main, 1, MINUTE_1, overrides={"temperature": 0.9})
        [again] = add_run(session, sample, 1, MINUTE_2, overrides={"seed": 1})
        assert (
            session_names(session).names[again.id]
            == "replay of (replay of main@3: temperature 0.9)@3: seed 1"
        )


class TestTheTreeItems:
    def build(self) -> tuple[Session, Context, list[Context], list[Context]]:
        session, _, main = base_session()
        hot = add_run(session, main, 3, MINUTE_1, overrides={"temperature": 0.9})
        edit = add_run(session, main, 2, MINUTE_2, overrides={"edits": {"3": "x"}})
        return session, main, hot, edit

    def test_folded_each_run_is_one_node_with_its_count(self) -> None:
        session, main, hot, edit = self.build()
        items = tree_items(session_names(session), fold_runs=True)
        assert [(i.kind, i.label) for i in items] == [
            ("root", "root · 5 messages"),
            ("fork", "main · 5 messages"),
            (RUN_KIND, "replay of main@3: temperature 0.9 (3 samples)"),
            (RUN_KIND, "replay of main@3: edit of message 3 (2 samples)"),
        ]
        assert set(items[2].members) == {c.id for c in hot}
        assert set(items[3].members) == {c.id for c in edit}
        assert items[2].parent == main.id and items[2].depth == 2

    def test_shown_every_fork_is_a_node(self) -> None:
        session, _, hot, edit = self.build()
        items = tree_items(session_names(session), fold_runs=False)
        assert len(items) == 2 + len(hot) + len(edit)
        assert {i.kind for i in items} == {"root", "fork", "replay"}

    def test_what_grew_from_a_folded_fork_is_folded_into_its_run_and_a_later_run_hangs_from_it(self) -> None:
        session, _, hot, _ = self.build()
        compacted = hot[0].fork([0])
        session.add_context(compacted)
        [again] = add_run(session, hot[1], 1, MINUTE_2, overrides={"seed": 3})
        items = tree_items(session_names(session), fold_runs=True)
        [run] = [i for i in items if i.run is not None and hot[0].id in i.run.fork_ids]
        assert compacted.id in run.members
        [later] = [i for i in items if i.run is not None and again.id in i.run.fork_ids]
        assert later.parent == run.id and later.depth == run.depth + 1

    def test_the_table_follows_the_fold_name_first_id_last(self) -> None:
        session, *_ = self.build()
        folded = node_table(tree_items(session_names(session), fold_runs=True))
        assert (folded.columns[0], folded.columns[-1]) == ("name", "id")
        assert len(folded) == 4
        assert folded["forks"].tolist()[2:] == [3, 2]
        assert folded["parent"].tolist() == ["— (root)", "root", "main", "main"]
        assert folded["time"].tolist()[:2] == ["", ""], "a context that is no run has no time"
        assert not folded[["name", "kind", "parent", "time", "id"]].isna().any().any()
        shown = node_table(tree_items(session_names(session), fold_runs=False))
        assert len(shown) == 7

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.tuples(st.integers(0, 6), st.integers(1, 3), st.booleans()), max_size=8))
    def test_folded_items_show_every_context_once_and_parents_come_first(
        self, plan: list[tuple[int, int, bool]]
    ) -> None:
        session, *_ = base_session(2)
        for step, (parent_at, samples, compact) in enumerate(plan):
            contexts = list(session.contexts.values())
            parent = contexts[parent_at % len(contexts)]
            made = add_run(session, parent, samples, f"2026010{step % 9 + 1}T1{step % 10}0000000000-00000000")
            if compact:
                session.add_context(made[0].fork([0]))
        items = tree_items(session_names(session), fold_runs=True)
        shown = [cid for item in items for cid in item.members]
        assert sorted(shown) == sorted(session.contexts)
        seen: set[str] = set()
        for item in items:
            assert item.parent is None or item.parent in seen
            seen.add(item.id)
        layout = tree_layout(items)
        assert all(layout.positions[p][1] < layout.positions[c][1] for p, c in layout.edges)


class TestSessions:
    def overview(self, **changes: Any) -> SessionOverview:
        fields: dict[str, Any] = {
            "role": "Analyst",
            "uuid": "20260102-1a2b3c4d-0000-4000-8000-000000000000",
            "thread_id": "investigation",
            "is_active": False,
            "contexts": 3,
            "messages": 12,
            "tokens": 400,
            "first_timestamp": "2026-01-02T14:05:33.1",
            "last_timestamp": "2026-01-02T15:00:00",
            "error": None,
        }
        return SessionOverview(**{**fields, **changes})

    def test_a_session_reads_name_size_time_then_a_short_id(self) -> None:
        assert session_label(self.overview()) == "Analyst · 3 contexts · 2026-01-02 14:05 · 1a2b3c4d"

    def test_an_openpoke_execution_agent_is_named_by_its_agent(self) -> None:
        label = session_label(self.overview(role="OpenPokeExecution", contexts=1), "Vercel Job Offer")
        assert label == "Vercel Job Offer (OpenPokeExecution) · 1 context · 2026-01-02 14:05 · 1a2b3c4d"

    def test_a_broken_session_says_so_before_its_id(self) -> None:
        assert session_label(self.overview(error="x")) == "Analyst · broken · 1a2b3c4d"

    def test_the_heading_of_a_loaded_session_names_its_agent(self) -> None:
        session, _, _ = base_session()
        session.state_data["_openpoke"] = {"kind": "execution", "agent": "Email to Bob"}
        session.role = "OpenPokeExecution"
        heading = session_heading(session)
        assert heading.startswith("Email to Bob (OpenPokeExecution) · 2 contexts · ")
        assert heading.endswith(f"session {session.uuid.split('-', 1)[1][:8]}")


class TestErrorsFirst:
    ROOT = Path("/stores/demo")
    FILE = (
        ROOT
        / "agents/Analyst/20260102-1a2b3c4d-0000-4000-8000-000000000000/0f1e2d3c-aaaa-bbbb-cccc-000000000000.json"
    )

    def test_a_format_error_reads_problem_then_the_file_in_the_store(self) -> None:
        error = FormatError(self.FILE, "$", "not valid JSON: Expecting value at line 3 column 1")
        assert error_first(error, self.ROOT) == (
            "not valid JSON: Expecting value at line 3 column 1 — "
            "agents/Analyst/20260102-1a2b3c4d…/0f1e2d3c-aaaa-bbbb-cccc-000000000000.json"
        )

    def test_the_json_path_inside_the_file_follows_the_problem(self) -> None:
        error = FormatError(self.ROOT / "agents/A/s/c.json", "$.messages[3].role", "must be a string")
        assert error_first(error, self.ROOT) == "must be a string (at $.messages[3].role) — agents/A/s/c.json"

    def test_an_error_kept_as_text_is_turned_around_too(self) -> None:
        text = str(FormatError(self.ROOT / "agents/A/s/c.json", "$", "not valid JSON: bad"))
        assert error_first(text, self.ROOT) == "not valid JSON: bad — agents/A/s/c.json"
        assert error_first("no session matches 'x'", self.ROOT) == "no session matches 'x'"

    def test_a_path_outside_the_store_stays_whole_unless_long(self) -> None:
        assert store_relative("/elsewhere/c.json", self.ROOT) == "/elsewhere/c.json"

    def test_an_unreadable_context_line_starts_with_unreadable(self) -> None:
        error = FormatError(self.ROOT / "agents/A/s/c.json", "$", "not valid JSON: bad")
        assert (
            load_error_line("c.json", error, self.ROOT)
            == "unreadable: not valid JSON: bad — agents/A/s/c.json"
        )
        assert load_error_line("c.json", "duplicate id") == "unreadable: duplicate id — c.json"


def test_a_short_id_drops_a_date_prefix_but_not_a_uuid_that_begins_with_digits() -> None:
    from replay import short_id

    assert short_id("20250611-3f0c2b6e-8a41-4d8e-9c1a-5b7d2e9f4a10") == "3f0c2b6e"
    assert short_id("43543053-fe84-4fb0-9c1a-5b7d2e9f4a10") == "43543053"
    assert short_id("b1d6e0a2-7c3f-4e59-a0b8-2f6d91c4e7a3") == "b1d6e0a2"
    assert short_id(None) == "-"


class TestTheLayout:
    def test_a_chain_of_compactions_is_one_column_and_a_branching_moves_right(self) -> None:
        session, root, main = base_session()
        session.active_context_id = None
        chain = [root]
        for _ in range(3):
            chain.append(chain[-1].fork([0]))
            session.add_context(chain[-1])
        hot = add_run(session, chain[-1], 2, MINUTE_1, overrides={"temperature": 0.9})
        layout = tree_layout(tree_items(session_names(session), fold_runs=False))
        assert layout.positions[root.id][0] == 0
        assert layout.positions[main.id][0] == 1  # root has two children: main and the chain
        assert [layout.positions[c.id][0] for c in chain[1:]] == [1, 1, 1]  # only children stay
        assert [layout.positions[c.id][0] for c in hot] == [2, 2]

    def test_shown_forks_sit_run_by_run_in_sample_order(self) -> None:
        session, _, main = base_session()
        first = add_run(session, main, 3, MINUTE_1, overrides={"temperature": 0.9})
        second = add_run(session, main, 2, MINUTE_2, label="noise band")
        shuffled = dict(reversed(list(session.contexts.items())))  # as a folder listing might
        session.contexts.clear()
        session.contexts.update(shuffled)
        items = tree_items(session_names(session), fold_runs=False)
        assert [i.id for i in items if i.kind == "replay"] == [c.id for c in [*first, *second]]


def test_a_call_id_time_is_shown_in_local_time_as_message_times_are(monkeypatch: pytest.MonkeyPatch) -> None:
    from replay import minute

    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        assert minute(MINUTE_1) == "2026-01-02 19:35"
        assert minute("2026-01-02T14:05:33.1") == "2026-01-02 14:05"  # already local
        assert minute("20261399T000000000000-x") is None
    finally:
        monkeypatch.undo()
        time.tzset()
