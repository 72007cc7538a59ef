"""The local model server as a pytest fixture, shared by every test that needs a real LLM.

One server per test session: starting it takes about a second, but the tests that use it
should not each pay for that. It runs with the deterministic settings, so a test may
compare two temperature-0 answers for equality.
"""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from local_model import NO_API_KEY, LocalModelServer


@pytest.fixture(scope="session")
def llm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalModelServer]:
    """A started ``LocalModelServer(deterministic=True)`` on a free loopback port; its log
    stays in pytest's temporary directory for a failing test to be read against."""
    log_path = tmp_path_factory.mktemp("llm") / "server.log"
    with LocalModelServer(deterministic=True, log_path=log_path) as server:
        yield server


def openai_client(server: LocalModelServer) -> openai.OpenAI:
    """An ``openai`` client for ``server``: no retries, so a failure shows at once."""
    return openai.OpenAI(base_url=server.base_url, api_key=NO_API_KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="session")
def scoring_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalModelServer]:
    """A second local model server with llama.cpp's default batching, as ``soapwb
    attribute`` starts one: scoring evaluates whole prompts, a few times faster in
    batches than one token at a time, and repeats its numbers all the same (every
    request is scored from a fresh state)."""
    log_path = tmp_path_factory.mktemp("scoring") / "server.log"
    with LocalModelServer(deterministic=False, log_path=log_path) as server:
        yield server
