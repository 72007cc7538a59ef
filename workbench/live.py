"""The pages follow the store: a page reruns within a second or two of a change to it.

One :class:`~soap_core.StoreFollower` per store and server process
(``st.cache_resource``), shared by every browser tab, counts the store's changes. Each
page run notes the count it started from (:func:`note_generation`, before the page reads
the store); a fragment in the sidebar (:func:`follow_store`) looks at the count every
:data:`TICK_S` and reruns the whole page when it moved. An idle page therefore costs one
comparison of two integers a tick: no read of the store, nothing drawn, no rerun.

A rerun is cheap where nothing changed: the pages' loads are cached by the store's
signature (:func:`workbench.views.store_signature`), and the catalog re-reads only the
files that changed. Widget state (the chosen session, context, toggles) survives it, as
it does any rerun. The sidebar's "Follow the store" toggle stops it.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import streamlit as st

from soap_core import StoreFollower, is_remote
from workbench.views import open_store

TICK_S = 1.0
"""How often an open page looks at the follower's count."""
FOLLOW_KEY = "follow_store"
_SEEN_KEY = "follow_seen_generation"


@st.cache_resource(show_spinner=False, max_entries=16)
def store_follower(root: str) -> StoreFollower:
    """The one follower of the store ``root`` in this server process (a folder, or a URL
    on object storage: :meth:`~soap_core.StoreFollower.of`)."""
    return StoreFollower.of(open_store(root), background=True)


def following(root: str) -> StoreFollower | None:
    """The follower of ``root`` when the sidebar's toggle is on and ``root`` is a
    folder or a URL on object storage (a path still being typed is not followed)."""
    on = st.sidebar.toggle(
        "Follow the store",
        value=True,
        key=FOLLOW_KEY,
        help="Show what agents write to the store while this page is open: new sessions, "
        "messages, forks and calls appear within two seconds, without a reload.",
    )
    if not on or not root or not (is_remote(root) or Path(root).is_dir()):
        return None
    return store_follower(root if is_remote(root) else str(Path(root)))


def note_generation(follower: StoreFollower) -> None:
    """Note the count this page run starts from; taken before the page reads the store,
    so a change during the run is a change after it (one more rerun, never a miss)."""
    st.session_state[_SEEN_KEY] = follower.generation


def moved(seen: int | None, now: int) -> bool:
    """Whether the store changed since the page run that saw ``seen`` (None: no run saw one)."""
    return seen is not None and seen != now


@st.fragment(run_every=timedelta(seconds=TICK_S))
def follow_store(follower: StoreFollower) -> None:
    """Rerun the page when the store changed since its run; otherwise do nothing."""
    if moved(st.session_state.get(_SEEN_KEY), follower.generation):
        st.rerun(scope="app")


def follow(root: str) -> None:
    """What app.py calls once a run, before the page: the toggle, the note, the tick."""
    follower = following(root)
    if follower is None:
        return
    note_generation(follower)
    follow_store(follower)
