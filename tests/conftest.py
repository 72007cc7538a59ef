"""Shared fixtures: the sample sOAP store and copies of it that tests may change."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser

from soap_core import SAVE_LOCKS_DIR, Context, Store
from soap_core._catalog import CATALOG_FILE, is_catalog_file
from tests.demo_store import demo_build, demo_store  # noqa: F401  (built once, against the local model)
from tests.llm import llm_server, scoring_server  # noqa: F401  (the session-wide local model servers)
from tests.peers.otel_traces import events, latest, written  # noqa: F401  (real instrumentations' traces)
from tests.peers.phoenix import phoenix  # noqa: F401  (a real Phoenix on 127.0.0.1, session-wide)
from tests.s3_server import S3, start_server
from tests.workbench_store import workbench_store  # noqa: F401  (a small store with every kind of record)

FIXTURES = Path(__file__).parent / "fixtures"
SOAP_FIXTURE = FIXTURES / "soap"
SESSION_UUID = "20250611-3f0c2b6e-8a41-4d8e-9c1a-5b7d2e9f4a10"
SESSION_DIR = SOAP_FIXTURE / "agents" / "HelloPete" / SESSION_UUID
PARENT_ID = "b1d6e0a2-7c3f-4e59-a0b8-2f6d91c4e7a3"
CHILD_ID = "e7c40f19-2a6b-4d35-8e91-7b03a5c6d2f4"
DISCARDED_ID = "5e2a9c71-0b4d-4f8e-b36a-c9d71e02f5b8"


@pytest.fixture(autouse=True)
def no_store_or_endpoint_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests name their store and endpoint; a developer's $SOAPWB_STORE or
    $OPENAI_BASE_URL must not leak into them."""
    monkeypatch.delenv("SOAPWB_STORE", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


@pytest.fixture
def store_copy(tmp_path: Path) -> Path:
    """A writable copy of the sample store (the config dir)."""
    target = tmp_path / "store"
    shutil.copytree(SOAP_FIXTURE, target, ignore=shutil.ignore_patterns(f"{CATALOG_FILE}*"))
    for path in target.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target


@pytest.fixture
def fixture_store() -> Store:
    return Store(SOAP_FIXTURE)


def load_fixture_context(context_id: str) -> Context:
    return Store(SOAP_FIXTURE).read_context(SESSION_DIR / f"{context_id}.json")


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes, to prove nothing was rewritten."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not is_catalog_file(p) and SAVE_LOCKS_DIR not in p.parts
    }


def session_dir(root: Path, session_uuid: str = SESSION_UUID) -> Path:
    return root / "agents" / "HelloPete" / session_uuid


def edit_json(path: Path, change: Callable[[Any], object]) -> None:
    """Apply ``change`` to the parsed file and write it back as peteos would."""
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Chromium for a module's browser tests (the flags of tests/test_browser.py).
    Module-scoped: some tests start a Playwright of their own, which cannot run while
    another is open in the same thread."""
    from playwright.sync_api import sync_playwright

    from tests.test_browser import CHROMIUM, FLAGS

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()


S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3]:
    """A moto S3 server on 127.0.0.1 (a free port) with one bucket, for the session."""
    saved = {name: os.environ.get(name) for name in S3_ENV}
    os.environ.update(S3_ENV)
    try:
        yield from start_server()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture
def s3(
    s3_server: S3, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[S3]:
    """The S3 server, with this test's own cache folder (no mirror leaks into ~/.cache
    or into another test) and the test's credentials in the environment."""
    from soap_core._remote import forget_mirrors

    for name, value in S3_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SOAPWB_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    forget_mirrors()
    yield s3_server
    forget_mirrors()
