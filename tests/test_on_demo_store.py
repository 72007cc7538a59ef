"""The other features on a store `soapwb demo` wrote: verify, drift, every page."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from analysis import RollingTokens, compare, history_of
from replay import verify_store
from soap_core import Store
from soap_core.runtime import LLMEndpoint
from soap_core.runtime.local_model import LocalModelServer
from soapwb.cli import main
from tests.apptest import open_app_page

PAGES = [
    "sessions",
    "context",
    "fork_tree",
    "traceback",
    "token_budget",
    "replay",
    "compaction",
    "object_state",
]


def role_session(store: Path, role: str) -> str:
    return next(s.uuid for s in Store(store).sessions() if s.role == role)


def test_verify_on_a_demo_store_finds_every_recorded_call_matching(
    demo_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = verify_store(Store(demo_store))
    assert len(results) >= 25 and all(r.match for r in results)
    assert main(["verify", "--store", str(demo_store), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["mismatches"] == 0 and report["calls"] == len(results)


def test_a_drift_comparison_runs_end_to_end_on_a_demo_session(
    demo_store: Path, tmp_path: Path, llm_server: LocalModelServer
) -> None:
    shutil.copytree(demo_store, tmp_path / "store")
    store = Store(tmp_path / "store")
    session = store.load_session(role_session(tmp_path / "store", "LogAnalyzer"))
    calls = history_of(session).calls
    rows = compare(
        store, session, [RollingTokens(600, 0.5)], drift_at=[1], endpoint=LLMEndpoint(llm_server.base_url)
    )
    assert [r.strategy for r in rows] == ["rolling-tokens:600:0.5"]
    [run] = rows[0].runs
    assert run.error is None and run.distance is not None and 0.0 <= run.distance <= 1.0
    assert rows[0].drift == run.distance and len(calls) >= 6
    fork = store.load_session(session.uuid).contexts[run.fork_id]
    assert fork.extra["soapwb_replay"]["label"] == "drift rolling-tokens:600:0.5 at call 1"


@pytest.mark.parametrize("page", PAGES)
def test_every_page_opens_on_the_demo_store(demo_store: Path, page: str) -> None:
    for role in ("LogAnalyzer", "InteractionAgent"):
        at = open_app_page(demo_store, page, session=role_session(demo_store, role))
        assert not at.error, [e.value for e in at.error]
