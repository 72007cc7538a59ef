"""The pages benchmark's side by side with ``inspect view`` (benchmarks/inspect_view.py)
compares like with like: the conversation written with inspect_ai's own API reads back,
through inspect_ai, as our messages (roles, texts, reasoning, tool calls and results, in
order), and the viewer started as the benchmark starts it draws it in the same headless
Chromium. inspect_ai runs in its side venv (tests/peers/venvs.py); a venv that cannot be
built is a skip with its reason."""

from __future__ import annotations

import json
import math
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from benchmarks import inspect_view
from tests.peers.venvs import PeerEnv, PeerUnavailable, ensure_peer
from tests.test_browser import CHROMIUM, FLAGS
from tests.test_page_context_long import long_context

READ_BACK = """
import json, sys
from inspect_ai.log import read_eval_log
log = read_eval_log(sys.argv[1])
out = []
for m in log.samples[0].messages:
    row = {"role": m.role, "text": m.text}
    if m.role == "assistant":
        reasoning = [c.reasoning for c in (m.content if isinstance(m.content, list) else []) if c.type == "reasoning"]
        if reasoning:
            row["reasoning"] = reasoning[0]
        if m.tool_calls:
            row["tool_calls"] = [{"id": c.id, "function": c.function, "arguments": c.arguments} for c in m.tool_calls]
    if m.role == "tool":
        row["tool_call_id"], row["function"] = m.tool_call_id, m.function
    out.append(row)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def peer() -> PeerEnv:
    try:
        return ensure_peer("inspect")
    except PeerUnavailable as exc:
        pytest.skip(f"inspect_ai cannot be installed here: {exc}")


@pytest.fixture(scope="module")
def written(peer: PeerEnv, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    rows = inspect_view.inspect_rows(long_context(400))
    log_dir = tmp_path_factory.mktemp("inspect") / "logs"
    result = inspect_view.write_log(peer.python, rows, log_dir)
    assert result["messages"] == len(rows)
    return log_dir, rows


def test_inspect_reads_back_the_conversation_we_wrote_with_its_api(
    peer: PeerEnv, written: tuple[Path, list[dict[str, Any]]]
) -> None:
    log_dir, rows = written
    done = subprocess.run(
        [str(peer.python), "-c", READ_BACK, str(log_dir / inspect_view.LOG_FILE)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    read = json.loads(done.stdout)
    assert [r["role"] for r in read] == [r["role"] for r in rows]
    for ours, theirs in zip(rows, read, strict=True):
        assert theirs["text"] == ours["text"]
        assert theirs.get("reasoning") == ours.get("reasoning")
        assert theirs.get("tool_calls") == ours.get("tool_calls")
        assert (theirs.get("tool_call_id"), theirs.get("function")) == (
            ours.get("tool_call_id"),
            ours.get("function"),
        )
    assert any(r.get("tool_calls") for r in rows) and any(r["role"] == "tool" for r in rows)
    assert any(r.get("reasoning") for r in rows)


def test_the_viewer_draws_the_first_and_a_later_message(
    peer: PeerEnv, written: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no chromium at {CHROMIUM}: the browser test cannot run")
    from playwright.sync_api import sync_playwright

    log_dir, rows = written
    first_user = next(r["text"] for r in rows if r["role"] == "user")
    with (
        inspect_view.inspect_view(peer.root, log_dir, tmp_path / "view.log") as url,
        sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            started = time.perf_counter()
            page.goto(f"{url}/#/tasks/{inspect_view.LOG_FILE}/samples/messages")
            page.get_by_text(first_user, exact=True).first.wait_for(state="visible", timeout=120_000)
            assert math.isfinite(time.perf_counter() - started)
            call = next(r for r in rows if r.get("tool_calls"))["tool_calls"][0]
            page.get_by_text(call["function"]).first.wait_for(state="visible", timeout=60_000)
        finally:
            browser.close()
