"""The UI a user would pick instead, side by side: the same long conversation written
as an Inspect eval log with inspect_ai's own API and opened in ``inspect view`` (UK
AISI's log viewer), in the same headless Chromium as our Context page (issue 28 point 4).

inspect_ai lives in a side venv (``tests/peers/venvs.py``, peer ``inspect``); its driver
(``tests/peers/inspect_driver.py``) writes the log from the conversation's messages as
JSON rows. What is timed is what a user waits for: from opening the sample's Messages
view in a new tab of a viewer started for it (``inspect view`` reads the log on that
first request, as our first open reads the store) to the conversation's first message
drawn. Best of three viewers, as for our first open.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks._harness import Bench
from soap_core import Context
from soap_core._parts import TextPart, ThinkingPart, ToolResultPart, ToolUsePart

if TYPE_CHECKING:
    from playwright.sync_api import Browser

DRIVER = Path(__file__).resolve().parents[1] / "tests" / "peers" / "inspect_driver.py"
LOG_FILE = "long-conversation.eval"
TRIES = 3


def inspect_rows(context: Context) -> list[dict[str, Any]]:
    """The context's messages as the driver's rows: Inspect's roles, an assistant's
    thinking as its reasoning and its tool calls as Inspect's, each tool result a message
    of its own. The tool definitions message has no place in Inspect's messages (the
    tools are the task's), so it is left out."""
    rows: list[dict[str, Any]] = []
    for message in context.messages:
        text = "\n".join(p.text for p in message.content if isinstance(p, TextPart))
        if message.message_type == "ToolDefinitionsMessage":
            continue
        if message.role in ("system", "user"):
            rows.append({"role": message.role, "text": text})
        elif message.role == "assistant":
            row: dict[str, Any] = {"role": "assistant", "text": text}
            thinking = "\n".join(p.text for p in message.content if isinstance(p, ThinkingPart))
            if thinking:
                row["reasoning"] = thinking
            calls = [
                {"id": p.call_id, "function": p.name, "arguments": _arguments(p)}
                for p in message.content
                if isinstance(p, ToolUsePart)
            ]
            if calls:
                row["tool_calls"] = calls
            rows.append(row)
        for part in message.content:
            if isinstance(part, ToolResultPart):
                content = part.content if isinstance(part.content, str) else json.dumps(part.content)
                rows.append(
                    {"role": "tool", "text": content, "tool_call_id": part.call_id, "function": part.name}
                )
    return rows


def _arguments(part: ToolUsePart) -> dict[str, Any]:
    try:
        parsed = json.loads(part.arguments)
    except ValueError:
        return {"arguments": part.arguments}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


def write_log(python: Path, rows: list[dict[str, Any]], log_dir: Path) -> dict[str, Any]:
    rows_file = log_dir.parent / "inspect-rows.json"
    rows_file.write_text(json.dumps(rows))
    done = subprocess.run(
        [str(python), str(DRIVER), str(rows_file), str(log_dir)],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"inspect_driver.py failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@contextlib.contextmanager
def inspect_view(venv: Path, log_dir: Path, log: Path) -> Iterator[str]:
    """``inspect view`` serving ``log_dir`` on a free loopback port; its URL."""
    from local_model import free_port

    port = free_port()
    with log.open("ab") as out:
        server = subprocess.Popen(
            [
                str(venv / "bin" / "inspect"),
                "view",
                "--log-dir",
                str(log_dir),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/", timeout=5):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"inspect view did not start: see {log}") from None
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


def side_by_side(bench: Bench, browser: Browser, context: Context, ours_first: float, what: str) -> None:
    """``inspect view`` opening the same conversation, against our Context page's first
    open of it (``ours_first``, measured the same way): goal ≤ 1x."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    from tests.peers.venvs import PeerUnavailable, ensure_peer

    try:
        peer = ensure_peer("inspect")
    except PeerUnavailable as exc:
        bench.figure(
            "`inspect view`: not measured", float("nan"), "", "", None, note=f"no inspect_ai here ({exc})"
        )
        return
    rows = inspect_rows(context)
    first_user = next(r["text"] for r in rows if r["role"] == "user" and r["text"])
    log_dir = bench.workdir / "inspect-logs"
    written = write_log(peer.python, rows, log_dir)
    size = (log_dir / LOG_FILE).stat().st_size
    theirs: list[float] = []
    for attempt in range(TRIES):
        with inspect_view(peer.root, log_dir, bench.workdir / f"inspect-view-{attempt}.log") as url:
            tab = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
            try:
                started = time.perf_counter()
                tab.goto(f"{url}/#/tasks/{LOG_FILE}/samples/messages", timeout=600_000)
                tab.get_by_text(first_user, exact=True).first.wait_for(state="visible", timeout=600_000)
                theirs.append(time.perf_counter() - started)
            except PlaywrightTimeout:
                theirs.append(float("inf"))
            finally:
                tab.context.close()
    best = min(theirs)
    bench.ratio(
        f"Context page against `inspect view`, {what}: first open to the first message drawn",
        ours_first,
        best,
        1,
        baseline_is=(
            f"`inspect view` (inspect_ai {peer.spec.peer.split('==')[-1]}) of the same conversation written with "
            f"inspect_ai's write_eval_log ({written['messages']:,} messages, {size / 1e6:.0f} MB .eval), its "
            "sample's Messages view opened in a new tab of a viewer started for it"
        ),
        note=f"ours {ours_first:.2f} s, theirs best of {TRIES} viewers: "
        + ", ".join(f"{t:.2f}" for t in theirs)
        + " s; the same Chromium; theirs draws the conversation from the whole sample it downloads, "
        "ours the page of 50 messages the catalog's spans give",
    )
