"""The same store suite on a local folder and on S3 (a moto server on 127.0.0.1).

Each test runs once per backend through :class:`Backend`: the store opened with
:func:`soap_core.open_store` on a path or on ``s3://bucket/prefix``, ``read_back``
reading what the storage itself holds (the disk, or the bucket through boto3, never the
mirror), ``put_raw`` writing as a foreign writer would, and ``second_opener`` a store
opened afresh (on S3: another cache folder, as another machine would)."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import fsspec  # type: ignore[import-untyped]
import pytest

from soap_core import (
    CallRecord,
    Context,
    Message,
    RemoteStore,
    SaveConflictError,
    Session,
    Store,
    StoreFollower,
    TextPart,
    is_remote,
    open_store,
    search_store,
    shown,
    write_call,
)
from soap_core._catalog import CATALOG_FILE
from soap_core._remote import forget_mirrors
from tests.conftest import CHILD_ID, PARENT_ID, SESSION_UUID, SOAP_FIXTURE
from tests.s3_server import S3

SESSION_REL = f"agents/HelloPete/{SESSION_UUID}"
OPENPOKE = Path(__file__).parent / "fixtures" / "openpoke" / "short"


def fixture_files(root: Path = SOAP_FIXTURE) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith(".soapwb") and CATALOG_FILE not in p.name
    }


@dataclass
class Backend:
    """One store under test and the storage behind it."""

    name: str
    location: str
    store: Store
    s3: S3 | None
    monkeypatch: pytest.MonkeyPatch
    tmp_path: Path

    def read_back(self, rel: str, at: str | None = None) -> bytes:
        """The bytes the storage holds at ``rel`` of this store (or of the store ``at``)."""
        location = at or self.location
        if self.s3 is not None:
            return self.s3.read(f"{location}/{rel}")
        if self.name == "memory":
            return bytes(fsspec.filesystem("memory").cat_file(f"{location}/{rel}"))
        return (Path(location) / rel).read_bytes()

    def put_raw(self, rel: str, data: bytes) -> None:
        if self.s3 is not None:
            self.s3.put(f"{self.location}/{rel}", data)
        elif self.name == "memory":
            fsspec.filesystem("memory").pipe_file(f"{self.location}/{rel}", data)
        else:
            path = Path(self.location) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

    def second_opener(self) -> Store:
        if self.name == "local":
            return open_store(self.location)
        self.monkeypatch.setenv("SOAPWB_CACHE_DIR", str(self.tmp_path / f"cache-{uuid.uuid4().hex}"))
        store = self.open(self.location)
        assert store.root != self.store.root  # another mirror, as on another machine
        return store

    def fresh(self, name: str) -> str:
        """The location of another, empty store on the same backend."""
        if self.s3 is not None:
            return self.s3.fresh_prefix()
        return f"memory://{uuid.uuid4().hex}/{name}" if self.name == "memory" else str(self.tmp_path / name)

    def open(self, location: str) -> Store:
        return open_store(location, self.s3.options if self.s3 is not None else None)


def upload(s3: S3, folder: Path, url: str) -> None:
    for rel, data in fixture_files(folder).items():
        s3.put(f"{url}/{rel}", data)


@pytest.fixture(params=["local", "s3", "memory"])
def backend(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Backend]:
    """``local``: a folder; ``s3``: a moto server; ``memory``: fsspec's in-process
    filesystem, which has no ETag and no conditional PUT (the mirror's other path)."""
    if request.param == "local":
        target = tmp_path / "store"
        shutil.copytree(SOAP_FIXTURE, target, ignore=shutil.ignore_patterns(f"{CATALOG_FILE}*", ".soapwb*"))
        yield Backend("local", str(target), open_store(target), None, monkeypatch, tmp_path)
        return
    if request.param == "memory":
        monkeypatch.setenv("SOAPWB_CACHE_DIR", str(tmp_path / "cache"))
        url = f"memory://{uuid.uuid4().hex}/store"
        memory = fsspec.filesystem("memory")
        for rel, data in fixture_files().items():
            memory.pipe_file(f"{url}/{rel}", data)
        yield Backend("memory", url, open_store(url), None, monkeypatch, tmp_path)
        forget_mirrors()
        return
    s3: S3 = request.getfixturevalue("s3")
    url = s3.fresh_prefix()
    upload(s3, SOAP_FIXTURE, url)
    store = open_store(url, s3.options)
    assert isinstance(store, RemoteStore)
    yield Backend("s3", url, store, s3, monkeypatch, tmp_path)


# -- reading ------------------------------------------------------------------------------


def test_the_listing_shows_every_session_of_the_store(backend: Backend) -> None:
    expected = [(s.role, s.uuid, s.context_files, s.error) for s in Store(SOAP_FIXTURE).scan_sessions()]
    listed = [(s.role, s.uuid, s.context_files, s.error) for s in backend.store.sessions()]
    assert listed == expected


def test_a_session_loads_with_every_context_and_message(backend: Backend) -> None:
    session = backend.store.load_session(SESSION_UUID[:12])
    reference = Store(SOAP_FIXTURE).load_session(SESSION_UUID)
    assert sorted(session.contexts) == sorted(reference.contexts) == sorted([PARENT_ID, CHILD_ID])
    for cid, context in reference.contexts.items():
        assert [m.to_dict() for m in session.contexts[cid].messages] == [
            m.to_dict() for m in context.messages
        ]


def test_search_finds_what_the_same_search_finds_in_a_local_folder(backend: Backend) -> None:
    word = "pete"
    expected = search_store(Store(SOAP_FIXTURE, use_catalog=False), word)
    assert expected, "the fixture must hold the word searched"
    assert search_store(backend.store, word) == expected


# -- writing ------------------------------------------------------------------------------


def test_a_loaded_session_saved_into_an_empty_store_gives_the_same_bytes(backend: Backend) -> None:
    session = backend.store.load_session(SESSION_UUID)
    session.directory, session.base = None, None
    location = backend.fresh("copy")
    written = backend.open(location).save_session(session)
    assert len(written) == 3
    assert {rel: backend.read_back(rel, at=location) for rel in fixture_files()} == fixture_files()


def test_a_saved_fork_is_seen_whole_and_byte_identical_by_a_second_opener(backend: Backend) -> None:
    session = backend.store.load_session(SESSION_UUID)
    fork = session.rolling_token_window(50)
    assert fork is not None
    session.set_active_context(fork)
    backend.store.save_session(session)
    again = backend.second_opener().load_session(SESSION_UUID)
    assert fork.id in again.contexts and again.active_context_id == fork.id
    assert [m.to_dict() for m in again.contexts[fork.id].messages] == [m.to_dict() for m in fork.messages]
    directory = session.directory
    assert directory is not None
    for path in sorted(directory.glob("*.json")):
        assert backend.read_back(f"{SESSION_REL}/{path.name}") == path.read_bytes()


def test_a_call_record_written_beside_a_session_reaches_the_store(backend: Backend) -> None:
    session = backend.store.load_session(SESSION_UUID)
    assert session.directory is not None
    record = CallRecord(
        id="20261204T000000000000-abcdef01",
        session=SESSION_UUID,
        role="HelloPete",
        context_id=PARENT_ID,
        message_index=0,
        request={"model": "m", "messages": []},
        request_hash="0" * 64,
        base_url="http://127.0.0.1:1/v1",
        response={"choices": []},
    )
    path = write_call(session.directory, record)
    assert json.loads(backend.read_back(f"{SESSION_REL}/calls/{path.name}")) == json.loads(path.read_bytes())
    calls = backend.second_opener().load_session(SESSION_UUID).calls()
    assert [c.id for c in calls] == [record.id]


def test_an_import_writes_its_sessions_into_the_store(backend: Backend) -> None:
    from importers.openpoke import import_openpoke

    location = backend.fresh("imported")
    if backend.s3 is not None:
        backend.monkeypatch.setenv("SOAPWB_STORAGE_OPTIONS", json.dumps(backend.s3.options))
    report = import_openpoke(OPENPOKE, location)
    assert report.sessions
    listed = backend.open(location)
    if isinstance(listed, RemoteStore):  # another cache: what the bucket holds, not the importer's mirror
        backend.monkeypatch.setenv("SOAPWB_CACHE_DIR", str(backend.tmp_path / "reader-cache"))
        listed = backend.open(location)
    sessions = listed.sessions()
    assert len(sessions) == len(report.sessions) and not any(s.error for s in sessions)


def test_two_writers_of_one_session_never_lose_each_others_save(backend: Backend) -> None:
    first, second = backend.store, backend.second_opener()
    mine = first.load_session(SESSION_UUID)
    theirs = second.load_session(SESSION_UUID)
    fork_a = mine.rolling_token_window(50)
    first.save_session(mine)
    theirs.state_data["note"] = "the second writer's"
    fork_b = theirs.rolling_token_window(40)
    assert fork_a is not None and fork_b is not None
    try:
        second.save_session(theirs)
    except SaveConflictError:
        second.update_session(SESSION_UUID, lambda s: s.state_data.__setitem__("note", "the second writer's"))
    backend.monkeypatch.setenv("SOAPWB_CACHE_DIR", str(backend.tmp_path / "third"))
    final = backend.second_opener().load_session(SESSION_UUID)
    assert fork_a.id in final.contexts  # the first save survived the second
    assert final.state_data.get("note") == "the second writer's"


def test_a_malformed_object_is_named_and_the_rest_of_the_store_stays_usable(backend: Backend) -> None:
    broken = "agents/HelloPete/20261204-broken/session.json"
    backend.put_raw(broken, b'{"uuid": ')
    if isinstance(backend.store, RemoteStore):
        backend.store.refresh(force=True)
    listed = {s.uuid: s for s in backend.store.sessions()}
    bad = listed["20261204-broken"]
    assert bad.error is not None
    assert f"{backend.location}/{broken}" in shown(bad.error)
    assert backend.store.load_session(SESSION_UUID).active_context.id


# -- S3 only: what the mirror downloads and holds back ------------------------------------


@pytest.fixture
def on_s3(s3: S3) -> tuple[S3, str, RemoteStore]:
    url = s3.fresh_prefix()
    upload(s3, SOAP_FIXTURE, url)
    store = open_store(url, s3.options)
    assert isinstance(store, RemoteStore)
    return s3, url, store


def test_a_second_listing_downloads_only_the_object_that_changed(on_s3: tuple[S3, str, RemoteStore]) -> None:
    s3, url, store = on_s3
    prefix = url.removeprefix("s3://")
    store.sessions()
    assert s3.log.count(prefix) == len(fixture_files())  # the first pull fetched each object once
    store.refresh(force=True)
    store.sessions()
    assert s3.log.count(prefix) == len(fixture_files())  # nothing changed: nothing fetched
    rel = f"{SESSION_REL}/{CHILD_ID}.json"
    data = json.loads(fixture_files()[rel])
    data["messages"][-1]["content"][0]["text"] = "changed on the bucket"
    s3.put(f"{url}/{rel}", json.dumps(data, indent=2).encode())
    s3.put(f"{url}/{SESSION_REL}/.soapwb-seal", b"a writer's save ends")
    store.refresh(force=True)
    store.sessions()
    assert s3.log.count(prefix) == len(fixture_files()) + 1  # that object, and only it
    session = store.load_session(SESSION_UUID)
    assert "changed on the bucket" in json.dumps(session.contexts[CHILD_ID].messages[-1].to_dict())


def test_a_session_between_two_puts_of_a_save_shows_as_it_was(on_s3: tuple[S3, str, RemoteStore]) -> None:
    s3, url, store = on_s3
    before = sorted(store.load_session(SESSION_UUID).contexts)
    new_id = "0f0f0f0f-1111-4222-8333-444455556666"
    data = json.loads(s3.read(f"{url}/{SESSION_REL}/{CHILD_ID}.json"))
    data["id"] = new_id
    s3.put(f"{url}/{SESSION_REL}/{new_id}.json", json.dumps(data, indent=2).encode())
    s3.put(f"{url}/agents/HelloPete/20261204-half/{new_id}.json", json.dumps(data, indent=2).encode())
    store.refresh(force=True)
    assert sorted(store.load_session(SESSION_UUID).contexts) == before  # the save is not finished
    assert "20261204-half" not in {s.uuid for s in store.sessions()}  # a session still being made
    session_json = json.loads(s3.read(f"{url}/{SESSION_REL}/session.json"))
    session_json["active_context_id"] = new_id
    s3.put(f"{url}/{SESSION_REL}/session.json", json.dumps(session_json, indent=2).encode())
    store.refresh(force=True)
    after = store.load_session(SESSION_UUID)
    assert sorted(after.contexts) == sorted([*before, new_id]) and after.active_context_id == new_id


def test_a_put_over_an_object_changed_since_it_was_read_is_refused(
    on_s3: tuple[S3, str, RemoteStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    s3, url, store = on_s3
    session = store.load_session(SESSION_UUID)
    other = json.loads(s3.read(f"{url}/{SESSION_REL}/session.json"))
    other["state_data"] = {**other.get("state_data", {}), "other": "writer"}
    s3.put(f"{url}/{SESSION_REL}/session.json", json.dumps(other, indent=2).encode())
    monkeypatch.setattr(
        store.remote, "pull", lambda *a, **k: None
    )  # the change lands after the pre-save pull
    session.state_data["mine"] = "too"
    fork = session.rolling_token_window(50)  # a new object put before session.json is refused
    assert fork is not None
    with pytest.raises(SaveConflictError) as raised:
        store.save_session(session)
    assert not [key for key in s3.keys(url) if fork.id in key]  # the refused save left no fork behind
    assert f"{url}/{SESSION_REL}/session.json" in str(raised.value)
    assert json.loads(s3.read(f"{url}/{SESSION_REL}/session.json")) == other  # theirs stands
    mirrored = store.remote.root / SESSION_REL / "session.json"
    assert json.loads(mirrored.read_bytes()) == other  # and the mirror holds it again


def test_an_object_key_that_would_lead_out_of_the_mirror_is_never_written(
    on_s3: tuple[S3, str, RemoteStore],
) -> None:
    s3, url, store = on_s3
    s3.put(f"{url}/../escaped.json", b"{}")  # outside every session folder: nothing holds it back
    s3.put(f"{url}/instances/../../../../escaped.json", b"{}")
    s3.put(f"{url}/agents//HelloPete/x/session.json", b"{}")
    store.refresh(force=True)
    cache = store.remote.cache_dir
    assert not list(cache.parent.rglob("escaped.json")) and not (cache / "escaped.json").exists()
    assert [s.uuid for s in store.sessions()] == [SESSION_UUID]


def test_a_mirrored_file_changed_behind_the_mirror_is_put_back_from_the_blob_cache(
    on_s3: tuple[S3, str, RemoteStore],
) -> None:
    s3, url, store = on_s3
    prefix = url.removeprefix("s3://")
    rel = f"{SESSION_REL}/{CHILD_ID}.json"
    mirrored = store.remote.root / rel
    mirrored.unlink()  # as a writer killed between its local write and its PUT leaves it
    mirrored.write_bytes(b'{"not": "what the bucket holds"}')
    gets = s3.log.count(prefix)
    store.refresh(force=True)
    assert mirrored.read_bytes() == fixture_files()[rel]
    assert s3.log.count(prefix) == gets  # from the blob cache, no download
    assert store.load_session(SESSION_UUID).contexts[CHILD_ID].id == CHILD_ID


def test_no_credential_or_option_is_written_into_the_cache(on_s3: tuple[S3, str, RemoteStore]) -> None:
    s3, _, store = on_s3
    cache = store.remote.cache_dir
    for path in cache.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert b"testing" not in data and s3.endpoint.encode() not in data, path


# -- the command line on S3 ---------------------------------------------------------------


def cli_env(s3: S3, tmp_path: Path) -> dict[str, str]:
    return {"SOAPWB_CACHE_DIR": str(tmp_path / "cli-cache"), "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip


def test_soapwb_ls_lists_a_store_on_s3_as_text_and_json(
    on_s3: tuple[S3, str, RemoteStore], tmp_path: Path
) -> None:
    from tests.cli_process import soapwb

    s3, url, _ = on_s3
    option = f"endpoint_url={s3.endpoint}"
    text = soapwb("ls", "--store", url, "--storage-option", option, env=cli_env(s3, tmp_path))
    assert text.returncode == 0, text.stderr
    assert SESSION_UUID in text.stdout
    listed = soapwb("ls", "--store", url, "--storage-option", option, "--json", env=cli_env(s3, tmp_path))
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [row["uuid"] for row in rows] == [SESSION_UUID]
    assert "cli-cache" not in listed.stdout  # paths are shown as the URL, never the cache


def test_soapwb_import_writes_into_a_store_on_s3(s3: S3, tmp_path: Path) -> None:
    from tests.cli_process import soapwb

    url, option = s3.fresh_prefix(), f"endpoint_url={s3.endpoint}"
    done = soapwb("import", "openpoke", OPENPOKE, "--store", url, "--storage-option", option, "--json",
                  env=cli_env(s3, tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr
    imported = json.loads(done.stdout)
    env = {**cli_env(s3, tmp_path), "SOAPWB_CACHE_DIR": str(tmp_path / "another-machine")}
    listed = soapwb("ls", "--store", url, "--storage-option", option, "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)) == len(imported["sessions"]) > 0
    assert any(key.endswith("/session.json") for key in s3.keys(url))


@pytest.mark.parametrize("what", ["closed port", "missing bucket"])
def test_a_store_that_cannot_be_reached_is_one_line_naming_the_url(s3: S3, tmp_path: Path, what: str) -> None:
    from tests.cli_process import soapwb
    from tests.s3_server import free_port

    endpoint = f"http://127.0.0.1:{free_port()}" if what == "closed port" else s3.endpoint
    url = "s3://soapwb-tests/x" if what == "closed port" else "s3://no-such-bucket-here/x"
    done = soapwb(
        "ls", "--store", url, "--storage-option", f"endpoint_url={endpoint}", env=cli_env(s3, tmp_path)
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and url in lines[0] and "Traceback" not in done.stderr, done.stderr


def test_a_storage_option_without_a_value_is_a_usage_error(tmp_path: Path) -> None:
    from tests.cli_process import soapwb

    done = soapwb("ls", "--store", "s3://b/x", "--storage-option", "endpoint_url")
    assert done.returncode == 2 and "KEY=VALUE" in done.stderr


def test_a_plain_path_and_a_file_url_open_the_same_local_store(tmp_path: Path) -> None:
    assert (
        not is_remote(str(SOAP_FIXTURE)) and is_remote("s3://b/p") and not is_remote(f"file://{SOAP_FIXTURE}")
    )
    by_url = open_store(f"file://{SOAP_FIXTURE}")
    assert type(by_url) is Store and by_url.root == SOAP_FIXTURE


def test_a_follower_of_the_store_sees_a_session_another_machine_saves(backend: Backend) -> None:
    """What keeps an open page live: file events on a folder; on object storage, a poll of
    the mirror that pulls the bucket first."""
    follower = StoreFollower.of(backend.store)
    try:
        assert follower.polling == (backend.name != "local")
        time.sleep(0.3)  # the watches are in place, the first poll taken
        seen = follower.generation
        context = Context.create("from elsewhere")
        context.append(Message.create("user", [TextPart("saved on another machine")]))
        backend.second_opener().save_session(Session.create("Elsewhere", context))
        assert follower.wait_for_change(seen, 15.0) != seen
        assert "Elsewhere" in {s.role for s in backend.store.sessions()}
    finally:
        follower.stop()
