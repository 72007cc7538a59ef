"""The Log Analyzer app of the sOAP seed, as agentic classes.

:class:`LogAnalyzer` answers questions about one log file with tools that grep, tail and
count its lines. Like the seed's app it compacts its session with a rolling token window
before every model call: over ``rolling_window_max_tokens`` (60,000 by default, as in the
app's config file) it keeps the most recent half. Its ``summarize_chunk`` tool hands a
range of lines to a :class:`ChunkSummarizer`, whose ``extract_keywords`` tool asks a
:class:`KeywordExtractor`; each invocation runs in its own session, so one question to
the analyzer leaves a chain of three sessions on disk.

The tools do the exact work in code and return what they found; the model chooses when
to call them (or is told to, by the caller's ``tool_choice``). Arguments from a small
model are often rough, so the tools accept them leniently: HTML-escaped quotes are
undone, an invalid regular expression is searched as plain text, and counts and line
ranges are clamped to what the file has.
"""

from __future__ import annotations

import copy
import dataclasses
import html
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soap_core.runtime import AgenticObject, ModelSettings, RollingTokenWindow, Runtime, ToolSpec, tool

DEFAULT_ROLLING_WINDOW_MAX_TOKENS = 60_000
"""The seed's ``rolling_window_max_tokens``: compact once a session is over this size."""
MAX_LINES_SHOWN = 8
"""The most log lines a tool returns at once: a result must fit in the window it feeds."""
MAX_CHUNK_LINES = 8
MAX_PATTERN_LENGTH = 40
LEVELS = ("INFO", "WARN", "ERROR")
_WORD = re.compile(r"[a-z][a-z0-9_-]{2,}")
_COMMON_WORDS = (
    "the and for with from after into on in of to at by was were is are not has had "
    "ms get post put delete info warn error took done waiting"
)
_STOPWORDS = frozenset(_COMMON_WORDS.split())


# -- driving a small model through the server's function-calling grammar ------------------
# Shared by the demo apps. A tool call forced by name is generated under a grammar made
# from the tool's JSON schema, so the schema is where code can keep a small model's
# arguments usable: short, on one line, and always finished within ``max_tokens``.


def one_line_text(max_length: int) -> dict[str, Any]:
    """The JSON schema of a text of at most ``max_length`` characters without control
    characters, quotes or backslashes. The server's grammar for a plain string lets a raw
    newline in, which strict JSON (and so the runtime) rejects."""
    return {"type": "string", "pattern": f'^[^\\x00-\\x1f"\\\\]{{0,{max_length}}}$'}


ANSWER_SCHEMA = one_line_text(80)
"""What every invocation of the demo apps returns: a short text, through ``produce_output``."""


def forced_answer(agent: AgenticObject, prompt: str, first_tool: str, thread: str | None = None) -> str:
    """One invocation of ``agent``: its first model call must use ``first_tool``, the next
    one gives the answer (:data:`ANSWER_SCHEMA`, through ``produce_output``)."""
    answer = agent.invoke(prompt, thread, ANSWER_SCHEMA, tool_choice=first_tool, follow_up="produce_output")
    return str(answer)


def bounded_strings(spec: ToolSpec, max_length: int) -> ToolSpec:
    """``spec`` with a ``maxLength`` on every string parameter, so that a forced call ends
    within ``max_tokens``. (Not :func:`one_line_text`: the model sees the tool schemas in
    its prompt and copies a regular expression found there into its arguments.)"""
    parameters = copy.deepcopy(spec.parameters)
    for schema in parameters["properties"].values():
        if schema.get("type") == "string":
            schema["maxLength"] = max_length
    return dataclasses.replace(spec, parameters=parameters)


def clean_argument(value: str) -> str:
    """A string argument as meant: the server's prompt template HTML-escapes earlier
    arguments, and a small model copies the escapes (and stray quotes) into new ones."""
    return html.unescape(str(value)).strip().strip("\"'").strip()


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(int(value), high))


def level_of(line: str) -> str | None:
    """The level of a log line in the sample format (``<time> <LEVEL> <component> ...``)."""
    fields = line.split(maxsplit=2)
    return fields[1] if len(fields) > 1 and fields[1] in LEVELS else None


def level_counts(lines: list[str]) -> dict[str, int]:
    counts = Counter(level_of(line) for line in lines)
    return {level: counts.get(level, 0) for level in LEVELS}


@dataclass(frozen=True)
class ChunkSummary:
    """What the summarizer made of a range of lines: the model's text, and what code
    counted exactly."""

    first_line: int
    last_line: int
    text: str
    keywords: list[str]
    levels: dict[str, int]

    def render(self) -> str:
        levels = ", ".join(f"{n} {level}" for level, n in self.levels.items())
        return (
            f"Lines {self.first_line}-{self.last_line} ({levels}); "
            f"keywords: {', '.join(self.keywords) or 'none'}. Summary: {self.text.strip() or '(empty)'}"
        )


class KeywordExtractor(AgenticObject):
    """Finds the words that characterise a piece of log text (the third object of the
    analyzer's chain). The text is handed over in code, as state, not through the model."""

    system_prompt = "You find the keywords of log lines."
    settings = ModelSettings(max_tokens=128, max_iterations=4)

    def __init__(self, *, runtime: Runtime | None = None, object_id: str | None = None) -> None:
        super().__init__(runtime=runtime, object_id=object_id)
        self.texts_seen = 0
        self.last_terms: list[str] = []
        self._text: list[str] = []

    @tool
    def top_terms(self, n: int = 5) -> list[dict[str, Any]]:
        """The most frequent meaningful words of the text, with their counts.

        Args:
            n: how many words (1 to 10).
        """
        words = Counter(
            word
            for line in self._text
            for word in _WORD.findall(line.lower().split(maxsplit=1)[-1])  # not the timestamp
            if word not in _STOPWORDS and not word.isdigit()
        )
        top = words.most_common(_clamp(n, 1, 10))
        self.last_terms = [word for word, _ in top]
        return [{"term": word, "count": count} for word, count in top]

    def extract(self, lines: list[str], n: int = 5) -> list[str]:
        """Invoke this object (a new session) on ``lines``; the keywords its tool found."""
        self._text = list(lines)
        self.texts_seen += 1
        self.last_terms = []
        prompt = f"Find the {_clamp(n, 1, 10)} keywords of the {len(lines)} log lines you were given."
        forced_answer(self, prompt, "top_terms")
        return list(self.last_terms)


class ChunkSummarizer(AgenticObject):
    """Summarises a range of log lines; asks its :class:`KeywordExtractor` for keywords."""

    system_prompt = "You summarise log lines in one sentence: what happened, what went wrong."
    settings = ModelSettings(max_tokens=128, max_iterations=4)

    def __init__(
        self,
        *,
        extractor: KeywordExtractor | None = None,
        runtime: Runtime | None = None,
        object_id: str | None = None,
    ) -> None:
        super().__init__(runtime=runtime, object_id=object_id)
        self.chunks_summarized = 0
        self.last_range: list[int] | None = None
        self.last_keywords: list[str] = []
        self._chunk: list[str] = []
        self._extractor = extractor or KeywordExtractor(
            runtime=runtime, object_id=f"{self.object_id}.keywords"
        )

    @tool
    def extract_keywords(self, max_keywords: int = 5) -> list[str]:
        """Ask the keyword extractor for the words that characterise the chunk.

        Args:
            max_keywords: how many keywords (1 to 10).
        """
        self.last_keywords = self._extractor.extract(self._chunk, max_keywords)
        return self.last_keywords

    def summarize(self, lines: list[str], first_line: int = 1) -> ChunkSummary:
        """Invoke this object (a new session) on ``lines``, numbered from ``first_line``."""
        self._chunk = list(lines)
        last_line = first_line + len(lines) - 1
        self.last_range = [first_line, last_line]
        self.last_keywords = []
        prompt = f"Summarise log lines {first_line}-{last_line}:\n" + "\n".join(lines)
        text = forced_answer(self, prompt, "extract_keywords")
        self.chunks_summarized += 1
        return ChunkSummary(first_line, last_line, text, list(self.last_keywords), level_counts(lines))


def _within_store(path: Path | str, runtime: Runtime | None) -> str:
    """``path`` relative to ``runtime``'s store when it lies inside it, else as given."""
    if runtime is None or not Path(path).is_absolute():
        return str(path)
    try:
        return Path(path).resolve().relative_to(runtime.store.root.resolve()).as_posix()
    except ValueError:
        return str(path)


class LogAnalyzer(AgenticObject):
    """Answers questions about one log file (the seed's Log Analyzer app)."""

    system_prompt = "You are a log analyst: you answer questions about a log file with your tools."
    settings = ModelSettings(max_tokens=128, max_iterations=4)
    compaction = RollingTokenWindow(threshold=DEFAULT_ROLLING_WINDOW_MAX_TOKENS, keep=0.5)

    def __init__(
        self,
        log_path: Path | str,
        *,
        rolling_window_max_tokens: int = DEFAULT_ROLLING_WINDOW_MAX_TOKENS,
        summarizer: ChunkSummarizer | None = None,
        runtime: Runtime | None = None,
        object_id: str | None = None,
    ) -> None:
        super().__init__(runtime=runtime, object_id=object_id)
        self.log_path = _within_store(log_path, runtime)
        """The log file; relative to the store when it lies inside it, so a store that is
        moved or renamed (``make run`` builds the demo under another name) still finds it."""
        self.rolling_window_max_tokens = rolling_window_max_tokens
        self.lines_scanned = 0
        self.lines_returned = 0
        self.tool_calls: dict[str, int] = {}
        self.chunks_summarized = 0
        if rolling_window_max_tokens != DEFAULT_ROLLING_WINDOW_MAX_TOKENS:
            # The runtime reads ``compaction`` from the object, so one object can differ
            # from its class (the seed's app reads the value from its config file).
            self.compaction = RollingTokenWindow(threshold=rolling_window_max_tokens, keep=0.5)
        self._summarizer = summarizer or ChunkSummarizer(
            runtime=runtime, object_id=f"{self.object_id}.summarizer"
        )

    @classmethod
    def rebuild(cls, state: Mapping[str, Any], *, runtime: Runtime, object_id: str) -> LogAnalyzer:
        """For a re-run: the constructor needs the log file, which the state records."""
        limit = int(state.get("rolling_window_max_tokens", DEFAULT_ROLLING_WINDOW_MAX_TOKENS))
        analyzer = cls(
            str(state["log_path"]), rolling_window_max_tokens=limit, runtime=runtime, object_id=object_id
        )
        analyzer.restore(state)
        return analyzer

    def tools(self) -> list[ToolSpec]:
        return [bounded_strings(spec, MAX_PATTERN_LENGTH) for spec in super().tools()]

    def ask(self, question: str, *, first_tool: str, thread: str | None = "triage") -> str:
        """One question on ``thread``: the first model call must use ``first_tool``, the
        next one gives the answer (a short text, through ``produce_output``)."""
        return forced_answer(self, question, first_tool, thread)

    @property
    def log_file(self) -> Path:
        """:attr:`log_path` as a path to open (a relative one lies in the runtime's store)."""
        path = Path(self.log_path)
        return path if path.is_absolute() else self.runtime.store.root / path

    def _read(self, tool_name: str) -> list[str]:
        lines = self.log_file.read_text(encoding="utf-8").splitlines()
        self.lines_scanned += len(lines)
        self.tool_calls[tool_name] = self.tool_calls.get(tool_name, 0) + 1
        return lines

    def _show(self, numbered: list[tuple[int, str]]) -> list[str]:
        self.lines_returned += len(numbered)
        return [f"{number}: {line}" for number, line in numbered]

    @tool
    def grep(self, text: str, max_lines: int = 10) -> str:
        """Find the log lines containing a text (a regular expression; case-insensitive).

        Args:
            text: what to look for, e.g. ERROR or timeout.
            max_lines: the most lines to show (1 to 8).
        """
        lines = self._read("grep")
        pattern = clean_argument(text)
        try:
            regex = re.compile(pattern, re.IGNORECASE)
        except re.error:
            regex = re.compile(re.escape(pattern), re.IGNORECASE)
        hits = [(i, line) for i, line in enumerate(lines, 1) if regex.search(line)]
        shown = hits[: _clamp(max_lines, 1, MAX_LINES_SHOWN)]
        header = f"{len(hits)} of {len(lines)} lines match {pattern!r}"
        header += f"; the first {len(shown)}:" if shown else "."
        return "\n".join([header, *self._show(shown)])

    @tool
    def tail(self, n: int = 10) -> str:
        """The last lines of the log.

        Args:
            n: how many lines (1 to 8).
        """
        lines = self._read("tail")
        count = _clamp(n, 1, MAX_LINES_SHOWN)
        start = max(len(lines) - count, 0)
        shown = list(enumerate(lines[start:], start + 1))
        return "\n".join([f"The last {len(shown)} of {len(lines)} lines:", *self._show(shown)])

    @tool
    def count_lines(self, text: str | None = None) -> dict[str, Any]:
        """Count the log lines, by level, and those containing a text.

        Args:
            text: what to look for (a regular expression); leave it out to count all lines.
        """
        lines = self._read("count_lines")
        result: dict[str, Any] = {"total": len(lines), "by_level": level_counts(lines)}
        if text:
            text = clean_argument(text)
            try:
                regex = re.compile(text, re.IGNORECASE)
            except re.error:
                regex = re.compile(re.escape(text), re.IGNORECASE)
            result["text"] = text
            result["matching"] = sum(1 for line in lines if regex.search(line))
        return result

    @tool
    def summarize_chunk(self, start: int, end: int) -> str:
        """Have the chunk summarizer summarise a range of lines (at most 8).

        Args:
            start: the first line number (from 1).
            end: the last line number.
        """
        lines = self._read("summarize_chunk")
        first = _clamp(start, 1, max(len(lines), 1))
        limit = min(first + MAX_CHUNK_LINES - 1, len(lines))
        last = limit if end < first else _clamp(end, first, limit)
        summary = self._summarizer.summarize(lines[first - 1 : last], first_line=first)
        self.lines_returned += last - first + 1
        self.chunks_summarized += 1
        return summary.render()
