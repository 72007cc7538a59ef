"""Replay on a long context: the request of a 100,000-message context is rebuilt once per
state of the store, its edit form draws a window of messages (the last ones by default,
any others by number and range), old history is dropped by a range, and the run goes to
the real local model. Also the message-range notation the page, the command line and
the fork names share, and the pure parts of the form."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

import replay
import replay._run as replay_run
from local_model import LocalModelServer
from replay import (
    REPLAY_KEY,
    MessageRangeError,
    Overrides,
    materialize,
    message_ranges_text,
    parse_message_ranges,
    replay_messages,
)
from soap_core import Message, Session, Store
from tests.apptest import APP
from tests.test_page_context_long import long_context, long_store
from workbench.replay_views import (
    EDIT_TAIL,
    MOST_EDITED,
    REQUEST_HEAD,
    REQUEST_TAIL,
    default_edit_window,
    dropped_by_ranges,
    edit_window,
    editable_text,
    overrides_summary,
    request_preview,
)

LONG = 100_000
real_materialize = replay.materialize


# -- the notation ----------------------------------------------------------------------


class TestMessageRanges:
    def test_numbers_ranges_and_open_ends_name_messages_once_in_order(self) -> None:
        assert parse_message_ranges("7, 0 3-5", 10) == [0, 3, 4, 5, 7]
        assert parse_message_ranges("#3 - #5, 4", 10) == [3, 4, 5]  # as the page prints them
        assert parse_message_ranges("8-", 10) == [8, 9]
        assert parse_message_ranges("  ", 10) == []

    @pytest.mark.parametrize(
        ("spec", "says"),
        [
            ("x", "'x' is not a message number or a range like 3-9"),
            ("5-2", "'5-2' runs backwards"),
            ("10", "'10': the request has 10 messages, numbered 0 to 9"),
            ("3-12", "'3-12': the request has 10 messages"),
            ("12-", "'12-': the request has 10 messages"),
            ("²", "'²' is not a message number"),
            ("-3", "'-3' is not a message number"),
        ],
    )
    def test_what_names_no_message_says_which_item_and_why(self, spec: str, says: str) -> None:
        with pytest.raises(MessageRangeError, match=says.replace("(", r"\(")):
            parse_message_ranges(spec, 10)

    def test_runs_of_three_or_more_are_written_as_ranges(self) -> None:
        assert message_ranges_text([9, 0, 3, 4, 5, 6, 10, 12]) == "#0, #3-#6, #9, #10, #12"
        assert message_ranges_text(range(1, 15_000)) == "#1-#14999"
        assert message_ranges_text([2, 3, 4], mark="") == "2-4"

    @given(st.sets(st.integers(min_value=0, max_value=300)))
    def test_what_is_written_reads_back_as_the_same_messages(self, indices: set[int]) -> None:
        assert parse_message_ranges(message_ranges_text(indices), 301) == sorted(indices)
        assert parse_message_ranges(message_ranges_text(indices, mark=""), 301) == sorted(indices)

    def test_a_batch_that_dropped_the_old_history_says_so_in_one_item(self) -> None:
        overrides = Overrides(edits={14_995: "hi"}, drops=tuple(range(1, 14_980)))
        assert overrides_summary(overrides) == "message #14995 edited; messages #1-#14979 dropped"


# -- the form's window, the drops and the request shown ---------------------------------


class TestTheForm:
    def test_a_short_request_shows_every_message_and_no_window(self) -> None:
        assert default_edit_window(MOST_EDITED) == ""
        assert edit_window("anything", MOST_EDITED).indices == list(range(MOST_EDITED))

    def test_a_long_request_starts_on_its_last_messages(self) -> None:
        window = edit_window(default_edit_window(LONG), LONG)
        assert window.indices == list(range(LONG - EDIT_TAIL, LONG)) and window.note is None

    def test_the_window_shows_what_is_named_and_at_most_its_limit(self) -> None:
        assert edit_window("0-2, 99998-", LONG).indices == [0, 1, 2, 99_998, 99_999]
        many = edit_window("100-400", LONG)
        assert many.indices == list(range(100, 100 + MOST_EDITED))
        assert many.note is not None and "301 messages named" in many.note and "#100-#149" in many.note

    def test_a_window_that_cannot_be_read_falls_back_to_the_last_messages_and_says_why(self) -> None:
        tail = list(range(LONG - EDIT_TAIL, LONG))
        bad = edit_window("two", LONG)
        assert bad.indices == tail and bad.note is not None and "'two' is not a message number" in bad.note
        empty = edit_window(",", LONG)
        assert empty.indices == tail and empty.note == f"No message named: showing the last {EDIT_TAIL}."

    def test_drops_by_range_or_why_not(self) -> None:
        assert dropped_by_ranges("1-3, 7", 10) == ([1, 2, 3, 7], None)
        assert dropped_by_ranges("", 10) == ([], None)
        dropped, problem = dropped_by_ranges("9-11", 10)
        assert dropped == [] and problem is not None and problem.startswith("Drop messages: '9-11'")

    def test_a_long_request_is_shown_by_its_ends_and_says_how_many_are_between(self) -> None:
        messages = [{"role": "user", "content": str(i)} for i in range(1_000)]
        shown, left_out = request_preview({"model": "m", "messages": messages})
        assert left_out == 1_000 - REQUEST_HEAD - REQUEST_TAIL
        assert shown["model"] == "m"
        assert shown["messages"][:REQUEST_HEAD] == messages[:REQUEST_HEAD]
        assert shown["messages"][-REQUEST_TAIL:] == messages[-REQUEST_TAIL:]
        assert (
            shown["messages"][REQUEST_HEAD]
            == f"… {left_out:,} messages of the body not shown (its positions 3 to 949) …"
        )
        short = {"messages": messages[: REQUEST_HEAD + REQUEST_TAIL]}
        assert request_preview(short) == (short, 0)

    def test_dropping_a_range_takes_the_tool_results_of_the_calls_it_drops(self) -> None:
        context = long_context(400)
        session = Session.create("Drops", context)
        last = max(i for i, m in enumerate(context.messages) if m.role == "assistant" and not m.tool_uses())
        found = materialize(session, context, last)
        calls = [i for i, m in enumerate(found.messages) if m.tool_uses()]
        cut = calls[-1]  # the range ends on a call: its result, just after, goes too
        sent = replay_messages(found, Overrides(drops=tuple(range(1, cut + 1))))
        kept_ids = {m.id for m in sent}
        assert found.messages[cut + 1].id not in kept_ids  # the result of the last dropped call
        assert [m.id for m in sent] == [found.messages[0].id] + [m.id for m in found.messages[cut + 2 :]]

    def test_dropping_a_range_reads_each_message_a_bounded_number_of_times(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Widening drops to tool pairs once looked at every message per dropped message:
        dropping the first 15,000 of a long request was quadratic. Counted, not timed."""
        context = long_context(3_000)
        last = max(i for i, m in enumerate(context.messages) if m.role == "assistant" and not m.tool_uses())
        found = materialize(Session.create("Counted", context), context, last)
        looked = [0]
        real = replay_run._call_ids

        def counted(message: Message) -> set[str]:
            looked[0] += 1
            return real(message)

        monkeypatch.setattr(replay_run, "_call_ids", counted)
        dropped = range(1, len(found.messages) - EDIT_TAIL)
        replay_messages(found, Overrides(drops=tuple(dropped)))
        assert 0 < looked[0] <= len(dropped) + len(found.messages)


# -- the page on a 100,000-message context -----------------------------------------------


@pytest.fixture(scope="module")
def huge(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Session]:
    root = tmp_path_factory.mktemp("huge") / "store"
    return root, long_store(root, LONG, forks=False)


def open_replay(root: Path, session: Session, **params: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=300)
    at.query_params.update({"store": str(root), "session": session.uuid, **params})
    at.run()
    at.switch_page("workbench/pages/replay.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def message_areas(at: AppTest) -> dict[int, str]:
    """The edit form's text areas, by the message they edit."""
    return {int(a.label.split()[1]): a.value for a in at.text_area if a.label.startswith("Message ")}


def drop_boxes(at: AppTest) -> list[int]:
    return [int(b.label.split()[2]) for b in at.checkbox if b.label.startswith("Drop message ")]


class TestTheLongPage:
    def test_the_form_draws_the_last_messages_of_the_request_and_any_others_named(
        self, huge: tuple[Path, Session], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        root, session = huge
        rebuilt: list[int] = []

        def counted(*args: Any, **kwargs: Any) -> Any:
            rebuilt.append(1)
            return real_materialize(*args, **kwargs)

        monkeypatch.setattr(replay, "materialize", counted)  # the page imports it on each run
        at = open_replay(root, session)
        assert rebuilt, "the page did not rebuild the request"
        rebuilt.clear()
        answer = int(at.query_params["message"])
        found = materialize(Store(root).load_session(session.uuid), session.active_context_id, answer)
        count = len(found.messages)
        assert count > 90_000
        tail = range(count - EDIT_TAIL, count)
        assert drop_boxes(at) == list(tail)  # a box per message of the window, and none more
        assert message_areas(at) == {
            i: editable_text(found.messages[i]) for i in tail if editable_text(found.messages[i]) is not None
        }
        [heading] = [e.label for e in at.expander if e.label.startswith("Messages of the request")]
        assert heading == f"Messages of the request ({count:,}; #{count - EDIT_TAIL}-#{count - 1} shown)"
        assert any(
            f"{len(found.request['messages']) - REQUEST_HEAD - REQUEST_TAIL:,} of the request's messages"
            in c.value
            for c in at.caption
        )
        shown = [json.loads(j.value) for j in at.json if '"messages"' in j.value]
        assert shown and len(shown[0]["messages"]) == REQUEST_HEAD + 1 + REQUEST_TAIL

        at.text_input(key=f"{found.context_id}:{found.index}:window").input(f"2-4, {count - 1}").run()
        assert not at.exception
        assert not rebuilt, "a click rebuilt the request of 100,000 messages again"
        assert drop_boxes(at) == [2, 3, 4, count - 1]
        assert set(message_areas(at)) <= {2, 3, 4, count - 1} and 2 in message_areas(at)
        assert message_areas(at)[2] == found.messages[2].text()

    def test_old_history_dropped_by_a_range_runs_on_the_local_model_as_a_fork(
        self, huge: tuple[Path, Session], llm_server: LocalModelServer
    ) -> None:
        root, session = huge
        at = open_replay(root, session)
        answer = int(at.query_params["message"])
        found = materialize(Store(root).load_session(session.uuid), session.active_context_id, answer)
        count = len(found.messages)
        prefix = f"{found.context_id}:{found.index}"
        asked = max(i for i in range(count) if found.messages[i].role == "user" and found.messages[i].text())
        at.text_input(key="replay_base_url").input(llm_server.base_url).run()
        at.text_input(key=f"{prefix}:drop_ranges").input(f"1-{count - EDIT_TAIL - 1}")
        at.text_area(key=f"{prefix}:edit:{asked}").input("Say hello.")
        [max_tokens] = [n for n in at.number_input if n.label == "Max tokens"]
        max_tokens.set_value(16)  # an answer's first words are enough
        [run] = [b for b in at.button if b.label == "Run"]
        run.click().run()
        assert not at.exception, [e.value for e in at.exception]
        assert not at.error, [e.value for e in at.error]

        after = Store(root).load_session(session.uuid)
        [fork] = [c for c in after.contexts.values() if REPLAY_KEY in c.extra]
        record = fork.extra[REPLAY_KEY]
        assert record["overrides"]["drops"] == list(range(1, count - EDIT_TAIL))
        assert record["overrides"]["edits"] == {str(asked): "Say hello."}
        sent = replay_messages(
            found, Overrides(edits={asked: "Say hello."}, drops=tuple(range(1, count - EDIT_TAIL)))
        )
        assert len(fork.messages) == len(sent) + 1 <= EDIT_TAIL + 2  # what was sent, and the answer
        assert [(m.role, m.text()) for m in fork.messages[:-1]] == [(m.role, m.text()) for m in sent]
        assert fork.messages[-1].role == "assistant"
        titles = [h.value.replace("\\", "") for h in at.subheader if h.value.startswith("Run 1")]
        dropped = f"messages #1-#{count - EDIT_TAIL - 1} dropped"
        assert titles == [f"Run 1: message #{asked} edited; {dropped}; max tokens 16"]
