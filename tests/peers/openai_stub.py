"""A scripted OpenAI-compatible server on 127.0.0.1 that records every request it gets.

The peer driver runs real peteos against it: peteos lists the models at import
(``GET /v1/models``) and sends ``POST /v1/chat/completions`` (non-streaming: peteos'
backend config defaults to ``streaming: false``). Each chat request is answered with the
next reply of the script and recorded, body and all, in the order it arrived, so a test
can compare what peteos really sent with what we rematerialize from the files.

A reply is a dict (JSON, so the driver in another process can send it):

* ``content``: the assistant text (``None``: no ``content`` key is sent for it);
* ``reasoning``: sent as the message's ``reasoning`` field (peteos stores it as thinking);
* ``tool_calls``: ``[{"id", "name", "arguments"}]`` (``arguments`` a JSON string, or any
  JSON value, which is encoded);
* ``finish_reason``: default ``tool_calls`` when there are tool calls, else ``stop``;
* ``http_error``: answer with this status and an OpenAI-style error instead;
* ``tag``: a label for the caller, never sent.

Control endpoints (stdlib ``urllib`` is enough to use them):

* ``POST /_stub/script`` ``{"replies": [...], "replace": false}`` appends (or replaces) replies;
* ``GET /_stub/requests`` returns ``{"requests": [...], "pending": n, "exhausted": n}``.

When the script runs out the server answers ``script exhausted`` (status 200, so peteos
does not retry) and counts it; a driver checks ``exhausted == 0`` at the end.

``python tests/peers/openai_stub.py [--port P]`` runs one in the foreground (for the driver
by hand). The module uses the standard library only: the side venvs' Python may import it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODELS = ("stub-model",)


def completion(reply: dict[str, Any], model: str, number: int) -> dict[str, Any]:
    """The chat.completion body for ``reply``."""
    message: dict[str, Any] = {"role": "assistant"}
    if reply.get("content") is not None:
        message["content"] = reply["content"]
    if reply.get("reasoning") is not None:
        message["reasoning"] = reply["reasoning"]
    calls = reply.get("tool_calls") or []
    if calls:
        message["tool_calls"] = [
            {
                "id": call["id"],
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": call["arguments"]
                    if isinstance(call["arguments"], str)
                    else json.dumps(call["arguments"], ensure_ascii=False),
                },
            }
            for call in calls
        ]
    finish = reply.get("finish_reason") or ("tool_calls" if calls else "stop")
    return {
        "id": f"chatcmpl-stub-{number}",
        "object": "chat.completion",
        "created": 1_700_000_000 + number,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _body(self) -> Any:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        return json.loads(raw.decode("utf-8")) if raw else None

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        owner = self.server.owner
        if path == "/v1/models":
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "stub"} for m in owner.models]
            self._send(200, {"object": "list", "data": data})
        elif path == "/_stub/requests":
            self._send(200, owner.snapshot())
        else:
            self._send(404, {"error": {"message": f"no route {path}"}})

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        owner = self.server.owner
        try:
            body = self._body()
        except ValueError as exc:
            self._send(400, {"error": {"message": f"body is not JSON: {exc}"}})
            return
        if path == "/_stub/script":
            owner.add_script(body.get("replies", []), replace=bool(body.get("replace")))
            self._send(200, {"pending": owner.pending})
        elif path == "/v1/chat/completions":
            status, answer = owner.answer(body)
            self._send(status, answer)
        else:
            self._send(404, {"error": {"message": f"no route {path}"}})

    def _send(self, status: int, value: Any) -> None:
        data = json.dumps(value).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    owner: OpenAIStub


class OpenAIStub:
    """A started server on a free port of 127.0.0.1 (use it as a context manager)."""

    def __init__(self, script: list[dict[str, Any]] | None = None, *, port: int = 0) -> None:
        self.models = list(MODELS)
        self._lock = threading.Lock()
        self._script: deque[dict[str, Any]] = deque(script or [])
        self._requests: list[dict[str, Any]] = []
        self._exhausted = 0
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="openai-stub", daemon=True
        )

    @property
    def root_url(self) -> str:
        """What peteos' backend ``url`` wants: it appends ``/v1/...`` itself."""
        return f"http://127.0.0.1:{self._server.server_port}"

    @property
    def base_url(self) -> str:
        """An OpenAI client's base URL (with ``/v1``)."""
        return f"{self.root_url}/v1"

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._script)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every chat request so far: ``{"number", "received_at", "body", "reply"}``."""
        with self._lock:
            return [dict(r) for r in self._requests]

    @property
    def bodies(self) -> list[Any]:
        return [r["body"] for r in self.requests]

    def add_script(self, replies: list[dict[str, Any]], *, replace: bool = False) -> None:
        with self._lock:
            if replace:
                self._script.clear()
            self._script.extend(replies)

    def answer(self, body: Any) -> tuple[int, dict[str, Any]]:
        """Record ``body`` and return the status and JSON of the next scripted reply."""
        with self._lock:
            number = len(self._requests) + 1
            reply = self._script.popleft() if self._script else None
            if reply is None:
                self._exhausted += 1
            self._requests.append(
                {"number": number, "received_at": time.time(), "body": body, "reply": reply}
            )
        model = body.get("model") if isinstance(body, dict) else None
        if reply is None:
            return 200, completion({"content": "script exhausted"}, model or self.models[0], number)
        if reply.get("http_error"):
            status = int(reply["http_error"])
            message = reply.get("content") or "scripted error"
            return status, {"error": {"message": message, "type": "invalid_request_error", "code": status}}
        return 200, completion(reply, model or self.models[0], number)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": [dict(r) for r in self._requests],
                "pending": len(self._script),
                "exhausted": self._exhausted,
            }

    def __enter__(self) -> OpenAIStub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    with OpenAIStub(port=args.port) as stub:
        print(stub.root_url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
