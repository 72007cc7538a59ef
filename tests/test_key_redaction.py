"""The API key never reaches a file or the output, even from a server that echoes it.

A real HTTP server on 127.0.0.1 answers with the request's ``Authorization`` header in
its body (as some proxies and mock servers do): in a 401's JSON, in a plain-text 401, in
a 500 that the client retries, and in a 200 answer's content. The runtime, a replay and
the command line then run against it with a canary key, and every file under the store
(the catalog included) and everything printed is searched for the key.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import re
import secrets
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from soap_core import Store
from soap_core._redact import redact, redact_value, remember_secret
from soap_core.runtime import AgenticObject, LLMEndpoint, LLMError, ModelSettings, Runtime
from tests.cli_process import soapwb
from tests.misbehaving_llm import OK_COMPLETION

CANARY = f"sk-canary-{secrets.token_hex(12)}"


class _Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _EchoServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        auth = self.headers.get("authorization", "")
        key = auth.removeprefix("Bearer ")
        mode = self.server.mode
        if mode == "json401":
            body = {
                "error": {
                    "message": f"Incorrect API key provided. You sent Authorization: {auth}",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                    "received_headers": {"authorization": auth, "x-api-key": key},
                }
            }
            self.send(401, json.dumps(body).encode())
        elif mode == "text401":
            self.send(401, f"unauthorized: the key {key} is not valid ({auth})".encode(), "text/plain")
        elif mode == "json500":
            self.send(500, json.dumps({"error": {"message": f"upstream refused {auth}"}}).encode())
        elif mode == "forms401":  # the key in every encoding, in an error body
            message = f"Incorrect API key provided: {every_encoding(key)}"
            self.send(401, json.dumps({"error": {"message": message, "code": "invalid_api_key"}}).encode())
        elif mode == "forms-ok":  # the key in every encoding, in an answer
            answer = {"role": "assistant", "content": f"you sent {every_encoding(key)}"}
            completion = {
                **OK_COMPLETION,
                "choices": [{"index": 0, "finish_reason": "stop", "message": answer}],
            }
            self.send(200, json.dumps(completion).encode())
        else:  # a 200 answer whose content echoes the header
            answer = {"role": "assistant", "content": f"you sent {auth}"}
            completion = {
                **OK_COMPLETION,
                "choices": [{"index": 0, "finish_reason": "stop", "message": answer}],
            }
            self.send(200, json.dumps(completion).encode())

    def send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.send_header("retry-after-ms", "1")
        self.end_headers()
        self.wfile.write(body)


class _EchoServer(ThreadingHTTPServer):
    daemon_threads = True
    mode = "json401"


@pytest.fixture
def echo() -> Iterator[_EchoServer]:
    server = _EchoServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def base_url(server: _EchoServer) -> str:
    return f"http://127.0.0.1:{server.server_port}/v1"


def files_holding_the_key(root: Path) -> list[str]:
    forms = {CANARY.encode(), json.dumps(CANARY)[1:-1].encode()}
    return [str(p) for p in root.rglob("*") if p.is_file() and any(f in p.read_bytes() for f in forms)]


class Caller(AgenticObject):
    settings = ModelSettings(max_tokens=4)


@pytest.mark.parametrize("mode", ["json401", "text401", "json500", "ok-echo"])
def test_an_echoed_key_reaches_no_file_under_the_store_and_no_output(
    tmp_path: Path, echo: _EchoServer, mode: str
) -> None:
    echo.mode = mode
    store = tmp_path / "store"
    runtime = Runtime(store, LLMEndpoint(base_url(echo), api_key=CANARY, max_retries=1))
    if mode == "ok-echo":
        answer = Caller(runtime=runtime, object_id="c").invoke("Hello.", thread="t")
        assert CANARY not in answer and "[REDACTED]" in answer
    else:
        with pytest.raises(LLMError) as failed:
            Caller(runtime=runtime, object_id="c").invoke("Hello.", thread="t")
        assert CANARY not in str(failed.value)
        assert "[REDACTED]" in str(failed.value) or mode == "text401"  # the client drops a text body
    assert files_holding_the_key(store) == []
    if mode in ("json401", "ok-echo"):  # what the command line prints of it
        [summary] = Store(store).sessions()
        for argv in (["ls", "--json"], ["show", summary.uuid], ["trace", summary.uuid], ["verify"]):
            proc = soapwb(*argv, "--store", store)
            assert CANARY not in proc.stdout + proc.stderr, proc


def test_a_replay_against_an_echoing_server_prints_and_stores_no_key(
    store_copy: Path, echo: _EchoServer
) -> None:
    echo.mode = "json401"
    proc = soapwb(
        "replay", "3f0c", "--at", "5", "--base-url", base_url(echo), "--retries", "0", "--store", store_copy,
        env={"OPENAI_API_KEY": CANARY},
    )  # fmt: skip
    assert proc.returncode == 1 and "FAILED" in proc.stdout and "HTTP 401" in proc.stdout, proc
    assert CANARY not in proc.stdout + proc.stderr, proc
    assert "[REDACTED]" in proc.stdout
    assert files_holding_the_key(store_copy) == []


STRANGER = f"sk-stranger-{secrets.token_hex(12)}"
"""A key this process was never configured with."""


@pytest.mark.parametrize(
    "text",
    [
        f"Authorization: Bearer {STRANGER}",
        f"{{'authorization': 'Bearer {STRANGER}'}}",
        f'{{\\"Authorization\\": \\"Bearer {STRANGER}\\"}}',
        f"authorization={STRANGER}&x=1",
        f"bearer {STRANGER}",
    ],
)
def test_credentials_after_authorization_or_bearer_are_redacted_whoever_they_belong_to(text: str) -> None:
    assert STRANGER not in redact(text), redact(text)  # no remembered key: the pattern alone


def test_records_and_the_command_line_redact_a_configured_key_whatever_put_it_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The layers behind the endpoint's own redaction: a record's error text, and an
    error the command line prints, lose the key too (an error raised anywhere)."""
    from soap_core import CallRecord, SoapError, read_calls, write_call
    from soapwb import cli

    key = f"sk-configured-{secrets.token_hex(12)}"
    LLMEndpoint("http://127.0.0.1:9/v1", api_key=key)  # configuring a key remembers it
    record = CallRecord("20250611T000000000000-abcdef12", "s", "R", "c", 0, {}, "h", error=f"boom {key}")
    write_call(tmp_path, record)
    assert key not in (tmp_path / "calls" / f"{record.id}.json").read_text()
    assert read_calls(tmp_path)[0].error == "boom [REDACTED]"

    def fail(_args: Any) -> int:
        raise SoapError(f"something mentioned {key}")

    parser = cli.build_parser("store_commands")
    monkey = pytest.MonkeyPatch()
    monkey.setattr(cli, "build_parser", lambda _only=None: parser)
    monkey.setattr(parser, "parse_args", lambda _argv: argparse.Namespace(handler=fail))
    try:
        assert cli.main(["ls"]) == 1
    finally:
        monkey.undo()
    assert key not in capsys.readouterr().err


# -- the key encoded -------------------------------------------------------------------------

ENCODED_CANARY = f"sk-proj_{secrets.token_hex(10)}.{secrets.token_hex(6)}"
"""A key with ``_`` and ``.``, which have named HTML entities (``&lowbar;``, ``&period;``)."""


def encodings(key: str) -> dict[str, str]:
    """The key as an echo may give it, encoded; each differs from the key itself."""
    data, header = key.encode(), f"Authorization: Bearer {key}"
    return {
        "base64": base64.b64encode(data).decode(),
        "base64 without padding": base64.b64encode(data).decode().rstrip("="),
        "URL-safe base64": base64.urlsafe_b64encode(data).decode(),
        "base64 of the header": base64.b64encode(header.encode()).decode(),
        "base64 of the header, one byte on": base64.b64encode(f"x{header}".encode()).decode(),
        "base64 of the header, two bytes on": base64.b64encode(f"xy{header}".encode()).decode(),
        "URL-encoded, every byte": "".join(f"%{byte:02X}" for byte in data),
        "HTML decimal entities": "".join(f"&#{ord(c)};" for c in key),
        "HTML hex entities": "".join(f"&#x{ord(c):x};" for c in key),
        "HTML named entities": key.replace("_", "&lowbar;").replace(".", "&period;"),
        "upper-cased": key.upper(),
        "case swapped": key.swapcase(),
        "reversed": key[::-1],
        "reversed and upper-cased": key[::-1].upper(),
        "JSON escapes": "".join(f"\\u{ord(c):04x}" for c in key),
    }


def every_encoding(key: str) -> str:
    return " | ".join(f"{name}: {form}" for name, form in encodings(key).items())


_BASE64_RUN = re.compile(r"[A-Za-z0-9+/_-]{8,}")


def revealed(text: str, key: str) -> list[str]:
    """The decodings of ``text`` that show ``key`` (in any case, or reversed): none of
    them may. Independent of the redaction's own list of forms: the text is decoded as
    URL, HTML, JSON escapes, and every base64-looking run at each of its 4 alignments."""
    wanted = {key.lower(), key[::-1].lower()}
    views = {
        "as it is": text,
        "URL-decoded": urllib.parse.unquote(text),
        "HTML-unescaped": html.unescape(text),
        "JSON-unescaped": re.sub(r"\\+u([0-9a-fA-F]{4})", lambda m: chr(int(m[1], 16)), text),
    }
    found = [name for name, view in views.items() if any(w in view.lower() for w in wanted)]
    for run in _BASE64_RUN.findall(text):
        normal = run.translate(str.maketrans("-_", "+/"))
        for skip in range(4):
            chunk = normal[skip:]
            chunk = chunk[: len(chunk) - 1] if len(chunk) % 4 == 1 else chunk + "=" * (-len(chunk) % 4)
            if key.encode() in base64.b64decode(chunk):
                found.append(f"base64 {run[:24]}...")
    return found


def files_revealing(root: Path, key: str) -> dict[str, list[str]]:
    """Every file under ``root`` (the catalog and its -wal included) whose text reveals
    ``key`` under some decoding."""
    found = {}
    for path in root.rglob("*"):
        if path.is_file():
            hits = revealed(path.read_bytes().decode("utf-8", "replace"), key)
            if hits:
                found[str(path.relative_to(root))] = hits
    return found


@pytest.mark.parametrize("encoding", list(encodings(ENCODED_CANARY)))
def test_a_configured_key_is_redacted_in_each_common_encoding(encoding: str) -> None:
    remember_secret(ENCODED_CANARY)
    form = encodings(ENCODED_CANARY)[encoding]
    text = f"the server said: {form}, twice: {form}."
    assert revealed(text, ENCODED_CANARY), "the oracle sees the key in the unredacted text"
    for cleaned in (redact(text), redact_value({"content": [text]})["content"][0]):
        assert revealed(cleaned, ENCODED_CANARY) == [], cleaned
        assert cleaned.count("[REDACTED]") == 2 and cleaned.startswith("the server said: "), cleaned


@pytest.mark.parametrize("mode", ["forms401", "forms-ok"], ids=["in an error body", "in an answer"])
def test_a_key_echoed_in_every_encoding_reaches_no_file_and_no_output(
    tmp_path: Path, echo: _EchoServer, mode: str
) -> None:
    """The runtime against a server that echoes the key in every encoding at once; then
    the command line reads the store back. Nothing anywhere decodes to the key."""
    echo.mode = mode
    store = tmp_path / "store"
    runtime = Runtime(store, LLMEndpoint(base_url(echo), api_key=ENCODED_CANARY, max_retries=0))
    if mode == "forms-ok":
        answer = Caller(runtime=runtime, object_id="c").invoke("Hello.", thread="t")
        assert revealed(answer, ENCODED_CANARY) == [] and "[REDACTED]" in answer, answer
    else:
        with pytest.raises(LLMError) as failed:
            Caller(runtime=runtime, object_id="c").invoke("Hello.", thread="t")
        assert revealed(str(failed.value), ENCODED_CANARY) == [], str(failed.value)
    [summary] = Store(store).sessions()
    for argv in (["ls"], ["ls", "--json"], ["show", summary.uuid], ["show", summary.uuid, "--json"],
                 ["search", "sent"], ["trace", summary.uuid], ["trace", summary.uuid, "--json"], ["verify"]):  # fmt: skip
        proc = soapwb(*argv, "--store", store)
        assert revealed(proc.stdout + proc.stderr, ENCODED_CANARY) == [], (argv, proc)
    assert list(store.glob(".soapwb-catalog*")), "the catalog was written, and is searched too"
    assert files_revealing(store, ENCODED_CANARY) == {}


def test_a_replay_against_a_server_echoing_every_encoding_prints_and_stores_none(
    store_copy: Path, echo: _EchoServer
) -> None:
    echo.mode = "forms-ok"
    proc = soapwb(
        "replay", "3f0c", "--at", "5", "--base-url", base_url(echo), "--retries", "0", "--store", store_copy,
        env={"OPENAI_API_KEY": ENCODED_CANARY},
    )  # fmt: skip
    assert proc.returncode == 0 and "[REDACTED]" in proc.stdout, proc
    assert revealed(proc.stdout + proc.stderr, ENCODED_CANARY) == [], proc
    shown = soapwb("show", "3f0c", "--json", "--store", store_copy)
    assert revealed(shown.stdout, ENCODED_CANARY) == [], shown
    assert files_revealing(store_copy, ENCODED_CANARY) == {}
