"""Processes that change one session at the same moment, for the concurrent-save tests.

Each racer is forked from the warm test process, waits for a shared start signal, then
appends one message to the session's root context and forks that context once (in an
order of its own), each through :meth:`Store.update_session`, which loads again and
redoes the change when another process saved the same part first. It reports on its
pipe what it added and how many attempts each change took, as one JSON line.
"""

from __future__ import annotations

import json
import os
import random
from multiprocessing.synchronize import Event
from pathlib import Path

from soap_core import Context, Message, Session, Store, TextPart

ROLE = "Racer"


def new_session(root: Path, uuid: str) -> str:
    """A session whose root context has a system prompt and one user message."""
    context = Context.create("You are a racer.")
    context.append(Message.create("user", [TextPart("start")]))
    session = Session.create(ROLE, context)
    session.uuid = uuid
    Store(root).save_session(session)
    return context.id


def racer(root: str, uuid: str, root_id: str, name: str, seed: int, start: Event, report: int) -> None:
    store = Store(root)
    rng = random.Random(seed)
    attempts = {"append": 0, "fork": 0}
    added: dict[str, str] = {}

    def append(session: Session) -> str:
        attempts["append"] += 1
        message = Message.create("user", [TextPart(f"from {name}")])
        session.contexts[root_id].append(message)
        return message.id

    def fork(session: Session) -> str:
        attempts["fork"] += 1
        parent = session.contexts[root_id]
        child = parent.fork(range(len(parent.messages)))
        session.add_context(child)
        return child.id

    changes = [("append", append), ("fork", fork)]
    rng.shuffle(changes)
    start.wait(30)
    for kind, change in changes:
        added[kind] = store.update_session(uuid, change)
    os.write(report, (json.dumps({"name": name, "added": added, "attempts": attempts}) + "\n").encode())
    os.close(report)
