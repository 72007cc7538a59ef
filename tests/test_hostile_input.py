"""Hostile and damaged files, one test per cause the fuzzer found (``python -m fuzz``):
each minimal input either loads or gives the project's typed error naming its file,
the rest of the store stays usable, and ``soapwb`` exits 0, 1 or 2 with UTF-8 output."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from analysis import call_budgets, chain_budget
from fuzz._targets import run_cli
from importers.openpoke import import_openpoke, read_openpoke
from replay import materialize, verify_session
from soap_core import (
    SESSION_FILE,
    ContextNotFoundError,
    FormatError,
    InvocationRecord,
    Party,
    Store,
    fork_tree,
    search_store,
    session_overview,
    write_invocation,
)
from soap_core.runtime import invocation_chain
from tests.conftest import CHILD_ID, PARENT_ID, SESSION_UUID, edit_json, session_dir, snapshot

OPENPOKE = Path(__file__).parent / "fixtures" / "openpoke"
SECOND_UUID = "20250612-9d41c7e2-5b38-4f06-a1d7-3e8c6b2f0a95"


def cli(*argv: str | Path) -> tuple[int, str, str]:
    """``soapwb`` in this process, its stdout written as the POSIX locale writes it
    (``surrogateescape``): the output must still decode as UTF-8."""
    code, out, err = run_cli([str(a) for a in argv])
    return code, out.decode("utf-8"), err.decode("utf-8")


def with_second_session(root: Path) -> Path:
    second = session_dir(root, SECOND_UUID)
    shutil.copytree(session_dir(root), second)
    edit_json(second / SESSION_FILE, lambda d: d.update(uuid=SECOND_UUID))
    return second


def set_message_text(text: str) -> Callable[[Any], None]:
    def change(context: Any) -> None:
        context["messages"][2]["content"][0]["text"] = text

    return change


# -- lone surrogates -------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["show", "materialize", "tokens", "tree"])
def test_a_lone_surrogate_in_a_message_gives_utf8_json_that_reads_back_the_same(
    store_copy: Path, command: str
) -> None:
    edit_json(session_dir(store_copy) / f"{CHILD_ID}.json", set_message_text("before \ud800 after"))
    extra = ["--at", "6"] if command == "materialize" else []  # the next call: every message
    code, out, err = cli(command, SESSION_UUID, *extra, "--store", store_copy, "--json")
    assert code == 0, err
    value = json.loads(out)
    if command in ("show", "materialize"):
        assert "before \ud800 after" in json.dumps(value, ensure_ascii=False)
        assert "\\ud800" in out and "lone surrogate" in err


@pytest.mark.parametrize("use_catalog", [True, False], ids=["catalog", "scan"])
def test_a_lone_surrogate_in_a_thread_id_leaves_ls_listing_every_session(
    store_copy: Path, use_catalog: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not use_catalog:
        monkeypatch.setenv("SOAPWB_NO_CATALOG", "1")
    with_second_session(store_copy)
    edit_json(
        session_dir(store_copy) / SESSION_FILE,
        lambda d: d["state_data"].update(_persistent_thread_id="pete\ud800chat"),
    )
    code, out, err = cli("ls", "--store", store_copy, "--json")
    assert code == 0, err
    rows = {row["uuid"]: row for row in json.loads(out)}
    assert set(rows) == {SESSION_UUID, SECOND_UUID}
    assert rows[SECOND_UUID]["messages"] == 6
    assert cli("ls", "--store", store_copy)[0] == 0  # the table too


def test_a_lone_surrogate_in_message_text_is_indexed_and_searched(store_copy: Path) -> None:
    edit_json(session_dir(store_copy) / f"{CHILD_ID}.json", set_message_text("find me \udcff here"))
    hits = search_store(Store(store_copy), "find me")
    assert [h.context_id for h in hits] == [CHILD_ID]


# -- identifiers that would become paths -----------------------------------------------------

BAD_IDS = {
    "too-long": "a" * 256,
    "traversal": "../../../../etc/passwd",
    "separator": "a/b",
    "dot-dot": "..",
    "surrogate": "x\ud800",
    "nul": "nul\x00",
    "empty": "",
}


@pytest.mark.parametrize("bad", BAD_IDS.values(), ids=BAD_IDS.keys())
def test_an_active_context_id_that_cannot_name_a_file_marks_that_session_only(
    store_copy: Path, bad: str
) -> None:
    with_second_session(store_copy)
    broken = session_dir(store_copy) / SESSION_FILE
    edit_json(broken, lambda d: d.update(active_context_id=bad))
    for store in (Store(store_copy), Store(store_copy, use_catalog=False)):
        rows = {s.path.name: session_overview(store, s) for s in store.sessions()}
        assert rows[SECOND_UUID].error is None and rows[SECOND_UUID].messages == 6
        assert f"{broken}: at $.active_context_id: " in str(rows[SESSION_UUID].error)
    with pytest.raises(FormatError) as caught:
        Store(store_copy).load_session(SESSION_UUID)
    assert (caught.value.path, caught.value.json_path) == (broken, "$.active_context_id")
    assert cli("ls", "--store", store_copy, "--json")[0] == 0


@pytest.mark.parametrize(
    ("key", "bad"),
    [("id", "../x"), ("origin_context_id", "a" * 300), ("children", ["ok", "../../up"])],
)
def test_a_context_whose_ids_cannot_name_a_file_is_a_format_error(
    store_copy: Path, key: str, bad: Any
) -> None:
    path = session_dir(store_copy) / f"{PARENT_ID}.json"
    edit_json(path, lambda d: d.update({key: bad}))
    session = Store(store_copy).load_session(SESSION_UUID)
    error = session.load_errors[path.name]
    assert isinstance(error, FormatError) and error.path == path
    assert error.json_path.startswith(f"$.{key}")


def test_a_parent_invocation_id_is_never_followed_out_of_the_store(workbench_copy: Path) -> None:
    outside = workbench_copy.parent / "outside.json"
    outside.write_text("{}")
    record = next(workbench_copy.rglob("invocations/*.json"))
    edit_json(record, lambda d: d.update(parent_invocation_id="../../../../../outside"))
    with pytest.raises(FormatError) as caught:
        invocation_chain(Store(workbench_copy), record.parent.parent.name)
    assert (caught.value.path, caught.value.json_path) == (record, "$.parent_invocation_id")


# -- records of the wrong shape ----------------------------------------------------------------


@pytest.fixture
def workbench_copy(workbench_store: Path, tmp_path: Path) -> Path:
    target = tmp_path / "workbench"
    shutil.copytree(workbench_store, target, ignore=shutil.ignore_patterns(".soapwb-catalog*"))
    return target


def _analyst(root: Path) -> Any:
    store = Store(root)
    [summary] = [s for s in store.sessions() if s.role == "Analyst" and s.thread_id == "investigation"][:1]
    return store, summary


CALL_DAMAGE = {
    "message_index-missing": lambda d: d.pop("message_index"),
    "request-a-list": lambda d: d.update(request=[]),
    "message_index-a-bool": lambda d: d.update(message_index=True),
    "hooks-not-strings": lambda d: d.update(system_prompt_hooks=[1, None]),
    "context_id-a-path": lambda d: d.update(context_id="../x"),
}


@pytest.mark.parametrize("damage", CALL_DAMAGE.values(), ids=CALL_DAMAGE.keys())
def test_a_call_record_of_the_wrong_shape_is_a_format_error_naming_it(
    workbench_copy: Path, damage: Callable[[Any], object]
) -> None:
    store, summary = _analyst(workbench_copy)
    record = sorted((summary.path / "calls").glob("*.json"))[0]
    edit_json(record, damage)
    session = store.load_session(summary.uuid, require_active=False)
    with pytest.raises(FormatError) as caught:
        verify_session(session)
    assert caught.value.path == record
    code, _out, err = cli("verify", "--store", workbench_copy, "--json")
    assert code == 1 and str(record) in err


INVOCATION_DAMAGE = {
    "caller-missing": (lambda d: d.pop("caller"), None),
    "thread-missing": (lambda d: d.pop("thread"), None),
    "callee-a-list": (lambda d: d.update(callee=[]), "$.callee"),
    "callee-role-a-number": (lambda d: d["callee"].update(role=7), "$.callee.role"),
    "calls-not-ids": (lambda d: d.update(calls=["../x"]), "$.calls[0]"),
    "prompt-missing": (lambda d: d.pop("prompt"), "$.prompt"),
    "rerun-an-int": (lambda d: d.update(rerun=7), "$.rerun"),
}


@pytest.mark.parametrize(("damage", "json_path"), INVOCATION_DAMAGE.values(), ids=INVOCATION_DAMAGE.keys())
def test_an_invocation_record_of_the_wrong_shape_is_read_or_a_format_error_naming_it(
    workbench_copy: Path, damage: Callable[[Any], object], json_path: str | None
) -> None:
    store, summary = _analyst(workbench_copy)
    record = sorted((summary.path / "invocations").glob("*.json"))[0]
    edit_json(record, damage)
    if json_path is None:
        assert invocation_chain(store, summary.path.name)
    else:
        with pytest.raises(FormatError) as caught:
            invocation_chain(store, summary.path.name)
        assert (caught.value.path, caught.value.json_path) == (record, json_path)
    for command in ("trace", "tokens"):
        code, _out, err = cli(command, summary.path.name, "--store", workbench_copy, "--json")
        assert code in (0, 1) and "internal error" not in err


@pytest.mark.parametrize("listing", [42, "not json [", '[{"name": 7}]', "[" * 5000])
def test_a_tool_listing_that_is_not_a_tool_list_falls_back_to_the_tools_on_disk(
    workbench_copy: Path, listing: Any
) -> None:
    store, summary = _analyst(workbench_copy)
    session = store.load_session(summary.uuid, require_active=False)
    calls = [c for c in verify_session(session)]
    assert calls and all(c.match for c in calls)
    first_call = json.loads(sorted((summary.path / "calls").glob("*.json"))[0].read_text())
    key, context_id = first_call["tool_list_hook"], first_call["context_id"]
    context_file = next(
        p for p in summary.path.glob("*.json") if json.loads(p.read_text()).get("id") == context_id
    )
    edit_json(context_file, lambda d: d["content_map"].update({key: listing}))
    session = store.load_session(summary.uuid, require_active=False)
    found = materialize(session, context_id, first_call["message_id"])
    assert any("tool listing" in note for note in found.notes)
    verify_session(session)  # a mismatch now, never a crash


# -- OpenPoke ----------------------------------------------------------------------------------


@pytest.fixture
def openpoke_dir(tmp_path: Path) -> Path:
    target = tmp_path / "openpoke"
    shutil.copytree(OPENPOKE / "long", target)
    return target / "server" / "data"


@pytest.mark.parametrize("name", ["America", "x" * 300, "../../../etc/passwd", "UTC\x00"])
def test_a_timezone_txt_zoneinfo_cannot_open_falls_back_to_utc(
    openpoke_dir: Path, tmp_path: Path, name: str
) -> None:
    (openpoke_dir / "timezone.txt").write_text(name)
    report = import_openpoke(openpoke_dir, tmp_path / "store")
    assert report.timezone == "UTC"
    assert any("unknown time zone" in n for n in report.notices)


@pytest.mark.parametrize("text", ["1" * 5000, "[" * 5000 + "]" * 5000], ids=["5000-digits", "deep"])
def test_a_roster_past_the_parser_limits_is_a_notice(openpoke_dir: Path, tmp_path: Path, text: str) -> None:
    (openpoke_dir / "execution_agents" / "roster.json").write_text(text)
    report = import_openpoke(openpoke_dir, tmp_path / "store")
    assert report.roster == []
    assert any("roster.json: not JSON" in n for n in report.notices)


@pytest.mark.parametrize(
    "info", ['{"last_index": ' + "9" * 5000 + "}", "[" * 5000], ids=["5000-digits", "deep"]
)
def test_a_summary_info_past_the_parser_limits_is_a_notice(openpoke_dir: Path, info: str) -> None:
    path = openpoke_dir / "conversation" / "poke_working_memory.log"
    lines = path.read_text().split("\n")
    lines[0] = f"<summary_info>{info}</summary_info>"
    path.write_text("\n".join(lines))
    data = read_openpoke(openpoke_dir)
    assert any("summary_info is not JSON" in n for n in data.notices)


@pytest.mark.parametrize(
    ("zone", "stamp"),
    [("Asia/Tokyo", "0001-01-01 00:00:00"), ("America/New_York", "9999-12-31 23:59:59")],
    ids=["year-1-east", "year-9999-west"],
)
def test_a_date_whose_instant_leaves_the_calendar_has_no_instant(
    openpoke_dir: Path, tmp_path: Path, zone: str, stamp: str
) -> None:
    (openpoke_dir / "timezone.txt").write_text(zone)
    log = openpoke_dir / "conversation" / "poke_conversation.log"
    lines = log.read_text().split("\n")
    lines.insert(3, f'<user_message timestamp="{stamp}">when?</user_message>')
    log.write_text("\n".join(lines))
    memory = openpoke_dir / "conversation" / "poke_working_memory.log"
    memory.write_text(
        memory.read_text().replace(
            '"updated_at": "2025-', '"updated_at": "9999-12-31T23:59:59-05:00", "x": "', 1
        )
    )
    report = import_openpoke(openpoke_dir, tmp_path / "store")
    assert report.entries == len(read_openpoke(openpoke_dir).entries)
    assert cli("ls", "--store", tmp_path / "store", "--json")[0] == 0


# -- fork and invocation links that loop ----------------------------------------------------------


def test_a_context_listing_itself_among_its_children_is_listed_once_and_marked(store_copy: Path) -> None:
    edit_json(session_dir(store_copy) / f"{CHILD_ID}.json", lambda d: d.update(children=[CHILD_ID]))
    nodes = fork_tree(Store(store_copy).load_session(SESSION_UUID))
    assert sorted(n.id for n in nodes if n.kind != "discarded") == sorted([PARENT_ID, CHILD_ID])
    assert [n.in_cycle for n in nodes if n.id == CHILD_ID] == [True]
    assert cli("tree", SESSION_UUID, "--store", store_copy)[0] == 0


def test_two_contexts_each_the_others_origin_are_both_listed_and_marked(store_copy: Path) -> None:
    edit_json(session_dir(store_copy) / f"{PARENT_ID}.json", lambda d: d.update(origin_context_id=CHILD_ID))
    nodes = fork_tree(Store(store_copy).load_session(SESSION_UUID))
    saved = [n for n in nodes if n.kind != "discarded"]
    assert sorted(n.id for n in saved) == sorted([PARENT_ID, CHILD_ID])
    assert all(n.in_cycle for n in saved)
    code, out, _err = cli("tree", SESSION_UUID, "--store", store_copy, "--json")
    assert code == 0 and {c["id"] for c in json.loads(out)["contexts"]} >= {PARENT_ID, CHILD_ID}


def test_a_context_that_is_its_own_origin_ends_the_token_budget(store_copy: Path) -> None:
    edit_json(session_dir(store_copy) / f"{CHILD_ID}.json", lambda d: d.update(origin_context_id=CHILD_ID))
    session = Store(store_copy).load_session(SESSION_UUID)
    assert call_budgets(session)
    assert cli("tokens", SESSION_UUID, "--store", store_copy, "--json")[0] == 0


def test_invocations_whose_parents_loop_are_traced_once_each(store_copy: Path) -> None:
    ids = [f"20250611T00000000000{n}-0000000{n}" for n in range(3)]
    for n, record_id in enumerate(ids):  # 0 made 1, 1 made 2, and 2 made 0
        write_invocation(
            [session_dir(store_copy)],
            InvocationRecord(
                id=record_id,
                callee=Party("HelloPete", "pete", SESSION_UUID),
                caller=Party("HelloPete", "pete", SESSION_UUID, None, n, None),
                prompt=f"step {n}",
                thread=None,
                started_at=f"2025-06-11T00:00:0{n}+00:00",
                parent_invocation_id=ids[n - 1],
                outcome="ok",
            ),
        )
    store = Store(store_copy)
    traces = invocation_chain(store, SESSION_UUID)
    assert len(traces) == 3
    for trace in traces:
        assert trace.invocation is not None
        listed = [f.invocation_id for f in [*trace.callers, trace.invocation, *trace.callees]]
        assert sorted(listed) == sorted(ids), "each invocation of the loop listed once"
        assert trace.loop is not None and "loop" in trace.loop
    assert [s.session for s in chain_budget(store, SESSION_UUID)] == [SESSION_UUID]
    assert cli("trace", SESSION_UUID, "--store", store_copy, "--json")[0] == 0


# -- errors name files ----------------------------------------------------------------------------


def test_a_session_without_an_active_context_names_its_session_json(store_copy: Path) -> None:
    path = session_dir(store_copy) / SESSION_FILE
    edit_json(path, lambda d: d.update(active_context_id=None))
    session = Store(store_copy).load_session(SESSION_UUID, require_active=False)
    with pytest.raises(ContextNotFoundError) as caught:
        session.active_context  # noqa: B018 - the property raises
    assert caught.value.path == path


def test_no_reader_writes_a_byte_of_a_hostile_store(store_copy: Path) -> None:
    edit_json(session_dir(store_copy) / f"{CHILD_ID}.json", lambda d: d.update(children=[CHILD_ID]))
    edit_json(session_dir(store_copy) / SESSION_FILE, lambda d: d.update(active_context_id="a" * 300))
    before = snapshot(store_copy)
    for argv in (["ls"], ["show", SESSION_UUID], ["tree", SESSION_UUID], ["tokens", SESSION_UUID]):
        assert cli(*argv, "--store", store_copy, "--json")[0] in (0, 1)
    assert snapshot(store_copy) == before


def test_an_instance_naming_its_class_with_a_lone_surrogate_leaves_the_listing_whole(
    store_copy: Path, tmp_path: Path
) -> None:
    root = tmp_path / "peteos06"
    (root / ".peteos" / "sessions").mkdir(parents=True)
    (root / "peteos.json").write_text("{}")
    shutil.copytree(session_dir(store_copy), root / ".peteos" / "sessions" / SESSION_UUID)
    instance = root / ".peteos" / "instances" / "hello" / "agentic_object.json"
    instance.parent.mkdir(parents=True)
    claim = {"class": {"qualname": "app.Hello\ud800"}, "thread_store": {"pete-chat": SESSION_UUID}}
    instance.write_text(json.dumps(claim))
    [summary] = Store(root).sessions()
    assert summary.role.startswith("Hello") and summary.error is None  # the catalog keeps "Hello?"
    for argv in (["ls"], ["materialize", SESSION_UUID, "--at", "-1"]):
        code, out, err = cli(*argv, "--store", root, "--json")
        assert code == 0, err
        json.loads(out)


def test_a_null_where_a_record_field_has_a_default_reads_as_the_default(tmp_path: Path) -> None:
    data = {
        "format": "soapwb.invocation/1",
        "id": "20250611T000000000000-00000000",
        "callee": {"role": "HelloPete", "object_id": "pete"},
        "prompt": "hi",
        "started_at": "2025-06-11T00:00:00+00:00",
        "calls": None,
        "outcome": None,
    }
    record = InvocationRecord.from_dict(data, tmp_path / "r.json")
    assert (record.calls, record.outcome, record.caller, record.thread) == ([], "running", None, None)


def test_a_chat_history_json_past_the_parser_limits_is_noticed_not_fatal(tmp_path: Path) -> None:
    target = tmp_path / "legacy"
    shutil.copytree(OPENPOKE / "legacy", target)
    data_dir = target / "server" / "data"
    (data_dir / "chat_history.json").write_text("[" * 5000 + "]" * 5000)
    data = read_openpoke(data_dir)
    assert data.legacy_history == 0
    assert any("chat_history.json" in n for n in data.notices)


def test_json5_syntax_nested_past_any_stack_is_a_format_error_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text("[" * 5000 + "'x'" + "]" * 5000)  # single quotes: only json5 would read it
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(50_000)  # as hypothesis raises it while a test runs: json5 then overflows C
    try:
        with pytest.raises(FormatError, match="too deep") as caught:
            Store(tmp_path, use_catalog=False).read_context(path)
    finally:
        sys.setrecursionlimit(limit)
    assert caught.value.path == path


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"a": 1, b: 2}', {"a": 1, "b": 2}),
        ('{"a": .5, "b": +1, "c": 0x1F}', {"a": 0.5, "b": 1, "c": 31}),
        ('{"x": \'it is\', // note\n "y": [1, 2,],}', {"x": "it is", "y": [1, 2]}),
        ('{"a": [1, 2,], "b": "x, ]", "c": {"d": 1,},}', {"a": [1, 2], "b": "x, ]", "c": {"d": 1}}),
        ('{"a": [\n1,\n],\n"b": "z, }",\n}', {"a": [1], "b": "z, }"}),
    ],
)
def test_json5_syntax_anywhere_on_a_line_is_read_in_a_small_file(
    tmp_path: Path, text: str, value: Any
) -> None:
    from soap_core._jsonio import parse_json_bytes

    assert parse_json_bytes(tmp_path / "x.json", text.encode()) == value


@pytest.mark.parametrize("text", ['{"a": "cut', '{"a": 1e5, "b": [true, null', '{"a": -2.5E+3,, }'])
def test_damaged_strict_json_is_reported_at_its_line_and_column(tmp_path: Path, text: str) -> None:
    from soap_core._jsonio import parse_json_bytes

    with pytest.raises(FormatError, match=r"^.*: at \$: not valid JSON: .* at line 1 column \d+$"):
        parse_json_bytes(tmp_path / "x.json", text.encode())
