"""The Streamlit workbench, run headless with AppTest on the sample store and small
stores built here: every page opens without an exception, shows the figures the
library computes, reports broken stores as errors, and shows file content as plain text.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from importers.openpoke import import_openpoke
from replay import short_id, system_prompt_history
from soap_core import (
    TOOLS_ANCHOR,
    Context,
    MediaPart,
    Message,
    Session,
    Store,
    TextPart,
    ThinkingPart,
    ToolPart,
    UnknownPart,
    base64_source,
    message_rows,
    search_store,
    session_overview,
    session_overviews,
    time_text,
)
from soap_core import _trust as trust
from soap_core._catalog import Catalog
from tests.apptest import open_app_page
from workbench import session_filters
from workbench.openpoke_views import two_tracks
from workbench.session_filters import SessionFilter, narrowed, typed_session
from workbench.transcript import prompt_history_label, prompt_versions

APP = Path(__file__).resolve().parents[1] / "app.py"
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "soap"
SESSION = "20250611-3f0c2b6e-8a41-4d8e-9c1a-5b7d2e9f4a10"
ACTIVE = "e7c40f19-2a6b-4d35-8e91-7b03a5c6d2f4"
ROOT_CONTEXT = "b1d6e0a2-7c3f-4e59-a0b8-2f6d91c4e7a3"
DISCARDED = "5e2a9c71-0b4d-4f8e-b36a-c9d71e02f5b8"
EVIL = "<script>alert(1)</script><img src=x onerror=alert(2)>"
PNG_1X1 = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


def open_page(store: Path | None, page: str = "sessions", **params: str) -> AppTest:
    return open_app_page(store, page, 30, **params)


def texts(at: AppTest) -> list[str]:
    return [element.value for element in at.text]


def headings(at: AppTest) -> list[str]:
    """The details line of every message shown, in the order shown (open the page with
    ``details="1"``: without it the page shows no display index)."""
    return [value for value in texts(at) if value.startswith("#")]


def shown_indices(at: AppTest) -> list[int]:
    return [int(heading.split()[0].lstrip("#")) for heading in headings(at)]


def json_values(at: AppTest) -> list[Any]:
    """What the st.json elements show, parsed (AppTest gives their JSON text)."""
    return [json.loads(element.value) for element in at.json]


def all_nodes(node: Any) -> Iterator[Any]:
    yield node
    for child in getattr(node, "children", {}).values():
        yield from all_nodes(child)


def save(tmp_path: Path, role: str, context: Context) -> tuple[Path, Session]:
    session = Session.create(role, context)
    Store(tmp_path).save_session(session)
    return tmp_path, session


def rich_store(tmp_path: Path) -> tuple[Path, Session]:
    """A session with every kind of part, and tool definitions added after the chat, so
    that display order and chronological order differ."""
    context = Context.create("sys prompt")
    context.append(
        Message.create(
            "user",
            [
                TextPart("look at these"),
                MediaPart("image", base64_source("image/png", PNG_1X1)),
                MediaPart("pdf", base64_source("application/pdf", b"%PDF-1.4 tiny")),
                UnknownPart({"type": "hologram", "depth": 3}),
            ],
        )
    )
    context.append(Message.create("assistant", [ThinkingPart("quiet reasoning"), TextPart("seen")]))
    tools = [ToolPart("get_name", "Return the name.", {"type": "object", "properties": {}})]
    context.append(Message.tool_definitions_message(tools), TOOLS_ANCHOR)
    return save(tmp_path, "Rich", context)


def type_into(picker: Any, text: str) -> None:
    """Type ``text`` into a picker that takes new options, as the browser sends it (the
    typed text as the widget's string); AppTest's ``set_value`` looks values up among the
    listed options only."""
    picker.options.append(text)
    picker.set_value(text)


def session_picker(at: AppTest) -> Any:
    """The Sessions page's session picker (the table's filters come before it)."""
    [picker] = [box for box in at.selectbox if box.label == "Session"]
    return picker


class TestSessionsPage:
    def test_without_a_store_it_asks_for_one(self) -> None:
        at = open_page(None)
        assert at.info
        assert not at.dataframe

    def test_it_lists_every_session_with_the_library_figures(self) -> None:
        at = open_page(FIXTURE)
        store = Store(FIXTURE)
        expected = [session_overview(store, summary) for summary in store.sessions()]
        table = at.dataframe[0].value
        rows = table.astype(object).where(table.notna(), None).to_dict("records")
        assert rows == [
            {
                "role": o.role,
                "session": o.uuid,
                "thread": o.thread_id or "—",
                "active": o.is_active,
                "contexts": o.contexts,
                "messages": o.messages,
                "tokens": o.tokens,
                "first": time_text(o.first_timestamp, age=False),
                "last": time_text(o.last_timestamp, age=False),
                "error": o.error or "",
            }
            for o in expected
        ]
        assert rows[0]["tokens"] == 400

    def test_without_a_selection_it_offers_no_link(self) -> None:
        at = open_page(FIXTURE)
        assert session_picker(at).value is None
        assert not at.page_link
        assert "session" not in at.query_params

    def test_picking_a_session_sets_the_query_param_and_links_to_its_context(self) -> None:
        at = open_page(FIXTURE)
        session_picker(at).set_value(SESSION).run()
        assert not at.exception
        assert at.query_params["session"] == SESSION
        link = at.page_link[0].proto
        assert link.page == "context"
        assert f"session={SESSION}" in link.query_string

    def test_a_long_table_offers_its_first_rows_and_any_session_typed_in(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The picker lists the table's first rows (10,000 options cost a first open a
        third of a second); an id, or part of one, typed in opens any other session."""
        monkeypatch.setattr(session_filters, "PICKER_ROWS", 2)
        for n in range(3):
            save(tmp_path, "Agent", Context.create(f"prompt {n}"))
        at = open_page(tmp_path)
        table = list(at.dataframe[0].value["session"])
        picker = session_picker(at)
        assert [label.rsplit(" · ", 1)[1] for label in picker.options] == [short_id(u) for u in table[:2]]
        type_into(picker, table[2])
        at.run()
        assert not at.exception
        assert at.query_params["session"] == table[2]
        assert session_picker(at).value == table[2]  # shown by its label, as a listed one
        assert not at.warning
        assert f"session={table[2]}" in at.page_link[0].proto.query_string
        type_into(session_picker(at), short_id(table[1]))  # the short id a label ends with
        at.run()
        assert at.query_params["session"] == table[1]
        type_into(session_picker(at), "no-such-session")
        at.run()
        assert "No single session" in at.warning[0].value
        assert at.query_params["session"] == table[1]  # the last session picked stays chosen

    def test_a_copied_link_to_a_session_past_the_first_rows_is_offered_and_picked(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(session_filters, "PICKER_ROWS", 1)
        for n in range(3):
            save(tmp_path, "Agent", Context.create(f"prompt {n}"))
        table = list(open_page(tmp_path).dataframe[0].value["session"])
        at = open_page(tmp_path, session=table[2])
        assert len(session_picker(at).options) == 2
        assert session_picker(at).value == table[2]
        assert f"session={table[2]}" in at.page_link[0].proto.query_string

    def test_a_typed_id_names_the_one_session_it_is_or_is_part_of(self) -> None:
        overviews = [session_overview(Store(FIXTURE), s) for s in Store(FIXTURE).sessions()]
        twin = dataclasses.replace(overviews[0], uuid=overviews[0].uuid[:-1] + "1")
        assert typed_session(SESSION, overviews) == SESSION
        assert typed_session(f"  {SESSION[:15]} ", overviews) == SESSION
        assert typed_session(short_id(SESSION), overviews) == SESSION
        assert typed_session(SESSION[:15], [*overviews, twin]) is None  # two sessions: neither
        assert typed_session(SESSION, [*overviews, twin]) == SESSION  # the whole id: that one
        assert typed_session("", overviews) is None
        assert typed_session("zzz", overviews) is None
        assert typed_session("8a41", overviews) is None  # inside the id: the store's rule takes beginnings

    def test_a_broken_session_json_is_listed_with_its_error(self, tmp_path: Path) -> None:
        store = tmp_path / "soap"
        shutil.copytree(FIXTURE, store)
        (store / "agents" / "HelloPete" / SESSION / "session.json").write_text("{")
        at = open_page(store)
        table = at.dataframe[0].value
        assert list(table["session"]) == [SESSION]
        assert "session.json" in table["error"][0]

    def test_a_missing_store_directory_is_an_error(self, tmp_path: Path) -> None:
        at = open_page(tmp_path / "nowhere")
        assert at.error
        assert not at.dataframe

    def test_a_run_walks_the_store_once_and_lists_what_that_walk_found(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Taking the store's state refreshes the catalog; the listing and the agent names
        read the catalog as it is then. Each walked it again: three walks on a first open,
        while nothing watches the store yet (a quarter second each at 10,000 sessions)."""
        store = tmp_path / "soap"
        shutil.copytree(FIXTURE, store)
        monkeypatch.setattr(trust, "watched_generation", lambda roots: None)  # every refresh walks
        walks = []
        walk = Catalog._walk
        monkeypatch.setattr(Catalog, "_walk", lambda self, *args: walks.append(1) or walk(self, *args))
        at = open_page(store)
        assert list(at.dataframe[0].value["session"]) == [SESSION]
        assert len(walks) == 1
        another = "20250612-0f0c2b6e-8a41-4d8e-9c1a-5b7d2e9f4a11"
        shutil.copytree(store / "agents" / "HelloPete" / SESSION, store / "agents" / "HelloPete" / another)
        at.run()
        assert len(at.dataframe[0].value) == 2  # the next run's walk found it, and the table shows it
        assert len(walks) == 2


class TestContextPage:
    def test_without_a_session_it_asks_for_one(self) -> None:
        at = open_page(FIXTURE, "context")
        assert at.info
        assert not headings(at)

    def test_it_shows_the_active_context_by_default(self) -> None:
        at = open_page(FIXTURE, "context", session=SESSION, details="1")
        context = Store(FIXTURE).load_session(SESSION).active_context
        assert at.query_params["context"] == ACTIVE
        assert shown_indices(at) == [row.index for row in message_rows(context)]
        assert f"{len(context.messages)} messages, {context.total_token_count()} tokens" in " ".join(
            texts(at)
        )

    def test_a_session_prefix_is_enough(self) -> None:
        at = open_page(FIXTURE, "context", session="20250611-3f0c")
        assert at.query_params["context"] == ACTIVE

    def test_the_stale_token_count_of_the_system_prompt_is_shown_beside_the_true_one(self) -> None:
        at = open_page(FIXTURE, "context", session=SESSION)
        row = message_rows(Store(FIXTURE).load_session(SESSION).active_context)[0]
        assert (row.stale, row.cached_tokens, row.tokens) == (True, 49, 79)
        assert "system prompt · 79 tokens (the file caches a stale 49)" in texts(at)

    def test_anchors_are_marked_after_the_message_they_end(self) -> None:
        at = open_page(FIXTURE, "context", session=SESSION, details="1")
        shown = texts(at)
        system_prompt = next(i for i, value in enumerate(shown) if value.startswith("#0 "))
        assert "end of anchor system_prompt" in shown[system_prompt + 2]
        assert "end of anchor messages" in shown[-1]

    def test_a_tool_call_and_its_result_show_the_same_call_id(self) -> None:
        at = open_page(FIXTURE, "context", session=SESSION, details="1")
        call_id = "toolu_01HXk3Vq9pZ2mN7cR4tY8wLb"
        assert len([value for value in texts(at) if call_id in value]) == 2
        assert "tool call produce_output(answer=42)" in texts(at)

    def test_a_context_is_picked_by_id_prefix(self) -> None:
        at = open_page(FIXTURE, "context", session=SESSION, context="b1d6", details="1")
        context = Store(FIXTURE).load_session(SESSION).context(ROOT_CONTEXT)
        assert at.query_params["context"] == ROOT_CONTEXT
        assert len(headings(at)) == len(context.messages) == 7
        assert "Remember this: the answer is 42." in texts(at)

    def test_picking_another_context_shows_it_and_records_it(self) -> None:
        at = open_page(FIXTURE, "context", session=SESSION, details="1")
        at.selectbox[0].set_value(ROOT_CONTEXT).run()
        assert not at.exception
        assert at.query_params["context"] == ROOT_CONTEXT
        assert len(headings(at)) == 7

    def test_an_unknown_context_is_a_warning_and_the_active_one_is_shown(self) -> None:
        at = open_page(FIXTURE, "context", session=SESSION, context="ffff", details="1")
        assert not at.error and "ffff" in at.warning[0].value
        assert headings(at)  # not a dead end: the active context, with the picker

    def test_the_chronological_toggle_orders_messages_by_sequence_number(self, tmp_path: Path) -> None:
        store, session = rich_store(tmp_path)
        at = open_page(store, "context", session=session.uuid, details="1")
        assert shown_indices(at) == [0, 1, 2, 3]
        at.toggle[0].set_value(True).run()
        assert not at.exception
        expected = [row.index for row in message_rows(session.active_context, chronological=True)]
        assert shown_indices(at) == expected == [0, 2, 3, 1]

    def test_the_chronological_toggle_works_on_a_picked_context(self) -> None:
        at = open_page(FIXTURE, "context", session=SESSION, context="b1d6", details="1")
        at.toggle[0].set_value(True).run()
        assert not at.exception
        context = Store(FIXTURE).load_session(SESSION).context(ROOT_CONTEXT)
        assert shown_indices(at) == [row.index for row in message_rows(context, chronological=True)]

    def test_the_fork_tree_labels_the_discarded_child(self) -> None:
        at = open_page(FIXTURE, "context", session=SESSION)
        tree = next(value for value in texts(at) if "discarded (no file)" in value)
        lines = tree.splitlines()  # names first, short ids last
        assert lines[0].startswith("- root ") and lines[0].endswith(ROOT_CONTEXT[:8])
        assert f"    - discarded fork 1  discarded (no file)  {DISCARDED[:8]}" in lines
        assert f"    - main  fork, 6 messages  [active]  {ACTIVE[:8]}  <- shown" in lines

    def test_each_kind_of_part_is_rendered_for_what_it_is(self, tmp_path: Path) -> None:
        store, session = rich_store(tmp_path)
        at = open_page(store, "context", session=session.uuid)
        assert len(at.image) == 1
        assert len(at.download_button) == 1
        assert {"type": "hologram", "depth": 3} in json_values(at)
        [thinking] = [e for e in at.expander if e.label == "thinking"]
        assert [element.value for element in thinking.text] == ["quiet reasoning"]
        assert "get_name: Return the name." in texts(at)

    def test_undecodable_media_is_reported_not_raised(self, tmp_path: Path) -> None:
        broken_base64 = MediaPart("image", {"type": "base64", "media_type": "image/png", "data": "abc"})
        not_an_image = MediaPart("image", base64_source("image/png", b"not a png"))
        context = Context.create("sys prompt")
        context.append(Message.create("user", [broken_base64, not_an_image]))
        store, session = save(tmp_path, "Media", context)
        at = open_page(store, "context", session=session.uuid)
        assert at.warning
        assert not at.image
        assert len(at.download_button) == 1

    def test_a_broken_session_json_is_an_error(self, tmp_path: Path) -> None:
        store = tmp_path / "soap"
        shutil.copytree(FIXTURE, store)
        (store / "agents" / "HelloPete" / SESSION / "session.json").write_text("{")
        at = open_page(store, "context", session=SESSION)
        assert at.error
        assert "session" in at.error[0].value
        assert not headings(at)

    def test_a_broken_fork_file_is_reported_and_the_rest_still_shown(self, tmp_path: Path) -> None:
        store = tmp_path / "soap"
        shutil.copytree(FIXTURE, store)
        (store / "agents" / "HelloPete" / SESSION / f"{ROOT_CONTEXT}.json").write_text("[1,")
        at = open_page(store, "context", session=SESSION, details="1")
        assert at.warning
        assert len(headings(at)) == 6

    def test_a_missing_store_directory_is_an_error(self, tmp_path: Path) -> None:
        at = open_page(tmp_path / "nowhere", "context", session=SESSION)
        assert at.error

    def test_html_in_a_message_is_shown_as_plain_text(self, tmp_path: Path) -> None:
        context = Context.create("sys prompt")
        context.append(Message.create("user", [TextPart(EVIL)]))
        store, session = save(tmp_path, "Evil", context)
        at = open_page(store, "context", session=session.uuid)
        assert EVIL in texts(at)
        carriers = [
            node
            for root in (at.main, at.sidebar)
            for node in all_nodes(root)
            if "<script>" in str(getattr(node, "proto", ""))
        ]
        assert carriers
        assert {node.type for node in carriers} == {"text"}
        assert not any("<script>" in html.proto.body for html in at.get("html"))  # our CSS only


class TestSearchAndPrompts:
    def test_search_lists_each_matching_message_once_as_the_library_finds_it(self) -> None:
        at = open_page(FIXTURE, "sessions", q="remember")
        hits = search_store(Store(FIXTURE), "remember")
        table = at.dataframe[-1]  # after the sessions table
        assert table.value["snippet"].tolist() == [h.snippet for h in hits]
        assert len(hits) == 3

    def test_the_system_prompt_at_each_recorded_call_is_shown(self, workbench_store: Path) -> None:
        store = Store(workbench_store)
        [analyst] = [s for s in store.sessions() if s.role == "Analyst"]
        session = store.load_session(analyst.uuid)
        root = next(c for c in session.contexts.values() if not c.origin_context_id)
        at = open_page(workbench_store, "context", session=analyst.uuid, context=root.id)
        [prompts] = [e for e in at.expander if e.label.startswith("System prompt")]
        expected = system_prompt_history(session, root)
        versions = prompt_versions(expected)
        assert prompts.label == prompt_history_label(versions) and len(expected) == 3
        assert [c.value for c in prompts.code] == [v.text for v in versions]

    def test_a_linked_message_is_marked(self) -> None:
        at = open_page(FIXTURE, "context", session=SESSION, message="3")
        assert "▶ message 3, as linked" in texts(at)


class TestOpenPoke:
    OPENPOKE = Path(__file__).resolve().parent / "fixtures" / "openpoke"

    def test_an_openpoke_directory_opens_through_a_temporary_store(self) -> None:
        at = open_page(FIXTURE, "sessions")
        at.text_input(key="openpoke_dir").input(str(self.OPENPOKE / "long")).run()
        at.button(key="openpoke_open").click().run()
        assert not at.exception
        store = Path(at.query_params["store"])
        assert store != FIXTURE and store.name.startswith("soapwb-openpoke-")
        roles = sorted(s.role for s in Store(store).sessions())
        assert roles == ["OpenPokeExecution", "OpenPokeInteraction"]
        assert "112 conversation entries read from" in " ".join(texts(at))
        assert sorted(at.dataframe[0].value["role"].tolist()) == roles

    def test_a_bad_openpoke_directory_is_an_error(self, tmp_path: Path) -> None:
        at = open_page(FIXTURE, "sessions")
        at.text_input(key="openpoke_dir").input(str(tmp_path / "nowhere")).run()
        at.button(key="openpoke_open").click().run()
        assert not at.exception and at.error
        assert at.query_params["store"] == str(FIXTURE)

    def test_the_context_page_shows_the_log_beside_the_working_memory(self, tmp_path: Path) -> None:
        report = import_openpoke(self.OPENPOKE / "long", tmp_path / "store")
        session = Store(tmp_path / "store").load_session(report.interaction_session or "")
        at = open_page(tmp_path / "store", "context", session=session.uuid, entry="111")
        expected = two_tracks(session, 111)
        codes = [c.value for c in at.code]
        assert expected.raw_log in codes and expected.working_memory in codes
        assert expected.working_memory.startswith("<conversation_summary>")
        assert f"The working memory as the model saw it at entry 111: {expected.rule}" in texts(at)


class TestSessionPickers:
    def test_a_pages_picker_offers_the_latest_sessions_and_opens_any_other_typed_in(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Every page's session picker lists the latest sessions and the URL's (10,000
        options cost every click on a page a third of a second); an id typed in opens any."""
        monkeypatch.setattr(session_filters, "PICKER_ROWS", 1)
        for n in range(3):
            save(tmp_path, "Agent", Context.create(f"prompt {n}"))
        latest, _, oldest = (
            o.uuid for o in narrowed(session_overviews(Store(tmp_path)), SessionFilter(), "")
        )
        at = open_page(tmp_path, "fork_tree")
        picker = next(box for box in at.selectbox if box.label == "Session")
        assert [label.rsplit(" · ", 1)[1] for label in picker.options] == [short_id(latest)]
        type_into(picker, short_id(oldest))
        at.run()
        assert not at.exception and not at.warning
        assert at.query_params["session"] == oldest
        assert next(box for box in at.selectbox if box.label == "Session").value == oldest
        type_into(next(box for box in at.selectbox if box.label == "Session"), "zzz")
        at.run()
        assert "No single session" in at.warning[0].value
        linked = open_page(tmp_path, "fork_tree", session=oldest)  # a copied link past the latest
        picker = next(box for box in linked.selectbox if box.label == "Session")
        assert len(picker.options) == 2 and picker.value == oldest

    def test_a_page_keeps_its_session_when_the_session_changes_under_it(self, tmp_path: Path) -> None:
        """A drift run or a replay saves forks into the session a page shows: its label in
        the picker changes ("2 contexts"), and the picker still holds the URL's session.
        (In Chromium a picker drawn without its index once lost it there, and the page
        asked for a session: tests/test_browser_numbers.py saw it; AppTest does not.)"""
        _, session = save(tmp_path, "Agent", Context.create("prompt"))
        at = open_page(tmp_path, "fork_tree", session=session.uuid)
        before = next(box for box in at.selectbox if box.label == "Session")
        assert before.value == session.uuid
        store = Store(tmp_path)
        loaded = store.load_session(session.uuid)
        loaded.add_context(loaded.active_context.fork([0]))
        store.save_session(loaded)
        before.set_value(session.uuid)  # the browser sends back the label it shows, now an old one
        at.run()
        assert not at.exception
        picker = next(box for box in at.selectbox if box.label == "Session")
        assert picker.options != before.options  # its label says 2 contexts now
        assert picker.value == session.uuid
        assert not [info for info in at.info if "Pick a session" in info.value]
