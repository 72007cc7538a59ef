"""``soapwb ls``, ``show``, ``tree`` and ``search``: reading a store."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from soap_core import UNKNOWN_ROLE, fork_tree, message_rows, search_store, session_overviews
from soap_core._tree import tree_lines
from soapwb.common import (
    SESSION_HELP,
    UsageError,
    add_progress_option,
    emit_json,
    format_table,
    open_store,
    role_names,
    store_command,
    terminal_time,
)


def register(commands: Any) -> None:
    ls = commands.add_parser("ls", help="list the sessions of a store")
    ls.add_argument(
        "--recount",
        action="store_true",
        help="rebuild the store's catalog from the files, counting every token again "
        "(the catalog otherwise reads only files that changed)",
    )
    add_progress_option(ls)
    store_command(ls, cmd_ls)

    show = commands.add_parser("show", help="show the messages of a session's context")
    show.add_argument("session", metavar="SESSION", help=SESSION_HELP)
    show.add_argument("--context", metavar="ID", help="context id or prefix (default: the active one)")
    show.add_argument(
        "--chronological", action="store_true", help="order by sequence number instead of display order"
    )
    store_command(show, cmd_show)

    tree = commands.add_parser("tree", help="show a session's fork tree")
    tree.add_argument("session", metavar="SESSION", help=SESSION_HELP)
    store_command(tree, cmd_tree)

    search = commands.add_parser(
        "search", help="find the messages whose content contains a text (case-insensitive)"
    )
    search.add_argument("text", metavar="TEXT", help="the text to find: text, thinking and tool traffic")
    search.add_argument("--limit", type=int, default=200, metavar="N", help="at most N hits (default 200)")
    add_progress_option(search)
    store_command(search, cmd_search)


def cmd_ls(args: argparse.Namespace) -> int:
    store = open_store(args)
    catalog = store.catalog() if args.recount else None
    if catalog is not None:
        catalog.clear()
    rows = session_overviews(store)
    if args.json:
        emit_json([row.as_dict() for row in rows])
        return 0
    if not rows:
        print(f"no sessions in {store.root} (looked in {store.agents_dir} and {store.sessions_dir})")
        return 0
    shown = role_names(store, *(r.role for r in rows))
    table = [
        (
            f"{shown[r.role]} ({r.instance})" if r.instance else shown[r.role],
            r.uuid,
            r.thread_id,
            "yes" if r.is_active else "no",
            r.contexts,
            r.messages,
            r.tokens,
            terminal_time(r.first_timestamp),
            terminal_time(r.last_timestamp),
        )
        for r in rows
    ]
    headers = ("ROLE", "SESSION", "THREAD", "ACTIVE", "CONTEXTS", "MESSAGES", "TOKENS", "FIRST", "LAST")
    print(format_table(headers, table))
    for r in rows:
        if r.error:
            print(f"broken: {shown[r.role]}/{r.uuid}: {r.error}")
    for problem in store.instance_problems():
        print(f"broken instance: {problem} (the sessions it claims are listed as {UNKNOWN_ROLE})")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    store = open_store(args)
    session, context = store.load_context(args.session, args.context)  # that one file, not the session
    rows = message_rows(context, chronological=args.chronological)
    header: dict[str, Any] = {
        "role": session.role,
        "session": session.uuid,
        "thread_id": session.thread_id,
        "context": context.id,
        "active": context.id == session.active_context_id,
        "origin_context_id": context.origin_context_id,
        "anchor_points": [list(a) for a in context.anchor_points],
        "tokens": context.total_token_count(),
    }
    if args.json:
        emit_json(
            {
                **header,
                "messages": [r.as_dict() for r in rows],
                "load_errors": {k: str(v) for k, v in session.load_errors.items()},
            }
        )
        return 0
    origin = f"  fork of {context.origin_context_id}" if context.origin_context_id else ""
    print(f"{role_names(store, session.role)[session.role]}/{session.uuid}  context {context.id}{origin}")
    print(f"{len(rows)} messages, {header['tokens']} tokens (cl100k_base)")
    table: list[tuple[object, ...]] = []
    for r in rows:
        tokens = f"{r.tokens} (cached {r.cached_tokens}, stale)" if r.stale else str(r.tokens)
        table.append((r.index, r.sequence_number, r.role, ",".join(r.parts) or "-", tokens, r.preview))
        if not args.chronological:
            table.extend(("", "", "", "", "", f"── anchor {name}") for name in r.anchors_after)
    print(format_table(("#", "SEQ", "ROLE", "PARTS", "TOKENS", "CONTENT"), table))
    for name, error in session.load_errors.items():
        print(f"unreadable: {name}: {error}")
    return 0


def cmd_tree(args: argparse.Namespace) -> int:
    store = open_store(args)
    session = store.load_session(args.session, require_active=False)
    nodes = fork_tree(session)
    if args.json:
        emit_json(
            {
                "role": session.role,
                "session": session.uuid,
                "active_context_id": session.active_context_id,
                "contexts": [dataclasses.asdict(n) for n in nodes],  # every field of the node
                "unreadable_files": {k: str(v) for k, v in session.load_errors.items()},
            }
        )
        return 0
    print(f"{role_names(store, session.role)[session.role]}/{session.uuid}")
    from replay import session_names  # here: ls and show need not load replay

    for line in tree_lines(nodes, session_names(session).names):  # named as the pages name them
        print(line)
    for name, error in session.load_errors.items():
        print(f"unreadable: {name}: {error}")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    """The Sessions page's search: each message once, the active context's copy first."""
    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    if not args.text:
        raise UsageError("the text to find is empty")
    store = open_store(args)
    hits = search_store(store, args.text, limit=args.limit)
    if args.json:
        emit_json([hit.as_dict() for hit in hits])
        return 0
    if not hits:
        print(f"no message contains {args.text!r}")
        return 0
    shown = role_names(store, *(h.role for h in hits))
    rows = [(shown[h.role], h.session, h.context_id, h.index, h.message_role, h.snippet) for h in hits]
    print(format_table(("ROLE", "SESSION", "CONTEXT", "MESSAGE", "FROM", "SNIPPET"), rows))
    if len(hits) == args.limit:
        print(f"(the first {args.limit} hits: --limit shows more)")
    return 0
