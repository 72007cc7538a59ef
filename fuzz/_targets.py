"""The readers a fuzz case runs, and what each may do: return, or raise the project's
typed error naming a file. Each reader is called on its own (a typed error of one does
not spare the others), through :func:`attempt`.

The store readers run on the whole (small) store and on the session whose file was
mutated; the OpenPoke readers read the data dir, import it into a scratch store and read
that store back; the command-line target runs one ``soapwb`` command in this process with
its output captured as bytes (under the POSIX locale's ``surrogateescape``, where a lone
surrogate would come out as a byte that is not UTF-8).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from soap_core import FormatError, SoapError, Store, StoreError

T = TypeVar("T")


class ReaderFailure(Exception):
    """A reader broke its contract; ``what`` says which reader and how."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def check_error(error: SoapError, roots: tuple[Path, ...]) -> None:
    """A typed error must name the file it concerns: a FormatError its file, a store
    error a place in the store (not a uuid or an id read from a file)."""
    if isinstance(error, FormatError) and error.path is None:
        raise ReaderFailure(f"FormatError names no file: {error}")
    path = getattr(error, "path", None)
    if isinstance(error, StoreError) and path is not None:
        resolved = str(path)
        if not any(resolved.startswith(str(root)) for root in roots):
            raise ReaderFailure(
                f"{type(error).__name__} names {resolved!r}, not a file of the store: {error}"
            )


def attempt(roots: tuple[Path, ...], reader: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
    """``reader(*args)``, or None when it raised a typed error (checked)."""
    try:
        return reader(*args, **kwargs)
    except SoapError as exc:
        check_error(exc, roots)
        return None


# -- the store -----------------------------------------------------------------------------


class StoreCase:
    """The store of one case, its listing, and the sessions the readers look at (those
    in ``focus``, a folder relative to ``root``; all when None), loaded once."""

    def __init__(self, root: Path, focus: str | None, *, catalog: bool) -> None:
        self.root = root
        self.roots = (root,)
        self.store = Store(root, use_catalog=catalog)
        self.summaries = attempt(self.roots, self.store.sessions) or []
        chosen = [s for s in self.summaries if focus is None or str(s.path).startswith(str(root / focus))]
        self.chosen = chosen[:2]
        self._sessions: dict[str, Any] = {}

    def sessions(self) -> list[Any]:
        found = []
        for summary in self.chosen:
            name = summary.path.name
            if name not in self._sessions:
                self._sessions[name] = attempt(
                    self.roots, self.store.load_session, name, require_active=False
                )
            if self._sessions[name] is not None:
                found.append(self._sessions[name])
        return found


def _overview(case: StoreCase) -> None:
    from soap_core import session_overview

    for summary in case.summaries:
        session_overview(case.store, summary)
    attempt(case.roots, case.store.instance_problems)


def _search(case: StoreCase) -> None:
    from soap_core import search_store

    attempt(case.roots, search_store, case.store, "the")


def _find(case: StoreCase) -> None:
    for summary in case.chosen:
        attempt(case.roots, case.store.find, summary.uuid)
        attempt(case.roots, case.store.load_active_context, summary)
        attempt(case.roots, case.store.load_session, summary.path.name)


def _tree(case: StoreCase) -> None:
    from soap_core import describe_node, fork_tree, message_rows

    for session in case.sessions():
        attempt(case.roots, lambda s=session: s.active_context)
        for node in fork_tree(session):
            describe_node(node)
        for context in list(session.contexts.values())[:4]:
            message_rows(context)


def _materialize(case: StoreCase) -> None:
    from replay import materialize
    from soap_core import read_calls

    for session in case.sessions():
        calls = attempt(case.roots, read_calls, session.directory) or []
        for context in list(session.contexts.values())[:4]:
            for at in sorted({len(context.messages), len(context.messages) - 1, 1} - {-1}):
                attempt(case.roots, materialize, session, context, at, calls=calls)


def _verify(case: StoreCase) -> None:
    from replay import verify_session

    for session in case.sessions():
        attempt(case.roots, verify_session, session)


def _budgets(case: StoreCase) -> None:
    from analysis import call_budgets, message_budgets

    for session in case.sessions():
        attempt(case.roots, call_budgets, session)
        if session.active_context_id in session.contexts:
            message_budgets(session.contexts[session.active_context_id])


def _trace(case: StoreCase) -> None:
    from analysis import chain_budget
    from soap_core.runtime import invocation_chain

    for summary in case.chosen:
        attempt(case.roots, invocation_chain, case.store, summary.path.name)
        attempt(case.roots, chain_budget, case.store, summary.path.name)


STORE_READERS: dict[str, Callable[[StoreCase], None]] = {
    "overview": _overview,
    "search": _search,
    "find": _find,
    "tree": _tree,
    "materialize": _materialize,
    "verify": _verify,
    "budgets": _budgets,
    "trace": _trace,
}


def read_store(root: Path, focus: str | None, readers: list[str], *, catalog: bool) -> None:
    """The listing of the store at ``root``, then each of ``readers`` (names of
    :data:`STORE_READERS`) on the sessions in ``focus``."""
    case = StoreCase(root, focus, catalog=catalog)
    for name in readers:
        STORE_READERS[name](case)


# -- OpenPoke --------------------------------------------------------------------------------


def read_openpoke_dir(data_dir: Path, scratch: Path, *, import_it: bool) -> None:
    """Read the data dir; with ``import_it``, import it into ``scratch`` (a store made
    again at every case, so its writes skip their fsyncs) and read what was imported."""
    from importers.openpoke import import_openpoke, materialize_at, read_openpoke, tracks_at
    from soap_core._jsonio import unsynced_writes

    roots = (data_dir, scratch)
    attempt(roots, read_openpoke, data_dir)
    if not import_it:
        return
    with unsynced_writes():
        report = attempt(roots, import_openpoke, data_dir, scratch)
    if report is None:
        return
    json.dumps(report.as_dict(), default=str)
    store = Store(scratch, use_catalog=False)
    for summary in attempt(roots, store.sessions) or []:
        session = attempt(roots, store.load_session, summary.path.name, require_active=False)
        if session is None:
            continue
        for at in ("0", "entry:1", "-1"):
            attempt(roots, materialize_at, session, None, at)
        attempt(roots, tracks_at, session, 1)


# -- the command line --------------------------------------------------------------------------


def run_cli(argv: list[str]) -> tuple[int, bytes, bytes]:
    """``soapwb argv`` in this process: exit code, stdout and stderr as bytes."""
    from soapwb.cli import main

    out, err = io.BytesIO(), io.BytesIO()
    stdout = io.TextIOWrapper(out, encoding="utf-8", errors="surrogateescape", write_through=True)
    stderr = io.TextIOWrapper(err, encoding="utf-8", errors="backslashreplace", write_through=True)
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse
            code = exc.code if isinstance(exc.code, int) else 2
        finally:
            stdout.flush()
            stderr.flush()
    sys.stdout.flush()
    return code, out.getvalue(), err.getvalue()


def check_cli(argv: list[str]) -> None:
    """The command exits 0, 1 or 2 with UTF-8 output (valid JSON with ``--json``) and
    no traceback."""
    check_cli_result(argv, run_cli(argv))


def check_cli_result(argv: list[str], result: tuple[int, bytes, bytes]) -> None:
    """:func:`check_cli` of a command already run."""
    code, out, err = result
    shown = " ".join(argv)
    if code not in (0, 1, 2):
        raise ReaderFailure(f"soapwb {shown}: exit {code}: {err.decode('utf-8', 'replace').strip()[:300]}")
    try:
        text = out.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReaderFailure(f"soapwb {shown}: stdout is not UTF-8 (byte {exc.start})") from None
    if b"Traceback" in err:
        raise ReaderFailure(f"soapwb {shown}: a traceback on stderr")
    if code == 0 and "--json" in argv and argv[0] != "materialize":
        try:
            json.loads(text)
        except ValueError as exc:
            raise ReaderFailure(f"soapwb {shown}: --json output is not JSON: {exc}") from None


def cli_commands(root: Path, session: str | None) -> list[list[str]]:
    """The commands a CLI case may run on the store at ``root``."""
    store = ["--store", str(root), "--json"]
    commands = [["ls", *store], ["verify", *store]]
    if session is not None:
        commands += [
            ["show", session, *store],
            ["tree", session, *store],
            ["tokens", session, *store],
            ["trace", session, *store],
            ["materialize", session, "--at", "-1", *store],
            ["materialize", session, "--at", "1", *store],
        ]
    return commands
