"""The Fork tree page, run headless with AppTest on the peteos sample store and on the
workbench store: the figure draws exactly the nodes of ``fork_tree`` with their kinds,
a node is opened from ``?context=`` or the picker, and two contexts are sent to Diff.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from local_model import LocalModelServer
from replay import session_names
from soap_core import ContextNode, Session, Store, fork_tree, read_mark
from tests.apptest import open_app_page
from tests.replayed_store import ReplayedStore, replayed_store
from workbench.fork_tree_views import clicked_context, hover_text, tree_items, tree_layout

APP = Path(__file__).resolve().parents[1] / "app.py"
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "soap"
SESSION = "20250611-3f0c2b6e-8a41-4d8e-9c1a-5b7d2e9f4a10"
ROOT_CONTEXT = "b1d6e0a2-7c3f-4e59-a0b8-2f6d91c4e7a3"
ACTIVE = "e7c40f19-2a6b-4d35-8e91-7b03a5c6d2f4"
DISCARDED = "5e2a9c71-0b4d-4f8e-b36a-c9d71e02f5b8"
KINDS = {"root", "fork", "replay", "replay run", "discarded"}


def open_page(store: Path, **params: str) -> AppTest:
    return open_app_page(store, "fork_tree", **params)


def figure(at: AppTest) -> dict[str, Any]:
    [chart] = at.get("plotly_chart")
    return json.loads(chart.proto.spec)


def drawn_nodes(at: AppTest) -> dict[str, tuple[str, float, float]]:
    """Context id → (kind, x, y) of every node marker, read from the figure's traces."""
    nodes = {}
    for trace in figure(at)["data"]:
        if trace.get("name") in KINDS:
            for [cid], x, y in zip(trace["customdata"], trace["x"], trace["y"], strict=True):
                nodes[cid] = (trace["name"], x, y)
    return nodes


def trace_named(at: AppTest, name: str) -> dict[str, Any]:
    return next(trace for trace in figure(at)["data"] if trace.get("name") == name)


def chart_labels(trace: dict[str, Any]) -> list[str]:
    """The names beside a trace's markers (each starts with a space, clear of the ring)."""
    return [text.strip() for text in trace["text"]]


def analyst(store: Path) -> Session:
    [summary] = [s for s in Store(store).sessions() if s.role == "Analyst"]
    return Store(store).load_session(summary.uuid)


def links(at: AppTest) -> list[tuple[str, str]]:
    return [(link.proto.page, link.proto.query_string) for link in at.page_link]


class TestTheTree:
    def test_the_figure_draws_every_node_of_fork_tree_with_its_kind_and_place(self) -> None:
        at = open_page(FIXTURE, session=SESSION)
        nodes = fork_tree(Store(FIXTURE).load_session(SESSION))
        assert drawn_nodes(at) == {n.id: (n.kind, n.depth, row) for row, n in enumerate(nodes)}

    def test_the_discarded_child_of_the_fixture_is_drawn_hollow(self) -> None:
        at = open_page(FIXTURE, session=SESSION)
        assert drawn_nodes(at)[DISCARDED][0] == "discarded"
        assert trace_named(at, "discarded")["marker"]["symbol"] == "circle-open"
        assert trace_named(at, "fork")["marker"]["symbol"] != "circle-open"

    def test_the_active_context_is_ringed(self) -> None:
        at = open_page(FIXTURE, session=SESSION)
        assert trace_named(at, "active")["customdata"] == [[ACTIVE]]

    def test_edges_join_each_child_to_its_parent(self) -> None:
        at = open_page(FIXTURE, session=SESSION)
        edges = trace_named(at, "edges")
        nodes = drawn_nodes(at)
        segments = len(edges["x"]) // 4
        assert segments == 2
        for child in (DISCARDED, ACTIVE):
            _, x, y = nodes[child]
            assert any(edges["x"][4 * i + 2] == x and edges["y"][4 * i + 2] == y for i in range(segments))

    def test_the_table_lists_the_nodes_of_fork_tree_name_first(self) -> None:
        at = open_page(FIXTURE, session=SESSION)
        table = at.dataframe[0].value
        rows = table.astype(object).where(table.notna(), None).to_dict("records")
        nodes = fork_tree(Store(FIXTURE).load_session(SESSION))
        assert (table.columns[0], table.columns[-1]) == ("name", "id")
        assert [r["id"] for r in rows] == [n.id for n in nodes]
        assert [r["kind"] for r in rows] == [n.kind for n in nodes]
        assert [r["name"] for r in rows] == ["root", "discarded fork 1", "main"]
        assert [r["parent"] for r in rows] == ["— (root)", "root", "root"]
        assert [r["messages"] for r in rows] == ["7", "-", "6"]  # a discarded context's count is not known
        assert [r["active"] for r in rows] == [False, False, True]

    def test_the_nodes_are_named_beside_their_markers(self) -> None:
        at = open_page(FIXTURE, session=SESSION)
        assert chart_labels(trace_named(at, "root")) == ["root · 7 messages"]
        assert chart_labels(trace_named(at, "fork")) == ["main · 6 messages"]

    def test_the_heading_names_the_session_before_its_id(self) -> None:
        at = open_page(FIXTURE, session=SESSION)
        assert at.text[0].value == "HelloPete · 2 contexts · thread pete-chat · session 3f0c2b6e"

    def test_the_replay_fork_of_the_workbench_store_is_drawn_as_a_replay(self, workbench_store: Path) -> None:
        session = analyst(workbench_store)
        at = open_page(workbench_store, session=session.uuid, forks="all")
        nodes = fork_tree(session)
        drawn = drawn_nodes(at)
        assert {cid: kind for cid, (kind, _, _) in drawn.items()} == {n.id: n.kind for n in nodes}
        [replay] = [n for n in nodes if n.kind == "replay"]
        assert drawn[replay.id][0] == "replay"
        hover = trace_named(at, "replay")["hovertext"][0]
        assert replay.id in hover
        assert "Count once more." in hover
        assert "overrides" in hover

    def test_the_summary_counts_the_kinds(self, workbench_store: Path) -> None:
        session = analyst(workbench_store)
        at = open_page(workbench_store, session=session.uuid)
        nodes = fork_tree(session)
        forks = sum(1 for n in nodes if n.kind == "fork")
        assert at.text[1].value == f"{len(nodes)} contexts: 1 root, {forks} fork, 1 replay (from 1 run)"


class TestOpeningANode:
    def test_by_default_the_active_context_is_offered(self) -> None:
        at = open_page(FIXTURE, session=SESSION)
        assert next(box for box in at.selectbox if box.label == "Node").value == ACTIVE
        assert at.query_params["context"] == ACTIVE
        [(page, query)] = links(at)
        assert page == "context"
        assert f"context={ACTIVE}" in query
        assert f"session={SESSION}" in query

    def test_the_context_query_param_opens_that_node(self) -> None:
        at = open_page(FIXTURE, session=SESSION, context="b1d6")
        node_picker = next(box for box in at.selectbox if box.label == "Node")
        assert node_picker.value == ROOT_CONTEXT
        assert at.query_params["context"] == ROOT_CONTEXT
        [(page, query)] = links(at)
        assert page == "context"
        assert f"context={ROOT_CONTEXT}" in query

    def test_picking_a_node_records_it_and_links_to_it(self) -> None:
        at = open_page(FIXTURE, session=SESSION)
        next(box for box in at.selectbox if box.label == "Node").set_value(ROOT_CONTEXT).run()
        assert not at.exception
        assert at.query_params["context"] == ROOT_CONTEXT
        assert f"context={ROOT_CONTEXT}" in links(at)[0][1]

    def test_a_discarded_node_says_it_has_no_file_and_offers_no_link(self) -> None:
        at = open_page(FIXTURE, session=SESSION, context=DISCARDED)
        assert any("never saved" in info.value for info in at.info)
        assert not [link for link in links(at) if link[0] == "context"]

    def test_an_unknown_context_is_an_error_and_the_tree_is_still_drawn(self) -> None:
        at = open_page(FIXTURE, session=SESSION, context="ffff")
        assert at.error
        assert "ffff" in at.error[0].value
        assert at.get("plotly_chart")

    def test_an_unknown_session_offers_the_picker(self) -> None:
        at = open_page(FIXTURE, session="no-such-session")
        assert at.warning and not at.error and [s.label for s in at.selectbox] == ["Session"]
        assert not at.get("plotly_chart")

    def test_without_a_session_it_asks_for_one(self) -> None:
        at = open_page(FIXTURE)
        assert at.info
        assert not at.get("plotly_chart")


class TestSendingToDiff:
    def test_two_picked_contexts_link_to_the_replay_page(self, workbench_store: Path) -> None:
        session = analyst(workbench_store)
        [first, *_, last] = [n.id for n in fork_tree(session)]
        at = open_page(workbench_store, session=session.uuid)
        at.multiselect[0].set_value([first, last]).run()
        assert not at.exception
        assert (at.query_params["diff_a"], at.query_params["diff_b"]) == (first, last)
        [query] = [query for page, query in links(at) if page == "replay"]
        assert f"diff_a={first}" in query
        assert f"diff_b={last}" in query

    def test_the_pair_comes_back_from_the_query_params(self) -> None:
        at = open_page(FIXTURE, session=SESSION, diff_a=ROOT_CONTEXT, diff_b=ACTIVE)
        assert at.multiselect[0].value == [ROOT_CONTEXT, ACTIVE]
        assert [page for page, _ in links(at)].count("replay") == 1

    def test_a_discarded_context_cannot_be_sent(self) -> None:
        at = open_page(FIXTURE, session=SESSION)
        assert at.multiselect[0].options == [
            f"root · 7 messages · {ROOT_CONTEXT[:8]}",
            f"main · 6 messages · active · {ACTIVE[:8]}",
        ]
        assert not [link for link in links(at) if link[0] == "replay"]

    def test_picks_made_one_at_a_time_are_both_kept(self) -> None:
        at = open_page(FIXTURE, session=SESSION)
        at.multiselect[0].select(ROOT_CONTEXT).run()
        assert at.multiselect[0].value == [ROOT_CONTEXT]
        assert at.query_params["diff_a"] == ROOT_CONTEXT and "diff_b" not in at.query_params
        at.multiselect[0].select(ACTIVE).run()
        assert at.multiselect[0].value == [ROOT_CONTEXT, ACTIVE]
        assert (at.query_params["diff_a"], at.query_params["diff_b"]) == (ROOT_CONTEXT, ACTIVE)
        at.run()  # any later rerun (a click elsewhere) keeps them too
        assert at.multiselect[0].value == [ROOT_CONTEXT, ACTIVE]
        [query] = [query for page, query in links(at) if page == "replay"]
        assert f"diff_a={ROOT_CONTEXT}" in query and f"diff_b={ACTIVE}" in query

    def test_a_session_with_one_context_says_so(self, workbench_store: Path) -> None:
        [summary] = [s for s in Store(workbench_store).sessions() if s.role == "Archivist"]
        at = open_page(workbench_store, session=summary.uuid)
        assert any("two saved contexts" in info.value for info in at.info)


class TestTheFigureFunctions:
    def test_a_click_returns_the_context_id_of_the_point(self) -> None:
        assert clicked_context([{"point_index": 0, "customdata": [ACTIVE]}]) == ACTIVE
        assert clicked_context([{"customdata": ACTIVE}]) == ACTIVE
        assert clicked_context([{"point_index": 0}]) is None
        assert clicked_context([]) is None

    def test_a_broken_context_file_is_told_error_first_and_path_in_the_store_after(
        self, store_copy: Path
    ) -> None:
        broken = store_copy / "agents" / "HelloPete" / SESSION / f"{DISCARDED}.json"
        broken.write_text('{\n  "id": "x",\n  oops\n')
        at = open_page(store_copy, session=SESSION)
        [warning] = [w.value.replace("\\", "") for w in at.warning]
        assert warning.startswith("unreadable: not valid JSON")
        assert "line 3" in warning
        assert warning.endswith(f" — agents/HelloPete/{SESSION[:17]}…/{DISCARDED}.json"), warning

    def test_markup_from_a_replay_record_is_escaped_in_the_hover(self) -> None:
        node = ContextNode("c1", "p1", (), "replay", 1, False, 3, "c1.json")
        replay = {"of_context": "p1", "of_index": 2, "overrides": {"edits": {"2": "<script>x</script>"}}}
        text = hover_text(node, read_mark(replay))
        assert "<script>" not in text
        assert "&lt;script&gt;" in text

    def test_the_layout_puts_each_node_at_its_depth_and_order(self) -> None:
        layout = tree_layout(tree_items(session_names(Store(FIXTURE).load_session(SESSION))))
        assert layout.positions == {ROOT_CONTEXT: (0, 0), DISCARDED: (1, 1), ACTIVE: (1, 2)}
        assert layout.edges == [(ROOT_CONTEXT, DISCARDED), (ROOT_CONTEXT, ACTIVE)]


def test_a_rerun_branch_is_named_a_rerun_with_its_tool_modes_in_the_hover() -> None:
    from workbench.fork_tree_views import hover_lines

    node = ContextNode("b1", "a1", (), "replay", 1, False, 6, "b1.json")
    record = {
        "kind": "rerun",
        "of_context": "a1",
        "of_index": 3,
        "overrides": {},
        "tools": {"default": "recorded"},
    }
    lines = hover_lines(node, read_mark(record))
    assert "re-run of the agent from a1 message #3" in lines
    assert 'tools: {"default": "recorded"}' in lines
    assert "replay of a1 message #3" in hover_lines(node, read_mark({"of_context": "a1", "of_index": 3}))


@pytest.fixture(scope="module")
def replayed(
    tmp_path_factory: pytest.TempPathFactory, workbench_store: Path, llm_server: LocalModelServer
) -> ReplayedStore:
    return replayed_store(workbench_store, tmp_path_factory.mktemp("replayed") / "store", llm_server.base_url)


def node_picker(at: AppTest) -> Any:
    return next(box for box in at.selectbox if box.label == "Node")


class TestReplayRuns:
    """Forks made by real replays against the local model, grouped by the run that made them."""

    def test_by_default_each_run_is_one_node_named_by_what_it_changed(self, replayed: ReplayedStore) -> None:
        at = open_page(replayed.root, session=replayed.session)
        main, edit = f"main@{replayed.index}", f"edit of message {replayed.edited_message}"
        texts = sorted(chart_labels(trace_named(at, "replay run")))
        assert f"replay of {main}: temperature 0.9 (3 samples)" in texts
        assert f"noise band: replay of {main} (2 samples)" in texts
        edits = [t for t in texts if t.startswith(f"replay of {main}: {edit} · ")]
        assert len(edits) == 2 and len(set(edits)) == 2, texts  # the store's own edit and ours, told apart
        assert len(texts) == 4
        assert not [t for t in figure(at)["data"] if t.get("name") == "replay"]
        assert "The 7 replay forks are shown as one node per run." in at.caption[0].value

    def test_the_toggle_shows_every_fork_and_lives_in_the_url(self, replayed: ReplayedStore) -> None:
        at = open_page(replayed.root, session=replayed.session)
        folded_rows = len(at.dataframe[0].value)
        at.toggle(key="fork_tree_show_forks").set_value(True).run()
        assert at.query_params["forks"] == "all"
        session = Store(replayed.root).load_session(replayed.session)
        nodes = fork_tree(session)
        assert {cid: kind for cid, (kind, _, _) in drawn_nodes(at).items()} == {n.id: n.kind for n in nodes}
        assert len(at.dataframe[0].value) == len(nodes) == folded_rows + 7 - 4
        hot = trace_named(at, "replay")
        named = dict(zip([c for [c] in hot["customdata"]], chart_labels(hot), strict=True))
        assert named[replayed.hot[1]].startswith(
            f"replay of main@{replayed.index}: temperature 0.9 · sample 2 of 3 · "
        )
        reopened = open_page(replayed.root, session=replayed.session, forks="all")
        assert reopened.toggle(key="fork_tree_show_forks").value is True
        assert len(reopened.dataframe[0].value) == len(nodes)

    def test_picking_a_run_offers_its_forks_and_opens_the_one_picked(self, replayed: ReplayedStore) -> None:
        at = open_page(replayed.root, session=replayed.session)
        assert f"replay of main@{replayed.index}: temperature 0.9 (3 samples)" in node_picker(at).options
        assert node_picker(at).options[0].startswith("root · ")
        node_picker(at).set_value(replayed.hot[0]).run()
        forks = next(box for box in at.selectbox if box.label == "Fork of this run")
        assert forks.options[0].startswith(
            f"replay of main@{replayed.index}: temperature 0.9 · sample 1 of 3 · "
        )
        assert all(
            o.endswith(" messages · " + cid[:8]) for o, cid in zip(forks.options, replayed.hot, strict=True)
        )
        forks.set_value(replayed.hot[2]).run()
        assert at.query_params["context"] == replayed.hot[2]
        [query] = [query for page, query in links(at) if page == "context"]
        assert f"context={replayed.hot[2]}" in query
        assert "ran 20" in " ".join(t.value for t in at.text)

    def test_a_context_link_into_a_run_opens_the_run_at_that_fork(self, replayed: ReplayedStore) -> None:
        at = open_page(replayed.root, session=replayed.session, context=replayed.noise[1])
        assert node_picker(at).value == replayed.noise[0]
        forks = next(box for box in at.selectbox if box.label == "Fork of this run")
        assert forks.value == replayed.noise[1]

    def test_two_replay_forks_picked_one_at_a_time_both_go_to_diff(self, replayed: ReplayedStore) -> None:
        at = open_page(replayed.root, session=replayed.session)
        at.multiselect[0].select(replayed.hot[0]).run()
        at.multiselect[0].select(replayed.edited[0]).run()
        assert at.multiselect[0].value == [replayed.hot[0], replayed.edited[0]]
        [query] = [query for page, query in links(at) if page == "replay"]
        assert f"diff_a={replayed.hot[0]}" in query and f"diff_b={replayed.edited[0]}" in query
