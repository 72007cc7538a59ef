"""``soapwb follow``: print what agents write to a store while it runs (issue 27 point 3).

The same :class:`~soap_core.StoreFollower` as the workbench's pages: file events where
the kernel gives them, polling elsewhere. At each change the listing is taken again
(the catalog reads only what changed) and compared with the last one, so each new
session, new context (a fork) and message count that moved is printed once, as one line.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from soap_core import SessionOverview, Store, StoreFollower, session_overviews
from soapwb.common import open_store, store_command

Listing = dict[str, SessionOverview]


def register(commands: Any) -> None:
    follow = commands.add_parser(
        "follow", help="print new sessions, forks and messages as they are written to a store"
    )
    follow.add_argument(
        "--for", dest="seconds", type=float, default=None, metavar="S", help="stop after S seconds"
    )
    store_command(follow, cmd_follow)


def listing(store: Store) -> Listing:
    return {row.uuid: row for row in session_overviews(store)}


def changes(before: Listing, after: Listing) -> list[dict[str, Any]]:
    """What moved from one listing to the next, one entry per session that changed."""
    found = []
    for uuid, row in after.items():
        old = before.get(uuid)
        if old is None:
            found.append(
                {"event": "new session", "role": row.role, "session": uuid, "messages": row.messages}
            )
        elif row.contexts > old.contexts:
            found.append(
                {"event": "new context", "role": row.role, "session": uuid, "contexts": row.contexts}
            )
        elif (row.messages or 0) != (old.messages or 0):
            found.append({"event": "messages", "role": row.role, "session": uuid, "messages": row.messages})
    found.extend({"event": "gone", "role": before[u].role, "session": u} for u in before if u not in after)
    return found


def line(change: dict[str, Any]) -> str:
    what = {
        "new session": f"{change.get('messages')} messages",
        "new context": f"now {change.get('contexts')} contexts",
        "messages": f"now {change.get('messages')} messages",
        "gone": "",
    }[change["event"]]
    return f"{change['event']}: {change['role']} {change['session']} {what}".rstrip()


def cmd_follow(args: argparse.Namespace) -> int:
    store = open_store(args)
    follower = StoreFollower.of(store)
    deadline = None if args.seconds is None else time.monotonic() + args.seconds
    seen, last = follower.generation, listing(store)
    print(f"following {store.root} ({len(last)} sessions; Ctrl-C stops)", flush=True)
    try:
        while deadline is None or time.monotonic() < deadline:
            now = follower.wait_for_change(seen, 1.0)
            if now == seen:
                continue
            seen, current = now, listing(store)
            for change in changes(last, current):
                if args.json:
                    print(json.dumps(change), flush=True)  # one JSON object a line
                else:
                    print(line(change), flush=True)
            last = current
    except KeyboardInterrupt:
        pass
    finally:
        follower.stop()
    return 0
