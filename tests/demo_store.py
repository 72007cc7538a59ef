"""The demo store, built once per test session against the real local model.

It uses a server of its own with the default (fast) settings: the demo needs real tool
calls, not reproducible answers, and the deterministic server evaluates long prompts one
token at a time. A fake API key is set while it runs, so that tests can prove that no
file ever holds a key.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from demo import DemoSummary, build_demo_store
from local_model import LocalModelServer
from soap_core.runtime import LLMEndpoint

FAKE_KEY = "sk-demo-FAKE-key-must-never-reach-disk-5150"

DEMO_PROGRESS: list[str] = []
"""The steps the demo build announced, in order (``soapwb demo`` prints them)."""


@pytest.fixture(scope="session")
def demo_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, DemoSummary]:
    store_dir = tmp_path_factory.mktemp("demo") / "store"
    log = tmp_path_factory.mktemp("demo-llm") / "server.log"
    with LocalModelServer(deterministic=False, log_path=log) as server, pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENAI_API_KEY", FAKE_KEY)
        endpoint = LLMEndpoint(server.base_url, api_key=os.environ["OPENAI_API_KEY"])
        summary = build_demo_store(store_dir, endpoint, progress=DEMO_PROGRESS.append)
    return store_dir, summary


@pytest.fixture(scope="session")
def demo_store(demo_build: tuple[Path, DemoSummary]) -> Path:
    """The demo store's folder; tests that write must copy it first."""
    return demo_build[0]
