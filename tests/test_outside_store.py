"""Never outside the store: real symlinks leading out, ids with ``..`` and separators,
and imported paths pointing elsewhere. Each is reported (a broken listing entry, one
clear line, a refusal on the page), and nothing outside is read or written: the files
outside are compared byte for byte before and after.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from importers.openpoke import import_openpoke
from soap_core import (
    CallRecord,
    Context,
    InvocationRecord,
    Message,
    OutsideStoreError,
    Party,
    Session,
    SoapError,
    Store,
    StoreError,
    TextPart,
    UnsafeNameError,
    read_calls,
    write_call,
    write_invocation,
)
from soap_core.runtime import AgenticObject, ModelSettings, Runtime
from tests.apptest import open_app_page
from tests.cli_process import soapwb
from tests.conftest import SESSION_DIR, SESSION_UUID, session_dir, snapshot
from tests.misbehaving_llm import MisbehavingLLM
from tests.scripted import ScriptedEndpoint, says
from workbench.openpoke_views import two_tracks

REPO = Path(__file__).parents[1]
OPENPOKE_SHORT = REPO / "tests" / "fixtures" / "openpoke" / "short"
HOSTILE_IDS = ["../../../../x", "a/b", "..", ".", "a\\b", "x\x00y", "/etc/passwd"]
MARKER = "OUTSIDE-THE-STORE-7d3f"


def one_clear_line(proc: subprocess.CompletedProcess[str], *words: str) -> str:
    assert proc.returncode == 1, proc
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith("soapwb: error: ") and all(w in line for w in words), line
    return line


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the store holding a complete session (a copy of the sample's)."""
    target = tmp_path / "outside"
    shutil.copytree(SESSION_DIR, target / "Evil" / "20250611-aaaaaaaa-0000-4000-8000-000000000001")
    (target / "precious.txt").write_text(f"{MARKER}: somebody else's file\n")
    return target


# -- symlinks leading out ----------------------------------------------------------------------


def test_a_role_folder_linked_outside_is_one_broken_entry_and_never_walked(
    store_copy: Path, outside: Path
) -> None:
    (store_copy / "agents" / "Evil").symlink_to(outside / "Evil")
    before = snapshot(outside)
    for store in (Store(store_copy), Store(store_copy, use_catalog=False)):
        summaries = store.sessions()
        broken = [s for s in summaries if s.role == "Evil"]
        assert [s.uuid for s in summaries if not s.broken] == [SESSION_UUID]
        [entry] = broken
        assert "symlink leading outside the store" in (entry.error or "")
        with pytest.raises(StoreError):
            store.load_session("20250611-aaaaaaaa")
    listing = soapwb("ls", "--store", store_copy)
    assert listing.returncode == 0 and "broken: Evil/Evil:" in listing.stdout
    assert "outside the store" in listing.stdout and "Traceback" not in listing.stderr
    assert snapshot(outside) == before


def test_a_session_folder_linked_outside_is_listed_broken_and_a_replay_writes_nothing_there(
    store_copy: Path, outside: Path
) -> None:
    link = store_copy / "agents" / "HelloPete" / "20250611-bbbbbbbb-0000-4000-8000-000000000002"
    link.symlink_to(next((outside / "Evil").iterdir()))
    before = snapshot(outside)
    store = Store(store_copy)
    [entry] = [s for s in store.sessions() if s.path == link]
    assert entry.broken and "outside the store" in (entry.error or "")
    with pytest.raises(OutsideStoreError):
        store.load_session(link.name)
    session = Store(store_copy).load_session(SESSION_UUID)
    session.directory = link  # a session pointed at the link: saving refuses
    with pytest.raises(OutsideStoreError):
        Store(store_copy).save_session(session)
    with MisbehavingLLM("ok") as server:
        proc = soapwb("replay", link.name, "--at", "5", "--base-url", server.base_url, "--store", store_copy)
        assert server.requests == 0
    one_clear_line(proc, "outside the store")
    assert snapshot(outside) == before


def test_context_files_and_session_json_linked_outside_are_refused_not_read(
    store_copy: Path, outside: Path
) -> None:
    folder = session_dir(store_copy)
    fork = next(p for p in folder.glob("*.json") if p.name != "session.json" and "e7c40f19" not in p.name)
    fork.unlink()
    fork.symlink_to(next((outside / "Evil").iterdir()) / fork.name)
    before = snapshot(outside)
    session = Store(store_copy).load_session(SESSION_UUID)
    assert isinstance(session.load_errors[fork.name], OutsideStoreError)
    session.active_context.append(Message.create("user", [TextPart("one more")]))
    Store(store_copy).save_session(session)  # saves the rest, leaves the link alone
    assert fork.is_symlink()
    assert "outside the store" in json.dumps(
        soapwb("show", SESSION_UUID, "--json", "--store", store_copy).stdout
    )
    (folder / "session.json").unlink()
    (folder / "session.json").symlink_to(next((outside / "Evil").iterdir()) / "session.json")
    [summary] = Store(store_copy).sessions()
    assert summary.broken and "outside the store" in (summary.error or "")
    with pytest.raises(OutsideStoreError):
        Store(store_copy).read_session_file("HelloPete", folder)
    assert snapshot(outside) == before


def test_record_folders_linked_outside_are_neither_read_nor_written(store_copy: Path, outside: Path) -> None:
    folder = session_dir(store_copy)
    (outside / "calls").mkdir()
    (folder / "calls").symlink_to(outside / "calls")
    before = snapshot(outside)
    with pytest.raises(OutsideStoreError):
        read_calls(folder)
    record = CallRecord("20250611T000000000000-abcdef12", SESSION_UUID, "HelloPete", "c", 0, {}, "h")
    with pytest.raises(OutsideStoreError):
        write_call(folder, record)
    assert snapshot(outside) == before


class Greeter(AgenticObject):
    settings = ModelSettings(max_tokens=4)


def test_a_lock_file_linked_outside_is_not_truncated(tmp_path: Path, outside: Path) -> None:
    runtime = Runtime(tmp_path / "store", ScriptedEndpoint(says("hi"), says("again")))
    Greeter(runtime=runtime, object_id="g").invoke("Hello.", thread="t")
    [summary] = runtime.store.sessions()
    lock = summary.path / ".soapwb.lock"
    lock.unlink()
    lock.symlink_to(outside / "precious.txt")
    before = snapshot(outside)
    with pytest.raises(StoreError, match="symlink"):
        Greeter(runtime=runtime, object_id="g").invoke("Again.", thread="t")
    assert snapshot(outside) == before


def test_an_instance_folder_and_a_catalog_file_linked_outside_are_not_used(
    tmp_path: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOAPWB_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "config"
    (root / "sessions").mkdir(parents=True)
    (root / "instances").mkdir()
    (outside / "inst").mkdir()
    (outside / "inst" / "agentic_object.json").write_text(
        json.dumps({"class": {"qualname": "x.Evil"}, "thread_store": {"t": "s"}})
    )
    (root / "instances" / "evil").symlink_to(outside / "inst")
    (outside / "empty").touch()  # SQLite would make its database in there
    (root / ".soapwb-catalog.sqlite3").symlink_to(outside / "empty")
    before = snapshot(outside)
    store = Store(root)
    assert store.instance_claims() == {}
    assert any("outside the store" in str(p) for p in store.instance_problems())
    assert store.sessions() == []
    catalog = store.catalog()
    assert catalog is not None and not catalog.path.is_relative_to(root)
    assert snapshot(outside) == before


# -- ids that are not plain names --------------------------------------------------------------


@pytest.mark.parametrize("bad", HOSTILE_IDS)
def test_ids_with_separators_or_dots_never_become_paths(store_copy: Path, outside: Path, bad: str) -> None:
    store = Store(store_copy)
    before = snapshot(outside)
    with pytest.raises(UnsafeNameError):
        store.find(bad)
    with pytest.raises(UnsafeNameError):
        store.session_dir("HelloPete", bad)
    with pytest.raises(UnsafeNameError):
        store.session_dir(bad, SESSION_UUID)
    with pytest.raises(UnsafeNameError):
        store.save_session(Session("HelloPete", bad))
    session = store.load_session(SESSION_UUID)
    session.add_context(Context(bad))
    with pytest.raises(UnsafeNameError):
        store.save_session(session)
    folder = session_dir(store_copy)
    with pytest.raises(UnsafeNameError):
        write_call(folder, CallRecord(bad, SESSION_UUID, "HelloPete", "c", 0, {}, "h"))
    with pytest.raises(UnsafeNameError):
        write_invocation(
            [folder], InvocationRecord(bad, Party("HelloPete", "o", SESSION_UUID), None, "", None, "")
        )
    assert snapshot(outside) == before
    assert not list(store_copy.parent.glob("x*")) and not (store_copy / "agents" / "a").exists()


def plant_context(store_copy: Path, hostile: str) -> None:
    """A readable context file where ``<session>/<hostile>.json`` leads."""
    context = json.loads(next(session_dir(store_copy).glob("*e7c40f19*.json")).read_text())
    context["messages"][-1]["content"] = [{"type": "text", "text": MARKER}]
    (session_dir(store_copy) / f"{hostile}.json").resolve().write_text(json.dumps(context))


@pytest.mark.parametrize("catalog", ["with the catalog", "without"])
@pytest.mark.parametrize(
    "hostile", ["../../../../x", "../../x"], ids=["outside the store", "another folder of the store"]
)
def test_an_active_context_id_with_dots_is_refused_by_ls_and_show(
    store_copy: Path, catalog: str, hostile: str
) -> None:
    plant_context(store_copy, hostile)
    path = session_dir(store_copy) / "session.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "active_context_id": hostile}, indent=2))
    env = {} if catalog == "with the catalog" else {"SOAPWB_NO_CATALOG": "1"}
    listing = soapwb("ls", "--json", "--store", store_copy, env=env)
    assert listing.returncode == 0, listing
    [row] = json.loads(listing.stdout)
    assert row["error"] and row["messages"] is None, row
    shown = soapwb("show", SESSION_UUID, "--store", store_copy, env=env)
    assert shown.returncode == 1 and MARKER not in shown.stdout + shown.stderr, shown
    assert "Traceback" not in shown.stderr and len(shown.stderr.splitlines()) == 1
    assert MARKER not in listing.stdout


def test_a_parent_invocation_id_with_dots_does_not_make_trace_print_an_outside_file(tmp_path: Path) -> None:
    runtime = Runtime(tmp_path / "store", ScriptedEndpoint(says("hi")))
    Greeter(runtime=runtime, object_id="g").invoke("Hello.")
    [summary] = runtime.store.sessions()
    [record_path] = (summary.path / "invocations").glob("*.json")
    outside_record = json.loads(record_path.read_text())
    outside_record.update(id="y", prompt=MARKER)
    (tmp_path / "y.json").write_text(json.dumps(outside_record))
    hostile = json.loads(record_path.read_text())
    hostile["caller"] = {**hostile["callee"]}
    hostile["parent_invocation_id"] = "../../../../../y"
    record_path.write_text(json.dumps(hostile))
    assert (summary.path / "invocations" / "../../../../../y.json").resolve() == tmp_path / "y.json"
    proc = soapwb("trace", summary.uuid, "--store", tmp_path / "store")
    assert MARKER not in proc.stdout + proc.stderr, proc
    one_clear_line(proc, "parent_invocation_id", "not a plain name")


# -- paths kept in imported OpenPoke sessions --------------------------------------------------


def edit_state(store_dir: Path, uuid: str, change: Callable[[dict[str, Any]], None]) -> None:
    path = Store(store_dir).find(uuid).path / "session.json"
    data = json.loads(path.read_text())
    change(data["state_data"]["_openpoke"])
    path.write_text(json.dumps(data, indent=2))


@pytest.mark.parametrize(
    "where",
    [
        {"data_dir": "/etc", "log": "passwd"},
        {"log": "../../../../../../../../etc/passwd"},
        {"data_dir": "etc"},
    ],
    ids=["data_dir /etc and log passwd", "log with dots", "a relative data_dir"],
)
def test_an_imported_sessions_paths_cannot_show_files_outside_the_imported_dir(
    tmp_path: Path, where: dict[str, str]
) -> None:
    report = import_openpoke(OPENPOKE_SHORT, tmp_path / "store")
    uuid = report.interaction_session or ""
    edit_state(tmp_path / "store", uuid, lambda state: state.update(where))
    session = Store(tmp_path / "store").load_session(uuid)
    tracks = two_tracks(session, 3)
    assert "root:" not in tracks.raw_log and "refused" in tracks.raw_source, tracks.raw_source
    at = open_app_page(tmp_path / "store", "context", session=uuid, entry="3")
    assert not any("root:" in code.value for code in at.code)
    assert any("refused" in text.value for text in at.text)


def test_a_log_linked_outside_the_imported_dir_is_refused_at_import_and_on_the_page(
    tmp_path: Path, outside: Path
) -> None:
    data = tmp_path / "openpoke"
    shutil.copytree(OPENPOKE_SHORT, data)
    log = data / "server" / "data" / "conversation" / "poke_conversation.log"
    report = import_openpoke(data, tmp_path / "store")
    log.rename(tmp_path / "real.log")
    log.symlink_to(outside / "precious.txt")
    session = Store(tmp_path / "store").load_session(report.interaction_session or "")
    tracks = two_tracks(session, 3)
    assert MARKER not in tracks.raw_log and "outside the imported directory" in tracks.raw_source
    with pytest.raises(SoapError, match="outside the imported directory"):
        import_openpoke(data, tmp_path / "store-2")
