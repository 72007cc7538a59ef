"""An Agents SDK app on the deterministic local model (issue 26): its database written by
the real SDK, imported with the app's code, and re-run from a middle message by the SDK's
own ``Runner``. Both the app and the re-runs reach it through
``tests/peers/local_proxy.py``, which keeps every body as sent (``content: null`` on the
SDK's tool-call turns included, which the local model takes)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from local_model import LocalModelServer
from replay import ToolModes, materialize, rerun
from soap_core import Store
from soap_core.runtime import LLMEndpoint
from tests.peers import agents_app
from tests.peers.local_proxy import LocalProxy
from tests.test_agents_import import APP, PEERS, answers, imported
from tests.test_framework_peers import Written

FIRST_ANSWER = 1  # the forced count_errors call; then its result, then the answer


@dataclass
class OnTheModel:
    written: Written
    proxy: LocalProxy


@pytest.fixture(scope="module")
def on_the_model(
    tmp_path_factory: pytest.TempPathFactory, llm_server: LocalModelServer
) -> Iterator[OnTheModel]:
    db = tmp_path_factory.mktemp("agents-local") / "s.db"
    with LocalProxy(llm_server.base_url) as proxy:
        done = subprocess.run(
            [
                sys.executable,
                str(PEERS / "agents_driver.py"),
                proxy.base_url,
                str(db),
                "How many errors are in the log?",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, f"the driver failed:\n{done.stdout}\n{done.stderr}"
        yield OnTheModel(Written(db, {}, list(proxy.bodies)), proxy)


def endpoint(proxy: LocalProxy) -> LLMEndpoint:
    return LLMEndpoint(proxy.base_url, timeout=300, max_retries=0)


def test_the_whole_body_of_every_call_on_the_local_model_is_rebuilt_exactly(
    on_the_model: OnTheModel, tmp_path: Path
) -> None:
    _, session = imported(on_the_model.written, tmp_path / "store", agent=APP)
    context = session.active_context
    assert [m.role for m in context.messages] == ["user", "assistant", "tool_result", "assistant"]
    for index, body in zip(answers(context), on_the_model.written.bodies, strict=True):
        assert materialize(session, context, index).request == body


def test_a_recorded_rerun_from_a_middle_message_repeats_the_original_answer_and_an_injected_one_diverges(
    on_the_model: OnTheModel, tmp_path: Path
) -> None:
    _, session = imported(on_the_model.written, tmp_path / "store", agent=APP)
    store = Store(tmp_path / "store")
    original = session.active_context.messages[-1].text()
    database = on_the_model.written.db.read_bytes()
    live_before = list(agents_app.COUNTED)
    again = rerun(store, session, None, FIRST_ANSWER, endpoint(on_the_model.proxy))
    assert again.ok, again.problem
    assert again.answer == original and len(again.calls) == 2
    assert [t["how"] for t in again.tools] == ["recorded"] and live_before == agents_app.COUNTED
    injected = rerun(
        store,
        store.load_session(session.uuid, require_active=False),
        None,
        FIRST_ANSWER,
        endpoint(on_the_model.proxy),
        tools=ToolModes(injected={"count_errors": "ERROR: the log file is missing"}),
    )
    assert injected.ok, injected.problem
    assert [t["how"] for t in injected.tools] == ["injected"]
    assert injected.answer != original
    assert on_the_model.written.db.read_bytes() == database


def test_a_live_rerun_on_the_local_model_calls_the_apps_function(
    on_the_model: OnTheModel, tmp_path: Path
) -> None:
    _, session = imported(on_the_model.written, tmp_path / "store", agent=APP)
    before = len(agents_app.COUNTED)
    result = rerun(
        Store(tmp_path / "store"),
        session,
        None,
        FIRST_ANSWER,
        endpoint(on_the_model.proxy),
        tools=ToolModes(default="live"),
    )
    assert result.ok, result.problem
    assert [t["how"] for t in result.tools] == ["live"]
    assert len(agents_app.COUNTED) == before + 1  # the app's own count_errors ran, in this process
