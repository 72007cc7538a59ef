"""``soapwb follow`` in a process of its own prints what another writer saves meanwhile:
a new session, its new messages and a fork, each once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from soap_core import Context, Message, Session, Store, TextPart
from tests.cli_process import REPO


def test_follow_prints_a_new_session_its_messages_and_a_fork_as_they_are_saved(store_copy: Path) -> None:
    environ = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [sys.executable, "-m", "soapwb.cli", "follow", "--store", str(store_copy), "--for", "12"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environ,
    )
    assert process.stdout is not None
    assert process.stdout.readline().startswith("following ")  # the follower is in place
    store = Store(store_copy)
    context = Context.create("follow me")
    context.append(Message.create("user", [TextPart("one")]))
    session = Session.create("Followed", context)
    store.save_session(session)
    time.sleep(1.5)
    context.append(Message.create("user", [TextPart("two")]))
    store.save_session(session)
    time.sleep(1.5)
    session.add_context(context.fork(range(2)))
    store.save_session(session)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    lines = out.splitlines()
    assert lines == [
        f"new session: Followed {session.uuid} 2 messages",
        f"messages: Followed {session.uuid} now 3 messages",
        f"new context: Followed {session.uuid} now 2 contexts",
    ], out
