"""Saves from several writers at once never lose each other's work.

A save compares the disk with what its session was loaded as, under the session's save
lock; it merges another writer's new forks, children and other keys of
``session.json``, and refuses (``SaveConflictError``, nothing written) a change to the
same messages, so the caller loads again and redoes it (``Store.update_session``).

The in-process tests play two writers with two loaded copies of a session; the race
test forks real processes that append and fork at the same moment.
``SOAPWB_RELIABILITY=full`` (``make reliability``) runs 1,000 rounds of the race,
``make test`` 40; the figures go to ``test-output/reliability/writers.json``.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from soap_core import (
    SAVE_LOCKS_DIR,
    Context,
    Message,
    SaveConflictError,
    Session,
    Store,
    TextPart,
    count_text,
    dump_json,
    read_json,
)
from soapwb.cli import main
from tests import save_racers as sr

FULL = os.environ.get("SOAPWB_RELIABILITY") == "full"
ROUNDS = 1000 if FULL else 40
RACERS = 4
SESSIONS = 100 if FULL else 20
"""Rounds pick a session among these: each stays small enough that loading it is cheap."""
FIGURES = Path(__file__).parents[1] / "test-output" / "reliability"
FORK = multiprocessing.get_context("fork")


def texts(context: Context) -> list[str]:
    return [m.text() for m in context.messages]


def new_store(tmp_path: Path) -> tuple[Store, str, str]:
    """A store with one session whose root context holds a system prompt and 'start'."""
    root = tmp_path / "store"
    root.mkdir()
    uuid = "20261203-00000000-aaaa-4bbb-8ccc-000000000001"
    root_id = sr.new_session(root, uuid)
    return Store(root), uuid, root_id


def say(session: Session, context_id: str, text: str) -> Message:
    return session.contexts[context_id].append(Message.create("user", [TextPart(text)]))


def folder_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.json"))}


# -- two writers, played in one process -------------------------------------------------------


def test_a_save_never_undoes_a_message_another_writer_appended_to_the_same_context(tmp_path: Path) -> None:
    store, uuid, root_id = new_store(tmp_path)
    a, b = store.load_session(uuid), store.load_session(uuid)
    say(b, root_id, "from B")
    store.save_session(b)
    say(a, root_id, "from A")
    before = folder_bytes(a.directory)  # type: ignore[arg-type]
    with pytest.raises(SaveConflictError) as refused:
        store.save_session(a)
    assert refused.value.path.name == a.context_files[root_id]  # the error names the file
    assert "load the session again" in str(refused.value)
    assert folder_bytes(a.directory) == before  # type: ignore[arg-type]  # nothing was written
    store.update_session(uuid, lambda s: say(s, root_id, "from A"))
    assert texts(store.load_session(uuid).contexts[root_id])[-2:] == ["from B", "from A"]


def test_two_writers_forking_the_same_context_keep_both_forks_in_its_children(tmp_path: Path) -> None:
    store, uuid, root_id = new_store(tmp_path)
    a, b = store.load_session(uuid), store.load_session(uuid)
    fork_a = a.add_context(a.contexts[root_id].fork([0, 1]))
    fork_b = b.add_context(b.contexts[root_id].fork([1]))
    store.save_session(a)
    store.save_session(b)  # merged: no conflict, nothing to redo
    after = store.load_session(uuid)
    assert after.contexts[root_id].children == [fork_a.id, fork_b.id]
    assert {fork_a.id, fork_b.id} <= set(after.contexts)
    # The writer that merged holds the merged children, and saves again without a conflict.
    assert b.contexts[root_id].children == [fork_a.id, fork_b.id]
    say(b, fork_b.id, "more")
    store.save_session(b)
    assert texts(store.load_session(uuid).contexts[fork_b.id])[-1] == "more"


def test_a_fork_made_elsewhere_is_kept_when_the_agent_saves_its_appended_context(tmp_path: Path) -> None:
    """The runtime appends to its active context while a replay elsewhere forks it."""
    store, uuid, root_id = new_store(tmp_path)
    agent, replay = store.load_session(uuid), store.load_session(uuid)
    fork = replay.add_context(replay.contexts[root_id].fork([0]))
    store.save_session(replay)
    say(agent, root_id, "the agent goes on")
    store.save_session(agent)
    after = store.load_session(uuid)
    assert after.contexts[root_id].children == [fork.id]
    assert texts(after.contexts[root_id])[-1] == "the agent goes on"
    assert fork.id in after.contexts


def test_a_fork_saved_after_the_agent_appended_keeps_the_agents_messages(tmp_path: Path) -> None:
    store, uuid, root_id = new_store(tmp_path)
    agent, replay = store.load_session(uuid), store.load_session(uuid)
    say(agent, root_id, "the agent goes on")
    store.save_session(agent)
    fork = replay.add_context(replay.contexts[root_id].fork([0]))
    store.save_session(replay)  # its copy of the root is older: the disk's messages stay
    after = store.load_session(uuid)
    assert texts(after.contexts[root_id])[-1] == "the agent goes on"
    assert after.contexts[root_id].children == [fork.id]
    # The replay's copy of the root still lacks the agent's message; changing it is refused.
    say(replay, root_id, "stale")
    with pytest.raises(SaveConflictError):
        store.save_session(replay)
    assert texts(store.load_session(uuid).contexts[root_id])[-1] == "the agent goes on"


def test_session_json_keeps_both_writers_changes_to_different_keys_and_refuses_one_key_changed_twice(
    tmp_path: Path,
) -> None:
    store, uuid, _root_id = new_store(tmp_path)
    a, b = store.load_session(uuid), store.load_session(uuid)
    a.state_data["from_a"] = 1
    b.state_data["from_b"] = 2
    b.auto_approve_tools = ["grep"]
    store.save_session(b)
    store.save_session(a)
    on_disk = store.load_session(uuid)
    assert on_disk.state_data["from_a"] == 1 and on_disk.state_data["from_b"] == 2
    assert on_disk.auto_approve_tools == ["grep"]
    assert a.auto_approve_tools == ["grep"]  # the merged header is what memory holds too
    c, d = store.load_session(uuid), store.load_session(uuid)
    c.state_data["from_a"] = "c"
    d.state_data["from_a"] = "d"
    store.save_session(d)
    with pytest.raises(SaveConflictError) as refused:
        store.save_session(c)
    assert refused.value.path.name == "session.json" and "state_data.from_a" in str(refused.value)
    assert store.load_session(uuid).state_data["from_a"] == "d"


def test_a_context_rewritten_in_place_by_a_writer_without_the_lock_is_not_overwritten(tmp_path: Path) -> None:
    """peteos writes its files in place (``open(path, 'w')``), without our lock or token."""
    store, uuid, root_id = new_store(tmp_path)
    session = store.load_session(uuid)
    path = session.directory / session.context_files[root_id]  # type: ignore[operator]
    data = read_json(path)
    data["messages"][-1]["content"][0]["text"] = "edited by peteos"
    with open(path, "w") as file:  # in place, same inode
        file.write(dump_json(data))
    say(session, root_id, "ours")
    with pytest.raises(SaveConflictError):
        store.save_session(session)
    assert "edited by peteos" in path.read_text()


def test_a_file_only_touched_by_another_writer_is_saved_over(tmp_path: Path) -> None:
    store, uuid, root_id = new_store(tmp_path)
    session = store.load_session(uuid)
    path = session.directory / session.context_files[root_id]  # type: ignore[operator]
    path.write_bytes(path.read_bytes())  # same content, new times
    say(session, root_id, "ours")
    store.save_session(session)
    assert texts(store.load_session(uuid).contexts[root_id])[-1] == "ours"


def test_a_context_file_removed_by_hand_is_written_again_from_memory(tmp_path: Path) -> None:
    """A removed file holds nothing a save could lose; memory still has the context."""
    store, uuid, root_id = new_store(tmp_path)
    session = store.load_session(uuid)
    fork = session.add_context(session.contexts[root_id].fork([0]))
    store.save_session(session)
    stale = store.load_session(uuid)
    (stale.directory / stale.context_files[fork.id]).unlink()  # type: ignore[operator]
    say(stale, fork.id, "into the removed fork")
    store.save_session(stale)
    assert texts(store.load_session(uuid).contexts[fork.id])[-1] == "into the removed fork"


def test_a_saved_sessions_next_save_checks_nothing_it_need_not(tmp_path: Path) -> None:
    """The save lock's token and the files' signatures let a writer whose session nobody
    else saved write at once: no file of the session is read back to compare content."""
    store, uuid, root_id = new_store(tmp_path)
    session = store.load_session(uuid)
    reads: list[str] = []
    import soap_core._save_plan as plan_module

    real_theirs = plan_module._theirs

    def counting(path: Path) -> Any:
        reads.append(path.name)
        return real_theirs(path)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plan_module, "_theirs", counting)
        for i in range(5):
            say(session, root_id, f"turn {i}")
            store.save_session(session)
        assert reads == []
        other = store.load_session(uuid)
        other.state_data["x"] = 1
        store.save_session(other)
        say(session, root_id, "after another save")
        store.save_session(session)  # the token changed: the changed files are compared
        assert reads == [session.context_files[root_id]]
    [lock] = (store.root / SAVE_LOCKS_DIR).iterdir()  # one lock file, outside the session folder
    assert session.base is not None and session.base.token == lock.read_text() != ""
    assert not [p.name for p in session.directory.iterdir() if "lock" in p.name]  # type: ignore[union-attr]


def test_soapwb_prints_a_conflict_as_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a command that saves shows when another writer got there first."""
    store, uuid, root_id = new_store(tmp_path)
    a, b = store.load_session(uuid), store.load_session(uuid)
    say(b, root_id, "B")
    store.save_session(b)
    say(a, root_id, "A")
    with pytest.raises(SaveConflictError) as refused:
        store.save_session(a)
    assert main(["ls", "--store", str(store.root)]) == 0  # the store stays usable
    line = str(refused.value)
    assert "\n" not in line and a.context_files[root_id] in line
    capsys.readouterr()


# -- real processes racing ---------------------------------------------------------------------


@contextlib.contextmanager
def racers(root: Path, uuid: str, root_id: str, round_no: int, start: Any) -> Iterator[list[tuple[Any, int]]]:
    runs = []
    try:
        for i in range(RACERS):
            read, write = os.pipe()
            name = f"r{round_no}-p{i}"
            process = FORK.Process(
                target=sr.racer,
                args=(str(root), uuid, root_id, name, round_no * 100 + i, start, write),
                daemon=True,
            )
            process.start()
            os.close(write)
            runs.append((process, read))
        yield runs
    finally:
        for process, read in runs:
            if process.is_alive():
                process.kill()
            process.join(30)
            os.close(read)


def read_report(read: int) -> dict[str, Any]:
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    text = b"".join(chunks).decode()
    assert text, "a racer died without reporting"
    return dict(json.loads(text))


def test_processes_appending_and_forking_at_once_keep_every_message_and_every_fork(tmp_path: Path) -> None:
    count_text("warm up")  # the tokenizer, loaded once before the forks
    root = tmp_path / "store"
    root.mkdir()
    uuids = [f"20261203-{i:08d}-aaaa-4bbb-8ccc-{i:012d}" for i in range(SESSIONS)]
    root_ids = {u: sr.new_session(root, u) for u in uuids}
    expected_messages: dict[str, Counter[str]] = {u: Counter() for u in uuids}
    expected_forks: dict[str, list[str]] = {u: [] for u in uuids}
    figures: Counter[str] = Counter()
    started = time.monotonic()
    rng = random.Random(22)
    for round_no in range(ROUNDS):
        uuid = rng.choice(uuids)
        start = FORK.Event()
        with racers(root, uuid, root_ids[uuid], round_no, start) as runs:
            start.set()
            reports = [read_report(read) for _process, read in runs]
        for report in reports:
            expected_messages[uuid][f"from {report['name']}"] += 1
            expected_forks[uuid].append(report["added"]["fork"])
            figures["appends"] += 1
            figures["forks"] += 1
            figures["attempts redone after a conflict"] += sum(report["attempts"].values()) - 2
        session = Store(root).load_session(uuid)
        root_context = session.contexts[root_ids[uuid]]
        found = Counter(t for t in texts(root_context) if t.startswith("from "))
        lost = expected_messages[uuid] - found
        doubled = found - expected_messages[uuid]
        assert not lost and not doubled, f"round {round_no}: lost {lost}, doubled {doubled}"
        missing_children = set(expected_forks[uuid]) - set(root_context.children)
        missing_files = set(expected_forks[uuid]) - set(session.contexts)
        assert not missing_children and not missing_files, (
            f"round {round_no}: {missing_children} {missing_files}"
        )
        assert not session.load_errors
        figures["rounds"] += 1
    store = Store(root)
    assert all(s.error is None for s in store.sessions())
    figures["messages lost"] = figures["forks lost"] = 0  # every round checked it above
    figures["seconds"] = round(time.monotonic() - started)
    FIGURES.mkdir(parents=True, exist_ok=True)
    (FIGURES / "writers.json").write_text(
        json.dumps({"full": FULL, "racers per round": RACERS, **figures}, indent=2)
    )
    assert figures["attempts redone after a conflict"] > 0, figures  # the racers did collide


def test_a_save_that_changes_no_file_leaves_the_save_token_as_it_was(tmp_path: Path) -> None:
    """Another writer's loaded copy then still saves at once, without reading back."""
    store, uuid, root_id = new_store(tmp_path)
    session = store.load_session(uuid)
    say(session, root_id, "one")
    store.save_session(session)
    [lock] = (store.root / SAVE_LOCKS_DIR).iterdir()
    token = lock.read_text()
    other = store.load_session(uuid)
    assert store.save_session(store.load_session(uuid)) == []  # nothing changed: no lock taken
    replaced = store.load_session(uuid)
    replaced.contexts[root_id] = Context.from_dict(replaced.contexts[root_id].to_dict())  # same content anew
    assert store.save_session(replaced) == []
    assert lock.read_text() == token
    say(other, root_id, "two")
    store.save_session(other)
    assert texts(store.load_session(uuid).contexts[root_id])[-2:] == ["one", "two"]
