"""OpenPoke's ``<active_agents>`` at each entry, checked against a run of OpenPoke's rules.

The data dirs here are written by a small simulation of what OpenPoke's code does (read
from its source, none of it copied): an incoming entry is logged and the roster read
right after it (``InteractionAgentRuntime.execute``/``handle_agent_message`` →
``_render_active_agents``); the turn may call ``send_message_to_agent``, which appends a
new name to ``roster.json`` and logs the name's ``agent_request``; the agents of a batch
report in one ``agent_message`` of ``[SUCCESS] <name>: …``/``[FAILED] <name>: …`` lines.
The clock moves in whole seconds and often not at all, so entries and requests share
seconds as they do when the model answers fast, and some execution logs are removed.

What the simulation held at each entry is the truth. The import never names an agent
that was not on the roster then, every name it leaves out is named in a note, and with
its evidence intact (every log, distinct seconds) it leaves out none.
"""

from __future__ import annotations

import html
import json
import random
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from importers.openpoke import import_openpoke, roster_at
from importers.openpoke._reader import slugify
from replay import materialize
from soap_core import Store
from tests.test_openpoke_entries import Entry, agents_block, write_data_dir

NAMES = [
    "Dana Offsite Emails",
    "Priya Contract",
    "Tomás Visit",
    "Q3: offsite venues",  # a name holding ": ", as the report's separator
    "zoë's birthday",
    "A/B test results",
    "Marcus Dinner",
    "Eli Code Review",
    "Lease: Omar",
    "Grace Invoice",
]


class Run:
    """One simulated OpenPoke run: the logs it writes and the roster at each incoming entry."""

    def __init__(self, seed: int, *, steps: tuple[int, ...]) -> None:
        self.random = random.Random(seed)
        self.steps = steps
        self.clock = datetime(2025, 6, 9, 9, 0, 0)
        self.entries: list[Entry] = []
        self.logs: dict[str, list[Entry]] = {}
        self.roster: list[str] = []
        self.pending: list[str] = []
        self.truth: dict[int, list[str]] = {}

    def tick(self) -> str:
        self.clock += timedelta(seconds=self.random.choice(self.steps))
        return self.clock.strftime("%Y-%m-%d %H:%M:%S")

    def log(self, tag: str, text: str) -> None:
        self.entries.append((tag, self.tick(), text))

    def incoming(self, tag: str, text: str) -> None:
        self.log(tag, text)
        self.truth[len(self.entries) - 1] = list(self.roster)  # _render_active_agents reads it now
        for _ in range(self.random.choice((0, 1, 1, 2))):
            unused = [n for n in NAMES if n not in self.roster]
            new = unused and self.random.random() < 0.6
            name = unused[0] if new else self.random.choice(self.roster or NAMES[:1])
            if name not in self.roster:
                self.roster.append(name)  # AgentRoster.add_agent
            self.logs.setdefault(slugify(name), []).append(("agent_request", self.tick(), f"do {name}"))
            self.pending.append(name)
        self.log("poke_reply", "on it" if self.pending else "ok")

    def report(self) -> None:
        batch, self.pending = self.pending, []
        lines = []
        for name in batch:
            self.logs[slugify(name)].append(("agent_response", self.tick(), f"{name} done"))
            status = self.random.choice(("SUCCESS", "SUCCESS", "FAILED"))
            lines.append(f"[{status}] {name}: {name} done\n[SUCCESS] not a name: text of the answer")
        self.incoming("agent_message", "\n".join(lines))

    def play(self, turns: int) -> None:
        for turn in range(turns):
            if self.pending and self.random.random() < 0.7:
                self.report()
            else:
                self.incoming("user_message", f"request {turn}")


def written(run: Run, root: Path, *, drop: float) -> Path:
    logs = {slug: log for slug, log in run.logs.items() if run.random.random() >= drop}
    return write_data_dir(root, run.entries, execution=logs, roster=run.roster)


def check(run: Run, source: Path, store_dir: Path) -> list[str]:
    """Every incoming entry's roster against the simulation's; the names left out."""
    report = import_openpoke(source, store_dir)
    assert report.interaction_session is not None
    session = Store(store_dir).load_session(report.interaction_session)
    root = session.contexts[session.state_data["_openpoke"]["root_context_id"]]
    left_out: list[str] = []
    for index, truth in run.truth.items():
        got = roster_at(session, index)
        assert [n for n in truth if n in got.names] == list(got.names), (index, truth, got)
        for name in truth:
            if name not in got.names:
                assert any("left out" in note and repr(name) in note for note in got.notes), (
                    index,
                    name,
                    got,
                )
                left_out.append(f"{index}:{name}")
        later = [n for n in run.roster if n not in truth]
        for name in later:
            assert name not in got.names, (index, name)
    for index in list(run.truth)[:: max(1, len(run.truth) // 12)]:  # the request itself carries it
        content = materialize(session, root, index).request["messages"][-1]["content"]
        shown = roster_at(session, index).names
        expected = "\n".join(f'<agent name="{html.escape(n, quote=True)}" />' for n in shown)
        assert agents_block(content) == (expected or "None"), index
    return left_out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_with_every_log_and_distinct_seconds_the_roster_is_exactly_openpokes(
    seed: int, tmp_path: Path
) -> None:
    run = Run(seed, steps=(1, 2, 7))
    run.play(60)
    assert len(run.roster) >= 5, run.roster  # the run did grow a roster
    assert check(run, written(run, tmp_path / "OpenPoke", drop=0.0), tmp_path / "store") == []


@pytest.mark.parametrize("seed", [4, 5, 6, 7])
def test_with_shared_seconds_and_lost_logs_no_name_is_wrong_and_every_doubt_is_said(
    seed: int, tmp_path: Path
) -> None:
    run = Run(seed, steps=(0, 0, 0, 1, 3))
    run.play(80)
    left_out = check(run, written(run, tmp_path / "OpenPoke", drop=0.4), tmp_path / "store")
    on_roster = sum(len(t) for t in run.truth.values())
    assert len(left_out) < on_roster / 2, (len(left_out), on_roster)  # the evidence still places most


def test_a_name_without_a_log_joins_by_its_first_report_and_its_neighbours(tmp_path: Path) -> None:
    """The long fixture's shape: Priya and Marcus have no execution log; the reports and
    roster.json's order place them (before this, both were on the roster from entry 0)."""
    entries: list[Entry] = [
        ("user_message", "2025-06-09 08:41:05", "Dana's emails?"),  # 0
        ("poke_reply", "2025-06-09 08:41:07", "checking"),  # 1
        ("agent_message", "2025-06-09 08:41:47", "[SUCCESS] Dana Offsite Emails: found 2"),  # 2
        ("user_message", "2025-06-09 10:43:03", "did Priya get back?"),  # 3
        ("poke_reply", "2025-06-09 10:43:06", "checking"),  # 4
        ("agent_message", "2025-06-09 10:43:51", "[SUCCESS] Priya Contract: yes"),  # 5
        ("user_message", "2025-06-09 13:37:22", "and Marcus?"),  # 6
        ("agent_message", "2025-06-09 13:37:47", "[FAILED] Marcus Dinner: no mail access"),  # 7
    ]
    execution = {"dana-offsite-emails": [("agent_request", "2025-06-09 08:41:09", "find Dana's emails")]}
    source = write_data_dir(
        tmp_path / "OpenPoke",
        entries,
        execution=execution,
        roster=["Dana Offsite Emails", "Priya Contract", "Marcus Dinner"],
    )
    report = import_openpoke(source, tmp_path / "store")
    assert report.interaction_session is not None
    session = Store(tmp_path / "store").load_session(report.interaction_session)
    assert roster_at(session, 0).names == ()  # Dana is asked after entry 0, the others after her
    assert roster_at(session, 2).names == ("Dana Offsite Emails",)
    doubt = roster_at(session, 3)
    assert doubt.names == ("Dana Offsite Emails",)
    assert any(
        "'Priya Contract' (no execution_agents/priya-contract.log" in n and "entry 5 reports it" in n
        for n in doubt.notes
    ), doubt.notes
    assert roster_at(session, 5).names == ("Dana Offsite Emails", "Priya Contract")
    assert roster_at(session, 7).names == ("Dana Offsite Emails", "Priya Contract", "Marcus Dinner")
    assert json.loads(json.dumps(session.state_data["_openpoke"]["roster_history"]))[1]["reported_in"] == 5
