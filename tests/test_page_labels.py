"""Names before ids and errors before paths, as the pages show them (AppTest): the
session pickers, OpenPoke execution agents by their agent name, the Sessions table's
error column and a page's error line; and labels quoting the files never become links."""

from __future__ import annotations

import os
import re
import time
import unicodedata
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from importers.openpoke import import_openpoke
from soap_core import Context, Message, Session, Store, TextPart, ToolPart, ToolResultPart, ToolUsePart
from tests.apptest import open_app_page
from workbench.context_views import PAGE_SIZE, build_index, entry_label
from workbench.views import escape_markdown

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "soap"
OPENPOKE = Path(__file__).resolve().parent / "fixtures" / "openpoke" / "long"
SESSION = "20250611-3f0c2b6e-8a41-4d8e-9c1a-5b7d2e9f4a10"
SESSION_DIR = f"agents/HelloPete/{SESSION}"


def unescaped(text: str) -> str:
    return text.replace("\\", "")  # the pages escape Markdown in messages


class TestSessionPickers:
    def test_the_session_picker_reads_name_size_time_then_a_short_id(self) -> None:
        at = open_app_page(FIXTURE, "fork_tree")
        picker = next(box for box in at.selectbox if box.label == "Session")
        [label] = picker.options
        assert label.startswith("HelloPete · 2 contexts · 2025-06-11 ")
        assert label.endswith(" · 3f0c2b6e")

    def test_openpoke_execution_agents_are_named_by_their_agent(self, tmp_path: Path) -> None:
        report = import_openpoke(OPENPOKE, tmp_path / "store")
        assert report.execution_sessions, "the fixture has execution agents"
        at = open_app_page(tmp_path / "store", "sessions")
        options = next(box for box in at.selectbox if box.label == "Session").options
        for agent in report.execution_sessions:
            assert any(o.startswith(f"{agent} (OpenPokeExecution) · ") for o in options), (agent, options)
        table = at.dataframe[0].value
        assert set(report.execution_sessions) <= set(table["name"].dropna())

    def test_a_page_of_an_execution_agent_heads_it_with_its_name(self, tmp_path: Path) -> None:
        report = import_openpoke(OPENPOKE, tmp_path / "store")
        agent, uuid = next(iter(report.execution_sessions.items()))
        at = open_app_page(tmp_path / "store", "fork_tree", session=uuid)
        assert at.text[0].value.startswith(f"{agent} (OpenPokeExecution) · 1 context")


class TestErrorsFirst:
    def test_the_sessions_table_tells_the_problem_then_the_file_in_the_store(self, store_copy: Path) -> None:
        (store_copy / SESSION_DIR / "session.json").write_text("{\n\n  oops")
        at = open_app_page(store_copy, "sessions")
        [error] = [e for e in at.dataframe[0].value["error"].tolist() if e]
        assert error.startswith("not valid JSON")
        assert "line 3" in error
        assert error.endswith(f" — {SESSION_DIR}/session.json")

    def test_a_page_error_tells_the_problem_then_where(self) -> None:
        at = open_app_page(FIXTURE, "fork_tree", session=SESSION, context="ffff")
        error = unescaped(at.error[0].value)
        assert error == f"context 'ffff': no such context in this session — {SESSION_DIR}"

    def test_the_sessions_table_names_sessions_before_their_ids(self) -> None:
        at = open_app_page(FIXTURE, "sessions")
        columns = list(at.dataframe[0].value.columns)
        assert columns.index("role") < columns.index("session")
        assert "name" not in columns  # no session here names its agent apart from its role
        assert Store(FIXTURE).sessions()


LINK_NAMES = ("https://evil.example/x", "www.evil.example", "mail@evil.example", "HTTP://EVIL.EXAMPLE")
"""Tool names a Markdown renderer would link as they stand: a URL, a bare www host, an
email address, a URL in capitals."""

GFM_LINKS = (
    re.compile(r"(https?://|www(?=\.))[-.\w]+", re.IGNORECASE | re.ASCII),
    re.compile(r"[-.\w+]+@[-\w]+(?:\.[-\w]+)+", re.ASCII),
)
"""What remark-gfm links in plain text (the patterns of mdast-util-gfm-autolink-literal,
which Streamlit's Markdown runs over each text node once the escapes are undone), less
its checks of the character before, so these find every link it makes and more."""

_MARKDOWN_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")


def shown_text(markdown: str) -> str:
    """The text of ``markdown`` once its backslash escapes are undone, as in a text node."""
    return _MARKDOWN_ESCAPE.sub(r"\1", markdown)


def visible(text: str) -> str:
    """``text`` without its invisible format characters (zero-width joiners and spaces)."""
    return "".join(c for c in text if unicodedata.category(c) != "Cf")


def links_in(markdown: str) -> list[str]:
    """What Streamlit's Markdown would make a link of in ``markdown`` (see GFM_LINKS)."""
    text = shown_text(markdown)
    return [found.group(0) for pattern in GFM_LINKS for found in pattern.finditer(text)]


def link_named_store(root: Path) -> Session:
    """A store at ``root`` with one session whose tools are named like links (LINK_NAMES),
    called once each, after a user message quoting two of them; two pages long."""
    tools = [
        ToolPart(name, "Named like a link.", {"type": "object", "properties": {}}) for name in LINK_NAMES
    ]
    context = Context.create("You call tools.", tools)
    context.append(Message.create("user", [TextPart("Write to mail@evil.example, or see www.evil.example")]))
    call = context.append(
        Message.create(
            "assistant", [ToolUsePart(f"call_{n}", name, "{}") for n, name in enumerate(LINK_NAMES)]
        )
    )
    context.append_tool_results(call, [ToolResultPart(f"call_{n}", "done") for n in range(len(LINK_NAMES))])
    context.append(Message.create("assistant", [TextPart("Done.")]))
    while len(context.messages) <= PAGE_SIZE:  # two pages: the Context page outlines them in the sidebar
        context.append(Message.create("user", [TextPart(f"small talk {len(context.messages)}")]))
    session = Session.create("Linker", context)
    Store(root).save_session(session)
    then = time.time() - 60  # the catalog does not trust files written in the last seconds
    for path in [root, *root.rglob("*")]:
        os.utime(path, (then, then))
    return session


def markdown_labels(at: AppTest) -> list[str]:
    """Every label and line the page sends to the browser as Markdown: expanders, radio
    options, tabs, buttons, captions, headings, alerts and Markdown blocks."""
    labels = [e.label for e in at.expander] + [t.label for t in at.tabs] + [b.label for b in at.button]
    labels += [option for radio in at.radio for option in radio.options]
    labels += [e.value for e in [*at.caption, *at.markdown, *at.title, *at.header, *at.subheader]]
    labels += [e.value for e in [*at.error, *at.warning, *at.info, *at.success]]
    return labels


class TestLabelsAreNeverLinks:
    @pytest.mark.parametrize("name", LINK_NAMES)
    def test_a_label_quoting_a_link_reads_as_written_and_links_nowhere(self, name: str) -> None:
        for label in (f"tool definition {name}", f"2 tool definitions: {name}, {name}", f"{name}@{name}"):
            escaped = escape_markdown(label)
            assert visible(shown_text(escaped)) == label
            assert links_in(escaped) == [], escaped

    def test_an_outline_entry_naming_linklike_tools_links_nowhere(self, tmp_path: Path) -> None:
        session = link_named_store(tmp_path / "store")
        context = session.active_context
        index = build_index(session, context)
        labels = [entry_label(index, context, at, "tool call") for at in range(len(context.message_view))]
        called = [label for label in labels if "tool call" in label and LINK_NAMES[0] in label]
        assert called, labels
        assert [links_in(escape_markdown(label)) for label in called] == [[] for _ in called]

    def test_no_label_of_the_context_page_links_a_tool_named_like_a_link(self, tmp_path: Path) -> None:
        session = link_named_store(tmp_path / "store")
        at = open_app_page(tmp_path / "store", "context", session=session.uuid)
        labels = markdown_labels(at)
        quoting = [label for label in labels if "evil" in shown_text(label)]
        assert len(quoting) >= 3, labels  # the tool definitions, the outline's turn and its tool call
        assert {label: links_in(label) for label in quoting} == {label: [] for label in quoting}
