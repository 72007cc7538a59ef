"""A process that follows its store by file events trusts its catalog between them
(soap_core._trust): a listing with no event since the last walk walks nothing, and every
change made by another process (a new session, a file rewritten in place with its times
put back, a session removed, a new context file) is in the first listing after its event.
The ground truth is the listing of a store read without a catalog."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from watchdog.events import EventsLostEvent

from soap_core import Context, Message, Session, Store, StoreFollower, TextPart
from soap_core._catalog import Catalog
from soap_core._follow import counts

WAIT_S = 10.0
WRITER = """
import sys
from soap_core import Context, Message, Session, Store, TextPart
context = Context.create("written elsewhere")
context.append(Message.create("user", [TextPart(sys.argv[2])]))
Store(sys.argv[1]).save_session(Session.create("Elsewhere", context))
"""


@pytest.fixture
def followed(store_copy: Path) -> Iterator[StoreFollower]:
    follower = StoreFollower(store_copy)
    assert follower.watching()
    Store(store_copy).sessions()  # the walk the trust starts from
    yield follower
    follower.stop()


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    counted: list[int] = []
    real = Catalog._walk

    def counting(self: Catalog, *args: object, **kwargs: object) -> object:
        counted.append(1)
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Catalog, "_walk", counting)
    return counted


Row = tuple[str, str, int, int | None]


def listing(root: Path) -> list[Row]:
    """(uuid, role, context files, messages of the active context) of every session."""
    return sorted(
        (s.uuid, s.role, s.context_files, s.figures.messages if s.figures else None)
        for s in Store(root).sessions()
    )


def truth(root: Path) -> list[Row]:
    store = Store(root, use_catalog=False)
    rows = []
    for s in store.sessions():
        messages = None if s.broken else store.load_active_context(s).message_count
        rows.append((s.uuid, s.role, s.context_files, messages))
    return sorted(rows)


def after_event(follower: StoreFollower, change: object) -> None:
    seen = follower.generation
    assert callable(change)
    change()
    assert follower.wait_for_change(seen, WAIT_S) != seen


def test_a_listing_with_no_event_since_the_last_walk_walks_nothing(
    followed: StoreFollower, walks: list[int]
) -> None:
    first = listing(followed.root)
    assert listing(followed.root) == first == truth(followed.root)
    assert walks == []


def test_a_session_another_process_writes_is_in_the_next_listing(
    followed: StoreFollower, walks: list[int]
) -> None:
    root = followed.root
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    after_event(
        followed, lambda: subprocess.run([sys.executable, "-c", WRITER, str(root), "hi"], env=env, check=True)
    )
    assert listing(root) == truth(root)
    assert len(walks) == 1
    assert listing(root) == truth(root)
    assert len(walks) == 1


def test_a_file_rewritten_in_place_with_its_times_put_back_is_seen(followed: StoreFollower) -> None:
    root = followed.root
    store = Store(root, use_catalog=False)
    summary = next(
        s for s in store.sessions() if not s.broken and store.load_active_context(s).message_count > 1
    )
    session = store.load_session(summary.uuid)
    path = summary.path / session.context_files[session.active_context_id or ""]
    data = json.loads(path.read_text())
    before = os.stat(path)

    def rewrite() -> None:
        data["messages"] = data["messages"][:1]
        with open(path, "w") as f:  # in place, as peteos writes
            f.write(json.dumps(data, indent=2))
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))

    after_event(followed, rewrite)
    assert listing(root) == truth(root)


def test_a_removed_session_leaves_the_next_listing(followed: StoreFollower) -> None:
    root = followed.root
    victim = Store(root).sessions()[0]
    after_event(followed, lambda: shutil.rmtree(victim.path))
    assert victim.uuid not in [s.uuid for s in Store(root).sessions()]
    assert listing(root) == truth(root)


def test_a_stopped_or_polling_follower_is_not_trusted(store_copy: Path, walks: list[int]) -> None:
    follower = StoreFollower(store_copy)
    Store(store_copy).sessions()
    follower.stop()
    Store(store_copy).sessions()
    polling = StoreFollower(store_copy, poll=True)
    try:
        Store(store_copy).sessions()
        Store(store_copy).sessions()
    finally:
        polling.stop()
    assert len(walks) == 4


def test_a_catalog_emptied_since_the_walk_is_walked_again(followed: StoreFollower) -> None:
    root = followed.root
    catalog = Store(root).catalog()
    assert catalog is not None
    catalog.clear()
    assert listing(root) == truth(root)


def test_lost_events_count_as_a_change(tmp_path: Path) -> None:
    """The kernel's queue overflowed: anything may have changed, so the next listing walks."""
    assert counts(EventsLostEvent(str(tmp_path)), tmp_path)


def test_a_save_in_this_process_is_listed_at_once(followed: StoreFollower) -> None:
    """No waiting for the event: the save tells the catalog itself."""
    root = followed.root
    context = Context.create("written here")
    context.append(Message.create("user", [TextPart("hello")]))
    session = Session.create("Here", context)
    Store(root).save_session(session)
    assert session.uuid in [s.uuid for s in Store(root).sessions()]
    assert listing(root) == truth(root)


def test_a_follower_started_in_the_background_is_trusted_once_its_watches_are_in_place(
    store_copy: Path, walks: list[int]
) -> None:
    """The workbench starts its follower so (seconds of watches at 10,000 sessions, which
    the first page need not wait for); it bumps once ready, so a page reads again what
    was written meanwhile."""
    follower = StoreFollower(store_copy, background=True)
    try:
        assert follower.wait_for_change(0, WAIT_S) == 1
        assert follower.watching() and not follower.polling
        Store(store_copy).sessions()
        Store(store_copy).sessions()
        assert len(walks) == 1
        after_event(follower, lambda: shutil.rmtree(Store(store_copy).sessions()[0].path))
        assert listing(store_copy) == truth(store_copy)
    finally:
        follower.stop()
