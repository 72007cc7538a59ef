"""The demo store: both example apps run through a scripted scenario against a real model.

The local model is tiny, so the script decides what a large model would: which tool each
invocation starts with (a tool name as ``tool_choice``, which the server's
function-calling format turns into a grammar-constrained call), which execution agent
gets a task, and that the next call gives the answer through ``produce_output`` (a short
text under a grammar, so a cut-off or multi-line answer cannot stall the loop). Everything
else is real: the model writes the tool arguments and answers, the tools work on a real
log file and mailbox, and the runtime records every call, invocation, fork and refusal.

What the scenario leaves in the store:

* ``LogAnalyzer`` on one thread for six questions (a reused thread), with a small
  rolling-token-window threshold so that compaction forks its context at least once;
* ``LogAnalyzer → ChunkSummarizer → KeywordExtractor``: a chain three sessions deep;
* ``InteractionAgent`` on one thread for three user turns and a relayed report, delegating
  to two execution agents (``Email Search`` twice, on its one thread), its older
  conversation summarised by a ``WorkingMemory`` object (a fork, and another chain);
* one refused invocation: an execution agent reporting to the interaction agent whose
  turn is still running (the no-circle rule), delivered properly after the turn.

:func:`summarize_sessions` describes what a run wrote from the files alone.
"""

from __future__ import annotations

import contextlib
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from demo.log_analyzer import LogAnalyzer
from demo.poke import InteractionAgent
from soap_core import SessionSummary, Store, StoreError
from soap_core.runtime import (
    InvocationError,
    InvocationRecord,
    LLMEndpoint,
    Runtime,
    read_calls,
    read_invocations,
)

DEMO_ROLLING_WINDOW_MAX_TOKENS = 1_800
"""Small enough that the analyzer's thread is compacted during the demo; large enough
that half of it holds the system prompt, the tools and the newest exchange."""
DEMO_WORKING_MEMORY_MAX_TOKENS = 1_300
"""The interaction agent's summarising threshold in the demo: reached once, in turn three."""
LOG_LINES = 400
INCIDENT = range(180, 240)
"""Zero-based line numbers of the sample log's incident: database timeouts pile up."""
ANALYZER_THREAD = "triage"

ANALYZER_STEPS = (
    ("How many lines does the log have, and how many are errors? Call count_lines.", "count_lines"),
    ("What happened most recently? Show the last 10 lines.", "tail"),
    ("Are there timeouts? Call grep to look for timeout.", "grep"),
    ("Summarise lines 181 to 188 of the log, where the errors start.", "summarize_chunk"),
    ("Which lines mention db-1? Call grep to look for db-1.", "grep"),
    ("How many lines are warnings? Call count_lines to look for WARN.", "count_lines"),
)
"""The analyzer's questions, each with the tool its first model call must use."""

POKE_TURNS = (
    ("Find the emails from Dana about the team offsite.", "Email Search", "search_email"),
    ("Draft a reply to Dana: I will join the offsite on Thursday.", "Reply Drafts", "create_draft"),
    ("What did Email Search find? Tell me.", "Email Search", "report_to_interaction_agent"),
)
"""User turns: the message, the execution agent it goes to, and that agent's first tool."""

_NORMAL = (
    ("INFO", "api", "GET /orders/{n} 200 in {ms} ms"),
    ("INFO", "api", "POST /checkout 201 in {ms} ms"),
    ("INFO", "worker", "job {job} finished in {s} s"),
    ("INFO", "auth", "user u{n} signed in"),
    ("INFO", "cache", "hit ratio {p}%"),
)
_WARNINGS = (
    ("WARN", "db", "slow query on orders took {ms} ms"),
    ("WARN", "cache", "evicted {n} keys under memory pressure"),
    ("WARN", "api", "retrying payments-gateway call (attempt {k})"),
)
_ERRORS = (
    ("ERROR", "db", "timeout after 30 s waiting for a connection to db-1"),
    ("ERROR", "api", "POST /payments 502: payments-gateway timeout"),
    ("ERROR", "auth", "token refresh failed for user u{n}: invalid_grant"),
    ("ERROR", "worker", "job {job} failed: connection pool exhausted on db-1"),
)


def write_sample_log(path: Path, lines: int = LOG_LINES) -> Path:
    """A web service's log: mostly INFO, some WARN and ERROR, and an incident where
    database timeouts pile up. The same file every time (a seeded generator)."""
    rng = random.Random(20250611)
    clock = datetime(2025, 6, 11, 9, 0, 0, tzinfo=UTC)
    out = []
    for i in range(lines):
        clock += timedelta(seconds=rng.randint(1, 9))
        roll = rng.random()
        error_share, warn_share = (0.35, 0.2) if i in INCIDENT else (0.04, 0.1)
        kinds = _ERRORS if roll < error_share else _WARNINGS if roll < error_share + warn_share else _NORMAL
        level, component, template = rng.choice(kinds)
        message = template.format(
            n=rng.randint(1000, 9999),
            ms=rng.randint(5, 900) if level == "INFO" else rng.randint(900, 4000),
            s=rng.randint(1, 60),
            job=f"j{rng.randint(100, 999)}",
            p=rng.randint(60, 99),
            k=rng.randint(2, 4),
        )
        out.append(f"{clock:%Y-%m-%dT%H:%M:%SZ} {level:<5} {component:<6} {message}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


@dataclass(frozen=True)
class DemoSummary:
    """What one demo run wrote, as read back from the store's files."""

    store: str
    log_file: str
    sessions: dict[str, list[str]]
    """Role → the uuids of the sessions this run created."""
    invocations: int
    model_calls: int
    reused_threads: dict[str, int]
    """``Role/thread`` → invocations of that one session, for threads used more than once."""
    forks: dict[str, int]
    """``Role/session`` → contexts forked from another by compaction."""
    deepest_chain: list[str]
    """``Role/session`` of each invocation on the deepest chain, outermost first."""
    refusals: list[str]
    """One line per refused invocation: who asked for which session, and why not."""
    errors: list[str]
    """One line per invocation that ended in an error (the model gave up, or looped)."""
    elapsed_s: float = 0.0
    roles: dict[str, int] = field(default_factory=dict)

    @property
    def session_count(self) -> int:
        return sum(len(uuids) for uuids in self.sessions.values())

    @property
    def fork_count(self) -> int:
        return sum(self.forks.values())

    @property
    def chain_depth(self) -> int:
        return len(self.deepest_chain)

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "session_count": self.session_count,
            "fork_count": self.fork_count,
            "chain_depth": self.chain_depth,
        }


def build_demo_store(
    store_dir: Path,
    endpoint: LLMEndpoint,
    *,
    log_file: Path | None = None,
    rolling_window_max_tokens: int = DEMO_ROLLING_WINDOW_MAX_TOKENS,
    progress: Callable[[str], None] = lambda _step: None,
) -> DemoSummary:
    """Run the demo scenario against ``endpoint`` and write its sessions into ``store_dir``
    (created if missing; sessions already there are kept, and new objects get new ids so
    that none of their threads continues an older run's session). ``progress`` is told
    each step before it runs (on a loaded machine the whole run takes minutes)."""
    started = time.perf_counter()
    log_file = log_file or store_dir / "demo" / "app.log"
    try:
        store_dir.mkdir(parents=True, exist_ok=True)
        write_sample_log(log_file)
    except OSError as exc:
        raise StoreError(exc.filename or store_dir, f"cannot write the demo store: {exc.strerror}") from exc
    store = Store(store_dir)
    before = {(s.role, s.path.name) for s in store.sessions()}
    runtime = Runtime(store, endpoint)
    run = uuid.uuid4().hex[:6]
    run_log_analyzer(runtime, log_file, f"analyzer-{run}", rolling_window_max_tokens, progress)
    run_poke(runtime, f"poke-{run}", progress)
    written = [s for s in store.sessions() if (s.role, s.path.name) not in before]
    with contextlib.suppress(ValueError):  # inside the store: named from it, as the analyzer keeps it
        log_file = log_file.resolve().relative_to(store_dir.resolve())
    return summarize_sessions(store, written, log_file=log_file, elapsed_s=time.perf_counter() - started)


def run_log_analyzer(
    runtime: Runtime,
    log_file: Path,
    object_id: str,
    max_tokens: int,
    progress: Callable[[str], None] = lambda _step: None,
) -> LogAnalyzer:
    """Ask the analyzer every question of :data:`ANALYZER_STEPS` on one thread."""
    analyzer = LogAnalyzer(
        log_file, rolling_window_max_tokens=max_tokens, runtime=runtime, object_id=object_id
    )
    for n, (question, first_tool) in enumerate(ANALYZER_STEPS, 1):
        progress(f"Log Analyzer, question {n} of {len(ANALYZER_STEPS)}: {question}")
        with contextlib.suppress(InvocationError):  # recorded as the invocation's outcome
            analyzer.ask(question, first_tool=first_tool, thread=ANALYZER_THREAD)
    return analyzer


def run_poke(
    runtime: Runtime, object_id: str, progress: Callable[[str], None] = lambda _step: None
) -> InteractionAgent:
    """Every user turn of :data:`POKE_TURNS`, then the reports held back during them."""
    poke = InteractionAgent(
        working_memory_max_tokens=DEMO_WORKING_MEMORY_MAX_TOKENS, runtime=runtime, object_id=object_id
    )
    for n, (text, agent_name, agent_tool) in enumerate(POKE_TURNS, 1):
        progress(f"Interaction agent, user turn {n} of {len(POKE_TURNS)} (to {agent_name}): {text}")
        with contextlib.suppress(InvocationError):  # recorded as the invocation's outcome
            poke.user_turn(text, delegate_to=agent_name, agent_tool=agent_tool)
    progress("Interaction agent: delivering the reports held back during its turns")
    with contextlib.suppress(InvocationError):
        poke.deliver_reports()
    return poke


# -- reading a run back from the files ----------------------------------------------------


def summarize_sessions(
    store: Store, sessions: list[SessionSummary], *, log_file: Path | str = "", elapsed_s: float = 0.0
) -> DemoSummary:
    """Describe ``sessions`` from their files: invocation and call records, contexts."""
    records: dict[str, InvocationRecord] = {}
    calls = 0
    forks: dict[str, int] = {}
    by_role: dict[str, list[str]] = {}
    for summary in sessions:
        by_role.setdefault(summary.role, []).append(summary.uuid)
        for record in read_invocations(summary.path):
            records.setdefault(record.id, record)
        calls += len(read_calls(summary.path))
        session = store.load_session(summary.path.name, require_active=False)
        forked = sum(1 for c in session.contexts.values() if c.origin_context_id is not None)
        if forked:
            forks[f"{summary.role}/{summary.uuid}"] = forked
    return DemoSummary(
        store=str(store.root),
        log_file=str(log_file),
        sessions=by_role,
        invocations=len(records),
        model_calls=calls,
        reused_threads=_reused_threads(records.values()),
        forks=forks,
        deepest_chain=_deepest_chain(records),
        refusals=[_outcome(r) for r in records.values() if r.outcome == "refused"],
        errors=[_outcome(r) for r in records.values() if r.outcome == "error"],
        elapsed_s=round(elapsed_s, 1),
        roles={role: len(uuids) for role, uuids in sorted(by_role.items())},
    )


def _reused_threads(records: Any) -> dict[str, int]:
    uses: Counter[tuple[str, str | None, str | None]] = Counter(
        (r.callee.role, r.thread, r.callee.session) for r in records if r.outcome != "refused"
    )
    return {
        f"{role}/{thread}": n for (role, thread, _), n in sorted(uses.items(), key=str) if thread and n > 1
    }


def _deepest_chain(records: dict[str, InvocationRecord]) -> list[str]:
    def chain(record: InvocationRecord) -> list[InvocationRecord]:
        links = [record]
        while links[-1].parent_invocation_id in records and len(links) <= len(records):
            links.append(records[str(links[-1].parent_invocation_id)])
        return links[::-1]

    deepest = max((chain(r) for r in records.values()), key=len, default=[])
    return [f"{r.callee.role}/{r.callee.session}" for r in deepest]


def _outcome(record: InvocationRecord) -> str:
    caller = f"{record.caller.role}/{record.caller.session}" if record.caller else "top level"
    return f"{caller} -> {record.callee.role}/{record.callee.session}: {record.error}"
