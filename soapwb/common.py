"""Pieces every ``soapwb`` command shares: the store options, JSON and table output."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TextIO

import orjson

from soap_core import Store, parse_storage_options, shown, time_text
from soap_core import open_store as open_any_store
from soap_core import use_storage_options as set_storage_options
from soap_core._names import distinct_names, escape_controls

if TYPE_CHECKING:
    from soap_core.runtime import LLMEndpoint


MIB = 1024 * 1024


class UsageError(Exception):
    """A command was called in a way that cannot work (no store given, ...)."""


Handler = Callable[[argparse.Namespace], int]


def store_command(parser: argparse.ArgumentParser, handler: Handler) -> None:
    """Make ``parser`` a command on a store, run by ``handler``. Called last, so that
    ``--store`` and ``--json`` come last in ``--help``."""
    parser.set_defaults(handler=handler)
    parser.add_argument(
        "--store",
        metavar="DIR|URL",
        default=os.environ.get("SOAPWB_STORE"),
        help="the store: a peteos config dir (holding peteos.json, .peteos/, agents/ or sessions/), "
        "or its agents/ or sessions/ folder, or such a folder on object storage "
        "(s3://bucket/prefix) (default: $SOAPWB_STORE)",
    )
    add_storage_option(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def add_storage_option(parser: argparse.ArgumentParser) -> None:
    """``--storage-option KEY=VALUE`` (repeatable): fsspec options for a store given as a
    URL (``endpoint_url=http://127.0.0.1:9000``, ``anon=true``)."""
    parser.add_argument(
        "--storage-option",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="for a store on object storage (s3://bucket/prefix): an fsspec storage option, "
        "e.g. endpoint_url=http://127.0.0.1:9000 or anon=true (repeatable; credentials also come "
        "from the usual AWS_* variables)",
    )


def use_storage_options(args: argparse.Namespace) -> None:
    """Make the command's ``--storage-option`` flags every store opener's default."""
    pairs = getattr(args, "storage_option", None)
    if pairs:
        try:
            options = parse_storage_options(pairs)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        set_storage_options(options)  # batch workers get them in their task (fleet.Location)


SESSION_HELP = (
    "session uuid or a unique prefix of one; ROLE/UUID or ROLE/PREFIX for a uuid under several roles "
    "(ROLE as ls shows it)"
)


def open_store(args: argparse.Namespace) -> Store:
    if not args.store:
        raise UsageError("no store given: pass --store DIR or set SOAPWB_STORE")
    use_storage_options(args)
    store = open_any_store(args.store)
    refuse_non_store(store)
    return store


def refuse_non_store(store: Store) -> None:
    """UsageError for a folder that is no sOAP store: it holds other things but neither
    ``agents/`` nor ``sessions/`` (``/tmp`` listed as "no sessions" looked like an empty
    store). An empty folder is an empty store."""
    root = store.root
    if not root.is_dir() or store.agents_dir.is_dir() or store.sessions_dir.is_dir():
        return  # a missing path or a file: the store's own error names it
    try:  # the workbench's own files (its catalog, its save locks) do not make a store
        empty = not any(not entry.name.startswith(".soapwb") for entry in root.iterdir())
    except OSError as exc:
        raise UsageError(f"{root} cannot be read: {exc.strerror or exc}") from None
    if not empty:
        raise UsageError(
            f"{root} is not a sOAP store: it has no agents/ or sessions/ folder (nor a .peteos holding one)"
        )


def role_names(store: Store, *roles: str) -> dict[str, str]:
    """Each of ``roles`` -> how text output shows it: as it is, unless another role of
    the store would print the same way (``Café`` composed and decomposed), when both are
    shown with their combining marks escaped (:func:`soap_core._names.distinct_names`)."""
    return distinct_names([*store.roles(), *roles])


_SURROGATE = re.compile("[\ud800-\udfff]")
_RAW_IN_JSON = re.compile("[\x7f-\x9f]")
"""DEL and C1 controls, which JSON encoders leave raw in strings (U+009B is a CSI)."""


def emit_json(value: Any) -> None:
    """``value`` as indented JSON on stdout: orjson where it can (the standard library's
    indenting encoder is pure Python: 0.4 s for a listing of 10,000 sessions), the
    standard library for what orjson refuses (lone surrogates, integers past 64 bits).

    The output is always UTF-8: a lone surrogate (a JSON file may hold ``"\\ud800"``, which
    is no Unicode character and has no UTF-8 form) is written as that same ``\\uXXXX``
    escape, which reads back as the value the file held, and stderr says so."""
    try:
        text = orjson.dumps(value, default=str, option=orjson.OPT_INDENT_2).decode("utf-8")
    except (TypeError, orjson.JSONEncodeError):
        text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
        text, escaped = _SURROGATE.subn(lambda m: f"\\u{ord(m.group()):04x}", text)
        if escaped:
            print(
                f"soapwb: note: {escaped} lone surrogate(s) in the data (text that is not valid Unicode) "
                "are written as \\uXXXX escapes",
                file=sys.stderr,
            )
    raw_possible = "\x7f" in text or not text.isascii()  # a 4 MB listing: 0.1 ms, the pattern 19
    if raw_possible and _RAW_IN_JSON.search(text):  # only inside strings: as \u escapes, the same values
        text = _RAW_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    print(text)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Plain left-aligned columns; None shows as '-'. A control character in a cell is
    shown escaped and the columns are as wide as what is shown (one look over the whole
    text; the cells are escaped one by one only when it finds one)."""
    cells = [[("-" if v is None else str(v)) for v in row] for row in rows]
    text = _layout(headers, cells)
    if escape_controls(text) is text:
        return text
    return _layout(headers, [[escape_controls(c) for c in row] for row in cells])


def _layout(headers: Sequence[str], cells: list[list[str]]) -> str:
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


class TerminalText:
    """A text stream that shows every control character but tab and newline as a
    visible escape (:func:`soap_core._names.escape_controls`): :func:`terminal_safe_output`
    puts one over stdout and one over stderr for a whole command, so no message, file
    name, id or error text can clear the screen, recolour it, retitle the window or plant
    a link. ``terminal`` is the stream below, for :func:`progress_line` only."""

    def __init__(self, terminal: TextIO) -> None:
        self.terminal = terminal

    def write(self, text: str) -> int:
        self.terminal.write(escape_controls(shown(text)))  # a remote store's URL, not its cache path
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self.terminal.flush()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, reconfigure...
        return getattr(self.terminal, name)


@contextlib.contextmanager
def terminal_safe_output() -> Iterator[None]:
    """stdout and stderr as :class:`TerminalText` while the block runs, text and
    ``--json`` alike (JSON holds no raw control character: :func:`emit_json`). An
    exception other than SystemExit leaves them in place, so that the traceback Python
    prints for it (``SOAPWB_DEBUG=1``) is escaped too."""
    saved = sys.stdout, sys.stderr
    wrapped = [s if isinstance(s, TerminalText) else TerminalText(s) for s in saved]
    sys.stdout, sys.stderr = wrapped
    try:
        yield
    except Exception:
        raise
    except BaseException:
        sys.stdout, sys.stderr = saved
        raise
    sys.stdout, sys.stderr = saved


def progress_line(text: str, *, last: bool = False) -> None:
    """``text`` on stderr over the line the previous call wrote, a newline after it when
    ``last``: the carriage return is the one control character soapwb sends on purpose,
    so it goes to the stream below :class:`TerminalText` (``text`` itself escaped)."""
    stream = sys.stderr
    terminal = stream.terminal if isinstance(stream, TerminalText) else stream
    terminal.write(f"\r{escape_controls(text)}{chr(10) if last else ''}")
    terminal.flush()


def terminal_time(stamp: str | None) -> str:
    """A time as the text output shows it: to the second, in this machine's zone (marked
    when UTC), a naive stamp as written; ``--json`` keeps the stamp whole."""
    return time_text(stamp, datetime.now().astimezone().tzinfo, age=False)


_WORD_COLOURS = {"delete": "\x1b[31m", "insert": "\x1b[32m"}
_RESET = "\x1b[0m"


def colour_wanted() -> bool:
    """Colour on stdout when it is a terminal and $NO_COLOR is unset or empty
    (https://no-color.org)."""
    return not os.environ.get("NO_COLOR") and sys.stdout.isatty()


def print_words(words: Iterable[tuple[str, str]], prefix: str = "") -> None:
    """A word diff on stdout as git's word diff marks it (:func:`replay.marked_words`),
    ``[-only in the first-]`` and ``{+only in the second+}``; on a terminal the marked runs
    are red and green too. The colour codes are the only control characters written on
    purpose, so they go to the stream below :class:`TerminalText`; the words themselves
    are escaped."""
    from replay import marked_runs  # here: `soapwb ls` must not load replay (tests/test_cli.py)

    runs = marked_runs(words)
    if not colour_wanted():
        print(prefix + " ".join(marked for _, marked in runs))
        return
    stream = sys.stdout
    terminal = stream.terminal if isinstance(stream, TerminalText) else stream
    stream.flush()
    coloured = (
        f"{_WORD_COLOURS[op]}{escape_controls(marked)}{_RESET}"
        if op in _WORD_COLOURS
        else escape_controls(marked)
        for op, marked in runs
    )
    terminal.write(escape_controls(prefix) + " ".join(coloured) + "\n")
    terminal.flush()


def add_progress_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--progress",
        action="store_true",
        help="print progress on stderr even with --json or when stderr is not a terminal",
    )


def wants_progress(args: argparse.Namespace) -> bool:
    """Progress goes to stderr on a terminal, quiet with ``--json`` (a script reading
    the output waits for it) unless ``--progress`` asks for it; $SOAPWB_PROGRESS turns it
    on where stderr is not a terminal, as ``--progress`` does."""
    if getattr(args, "progress", False):
        return True
    if getattr(args, "json", False):
        return False
    return sys.stderr.isatty() or bool(os.environ.get("SOAPWB_PROGRESS"))


class Progress:
    """What a command that calls a model says on stderr while it works: one line when it
    starts (what it calls, where), then a bar with counts redrawn over itself."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.on = wants_progress(args)

    def say(self, text: str) -> None:
        if self.on:
            progress_line(text, last=True)

    def bar(self, done: int, total: int, unit: str, *, last: bool | None = None) -> None:
        if self.on and total > 0:
            filled = int(20 * min(done, total) / total)
            ended = done >= total if last is None else last
            progress_line(f"[{'#' * filled}{'.' * (20 - filled)}] {done}/{total} {unit}", last=ended)

    def status(self, text: str, *, last: bool = False) -> None:
        """A line redrawn over the previous one (``last``: then left standing)."""
        if self.on:
            progress_line(text, last=last)


STORE_WORK_SHOWN_AFTER_S = 0.5
"""The catalog's work that ends sooner draws no bar (a listing that reads three files)."""


class StoreWorkProgress:
    """The catalog's long work (``soap_core.reporting_progress``: a new store's first
    indexing, the text search filling in) as a bar on stderr, under the same rules as
    :class:`Progress`, drawn once the work has taken :data:`STORE_WORK_SHOWN_AFTER_S`
    and redrawn at most ten times a second; a line when it ends says what it did."""

    def __init__(self, progress: Progress, clock: Callable[[], float] = time.monotonic) -> None:
        self._progress = progress
        self._clock = clock
        self._started = 0.0
        self._drawn_at: float | None = None

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self._progress.on:
            return
        now = self._clock()
        if done == 0:
            self._started, self._drawn_at = now, None
            return
        ended = done >= total
        if self._drawn_at is None and now - self._started < STORE_WORK_SHOWN_AFTER_S:
            return
        if not ended and self._drawn_at is not None and now - self._drawn_at < 0.1:
            return
        self._drawn_at = now
        if not ended:
            unit = {"sessions": "sessions indexed (once)", "tokens": "files' tokens counted"}.get(
                stage, "files' text indexed for search"
            )
            self._progress.bar(done, total, unit, last=False)
            return
        took = now - self._started
        said = {
            "sessions": f"indexed {total:,} new or changed sessions in {took:.1f} s; "
            "the text search fills in at the first search",
            "tokens": f"counted the tokens of {total:,} files in {took:.1f} s",
        }.get(stage, f"indexed the text of {total:,} files for search in {took:.1f} s")
        self._progress.status(said.ljust(72), last=True)  # over the whole bar


@contextlib.contextmanager
def endpoint_for(args: argparse.Namespace) -> Iterator[LLMEndpoint]:
    """The endpoint asked for, else $OPENAI_BASE_URL, else a local model started for the run."""
    from soap_core.runtime import LLMEndpoint

    base_url = args.base_url or os.environ.get("OPENAI_BASE_URL")
    with contextlib.ExitStack() as stack:
        if not base_url:
            from local_model import LocalModelServer

            base_url = stack.enter_context(LocalModelServer(deterministic=True)).base_url
        yield LLMEndpoint(
            base_url,
            timeout=args.timeout,
            max_retries=args.retries,
            max_response_bytes=max(1, int(args.max_response_mb * MIB)),
        )
