"""The Context page read as a transcript, headless (AppTest): speakers named and styled,
each result nested under its call (and reachable by ``?message=``), links across a page
boundary, thinking and tool definitions folded, ids behind the details toggle, images
with their size, and the system prompt once per change."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from replay import system_prompt_history
from soap_core import Session, Store
from tests.apptest import APP
from tests.transcript_store import IMAGE, Landmarks, transcript_store
from workbench.transcript import STYLES, prompt_history_label, prompt_versions, size_label
from workbench.views import escape_markdown


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Session, Landmarks]:
    root = tmp_path_factory.mktemp("transcript") / "store"
    session, marks = transcript_store(root)
    return root, session, marks


def open_context(root: Path, session: Session, **params: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params.update(store=str(root), session=session.uuid, **params)
    at.run()
    at.switch_page("workbench/pages/context.py").run()
    assert not at.exception
    return at


def walk(node: Any, inside: str | None = None) -> Iterator[tuple[Any, str | None]]:
    """Every node with the key of the message box it stands in (its nearest one)."""
    key = getattr(node, "key", None)
    here = key if isinstance(key, str) and key.startswith("message-") else inside
    yield node, here
    for child in getattr(node, "children", {}).values():
        yield from walk(child, here)


def boxes(at: AppTest) -> dict[int, Any]:
    """The message boxes by display index."""
    return {
        int(node.key.removeprefix("message-")): node
        for node, _ in walk(at.main)
        if (getattr(node, "key", None) or "").startswith("message-")
    }


def enclosing(at: AppTest) -> dict[int, int | None]:
    """For each message box, the message box it is nested in (None: top level)."""
    found: dict[int, int | None] = {}

    def visit(node: Any, outer: int | None) -> None:
        key = getattr(node, "key", None)
        if isinstance(key, str) and key.startswith("message-"):
            index = int(key.removeprefix("message-"))
            found[index] = outer
            outer = index
        for child in getattr(node, "children", {}).values():
            visit(child, outer)

    visit(at.main, None)
    return found


def texts_in(node: Any) -> list[str]:
    return [n.value for n, _ in walk(node) if getattr(n, "type", None) == "text"]


def own_texts(at: AppTest, index: int) -> list[str]:
    """Texts of one box, leaving out the boxes nested in it."""
    return [
        n.value
        for n, box in walk(at.main)
        if getattr(n, "type", None) == "text" and box == f"message-{index}"
    ]


def all_texts(at: AppTest) -> list[str]:
    return [t.value for t in at.text]


class TestSpeakers:
    def test_each_message_is_named_by_its_speaker_and_size_and_no_id_is_shown(
        self, library: tuple[Path, Session, Landmarks]
    ) -> None:
        root, session, marks = library
        at = open_context(root, session)
        messages = session.active_context.messages
        shown = boxes(at)
        assert sorted(shown) == list(range(50))
        assert own_texts(at, 0)[0].startswith("system prompt · ")
        assert own_texts(at, 1)[0].startswith("tool definitions · ")
        assert own_texts(at, 2)[0].startswith("user · ") and own_texts(at, 2)[0].endswith(" tokens")
        assert own_texts(at, marks.call)[0].startswith("assistant · ")
        assert own_texts(at, marks.result)[0].startswith("tool result · ")
        everything = " ".join(all_texts(at) + [c.value for c in at.code])
        assert not any(m.id in everything for m in messages)
        assert not any(t.startswith("#") for t in all_texts(at)) and "call_cats" not in everything
        assert not at.markdown

    def test_each_speaker_has_its_avatar_and_the_colour_of_its_box(
        self, library: tuple[Path, Session, Landmarks]
    ) -> None:
        root, session, marks = library
        at = open_context(root, session)
        avatars = {message.name: message.avatar for message in at.chat_message}
        assert avatars["tool result"] == STYLES["tool result"].avatar == ":material/output:"
        assert (
            avatars["system prompt"] == ":material/settings:" and "user" in avatars and "assistant" in avatars
        )
        [style] = [h.proto.body for h in at.get("html") if "border-left" in h.proto.body]
        assert f".st-key-message-{marks.result}" in style.split("#21a366")[0].rsplit("}", 1)[-1]
        assert ".st-key-message-2," in style.split("#1c83e1")[0].rsplit("}", 1)[-1]


class TestCallsAndResults:
    def test_a_result_is_nested_under_its_call_and_not_listed_again(
        self, library: tuple[Path, Session, Landmarks]
    ) -> None:
        root, session, marks = library
        at = open_context(root, session)
        outer = enclosing(at)
        assert outer[marks.result] == marks.call and outer[marks.pair_result] == marks.pair
        assert outer[marks.call] is None and outer[marks.orphan] is None
        top = [index for index, box in outer.items() if box is None]
        assert marks.result not in top and len(top) + 2 == len(outer) == 50
        call_texts = own_texts(at, marks.call)
        assert 'tool call search(query="cats")' in call_texts
        assert texts_in(boxes(at)[marks.result])[0] == own_texts(at, marks.result)[0]
        assert "12 books" in [c.value for c in boxes(at)[marks.result].code]

    def test_two_calls_answered_by_one_message_show_both_calls_then_both_results(
        self, library: tuple[Path, Session, Landmarks]
    ) -> None:
        root, session, marks = library
        at = open_context(root, session)
        pair = texts_in(boxes(at)[marks.pair])
        order = [
            pair.index('tool call search(query="dogs")'),
            pair.index("tool call clock()"),
            pair.index('result of search(query="dogs")'),
            pair.index("result of clock()"),
        ]
        assert order == sorted(order)

    def test_a_call_without_a_result_and_a_result_without_a_call_say_so(
        self, library: tuple[Path, Session, Landmarks]
    ) -> None:
        root, session, marks = library
        at = open_context(root, session)
        assert "no result recorded" in own_texts(at, marks.unanswered)
        assert "result of a tool: no call in this context asked for it" in own_texts(at, marks.orphan)

    def test_a_result_on_the_next_page_is_a_link_that_opens_it_marked(
        self, library: tuple[Path, Session, Landmarks]
    ) -> None:
        root, session, marks = library
        at = open_context(root, session)
        link = at.button(key=f"result-of-{marks.boundary_call}-0")
        assert link.label == "result on page 2"
        link.click().run()
        assert not at.exception and at.query_params["message"] == str(marks.boundary_result)
        assert enclosing(at)[marks.boundary_result] is None
        linked = own_texts(at, marks.boundary_result)
        assert linked[0] == f"▶ message {marks.boundary_result}, as linked"
        assert linked[1].startswith("tool result · ") and linked[2] == 'result of search(query="edge")'
        back = at.button(key=f"call-of-{marks.boundary_result}-0")
        assert back.label == "the call is on page 1"
        back.click().run()
        assert at.query_params["message"] == str(marks.boundary_call)
        assert f"▶ message {marks.boundary_call}, as linked" in own_texts(at, marks.boundary_call)

    def test_a_link_to_a_nested_result_marks_it_inside_its_call(
        self, library: tuple[Path, Session, Landmarks]
    ) -> None:
        root, session, marks = library
        at = open_context(root, session, message=str(marks.result))
        assert enclosing(at)[marks.result] == marks.call
        assert own_texts(at, marks.result)[0] == f"▶ message {marks.result}, as linked"
        bodies = [h.proto.body for h in at.get("html")]
        assert any(f".st-key-message-{marks.result} {{ border: 2px solid #ff4b4b" in b for b in bodies)
        assert any(f'"st-key-message-{marks.result}"' in b and "scrollIntoView" in b for b in bodies)


class TestFolded:
    def test_thinking_and_tool_definitions_are_folded(self, library: tuple[Path, Session, Landmarks]) -> None:
        root, session, _ = library
        at = open_context(root, session)
        [thinking] = [e for e in at.expander if e.label == "thinking"]
        assert not thinking.proto.expanded
        assert [t.value for t in thinking.text] == ["The catalogue knows; search it first."]
        [tools] = [e for e in at.expander if "tool definitions" in e.label]
        assert (
            tools.label == escape_markdown("2 tool definitions: search, clock") and not tools.proto.expanded
        )
        assert [t.value for t in tools.text] == ["search: Search the catalogue.", "clock: Tell the time."]

    def test_the_linked_message_opens_what_is_folded(self, library: tuple[Path, Session, Landmarks]) -> None:
        root, session, marks = library
        at = open_context(root, session, message=str(marks.call))
        [thinking] = [e for e in at.expander if e.label == "thinking"]
        assert thinking.proto.expanded
        at = open_context(root, session, message="1")
        [tools] = [e for e in at.expander if "tool definitions" in e.label]
        assert tools.proto.expanded


class TestDetails:
    def test_the_toggle_shows_ids_sequence_numbers_call_ids_and_anchors_and_keeps_them_in_the_url(
        self, library: tuple[Path, Session, Landmarks]
    ) -> None:
        root, session, marks = library
        at = open_context(root, session)
        at.toggle(key="details").set_value(True).run()
        assert not at.exception and at.query_params["details"] == "1"
        messages = session.active_context.messages
        details = [t for t in all_texts(at) if t.startswith("#")]
        assert [int(t.split()[0][1:]) for t in details] == list(range(50))
        assert f"id {messages[marks.call].id}" in own_texts(at, marks.call)[1]
        assert "call_id call_cats" in own_texts(at, marks.call) and "call_id call_cats" in own_texts(
            at, marks.result
        )
        assert any(t.startswith("──── end of anchor ") for t in all_texts(at))
        at.toggle(key="details").set_value(False).run()
        assert "details" not in at.query_params and not [t for t in all_texts(at) if t.startswith("#")]

    def test_a_link_with_details_opens_with_them(self, library: tuple[Path, Session, Landmarks]) -> None:
        root, session, _ = library
        at = open_context(root, session, details="1")
        assert at.toggle(key="details").value
        assert any(t.startswith("#0  seq ") for t in all_texts(at))


class TestMediaAndPrompt:
    def test_an_image_is_shown_with_its_pixels_and_bytes(
        self, library: tuple[Path, Session, Landmarks]
    ) -> None:
        root, session, marks = library
        at = open_context(root, session)
        assert f"image · image/png · 64×48 px · {size_label(len(IMAGE))}" in own_texts(at, marks.image)
        assert len(at.image) == 1

    def test_the_system_prompt_is_listed_once_per_change(self, workbench_store: Path) -> None:
        store = Store(workbench_store)
        [analyst] = [s for s in store.sessions() if s.role == "Analyst"]
        session = store.load_session(analyst.uuid)
        root = next(c for c in session.contexts.values() if not c.origin_context_id)
        at = open_context(workbench_store, session, context=root.id)
        versions = prompt_versions(system_prompt_history(session, root))
        [prompts] = [e for e in at.expander if e.label.startswith("System prompt")]
        assert prompts.label == prompt_history_label(versions)
        assert [c.value for c in prompts.code] == [v.text for v in versions]
        assert [t.value for t in prompts.text] == [v.label for v in versions]
