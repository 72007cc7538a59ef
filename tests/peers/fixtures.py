"""Session-wide fixtures: a store written by real peteos 0.5.8 and one by 0.6.13.

Each is built once per test session, into pytest's temporary directory, by the driver
(``peteos_driver.py build``) running in its side venv (``venvs.py``) against one scripted
OpenAI stub (``openai_stub.py``) that lives as long as the test session: peteos contacts
every backend of its ``peteos.json`` when it is imported, so the driver's ``load`` needs it
too. Import the fixtures into a test module with
``from tests.peers.fixtures import peteos05_store, peteos06_store  # noqa: F401``.

A venv that cannot be built (no Python 3.12, pip failing) skips the tests that need it,
with the reason; a driver that fails on a built venv is an error, never a skip.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.peers.openai_stub import OpenAIStub
from tests.peers.venvs import PeerEnv, PeerUnavailable, ensure_peer

DRIVER = Path(__file__).with_name("peteos_driver.py")
DRIVER_TIMEOUT_S = 600


class DriverError(RuntimeError):
    """The driver failed: its exit status and the end of its output."""


@dataclass(frozen=True)
class PeerStore:
    """A store real peteos wrote, and what peteos says about it."""

    version: str
    """The peteos version that wrote it (``0.5.8``, ``0.6.13``)."""
    layout: str
    """``0.5`` (``agents/<role>/<uuid>/``) or ``0.6`` (``.peteos/sessions/<uuid>/``)."""
    path: Path
    """The folder holding ``peteos.json``: what a user points ``Store(...)`` at."""
    config_dir: Path
    """peteos' CONFIG_DIR: ``path/.peteos`` for 0.6, ``path`` for 0.5."""
    sessions_dir: Path
    """``config_dir/sessions`` (0.6) or ``config_dir/agents`` (0.5)."""
    ground_truth: dict[str, Any]
    env: PeerEnv
    stub: OpenAIStub
    build_seconds: float

    def copy_to(self, target: Path) -> PeerStore:
        """A writable copy (same ground truth) under ``target``."""
        shutil.copytree(self.path, target, symlinks=True)
        return dataclasses.replace(
            self,
            path=target,
            config_dir=target / self.config_dir.relative_to(self.path),
            sessions_dir=target / self.sessions_dir.relative_to(self.path),
        )

    def peteos_load(self, store_root: Path | None = None) -> dict[str, Any]:
        """What peteos' own ``Session.load`` / ``Context.load`` (and for 0.6 instance
        restore) make of the store at ``store_root`` (default: this one)."""
        return run_driver(self.env, ["load", "--store", str(store_root or self.path)])


def run_driver(env: PeerEnv, args: list[str]) -> dict[str, Any]:
    done = subprocess.run(
        [str(env.python), str(DRIVER), *args],
        capture_output=True,
        text=True,
        timeout=DRIVER_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise DriverError(
            f"peteos driver {' '.join(args[:1])} ({env.spec.peer}) exited "
            f"{done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-6000:]}"
        )
    if args[0] == "build":
        return {}
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def build_peer_store(name: str, layout: str, target: Path, stub: OpenAIStub) -> PeerStore:
    try:
        env = ensure_peer(name)
    except PeerUnavailable as exc:
        pytest.skip(f"no side venv for {name}: {exc}")
    started = time.monotonic()
    run_driver(env, ["build", "--out", str(target), "--base-url", stub.base_url, "--layout", layout])
    seconds = time.monotonic() - started
    truth = json.loads((target / "ground_truth.json").read_text())
    config_dir = target / ".peteos" if layout == "0.6" else target
    return PeerStore(
        version=truth["peteos_version"],
        layout=layout,
        path=target,
        config_dir=config_dir,
        sessions_dir=config_dir / ("sessions" if layout == "0.6" else "agents"),
        ground_truth=truth,
        env=env,
        stub=stub,
        build_seconds=seconds,
    )


@pytest.fixture(scope="session")
def peteos_stub() -> Iterator[OpenAIStub]:
    """The scripted OpenAI stub every peer store was built against (kept for ``load``)."""
    with OpenAIStub() as stub:
        yield stub


@pytest.fixture(scope="session")
def peteos05_store(tmp_path_factory: pytest.TempPathFactory, peteos_stub: OpenAIStub) -> PeerStore:
    """A store written by peteos 0.5.8: ``<path>/agents/<role>/<uuid>/``."""
    return build_peer_store("peteos05", "0.5", tmp_path_factory.mktemp("peteos05") / "store", peteos_stub)


@pytest.fixture(scope="session")
def peteos06_store(tmp_path_factory: pytest.TempPathFactory, peteos_stub: OpenAIStub) -> PeerStore:
    """A store written by peteos 0.6.13: ``<path>/.peteos/{sessions,instances,roles}/``."""
    return build_peer_store("peteos06", "0.6", tmp_path_factory.mktemp("peteos06") / "store", peteos_stub)
