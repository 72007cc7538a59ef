"""The store follower (soap_core._follow): its generation moves at every change a page
could show, and only then (never for the catalog, a lock being probed, or a write still
in its temp file); the polling fallback does the same and calls its refresh first."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from soap_core import Context, Message, Session, Store, StoreFollower, TextPart, files_signature, write_call
from soap_core._catalog import CATALOG_FILE
from soap_core._records import LOCK_FILE
from tests.crash_writers import call_at

QUIET_S = 0.6
"""How long a follower is watched for a bump that must not come."""
WAIT_S = 10.0


def new_session(store: Store) -> Session:
    context = Context.create("follow me")
    context.append(Message.create("user", [TextPart("hello")]))
    session = Session.create("Follower", context)
    store.save_session(session)
    return session


@pytest.fixture(params=["events", "polling"])
def follower(request: pytest.FixtureRequest, store_copy: Path) -> Iterator[StoreFollower]:
    started = StoreFollower(store_copy, poll=request.param == "polling", poll_every_s=0.1)
    assert started.polling == (request.param == "polling")
    time.sleep(0.2)  # the observer's watches are in place
    yield started
    started.stop()


def bumped_by(follower: StoreFollower, change: object) -> bool:
    seen = follower.generation
    assert callable(change)
    change()
    return follower.wait_for_change(seen, WAIT_S) != seen


def quiet_after(follower: StoreFollower, change: object) -> bool:
    time.sleep(QUIET_S)  # earlier events have landed
    seen = follower.generation
    assert callable(change)
    change()
    time.sleep(QUIET_S)
    return follower.generation == seen


def test_a_new_session_folder_bumps_the_generation(follower: StoreFollower) -> None:
    assert bumped_by(follower, lambda: new_session(Store(follower.root)))


def test_a_rewritten_context_bumps_the_generation(follower: StoreFollower) -> None:
    store = Store(follower.root)
    session = new_session(store)
    time.sleep(QUIET_S)

    def append() -> None:
        session.active_context.append(Message.create("user", [TextPart("more")]))
        store.save_session(session)

    assert bumped_by(follower, append)


def test_a_new_call_record_bumps_the_generation(follower: StoreFollower) -> None:
    store = Store(follower.root)
    session = new_session(store)
    time.sleep(QUIET_S)
    directory = store.session_dir(session.role, session.uuid)
    assert bumped_by(follower, lambda: write_call(directory, call_at(session.uuid, 1)))


def test_catalog_files_temp_files_and_a_probed_lock_do_not_bump(store_copy: Path) -> None:
    follower = StoreFollower(store_copy)
    assert not follower.polling, "this machine has inotify: the event path is the one tested"
    try:
        store = Store(store_copy)
        session_dir = store.session_dir(*next((s.role, s.uuid) for s in store.sessions()))
        lock = session_dir / LOCK_FILE
        lock.write_text("{}")
        temp = session_dir / f".c1.json.{'0' * 8}-{os.getpid()}.abcdefgh.tmp"

        def untracked_writes() -> None:
            (store_copy / CATALOG_FILE).write_bytes(b"catalog")
            (store_copy / f"{CATALOG_FILE}-wal").write_bytes(b"wal")
            temp.write_text("half a file")
            temp.unlink()
            os.close(os.open(lock, os.O_RDONLY))  # a reader probing whether a writer holds it

        assert quiet_after(follower, untracked_writes)
    finally:
        follower.stop()


def test_a_writer_letting_go_of_a_session_lock_bumps_the_generation(store_copy: Path) -> None:
    """A killed writer changes no file; its lock's release is the only sign (the page then
    finds its running invocation interrupted)."""
    follower = StoreFollower(store_copy)
    try:
        store = Store(store_copy)
        session_dir = store.session_dir(*next((s.role, s.uuid) for s in store.sessions()))
        fd = os.open(session_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT)
        time.sleep(QUIET_S)
        assert bumped_by(follower, lambda: os.close(fd))
    finally:
        follower.stop()


def test_polling_calls_the_refresh_before_each_look_and_sees_what_it_brings(
    store_copy: Path, tmp_path: Path
) -> None:
    """A remote store's follower: ``refresh`` (the mirror's pull) brings the change."""
    pulled = threading.Event()
    pulls = []

    def pull() -> None:
        pulls.append(time.monotonic())
        if pulled.is_set():
            new_session(Store(store_copy))
            pulled.clear()

    follower = StoreFollower(store_copy, refresh=pull, poll_every_s=0.1)
    try:
        assert follower.polling
        time.sleep(QUIET_S)
        assert follower.generation == 0, "nothing changed: no bump"
        seen = follower.generation
        pulled.set()
        assert follower.wait_for_change(seen, WAIT_S) != seen
        assert len(pulls) >= 3
    finally:
        follower.stop()


def test_a_store_that_cannot_be_watched_is_polled(tmp_path: Path) -> None:
    follower = StoreFollower(tmp_path / "not-yet-there", poll_every_s=0.1)
    try:
        assert follower.polling
        seen = follower.generation
        new_session(Store(tmp_path / "not-yet-there"))
        assert follower.wait_for_change(seen, WAIT_S) != seen
    finally:
        follower.stop()


def test_the_files_signature_leaves_out_temp_files_and_the_catalog(store_copy: Path) -> None:
    """The catalog a page's rerun writes changes nothing; a temp file is never in it (its
    folder's time moves, as with any write there: a rerun too early, never a half read)."""
    before = files_signature(store_copy)
    (store_copy / CATALOG_FILE).write_bytes(b"x")
    assert files_signature(store_copy) == before
    session_dir = next(s.path for s in Store(store_copy).sessions())
    (session_dir / f".c1.json.{'0' * 8}-1.abcdefgh.tmp").write_text("x")
    assert not [path for path, _, _ in files_signature(store_copy) if path.endswith(".tmp")]
