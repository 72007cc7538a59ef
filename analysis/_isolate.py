"""The smallest part of a request that changes what the model answers: delta debugging.

``isolate`` re-runs the model on the request behind an answer with units (its messages,
as :mod:`analysis._units` names them) removed, and asks a :class:`Check` of each
new answer (it contains a text, calls a tool, has a JSON field, passes a command). Zeller
and Hildebrandt's ``ddmin`` ("Simplifying and Isolating Failure-Inducing Input", 2002)
narrows the units down to a smallest set whose removal flips the check (with ``keep``:
a smallest set that, kept alone, still gives the check's usual result), in about
log(n) runs when the cause is one or two messages. The units are split in the order of
the answer's latest attribution, the most relied on first, so the first halves tried
hold the likeliest causes.

What "flips" means is measured first: ``noise`` unchanged re-runs give the check's usual
result (the majority) and how often it comes out otherwise by chance. Every run is a
replay, saved as a fork of the session with its call, like any other.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from analysis._attribution import latest_attribution
from analysis._units import removal, request_units
from replay import Endpoint, Materialized, Output, Overrides, replay
from soap_core import Session, SoapError, Store, new_record_id, read_isolations, utc_now, write_isolation

ISOLATE_LABEL = "isolate"
CHECK_KINDS = ("contains", "lacks", "calls", "no-call", "json", "cmd")
CHECK_HELP = (
    "contains:TEXT, lacks:TEXT (the answer's text), calls:TOOL, no-call:TOOL, json:FIELD=VALUE (the answer "
    "parsed as JSON, FIELD dotted: a.b.0), cmd:COMMAND (the answer's text on stdin; exit 0 holds, 1 does not)"
)
COMMAND_TIMEOUT_S = 60.0


class IsolateError(SoapError):
    """A check that cannot be read or run."""


@dataclass(frozen=True)
class Check:
    """What is asked of an answer."""

    kind: str
    value: str
    field: str | None = None

    @classmethod
    def parse(cls, text: str) -> Check:
        kind, sep, rest = text.partition(":")
        if not sep or kind not in CHECK_KINDS or not rest:
            raise IsolateError(f"--check {text!r}: give one of {CHECK_HELP}")
        if kind == "json":
            path, eq, value = rest.partition("=")
            if not eq or not path:
                raise IsolateError(f"--check {text!r}: json takes FIELD=VALUE")
            return cls(kind, value, path)
        return cls(kind, rest)

    def __str__(self) -> str:
        return (
            f"{self.kind}:{self.field}={self.value}" if self.kind == "json" else f"{self.kind}:{self.value}"
        )

    def holds(self, output: Output) -> bool:
        """Whether the check holds of ``output``; IsolateError where it cannot be run."""
        if self.kind == "contains":
            return self.value in output.text
        if self.kind == "lacks":
            return self.value not in output.text
        if self.kind in ("calls", "no-call"):
            called = any(name == self.value for name, _ in output.tool_calls)
            return called if self.kind == "calls" else not called
        if self.kind == "json":
            return bool(_json_field(output.text, self.field or "") == _json_value(self.value))
        return self._command(output.text)

    def _command(self, text: str) -> bool:
        try:
            done = subprocess.run(
                self.value, shell=True, input=text, text=True, capture_output=True, timeout=COMMAND_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            raise IsolateError(f"--check cmd:{self.value}: ran longer than {COMMAND_TIMEOUT_S:g} s") from None
        if done.returncode not in (0, 1):
            raise IsolateError(
                f"--check cmd:{self.value}: exited {done.returncode} (0: holds, 1: does not): "
                f"{done.stderr.strip()[:200]}"
            )
        return done.returncode == 0


_MISSING = object()


def _json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _json_field(text: str, path: str) -> Any:
    try:
        value: Any = json.loads(text)
    except ValueError:
        return _MISSING
    for key in path.split("."):
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.lstrip("-").isdigit() and -len(value) <= int(key) < len(value):
            value = value[int(key)]
        else:
            return _MISSING
    return value


@dataclass
class Trial:
    """One run: the units taken out, what the check said (None: the run failed)."""

    removed: list[int]
    holds: bool | None
    fork_id: str | None
    text: str
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "removed": self.removed,
            "holds": self.holds,
            "fork_id": self.fork_id,
            "text": self.text,
            "error": self.error,
        }


@dataclass
class Isolation:
    """What ``isolate`` found, and what it took."""

    session: str
    context_id: str
    index: int
    check: str
    keep: bool
    usual: bool
    """The check's usual result: the majority of the unchanged re-runs."""
    chance: float
    """How often an unchanged re-run disagreed with ``usual``."""
    cause: list[int] | None
    """Display indices of the smallest set found (None: none flipped the check)."""
    labels: dict[int, str]
    order: list[int]
    ordered_by: str
    noise: list[Trial] = field(default_factory=list)
    trials: list[Trial] = field(default_factory=list)
    created_at: str = field(default_factory=utc_now)
    id: str | None = None

    @property
    def calls(self) -> int:
        return len(self.noise) + len(self.trials)

    @property
    def one_by_one(self) -> int:
        """Runs that removing one unit at a time would make (and it finds only single causes)."""
        return len(self.labels)

    def summary(self) -> str:
        check = f"`{self.check}`"
        if self.cause is None:
            what = "keeping any smaller part" if self.keep else "removing any part"
            return f"{what} left {check} as it usually is ({_said(self.usual)}): no cause found"
        names = ", ".join(self.labels[i] for i in self.cause)
        if self.keep:
            return f"{names} alone still give {check} its usual result ({_said(self.usual)})"
        return f"removing {names} flips {check} from {_said(self.usual)} to {_said(not self.usual)}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "context_id": self.context_id,
            "index": self.index,
            "check": self.check,
            "keep": self.keep,
            "usual": self.usual,
            "chance": self.chance,
            "cause": self.cause,
            "cause_labels": [self.labels[i] for i in self.cause or []],
            "order": self.order,
            "ordered_by": self.ordered_by,
            "calls": self.calls,
            "one_by_one": self.one_by_one,
            "summary": self.summary(),
            "noise": [t.as_dict() for t in self.noise],
            "trials": [t.as_dict() for t in self.trials],
            "labels": {str(k): v for k, v in self.labels.items()},
            "created_at": self.created_at,
            "id": self.id,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Isolation:
        cause = data.get("cause")
        return cls(
            session=data["session"],
            context_id=data["context_id"],
            index=int(data["index"]),
            check=str(data["check"]),
            keep=bool(data.get("keep", False)),
            usual=bool(data["usual"]),
            chance=float(data.get("chance", 0.0)),
            cause=[int(i) for i in cause] if cause is not None else None,
            labels={int(k): str(v) for k, v in data.get("labels", {}).items()},
            order=[int(i) for i in data.get("order", [])],
            ordered_by=str(data.get("ordered_by", "")),
            noise=[Trial(**t) for t in data.get("noise", [])],
            trials=[Trial(**t) for t in data.get("trials", [])],
            created_at=str(data.get("created_at", "")),
            id=data.get("id"),
        )

    def removed_labels(self, trial: Trial) -> str:
        """The units a run took out, by name."""
        return ", ".join(self.labels.get(i, f"#{i}") for i in trial.removed) or "nothing"


def _said(value: bool) -> str:
    return "holds" if value else "does not hold"


def ddmin(units: Sequence[int], test: Callable[[frozenset[int]], bool]) -> list[int] | None:
    """A 1-minimal subset of ``units`` for which ``test`` is true (Zeller's ddmin: halves,
    then finer parts and their complements), in ``units``' order; None when no subset
    tried was. ``test(frozenset(units))`` is assumed true and never asked."""
    current, parts = list(units), 2
    proven = False
    while len(current) >= 2:
        size = -(-len(current) // parts)
        chunks = [current[i : i + size] for i in range(0, len(current), size)]
        for chunk in chunks:
            if test(frozenset(chunk)):
                current, parts, proven = chunk, 2, True
                break
        else:
            for chunk in chunks if len(chunks) > 2 else []:
                rest = [u for u in current if u not in chunk]
                if test(frozenset(rest)):
                    current, parts, proven = rest, max(parts - 1, 2), True
                    break
            else:
                if parts >= len(current):
                    break
                parts = min(len(current), parts * 2)
    return current if proven else None


def isolate(
    store: Store,
    session: Session,
    found: Materialized,
    endpoint: Endpoint,
    check: Check,
    *,
    keep: bool = False,
    noise: int = 3,
    base: Overrides | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> Isolation:
    """Find the smallest set of units whose removal flips ``check`` (module docstring);
    ``base`` is applied to every run (max_tokens, temperature), ``on_progress(runs)``
    is told each run made."""
    base = base or Overrides()
    units = request_units(found)
    labels = {u.index: u.label for u in units}
    latest = latest_attribution(session, found.context_id, found.index, store=store)
    if latest is not None and {u.index for u in latest.units} == set(labels):
        best: dict[int, float] = {}  # a message attributed by parts or sentences: its strongest
        for unit, weight in zip(latest.units, latest.weights, strict=True):
            best[unit.index] = max(weight, best.get(unit.index, weight))
        order = sorted(best, key=lambda i: (-best[i], i))
        by = "" if latest.unit == "message" else f", each message by its {latest.unit} that weighs most"
        ordered_by = f"attribution {latest.id}{by}"
    else:
        order, ordered_by = [u.index for u in units], "position (no attribution of this answer yet)"
    made = 0

    def run(removed: frozenset[int]) -> Trial:
        nonlocal made
        overrides, gone = removal(found, removed)
        changed = replace(base, drops=overrides.drops, tool_results=overrides.tool_results)
        [done] = replay(store, session, found, endpoint, changed, samples=1, label=ISOLATE_LABEL)
        made += 1
        if on_progress is not None:
            on_progress(made)
        if not done.ok:
            return Trial(sorted(gone), None, done.fork_id if done.saved else None, "", done.error)
        output = Output.of(done.output)
        return Trial(sorted(gone), check.holds(output), done.fork_id, output.text)

    baseline = [run(frozenset()) for _ in range(max(1, noise))]
    said = [t.holds for t in baseline if t.holds is not None]
    if not said:
        raise IsolateError(f"every unchanged run failed: {baseline[0].error}")
    usual = sum(said) * 2 >= len(said)
    chance = sum(1 for h in said if h != usual) / len(said)
    trials: list[Trial] = []
    seen: dict[frozenset[int], bool] = {}

    def flips(chosen: frozenset[int]) -> bool:
        removed = frozenset(order) - chosen if keep else chosen
        if not removed or removed == frozenset(order):
            return False  # nothing changed, or nothing left to send
        if removed not in seen:
            trial = run(removed)
            trials.append(trial)
            seen[removed] = trial.holds is not None and (
                trial.holds == usual if keep else trial.holds != usual
            )
        return seen[removed]

    cause = ddmin(order, flips)
    return Isolation(
        session=session.uuid,
        context_id=found.context_id,
        index=found.index,
        check=str(check),
        keep=keep,
        usual=usual,
        chance=chance,
        cause=sorted(cause) if cause is not None else None,
        labels=labels,
        order=order,
        ordered_by=ordered_by,
        noise=baseline,
        trials=trials,
    )


def save_isolation(store: Store, session: Session, isolation: Isolation) -> Isolation:
    """Keep ``isolation`` beside ``session``; it comes back with its record id."""
    record_id = isolation.id or new_record_id()
    directory = store.folder_of(session)
    write_isolation(directory, record_id, isolation.as_dict())
    isolation.id = record_id
    return isolation


def saved_isolations(
    session: Session, *, store: Store | None = None, errors: list[SoapError] | None = None
) -> list[Isolation]:
    """The isolations kept beside ``session``, oldest first."""
    directory = store.folder_of(session) if store else session.directory
    if directory is None:
        return []
    return [Isolation.from_dict(data) for data in read_isolations(directory, errors=errors)]
