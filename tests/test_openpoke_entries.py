"""OpenPoke entries in time and by number: a DST fall-back's repeated hour read by the
log's order, the roster as it stood at each entry, the request's exact top-level keys,
and ``soapwb materialize``/``replay`` addressing entries and taking ``--openpoke-root``.

Every data dir here is written by the test in OpenPoke's shapes (FORMATS.md §2), as
OpenPoke's writers lay them out (``ConversationLog._append``, ``WorkingMemoryLog.
write_summary_state``, ``ExecutionAgentLogStore._append``, ``AgentRoster.save``)."""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import NamedTuple

import pytest

from importers.openpoke import import_openpoke, materialize_entry, read_openpoke, working_memory_at
from local_model import LocalModelServer
from replay import materialize
from soap_core import Context, Session, Store, read_calls
from soap_core.runtime import invocation_chain, read_invocations
from soapwb.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
LONG = FIXTURES / "openpoke" / "long"
SOAP_STORE = FIXTURES / "soap"
HELLO_PETE = "20250611-3f0c2b6e-8a41-4d8e-9c1a-5b7d2e9f4a10"

Entry = tuple[str, str, str]
"""(tag, local timestamp, text)."""


def line(tag: str, timestamp: str | None, text: str) -> str:
    """One record as OpenPoke writes it (FORMATS.md §2.2), written out independently."""
    payload = html.escape(text.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "\\n"), quote=False)
    return (
        f'<{tag} timestamp="{timestamp}">{payload}</{tag}>\n' if timestamp else f"<{tag}>{payload}</{tag}>\n"
    )


def write_data_dir(
    root: Path,
    entries: list[Entry],
    *,
    timezone: str = "America/New_York",
    summary: tuple[int, str, str] | None = None,
    execution: dict[str, list[Entry]] | None = None,
    roster: list[str] | None = None,
) -> Path:
    """A ``server/data`` dir: the log, the working memory (``summary`` = (last_index,
    updated_at, text), else the initial state mirroring every entry), the execution
    logs by slug, ``roster.json`` and ``timezone.txt``."""
    data = root / "server" / "data"
    (data / "conversation").mkdir(parents=True)
    (data / "timezone.txt").write_text(timezone, "utf-8")
    (data / "conversation" / "poke_conversation.log").write_text("".join(line(*e) for e in entries), "utf-8")
    last_index, updated_at, text = summary or (-1, None, "")
    memory = [
        line("summary_info", None, json.dumps({"last_index": last_index, "updated_at": updated_at})),
        line("conversation_summary", None, text),
        *(line(*e) for e in entries[last_index + 1 :]),
    ]
    (data / "conversation" / "poke_working_memory.log").write_text("".join(memory), "utf-8")
    if execution is not None or roster is not None:
        (data / "execution_agents").mkdir()
        for slug, journal in (execution or {}).items():
            (data / "execution_agents" / f"{slug}.log").write_text(
                "".join(line(*e) for e in journal), "utf-8"
            )
        (data / "execution_agents" / "roster.json").write_text(json.dumps(roster or [], indent=2), "utf-8")
    return root


def imported(source: Path, store_dir: Path) -> tuple[Store, Session, Context]:
    report = import_openpoke(source, store_dir)
    assert report.interaction_session is not None
    store = Store(store_dir)
    session = store.load_session(report.interaction_session)
    return store, session, session.contexts[session.state_data["_openpoke"]["root_context_id"]]


def content_at(session: Session, root: Context, entry: int) -> str:
    text = materialize(session, root, entry).request["messages"][-1]["content"]
    assert isinstance(text, str)
    return text


def agents_block(content: str) -> str:
    return content.split("<active_agents>\n", 1)[1].split("\n</active_agents>", 1)[0]


class Result(NamedTuple):
    code: int
    out: str
    err: str


@pytest.fixture
def soapwb(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    def run(*argv: str) -> Result:
        capsys.readouterr()
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse refusing an option
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


# -- a DST fall-back's repeated hour --------------------------------------------------------
#
# 2025-11-02 in New York: 01:00-02:00 happens twice, first EDT (UTC-4), then EST (UTC-5).
# Entries 0..97 on the day before; 98..109 in the first pass (01:00..01:44 EDT); the
# summary of 0..99 written at 06:10:30 UTC, that is 01:10:30 EST, in the second pass;
# then entry 110 at 01:05 EST (the clock went back) and 111 at 01:15 EST, after it.

SUMMARY_AT = "2025-11-02T06:10:30.250000+00:00"
SUMMARY_TEXT = "Summary generated: 2025-11-02 01:10 (user timezone)\n\nTimeline & Commitments:\n- No items."


def fall_back_log() -> list[Entry]:
    entries: list[Entry] = []
    day_before = datetime(2025, 11, 1, 10, 0, 0)
    for i in range(98):
        stamp = (day_before + timedelta(minutes=i)).strftime("%Y-%m-%d %H:%M:%S")
        entries.append(("user_message" if i % 2 == 0 else "poke_reply", stamp, f"entry {i}"))
    for i in range(98, 110):
        stamp = (datetime(2025, 11, 2, 1, 0, 0) + timedelta(minutes=4 * (i - 98))).strftime(
            "%Y-%m-%d %H:%M:%S"
        )
        entries.append(("user_message" if i % 2 == 0 else "poke_reply", stamp, f"entry {i}"))
    entries.append(("user_message", "2025-11-02 01:05:00", "entry 110, the second 01:05"))
    entries.append(("user_message", "2025-11-02 01:15:00", "entry 111, after the summary"))
    return entries


@pytest.fixture
def fall_back(tmp_path: Path) -> Path:
    return write_data_dir(
        tmp_path / "OpenPoke",
        fall_back_log(),
        summary=(99, SUMMARY_AT, SUMMARY_TEXT),
        execution={
            "calendar-check": [
                ("agent_request", "2025-11-02 01:41:00", "check the calendar"),
                ("agent_response", "2025-11-02 01:42:00", "nothing today"),
            ]
        },
        roster=["Calendar Check"],
    )


def test_a_time_that_goes_back_inside_the_repeated_hour_is_read_as_the_second_pass_from_there_on(
    fall_back: Path,
) -> None:
    data = read_openpoke(fall_back)
    folds = [(e.index, e.fold) for e in data.entries[97:]]
    assert folds == [(97, 0), *((i, 0) for i in range(98, 110)), (110, 1), (111, 1)]
    assert data.working_memory is not None
    assert [e.fold for e in data.working_memory.entries] == [0] * 10 + [1, 1]  # the tail, 100..111
    conversation, journal = [n for n in data.notices if "repeats when DST ends" in n]
    assert conversation.startswith("conversation/poke_conversation.log: 14 entries (line 99-112)")
    assert "2 of them in the second pass (EST, from line 111: the time goes back there)" in conversation
    assert journal.startswith("execution_agents/calendar-check.log: 2 entries")
    assert "all read as the first pass (EDT): no time goes back" in journal


def test_entries_in_the_repeated_hour_after_a_summary_written_in_it_see_the_summary(
    fall_back: Path, tmp_path: Path
) -> None:
    """Without the log's order, 01:15 would be read as EDT (05:15 UTC), before the summary
    written at 06:10:30 UTC, and entry 111's request would lose the summary."""
    _, session, root = imported(fall_back, tmp_path / "store")
    after = content_at(session, root, 111)
    assert after.startswith(
        "<conversation_history>\n<conversation_summary>Summary generated: 2025-11-02 01:10"
    )
    assert after.count("timestamp=") == 11  # entries 100..110
    memory = working_memory_at(session, 111)
    assert memory.summary is not None and [e.index for e in memory.entries] == list(range(100, 111))
    before = content_at(session, root, 110)  # 01:05 EST = 06:05 UTC: before the summary
    assert "<conversation_summary>" not in before and before.count("timestamp=") == 110
    assert root.messages[111].metadata["openpoke"]["fold"] == 1
    assert "fold" not in root.messages[109].metadata["openpoke"]


def test_records_and_hand_offs_in_the_repeated_hour_are_placed_by_instant_not_by_wall_clock(
    fall_back: Path, tmp_path: Path
) -> None:
    """The agent_request at 01:41 (first pass, EDT) came after entry 108 (01:40 EDT) and
    before entry 109; compared as wall-clock text it would land after entry 111 (01:15)."""
    store, session, _ = imported(fall_back, tmp_path / "store")
    turns = {r.callee.message_index: r for r in read_invocations(store.find(session.uuid).path)}
    assert turns[111].started_at == "2025-11-02T06:15:00+00:00"  # EST
    assert turns[108].started_at == "2025-11-02T05:40:00+00:00"  # EDT
    agent = next(s for s in store.sessions() if s.role == "OpenPokeExecution")
    [hand_off] = invocation_chain(store, agent.uuid)
    assert hand_off.invocation is not None and hand_off.invocation.message_index == 108
    assert hand_off.invocation.started_at == "2025-11-02T05:41:00+00:00"
    assert not import_openpoke(fall_back, tmp_path / "store").changed  # the folds are stable


# -- the roster at each entry -----------------------------------------------------------------


@pytest.fixture
def growing_roster(tmp_path: Path) -> Path:
    """Alpha is created in entry 0's turn, Beta in entry 3's; Gamma is in roster.json but
    has no log (its neighbours place it); Delta's first request is logged in the same
    second as entry 5."""
    entries: list[Entry] = [
        ("user_message", "2025-06-09 09:00:00", "find the invoice"),  # 0
        ("poke_reply", "2025-06-09 09:00:04", "looking"),  # 1
        ("agent_message", "2025-06-09 09:00:30", "[SUCCESS] Alpha Invoices: found it"),  # 2
        ("user_message", "2025-06-09 09:05:00", "and the contract?"),  # 3
        ("poke_reply", "2025-06-09 09:05:03", "on it"),  # 4
        ("user_message", "2025-06-09 09:06:00", "and lunch"),  # 5
        ("agent_message", "2025-06-09 09:06:40", "[SUCCESS] Beta Contract: signed"),  # 6
    ]
    execution = {
        "alpha-invoices": [
            ("agent_request", "2025-06-09 09:00:03", "find the invoice"),
            ("agent_response", "2025-06-09 09:00:29", "found it"),
        ],
        "beta-contract": [
            ("agent_request", "2025-06-09 09:05:02", "find the contract"),
            ("agent_response", "2025-06-09 09:06:39", "signed"),
        ],
        "delta-lunch": [("agent_request", "2025-06-09 09:06:00", "book lunch")],
    }
    roster = ["Alpha Invoices", "Beta Contract", "Gamma Unlogged", "Delta Lunch"]
    return write_data_dir(tmp_path / "OpenPoke", entries, execution=execution, roster=roster)


def test_active_agents_are_the_roster_names_added_before_the_entry_in_roster_order(
    growing_roster: Path, tmp_path: Path
) -> None:
    _, session, root = imported(growing_roster, tmp_path / "store")
    assert agents_block(content_at(session, root, 0)) == "None"
    assert agents_block(content_at(session, root, 2)) == '<agent name="Alpha Invoices" />'
    assert agents_block(content_at(session, root, 3)) == agents_block(content_at(session, root, 2))
    assert agents_block(content_at(session, root, 6)) == (
        '<agent name="Alpha Invoices" />\n<agent name="Beta Contract" />\n'
        '<agent name="Gamma Unlogged" />\n<agent name="Delta Lunch" />'
    )
    notes = materialize(session, root, 5).notes
    assert agents_block(content_at(session, root, 5)) == (
        '<agent name="Alpha Invoices" />\n<agent name="Beta Contract" />'
    )
    assert any("rebuilt at entry 5" in n and "2 of the 4" in n for n in notes)
    assert any("same second as entry 5" in n and "'Delta Lunch'" in n for n in notes)
    # Gamma has no log: it joined after Beta and before Delta (roster.json's order), and
    # Delta was first asked in entry 5's second, so at entry 5 it is not known either.
    assert any(
        "not known" in n
        and "'Gamma Unlogged' (no execution_agents/gamma-unlogged.log; a name after it in roster.json" in n
        for n in notes
    ), notes


# -- the request's top-level keys -------------------------------------------------------------


def test_the_request_has_openpokes_top_level_keys_in_its_order_with_stream_false(
    growing_roster: Path, tmp_path: Path
) -> None:
    """``openrouter_client/client.py:request_chat_completion``: model, messages, stream
    (False), then tools."""
    _, session, root = imported(growing_roster, tmp_path / "store")
    found = materialize(session, root, 0)
    assert list(found.request) == ["model", "messages", "stream", "tools"]
    assert found.request["stream"] is False
    assert found.parameters["stream"] is False  # what a replay sends along


# -- the command line: --at N is the entry, --openpoke-root on materialize and replay ------


def test_soapwb_materialize_at_n_is_log_entry_n_although_the_summary_fork_is_active(
    soapwb: Callable[..., Result], tmp_path: Path
) -> None:
    store = str(tmp_path / "store")
    session = import_openpoke(LONG, store).interaction_session
    assert session is not None
    found = soapwb("materialize", session, "--at", "105", "--store", store, "--json")
    assert found.code == 0, found.err
    report = json.loads(found.out)
    assert "OpenPoke interaction request at entry 105 (user_message, 2025-06-10 23:57:33)" in report["notes"]
    assert report["index"] == 106  # the output: entry 106 of the log, as a root display index
    for same in ("entry:105", "message:6"):  # the explicit entry; display index 6 of the active fork
        again = soapwb("materialize", session, "--at", same, "--store", store, "--json")
        assert json.loads(again.out)["request"] == report["request"], same
    shown = json.loads(soapwb("materialize", session, "--at", "4", "--store", store, "--json").out)
    assert shown["notes"][0] == (
        f"--at 4 is log entry 4; message 4 of the active context {Store(store).load_session(session).active_context_id} "
        "(as `soapwb show` numbers it) is entry 103: --at message:4 gives that one"
    )


def test_soapwb_materialize_errors_name_the_entries_that_exist(
    soapwb: Callable[..., Result], tmp_path: Path
) -> None:
    store = str(tmp_path / "store")
    session = import_openpoke(LONG, store).interaction_session
    assert session is not None
    missing = soapwb("materialize", session, "--at", "112", "--store", store)
    assert missing.code == 1
    assert (
        f"no entry 112: session {session} holds entries 0..111 of conversation/poke_conversation.log"
        in missing.err
    )
    reply = soapwb("materialize", session, "--at", "1", "--store", store)
    assert "entry 1, a poke_reply" in reply.err and "materialize that entry (--at 0)" in reply.err
    fork = Store(store).load_session(session).active_context_id
    outside = soapwb("materialize", session, "--context", fork, "--at", "3", "--store", store)
    assert (
        f"entry 3 is not in context {fork}, which holds the summary of entries 0..99 and entries 100..111"
        in (outside.err)
    )
    elsewhere = soapwb("materialize", HELLO_PETE, "--at", "entry:3", "--store", str(SOAP_STORE))
    assert elsewhere.code == 2 and "was not imported from OpenPoke" in elsewhere.err


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A stand-in OpenPoke checkout: only the file materialization reads."""
    root = tmp_path / "checkout"
    prompt = root / "server" / "agents" / "interaction_agent" / "system_prompt.md"
    prompt.parent.mkdir(parents=True)
    prompt.write_text("\nYou are the test's Poke.\n", "utf-8")
    return root


def test_soapwb_materialize_takes_openpoke_root_and_sends_that_checkouts_system_prompt(
    soapwb: Callable[..., Result], tmp_path: Path, checkout: Path
) -> None:
    store = str(tmp_path / "store")
    session = import_openpoke(LONG, store).interaction_session  # imported without a checkout
    assert session is not None
    result = soapwb(
        "materialize", session, "--at", "0", "--openpoke-root", str(checkout), "--store", store, "--json"
    )
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert report["request"]["messages"][0] == {"role": "system", "content": "You are the test's Poke."}
    assert any("system prompt: read from" in n and str(checkout) in n for n in report["notes"])
    plain = json.loads(soapwb("materialize", session, "--at", "0", "--store", store, "--json").out)
    assert "PLACEHOLDER" in " ".join(plain["notes"])  # for this command only: nothing remembered
    bad = soapwb(
        "materialize", session, "--at", "0", "--openpoke-root", str(tmp_path / "nowhere"), "--store", store
    )
    assert bad.code == 1 and "no such directory" in bad.err
    other = soapwb(
        "materialize", HELLO_PETE, "--at", "-1", "--openpoke-root", str(checkout), "--store", str(SOAP_STORE)
    )
    assert other.code == 2 and "--openpoke-root is for sessions imported from OpenPoke" in other.err


def test_soapwb_replay_takes_openpoke_root_and_an_entry_number(
    soapwb: Callable[..., Result], tmp_path: Path, checkout: Path, llm_server: LocalModelServer
) -> None:
    store = str(tmp_path / "store")
    session = import_openpoke(LONG, store).interaction_session
    assert session is not None  # an early entry: the local model's window is 4096 tokens
    result = soapwb(
        "replay", session, "--at", "4", "--openpoke-root", str(checkout), "--max-tokens", "16",
        "--base-url", llm_server.base_url, "--store", store, "--json",
    )  # fmt: skip
    assert result.code == 0, result.err
    [run] = json.loads(result.out)["runs"]
    assert run["ok"], run["error"]
    [call] = [c for c in read_calls(Store(store).find(session).path) if c.id == run["call_id"]]
    assert list(call.request)[:4] == ["model", "messages", "stream", "tools"]  # OpenPoke's body, then
    assert call.request["stream"] is False and call.request["max_tokens"] == 16  # the replay's override
    assert call.request["messages"][0] == {"role": "system", "content": "You are the test's Poke."}
    assert call.request["messages"][1]["content"].endswith(
        "<new_user_message>\ncedar hall. headcount 25, I'll send dietary stuff thursday. draft it\n</new_user_message>"
    )
    assert call.replay is not None and call.replay["of_index"] == 5  # against entry 5, the reply ("on it")


def test_materialize_entry_keeps_its_signature_for_replays_dispatch(
    growing_roster: Path, tmp_path: Path
) -> None:
    """replay's materialize calls ``materialize_entry(session, context, index)``; None
    means: not an imported entry."""
    _, session, root = imported(growing_roster, tmp_path / "store")
    found = materialize_entry(session, root, 0)
    assert found is not None and found.index == 1
    not_openpoke = Store(SOAP_STORE).load_session(HELLO_PETE, require_active=False)
    assert materialize_entry(not_openpoke, not_openpoke.active_context, 0) is None
