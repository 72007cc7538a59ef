"""The session the pages share through ``st.cache_resource`` is never changed by them
(issue 24, point 5).

:func:`workbench.loading.read_only_session` hands one object to every rerun and every
browser tab, so that a long context is not copied on each click. Python has no frozen
form for a graph of dataclasses, so the pages hold to a contract: read it, never change
it (a run writes to :meth:`~workbench.loading.Scope.writable`, a fresh load). These tests
hold them to it: each opens a page that shares the session, works it as a user would (a
replay run and a drift measurement on the local model, for the two pages that write),
and compares the shared object with a snapshot taken before."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from local_model import LocalModelServer
from soap_core import Session, Store
from tests.apptest import open_app_page
from workbench import loading


@pytest.fixture
def store(workbench_store: Path, tmp_path: Path) -> Path:
    """A copy of the workbench store that the pages may write runs into."""
    target = tmp_path / "store"
    shutil.copytree(workbench_store, target)
    return target


def uuid_of(store: Path, role: str) -> str:
    return next(s.uuid for s in Store(store).sessions() if s.role == role)


def fingerprint(session: Session) -> bytes:
    """Every byte of the session object; the token caches filled first, for a page may
    fill them as it counts (the same numbers: harmless sharing)."""
    for context in session.contexts.values():
        context.total_token_count()
    return pickle.dumps(session)


def shared_after_opening(
    store: Path, page: str, role: str, monkeypatch: pytest.MonkeyPatch, **params: str
) -> tuple[AppTest, Session]:
    """Open ``page`` and return it with the shared session of ``role`` it holds. The page
    runs twice first (its first run on a copied store writes the catalog, which changes
    the store's state), and the store may not load a session when it is fetched here, so
    the session returned is the very object the page holds."""
    at = open_app_page(store, page, timeout=300, **params)
    at.run()
    with monkeypatch.context() as patched:
        patched.setattr(
            Store, "load_session", lambda *a, **k: pytest.fail(f"{page} shares no {role} session")
        )
        shared = loading.read_only_session(str(store), uuid_of(store, role))
    return at, shared


@pytest.mark.parametrize(
    ("page", "opened_on", "shared"),
    [
        ("context", "Analyst", "Analyst"),
        ("token_budget", "Analyst", "Analyst"),
        ("compaction", "Analyst", "Analyst"),
        ("replay", "Analyst", "Analyst"),
        ("traceback", "Archivist", "Researcher"),  # the caller's session, for its call sites
    ],
)
def test_a_page_reading_the_shared_session_leaves_it_as_it_was(
    store: Path, page: str, opened_on: str, shared: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    at, session = shared_after_opening(store, page, shared, monkeypatch, session=uuid_of(store, opened_on))
    before = fingerprint(session)
    at.run()
    assert not at.exception
    assert fingerprint(session) == before


def test_a_replay_run_writes_a_fresh_load_not_the_shared_session(
    store: Path, llm_server: LocalModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    at, session = shared_after_opening(
        store, "replay", "Analyst", monkeypatch, session=uuid_of(store, "Analyst")
    )
    before, contexts = fingerprint(session), len(session.contexts)
    at.text_input(key="replay_base_url").input(llm_server.base_url).run()
    next(b for b in at.button if b.label == "Run").click().run()
    assert not at.exception
    assert len(Store(store).load_session(session.uuid, require_active=False).contexts) == contexts + 1
    assert fingerprint(session) == before


def test_a_drift_measurement_writes_a_fresh_load_not_the_shared_session(
    store: Path, llm_server: LocalModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    uuid = uuid_of(store, "Analyst")
    at, session = shared_after_opening(
        store, "compaction", "Analyst", monkeypatch, session=uuid, strategies="rolling-messages:3"
    )
    before, contexts = fingerprint(session), len(session.contexts)
    at.text_input(key="drift_endpoint").input(llm_server.base_url).run()
    at.multiselect(key="drift_calls").select(0).run()
    at.button(key="measure_drift").click().run(timeout=300)
    assert not at.exception
    assert len(Store(store).load_session(uuid, require_active=False).contexts) > contexts
    assert fingerprint(session) == before
