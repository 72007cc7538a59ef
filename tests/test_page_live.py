"""The pages' side of live follow (workbench.live), headless with AppTest: a page run notes
the follower's count it started from; a change to the store moves the count past it (the
sidebar fragment's cue to rerun, which AppTest does not tick by itself, so the test reruns
as the fragment would); the toggle turns following off. The browser test
(tests/test_browser_live.py) shows the fragment doing it on its own."""

from __future__ import annotations

import time
from pathlib import Path

from soap_core import Context, Message, Session, Store, TextPart
from tests.apptest import open_app_page
from workbench.live import FOLLOW_KEY, moved, store_follower

SEEN = "follow_seen_generation"
WAIT_S = 10.0


def save_a_session(root: Path) -> None:
    context = Context.create("written while the page is open")
    context.append(Message.create("user", [TextPart("hello")]))
    Store(root).save_session(Session.create("Newcomer", context))


def test_a_change_to_the_store_moves_the_count_past_the_page_and_a_rerun_shows_it(store_copy: Path) -> None:
    at = open_app_page(store_copy, "sessions")
    assert at.toggle(key=FOLLOW_KEY).value is True, "following is on by default"
    follower = store_follower(str(store_copy))
    follower.wait_for_change(0, WAIT_S)  # its watches in place (put there in the background)
    assert follower.watching()
    at.run()  # the one rerun that readiness asks for
    seen = at.session_state[SEEN]
    assert not moved(seen, follower.generation), "an idle page is not rerun"
    save_a_session(store_copy)
    assert follower.wait_for_change(seen, WAIT_S) != seen
    assert moved(seen, follower.generation), "the fragment's cue to rerun"
    at.run()  # what st.rerun() from the fragment does
    assert not at.exception
    assert any("Newcomer" in str(cell) for cell in at.dataframe[0].value["role"])
    assert at.session_state[SEEN] == follower.generation


def test_with_the_toggle_off_the_page_notes_no_count(store_copy: Path) -> None:
    at = open_app_page(store_copy, "sessions")
    at.toggle(key=FOLLOW_KEY).set_value(False).run()
    noted = at.session_state[SEEN]
    save_a_session(store_copy)
    time.sleep(1.0)
    at.run()
    assert not at.exception
    assert at.session_state[SEEN] == noted, "no page run took the count: nothing follows"
