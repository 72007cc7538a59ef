"""OpenPoke as a source: reading its logs exactly as OpenPoke does, importing them into
sessions idempotently, and rebuilding (and replaying) the interaction agent's request."""

from __future__ import annotations

import html
import json
import re
import shutil
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from importers.openpoke import (
    INTERACTION_TOOLS,
    PLACEHOLDER_PROMPT,
    SUMMARY_TAG,
    ImporterError,
    ImportReport,
    format_line,
    import_openpoke,
    materialize_entry,
    parse_log,
    read_openpoke,
    tracks_at,
    working_memory_at,
)
from local_model import LocalModelServer
from replay import MaterializeError, Output, Overrides, diff_outputs, materialize, replay
from soap_core import SAVE_LOCKS_DIR, Context, Session, Store, fork_tree, tool_schema
from soap_core._catalog import is_catalog_file
from soap_core.runtime import LLMEndpoint, invocation_chain, read_invocations
from soapwb.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "openpoke"
SHORT, LONG, LEGACY = FIXTURES / "short", FIXTURES / "long", FIXTURES / "legacy"
LOG = "server/data/conversation/poke_conversation.log"
MEMORY = "server/data/conversation/poke_working_memory.log"


def imported(source: Path, store_dir: Path, **kwargs: Any) -> tuple[ImportReport, Store, Session]:
    report = import_openpoke(source, store_dir, **kwargs)
    store = Store(store_dir)
    assert report.interaction_session is not None
    return report, store, store.load_session(report.interaction_session)


def root_of(session: Session) -> Context:
    return session.contexts[session.state_data["_openpoke"]["root_context_id"]]


def files(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``root``: its bytes and modification time (ns). The catalog and
    the save locks (``.soapwb-saves/``) are the workbench's own, not the store's."""
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file() and not is_catalog_file(p) and SAVE_LOCKS_DIR not in p.parts
    }


def copy_of(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / source.name
    shutil.copytree(source, target)
    return target


# -- reading ------------------------------------------------------------------------------


def test_the_short_log_reads_15_entries_covering_all_four_tags() -> None:
    data = read_openpoke(SHORT)
    assert data.data_dir == (SHORT / "server" / "data").resolve()
    assert len(data.entries) == 15 and data.skipped() == []
    assert {e.tag for e in data.entries} == {"user_message", "poke_reply", "agent_message", "wait"}
    assert [e.index for e in data.entries] == list(range(15))
    assert data.entries[12].text == "sent to Dana ✔"
    assert "Dana Whitfield <dana@northwind.io>:\n1. 2025-06-06" in data.entries[2].text
    assert data.timezone == "America/New_York"
    assert data.working_memory is not None and data.working_memory.last_index == -1
    assert len(data.working_memory.entries) == 15 and not data.working_memory.has_summary


def test_the_long_log_reads_112_entries_and_a_summary_of_the_first_100() -> None:
    data = read_openpoke(LONG / "server" / "data")  # the data dir itself is accepted too
    memory = data.working_memory
    assert len(data.entries) == 112
    assert memory is not None
    assert (memory.last_index, len(memory.entries)) == (99, 12)
    assert memory.updated_at == datetime(2025, 6, 11, 4, 1, 33, 204117, tzinfo=UTC)
    assert memory.summary.startswith(
        "Summary generated: 2025-06-10 23:01 (user timezone)\n\nTimeline & Commitments:"
    )
    assert "invoice #4471 <overdue> & reminder" in memory.summary
    assert [(e.tag, e.text) for e in memory.entries] == [(e.tag, e.text) for e in data.entries[100:]]
    assert data.roster == ("Dana Offsite Emails", "Priya Contract", "Marcus Dinner")
    [agent] = data.execution_logs
    assert (agent.slug, agent.name, len(agent.log.entries)) == (
        "dana-offsite-emails",
        "Dana Offsite Emails",
        8,
    )


def test_the_legacy_log_is_skipped_except_the_replies_line_that_openpokes_parser_accepts() -> None:
    """FORMATS.md §2.9 says every legacy line is skipped; OpenPoke's ``_parse_line`` in fact
    accepts ``<replies>…</replies>`` (no space in the tag, so the closing tag matches) as an
    entry with tag ``replies`` and no timestamp. We count it as OpenPoke does."""
    data = read_openpoke(LEGACY)
    assert [(s.line, s.text) for s in data.skipped()] == [
        (1, "<user message>sup</user message>"),
        (2, "<agent message>hey! what's good?</agent message>"),
    ]
    assert all("legacy tag format" in s.reason for s in data.skipped())
    [entry] = data.entries
    assert (entry.index, entry.tag, entry.timestamp, entry.text, entry.line) == (
        0,
        "replies",
        "",
        "hey! what's good?",
        3,
    )
    assert data.conversation.legacy_lines == (3,)
    assert data.legacy_history == 2
    assert any("chat_history.json" in n and "not imported" in n for n in data.notices)
    assert data.timezone == "Asia/Calcutta"


def test_entry_indices_count_only_the_lines_that_parse() -> None:
    text = (
        format_line("user_message", "one", "2025-01-01 10:00:00")
        + "garbage\n"
        + "\n"
        + '<user_message timestamp="2025-01-01 10:00:01">x</poke_reply>\n'
        + "<wait>no closing\n"
        + format_line("poke_reply", "two", "2025-01-01 10:00:02")
    )
    log = parse_log(text, "conversation/poke_conversation.log")
    assert [(e.index, e.text, e.line) for e in log.entries] == [(0, "one", 1), (1, "two", 6)]
    assert [(s.line, s.reason) for s in log.skipped] == [
        (2, "does not start with '<', so it is not a record"),
        (3, "blank line"),
        (4, "closing tag </poke_reply> does not match the opening tag <user_message>"),
        (5, "no closing tag ('</' is missing)"),
    ]
    assert (
        log.skipped[0].describe()
        == "conversation/poke_conversation.log:2: does not start with '<', so it is not a record"
    )


def test_a_payload_holding_a_splitlines_break_is_lost_and_both_fragments_are_reported() -> None:
    """OpenPoke's writer escapes only \\r and \\n, but its reader splits with str.splitlines,
    which also breaks at U+2028: the record falls apart into two unparseable lines."""
    text = format_line("user_message", "before\u2028after", "2025-01-01 10:00:00") + format_line(
        "poke_reply", "ok", "2025-01-01 10:00:01"
    )
    log = parse_log(text, "log")
    assert [(e.index, e.tag, e.line) for e in log.entries] == [(0, "poke_reply", 2)]
    assert [s.line for s in log.skipped] == [1, 1]
    assert all("U+2028" in s.reason for s in log.skipped)


_SPLITLINES_ONLY = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_PIECES = [
    "\\",
    "n",
    "\\n",
    "\n",
    "\r",
    "\r\n",
    "&",
    "<",
    ">",
    "&amp;",
    "&lt;",
    "</",
    '"',
    "'",
    "C:\\new",
    " ",
    "\t",
]
texts = st.lists(
    st.one_of(
        st.sampled_from(_PIECES),
        st.text(
            st.characters(blacklist_categories=("Cs",), blacklist_characters=_SPLITLINES_ONLY), max_size=6
        ),
    ),
    max_size=24,
).map("".join)
tags = st.sampled_from(["user_message", "poke_reply", "agent_message", "wait"])


def openpoke_encoded(text: str) -> str:
    """FORMATS.md §2.2, written out independently of the importer."""
    normalized = text.replace("\r\n", "\n").replace("\r", "\n")
    return html.escape(normalized.replace("\n", "\\n"), quote=False)


def lossy_expected(text: str) -> str:
    """What OpenPoke reads back: newlines normalized, and every literal backslash-n of the
    original text turned into a newline too (the documented loss)."""
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\\n", "\n")


@settings(max_examples=300, deadline=None)
@given(entries=st.lists(st.tuples(tags, texts), max_size=8))
def test_a_log_written_with_openpokes_escaping_reads_back_to_the_same_entries(
    entries: list[tuple[str, str]],
) -> None:
    lines = [
        f'<{tag} timestamp="2025-06-09 08:41:{i:02d}">{openpoke_encoded(text)}</{tag}>\n'
        for i, (tag, text) in enumerate(entries)
    ]
    assert lines == [
        format_line(tag, text, f"2025-06-09 08:41:{i:02d}") for i, (tag, text) in enumerate(entries)
    ]
    log = parse_log("".join(lines), "log")
    assert log.skipped == ()
    assert [(e.index, e.tag, e.timestamp, e.text) for e in log.entries] == [
        (i, tag, f"2025-06-09 08:41:{i:02d}", lossy_expected(text)) for i, (tag, text) in enumerate(entries)
    ]


def test_the_backslash_n_loss_is_openpokes() -> None:
    [entry] = parse_log(format_line("user_message", "dir C:\\new\\x", "2025-01-01 00:00:00"), "log").entries
    assert entry.text == "dir C:\new\\x"


# -- into the workbench's model -----------------------------------------------------------


def test_the_interaction_session_holds_every_entry_with_its_tag_role_and_visibility(tmp_path: Path) -> None:
    report, _, session = imported(SHORT, tmp_path / "store")
    root = root_of(session)
    assert session.role == "OpenPokeInteraction" and session.active_context_id == root.id
    assert session.state_data["_soapwb_source"] == "openpoke"
    assert session.state_data["_openpoke"]["timezone"] == "America/New_York"
    assert len(root.messages) == 15 == report.entries
    roles = {m.metadata["openpoke"]["tag"]: (m.role, m.metadata["openpoke"]["hidden"]) for m in root.messages}
    assert roles == {
        "user_message": ("user", False),
        "poke_reply": ("assistant", False),
        "agent_message": ("user", True),
        "wait": ("assistant", True),
    }
    first = root.messages[0]
    assert first.metadata == {
        "openpoke": {"tag": "user_message", "index": 0, "timestamp": "2025-06-09 08:41:05", "hidden": False}
    }
    assert first.text().startswith("morning! what's on my calendar")
    assert [m.metadata["openpoke"]["index"] for m in root.messages] == list(range(15))


def test_timestamps_keep_their_meaning_local_naive_entries_and_utc_records(tmp_path: Path) -> None:
    report, store, session = imported(LONG, tmp_path / "store")
    root = root_of(session)
    assert root.messages[0].creation_timestamp == "2025-06-09T08:41:05"  # naive, New York wall clock
    assert root.messages[0].created_at is not None and root.messages[0].created_at.tzinfo is None
    summary = session.active_context.messages[0]
    assert summary.metadata["openpoke"]["updated_at"] == "2025-06-11T04:01:33.204117+00:00"
    assert summary.creation_timestamp == "2025-06-11T00:01:33.204117"  # the same instant, local (EDT)
    first_turn = min(read_invocations(store.find(session.uuid).path), key=lambda r: r.started_at)
    assert first_turn.started_at == "2025-06-09T12:41:05+00:00"  # records are UTC, as the runtime's
    assert report.timezone == "America/New_York"


def test_the_summary_is_the_first_message_of_an_active_fork_of_the_full_log(tmp_path: Path) -> None:
    report, _, session = imported(LONG, tmp_path / "store")
    root, fork = root_of(session), session.active_context
    assert report.summary is not None and report.summary.context_id == fork.id
    assert (report.summary.last_index, report.summary.unsummarised) == (99, 12)
    assert len(root.messages) == 112 and root.origin_context_id is None
    assert fork.origin_context_id == root.id and fork.id in root.children
    first = next(m for m in fork.messages if not m.is_special)
    assert first.metadata["openpoke"]["tag"] == SUMMARY_TAG
    assert first.metadata["openpoke"]["last_index"] == 99
    assert first.text().startswith("Summary generated:")
    assert [m.id for m in fork.messages[1:]] == [m.id for m in root.messages[100:]]
    assert fork.parent_mutation_counter == 3 + 100  # the root right after entry 99
    kinds = {node.id: (node.kind, node.active) for node in fork_tree(session)}
    assert kinds == {root.id: ("root", False), fork.id: ("fork", True)}


def test_each_execution_agent_is_a_session_linked_by_invocation_records(tmp_path: Path) -> None:
    report, store, session = imported(LONG, tmp_path / "store")
    agent = store.load_session(report.execution_sessions["Dana Offsite Emails"])
    context = agent.active_context
    assert agent.role == "OpenPokeExecution"
    assert [(m.role, m.metadata["openpoke"]["tag"]) for m in context.messages] == [
        ("user", "agent_request"),
        ("assistant", "agent_action"),
        ("tool_result", "tool_response"),
        ("assistant", "agent_response"),
    ] * 2
    [call] = context.messages[1].tool_uses()
    [result] = context.messages[2].tool_results()
    assert (call.name, result.call_id) == ("task_email_search", call.call_id)
    assert call.parsed_arguments() == {"query": "from:dana offsite newer_than:14d"}

    [first, second] = invocation_chain(store, agent.uuid)
    assert first.invocation is not None and second.invocation is not None
    assert (first.invocation.caller_session, first.invocation.context_id) == (
        session.uuid,
        root_of(session).id,
    )
    assert [first.invocation.message_index, second.invocation.message_index] == [
        1,
        5,
    ]  # entries at or before T
    [turn] = first.callers  # the turn of the user_message at entry 0 (08:41:05 in New York)
    assert (turn.role, turn.session, turn.started_at) == (
        "OpenPokeInteraction",
        session.uuid,
        "2025-06-09T12:41:05+00:00",
    )
    assert first.invocation.outcome == "ok"
    assert first.invocation.started_at == "2025-06-09T12:41:09+00:00"
    assert first.invocation.ended_at == "2025-06-09T12:41:47+00:00"

    turns = invocation_chain(store, session.uuid)
    assert len(turns) == sum(
        1 for e in read_openpoke(LONG).entries if e.tag in ("user_message", "agent_message")
    )
    handed = [t for t in turns if t.callees]
    assert [[c.session for c in t.callees] for t in handed] == [[agent.uuid], [agent.uuid]]


def test_soapwb_trace_shows_the_hand_off(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report, _, session = imported(LONG, tmp_path / "store")
    agent = report.execution_sessions["Dana Offsite Emails"]
    capsys.readouterr()
    assert main(["trace", agent, "--store", str(tmp_path / "store")]) == 0
    out = capsys.readouterr().out
    # each hand-off once, at depth 1 under the turn that made it, marked as this session's
    assert f">   1   OpenPokeExecution/{agent}  [called from OpenPokeInteraction/{session.uuid}" in out
    assert "message 1]" in out and "message 5]" in out


# -- idempotence --------------------------------------------------------------------------


def test_importing_the_same_dir_again_changes_no_file(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    import_openpoke(LONG, store_dir)
    before = files(store_dir)
    time.sleep(0.01)
    again = import_openpoke(LONG, store_dir)
    assert files(store_dir) == before
    assert not again.changed and [s.status for s in again.sessions] == ["unchanged", "unchanged"]
    assert again.invocations == 58 and again.invocations_written == 0


def test_an_import_after_the_log_grew_appends_only_the_new_entries(tmp_path: Path) -> None:
    source, store_dir = copy_of(SHORT, tmp_path), tmp_path / "store"
    _, _, session = imported(source, store_dir)
    old_ids = [m.id for m in root_of(session).messages]
    new_lines = format_line("user_message", "thanks!\nalso: lunch?", "2025-06-09 09:00:00") + format_line(
        "poke_reply", "anytime", "2025-06-09 09:00:03"
    )
    for name in (LOG, MEMORY):
        with (source / name).open("a", encoding="utf-8") as handle:
            handle.write(new_lines)
    report, _, session = imported(source, store_dir)
    [written] = report.sessions
    assert (written.status, written.messages, written.appended, written.rewritten_from) == (
        "updated",
        17,
        2,
        None,
    )
    root = root_of(session)
    assert [m.id for m in root.messages[:15]] == old_ids
    assert [m.text() for m in root.messages[15:]] == ["thanks!\nalso: lunch?", "anytime"]
    assert report.invocations_written == 1  # the new turn; the earlier turns are as they were


def test_a_log_that_changed_in_the_middle_is_rebuilt_from_the_first_difference(tmp_path: Path) -> None:
    source, store_dir = copy_of(SHORT, tmp_path), tmp_path / "store"
    import_openpoke(source, store_dir)
    log = source / LOG
    log.write_text(log.read_text("utf-8").replace(">on it<", ">on it!<"), "utf-8")
    [written] = import_openpoke(source, store_dir).sessions
    assert (written.status, written.appended, written.rewritten_from) == ("updated", 10, 5)


# -- materialize --------------------------------------------------------------------------

EXPECTED_AT_SEND_IT = """<conversation_history>
<user_message timestamp="2025-06-09 08:41:05">morning! what's on my calendar email-wise today? anything from Dana about the Q3 offsite?</user_message>
<poke_reply timestamp="2025-06-09 08:41:09">morning. digging through your inbox for Dana + offsite stuff now</poke_reply>
<agent_message timestamp="2025-06-09 08:41:47">[SUCCESS] Dana Offsite Emails: Found 2 relevant emails from Dana Whitfield &lt;dana@northwind.io&gt;:
1. 2025-06-06 16:12 "Q3 offsite - venue shortlist" - asks you to pick between Lakehouse Retreat (Jul 17-18, $14,200) and Cedar Hall (Jul 24-25, $11,950) by Wed Jun 11.
2. 2025-06-08 09:30 "Re: offsite headcount" - needs final headcount (she has 23 confirmed) &amp; dietary list.</agent_message>
<poke_reply timestamp="2025-06-09 08:41:52">Dana needs two things from you:
- pick a venue by Wed: Lakehouse (Jul 17-18, $14.2k) or Cedar Hall (Jul 24-25, ~$12k)
- final headcount (23 so far) + dietary list
want me to draft a reply?</poke_reply>
<user_message timestamp="2025-06-09 08:42:53">cedar hall. headcount 25, I'll send dietary stuff thursday. draft it</user_message>
<poke_reply timestamp="2025-06-09 08:42:56">on it</poke_reply>
<agent_message timestamp="2025-06-09 08:43:25">[SUCCESS] Dana Offsite Emails: Draft created in thread "Q3 offsite - venue shortlist".
To: dana@northwind.io
Subject: Re: Q3 offsite - venue shortlist

Hi Dana,

Let's go with Cedar Hall (Jul 24-25). Final headcount is 25 - dietary list coming Thursday.

Thanks!
Alex</agent_message>
<poke_reply timestamp="2025-06-09 08:43:29">To: dana@northwind.io
Subject: Re: Q3 offsite - venue shortlist

Hi Dana,

Let's go with Cedar Hall (Jul 24-25). Final headcount is 25 - dietary list coming Thursday.

Thanks!
Alex</poke_reply>
<poke_reply timestamp="2025-06-09 08:43:30">draft's ready - send as is?</poke_reply>
</conversation_history>

<active_agents>
None
</active_agents>

<new_user_message>
send it
</new_user_message>"""

OPENPOKE_TOOLS = [
    ("send_message_to_agent", ["agent_name", "instructions"]),
    ("send_message_to_user", ["message"]),
    ("send_draft", ["to", "subject", "body"]),
    ("wait", ["reason"]),
]


def test_the_request_at_the_third_user_message_of_the_short_log_is_exactly_openpokes(tmp_path: Path) -> None:
    _, _, session = imported(SHORT, tmp_path / "store")
    root = root_of(session)
    third = [i for i, m in enumerate(root.messages) if m.metadata["openpoke"]["tag"] == "user_message"][2]
    found = materialize(session, root, third)  # replay's materialize dispatches to OpenPoke's
    assert third == 9
    assert found.request == {
        "model": "anthropic/claude-sonnet-4",
        "messages": [
            {"role": "system", "content": PLACEHOLDER_PROMPT},
            {"role": "user", "content": EXPECTED_AT_SEND_IT},
        ],
        "stream": False,
        "tools": [tool_schema(t) for t in INTERACTION_TOOLS],
    }
    assert [
        (t["function"]["name"], t["function"]["parameters"]["required"]) for t in found.request["tools"]
    ] == OPENPOKE_TOOLS
    assert [m.message_type for m in found.messages] == [
        "SystemPromptMessage",
        "ToolDefinitionsMessage",
        "Message",
    ]
    assert found.parameters == {"model": "anthropic/claude-sonnet-4", "stream": False}
    assert (found.context_id, found.index, found.message_id) == (
        root.id,
        10,
        root.messages[10].id,
    )  # "sending"
    assert any("[OpenPoke system prompt not available: pass --openpoke-root]" in n for n in found.notes)
    assert any("no summary existed when entry 9 arrived" in n for n in found.notes)


def test_the_summary_is_in_the_history_only_for_entries_that_arrived_after_it(tmp_path: Path) -> None:
    """Entry 105 comes after last_index 99 but before updated_at (04:01:33 UTC = 00:01:33 in
    New York); entry 109 triggered the summarisation; only entry 111 saw the summary."""
    _, _, session = imported(LONG, tmp_path / "store")
    root = root_of(session)

    def content(index: int) -> str:
        text = materialize(session, root, index).request["messages"][1]["content"]
        assert isinstance(text, str)
        return text

    after = content(111)
    assert after.startswith(
        "<conversation_history>\n<conversation_summary>Summary generated: 2025-06-10 23:01 (user timezone)\n\nTimeline &amp; Commitments:"
    )
    assert after.count("timestamp=") == 11  # entries 100..110
    assert '<poke_reply timestamp="2025-06-10 23:01:04">checking for Zoe\'s reply</poke_reply>' in after
    assert (
        '<agent name="Dana Offsite Emails" />\n<agent name="Priya Contract" />\n<agent name="Marcus Dinner" />'
        in after
    )
    assert after.endswith(
        "<new_user_message>\ndid Iris ever get back to me about the translation quote?\n</new_user_message>"
    )
    for before in (105, 109):
        text = content(before)
        assert "<conversation_summary>" not in text
        assert text.count("timestamp=") == before  # every entry before it
    memory = working_memory_at(session, 111)
    assert memory.summary is not None and [e.index for e in memory.entries] == list(range(100, 111))
    # the active context is the summary fork: materializing its copy of entry 111 gives the same request
    assert materialize(session, None, -1).request == materialize(session, root, 111).request


def test_an_agent_message_becomes_a_new_agent_message_block(tmp_path: Path) -> None:
    _, _, session = imported(SHORT, tmp_path / "store")
    found = materialize(session, root_of(session), 13)
    content = found.request["messages"][1]["content"]
    assert content.endswith(
        "<new_agent_message>\n[SUCCESS] Dana Offsite Emails: Draft sent (message id 18f4c2a7be90d1c3) to dana@northwind.io.\n</new_agent_message>"
    )
    assert found.index == 14 and "wait" in root_of(session).messages[14].metadata["openpoke"]["tag"]


def test_only_user_and_agent_messages_can_be_materialized(tmp_path: Path) -> None:
    report, store, session = imported(LONG, tmp_path / "store")
    with pytest.raises(
        MaterializeError,
        match=r"entry 1, a poke_reply: only user_message and agent_message .*turn of entry 0",
    ):
        materialize(session, root_of(session), 1)
    with pytest.raises(MaterializeError, match="conversation_summary"):
        materialize(session, None, 0)
    with pytest.raises(MaterializeError, match="an OpenPoke request exists only for an entry that arrived"):
        materialize(session, root_of(session), 112)
    agent = store.load_session(report.execution_sessions["Dana Offsite Emails"])
    with pytest.raises(MaterializeError, match="execution agent's agent_request"):
        materialize(agent, None, 0)


def test_an_openpoke_checkout_supplies_the_system_prompt_and_tools(tmp_path: Path) -> None:
    checkout = tmp_path / "OpenPoke"
    agent_dir = checkout / "server" / "agents" / "interaction_agent"
    agent_dir.mkdir(parents=True)
    (agent_dir / "system_prompt.md").write_text("\n  You are Poke.\n\n", "utf-8")
    schema = {
        "type": "function",
        "function": {"name": "wait", "description": "d", "parameters": {"type": "object"}},
    }
    (agent_dir / "tools.py").write_text(f"import json\nTOOL_SCHEMAS = [{schema!r}]\n", "utf-8")
    _, _, session = imported(SHORT, tmp_path / "store", openpoke_root=checkout)
    found = materialize(session, root_of(session), 0)
    assert found.request["messages"][0] == {"role": "system", "content": "You are Poke."}
    assert found.request["tools"] == [schema]
    assert any(str(agent_dir / "system_prompt.md") in n for n in found.notes)
    _, _, session = imported(SHORT, tmp_path / "store")  # an import without it keeps the checkout
    assert session.state_data["_openpoke"]["openpoke_root"] == str(checkout.resolve())
    with pytest.raises(
        MaterializeError, match=re.escape("no server/agents/interaction_agent/system_prompt.md")
    ):
        materialize_entry(session, root_of(session), 0, openpoke_root=tmp_path)


def test_the_two_tracks_at_an_entry(tmp_path: Path) -> None:
    _, _, session = imported(SHORT, tmp_path / "store")
    tracks = tracks_at(session, 4)
    assert [line.number for line in tracks.raw_lines] == [1, 2, 3, 4, 5]
    assert tracks.raw_lines[-1].entry_index == 4
    assert tracks.raw_lines[-1].text.startswith('<user_message timestamp="2025-06-09 08:42:53">cedar hall')
    assert tracks.raw_lines_source.endswith("poke_conversation.log")
    assert [e.index for e in tracks.working_memory.entries] == [0, 1, 2, 3]
    assert tracks.working_memory.summary is None
    assert tracks.working_memory.transcript.count("\n") > 3  # real newlines in the multi-line entries


# -- replay -------------------------------------------------------------------------------


def test_replaying_an_early_entry_against_the_local_model_gives_a_diffable_run(
    tmp_path: Path, llm_server: LocalModelServer
) -> None:
    store_dir = tmp_path / "store"
    _, store, session = imported(SHORT, store_dir)
    root = root_of(session)
    found = materialize(session, root, 0)
    original = root.messages[found.index]
    assert (found.index, original.metadata["openpoke"]["tag"]) == (1, "poke_reply")
    [run] = replay(store, session, found, LLMEndpoint(llm_server.base_url), Overrides(max_tokens=32))
    assert run.ok, run.error
    assert (
        run.request["messages"] == found.request["messages"]
        and run.request["tools"] == found.request["tools"]
    )
    assert run.request["max_tokens"] == 32
    diff = diff_outputs(Output.of(original), Output.of(run.output, run.usage, run.latency_s))
    assert 0.0 <= diff.distance <= 1.0
    left = " ".join(words for op, words in diff.words if op != "insert")
    right = " ".join(words for op, words in diff.words if op != "delete")
    assert left == "morning. digging through your inbox for Dana + offsite stuff now"  # the original reply
    assert right == " ".join(run.output.text().split())
    # the run is a fork of the imported root, and importing again leaves it (and every file) alone
    session = store.load_session(session.uuid)
    assert session.contexts[run.fork_id].origin_context_id == root.id
    before = files(store_dir)
    assert not import_openpoke(SHORT, store_dir).changed
    assert files(store_dir) == before


# -- the command line ---------------------------------------------------------------------


class Result(NamedTuple):
    code: int
    out: str
    err: str


@pytest.fixture
def soapwb(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    def run(*argv: str) -> Result:
        capsys.readouterr()
        code = main(list(argv))
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


def test_soapwb_import_openpoke_reports_what_it_read_and_wrote(
    soapwb: Callable[..., Result], tmp_path: Path
) -> None:
    store = str(tmp_path / "store")
    first = soapwb("import", "openpoke", str(LONG), "--store", store)
    assert (first.code, first.err) == (0, "")
    assert "conversation log: 112 entries, 0 lines skipped" in first.out
    assert "summary of entries 0..99" in first.out and "12 unsummarised entries" in first.out
    assert "created   OpenPokeInteraction/" in first.out and "112 messages (112 new)" in first.out
    assert "summary fork: context " in first.out
    again = soapwb("import", "openpoke", str(LONG), "--store", store)
    assert again.code == 0 and "nothing changed (already imported)" in again.out
    legacy = soapwb("import", "openpoke", str(LEGACY), "--store", store)
    assert "conversation/poke_conversation.log:1: legacy tag format <user message>" in legacy.out
    assert "chat_history.json" in legacy.out


def test_soapwb_import_openpoke_json_is_the_report(soapwb: Callable[..., Result], tmp_path: Path) -> None:
    result = soapwb("import", "openpoke", str(LONG), "--store", str(tmp_path / "store"), "--json")
    assert result.code == 0
    report = json.loads(result.out)
    assert (report["entries"], report["summary"]["last_index"], report["summary"]["unsummarised"]) == (
        112,
        99,
        12,
    )
    assert [s["status"] for s in report["sessions"]] == ["created", "created"]
    assert report["execution_agents"] == {"Dana Offsite Emails": 8}
    assert report["changed"] is True


@pytest.mark.parametrize("problem", ["missing", "not openpoke", "not utf-8", "log is a folder", "a file"])
def test_a_missing_or_garbled_dir_is_one_error_line(
    soapwb: Callable[..., Result], tmp_path: Path, problem: str
) -> None:
    data = tmp_path / "data"
    if problem == "not openpoke":
        data.mkdir()
        (data / "notes.txt").write_text("hello")
    elif problem == "not utf-8":
        (data / "conversation").mkdir(parents=True)
        (data / "conversation" / "poke_conversation.log").write_bytes(
            b'<user_message timestamp="x">\xff\xfe</user_message>\n'
        )
    elif problem == "log is a folder":
        (data / "conversation" / "poke_conversation.log").mkdir(parents=True)
    elif problem == "a file":
        data.write_text("not a directory")
    result = soapwb("import", "openpoke", str(data), "--store", str(tmp_path / "store"))
    assert result.code == 1 and result.out == ""
    lines = result.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("soapwb: error: ") and "Traceback" not in result.err
    with pytest.raises(ImporterError):
        import_openpoke(data, tmp_path / "store")


def test_soapwb_import_without_a_store_is_a_usage_error(
    soapwb: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SOAPWB_STORE", raising=False)
    result = soapwb("import", "openpoke", str(SHORT))
    assert result.code == 2 and "no store given" in result.err
