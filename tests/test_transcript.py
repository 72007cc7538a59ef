"""The transcript's plain functions (workbench.transcript): who speaks, headings names
first, call signatures, media sizes, which result answers which call and where the page
puts it, the system prompt once per change, and the page's CSS."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator, Sequence
from typing import overload

from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from replay import PromptAtCall
from soap_core import (
    Context,
    MediaPart,
    Message,
    MessageRow,
    Session,
    TextPart,
    ThinkingPart,
    ToolPart,
    ToolResultPart,
    ToolUsePart,
    base64_source,
    build_call_pairs,
)
from soap_core.runtime._compaction import SUMMARY_PREFIX
from workbench.context_views import PAGE_SIZE, build_index, page_of, page_rows
from workbench.transcript import (
    BOX_CSS,
    CallLink,
    ResultLink,
    call_signature,
    details_line,
    image_dimensions,
    media_caption,
    message_title,
    place_page,
    placed_indices,
    prompt_history_label,
    prompt_versions,
    size_label,
    speaker,
    transcript_css,
)


def png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), "white").save(out, "PNG")
    return out.getvalue()


def call(call_id: str, name: str = "lookup", arguments: str = '{"q": "x"}') -> ToolUsePart:
    return ToolUsePart(call_id, name, arguments)


def asks(*calls: ToolUsePart) -> Message:
    return Message.create("assistant", list(calls))


def answers(*call_ids: str) -> Message:
    return Message.create("tool_result", [ToolResultPart(c, f"result of {c}") for c in call_ids])


def says(text: str, role: str = "user") -> Message:
    return Message.create(role, [TextPart(text)])  # type: ignore[arg-type]


def row_of(message: Message, index: int = 12) -> MessageRow:
    context = Context.create("sys")
    while len(context.messages) < index:
        context.append(says("filler"))
    context.append(message)
    return page_rows(context, [index])[0]


# -- who speaks, and headings names first ---------------------------------------------


class TestHeadings:
    def test_each_kind_of_message_has_its_speaker(self) -> None:
        context = Context.create("sys", [ToolPart("t", "", {})])
        system, tools = context.messages
        assert speaker(system) == "system" and speaker(tools) == "tools"
        assert speaker(says("hi")) == "user" and speaker(says("hello", "assistant")) == "assistant"
        assert speaker(answers("c1")) == "tool result"
        assert speaker(says(SUMMARY_PREFIX + "earlier")) == "summary"
        anthropic = Message.create("user", [ToolResultPart("c1", "42")])
        assert speaker(anthropic) == "tool result"
        assert speaker(Message("narrator", [TextPart("once")])) == "other"

    def test_the_heading_names_the_speaker_and_the_size_and_no_id(self) -> None:
        message = says("a question of some length")
        row = row_of(message)
        title = message_title(row, message)
        assert title == f"user · {row.tokens} tokens"
        assert message.id not in title and "#" not in title and "seq" not in title
        assert message_title(
            row_of(Message("narrator", [TextPart("x")])), Message("narrator", [])
        ).startswith("narrator message · ")

    def test_a_stale_count_is_named_beside_the_true_one(self) -> None:
        message = says("hello")
        message.token_count = 999
        row = row_of(message)
        assert message_title(row, message) == f"user · {row.tokens} tokens (the file caches a stale 999)"

    def test_the_details_start_with_the_display_index_and_hold_the_ids(self) -> None:
        message = says("hello")
        row = row_of(message, index=12)
        line = details_line(row)
        assert line.startswith("#12  seq ") and f"id {message.id}" in line and "role user" in line

    def test_a_call_reads_as_a_function_call(self) -> None:
        assert call_signature(call("c", "search", '{"query": "cats", "limit": 5}')) == (
            'search(query="cats", limit=5)',
            True,
        )
        assert call_signature(call("c", "now", "{}")) == ("now()", True)
        assert call_signature(call("c", "now", "")) == ("now()", True)
        assert call_signature(call("c", "raw", "not json")) == ("raw(not json)", True)
        long, whole = call_signature(call("c", "note", '{"text": "' + "word " * 50 + '"}'))
        assert not whole and len(long) == 100 and long.endswith("…)")
        lines, whole = call_signature(call("c", "note", '{"text": "a\\nb"}'))
        assert whole and lines == 'note(text="a\\nb")'  # JSON keeps the newline escaped


# -- media --------------------------------------------------------------------------


class TestMedia:
    def test_sizes_read_as_a_person_says_them(self) -> None:
        assert [size_label(n) for n in (0, 1, 13, 999, 1_000, 12_345, 4_500_000, 7 * 10**12)] == [
            "0 bytes",
            "1 byte",
            "13 bytes",
            "999 bytes",
            "1.0 kB",
            "12.3 kB",
            "4.5 MB",
            "7000.0 GB",
        ]

    def test_an_image_is_named_with_its_pixels_and_bytes(self) -> None:
        data = png(640, 480)
        part = MediaPart("image", base64_source("image/png", data))
        assert image_dimensions(data) == (640, 480)
        assert media_caption(part, data) == f"image · image/png · 640×480 px · {size_label(len(data))}"

    def test_bytes_that_are_no_image_pil_reads_still_have_their_size(self) -> None:
        part = MediaPart("image", base64_source("image/svg+xml", b"<svg/>"))
        assert (
            media_caption(part, b"<svg/>")
            == "image · image/svg+xml · size unknown (not an image PIL reads) · 6 bytes"
        )

    def test_other_media_have_bytes_and_url_media_are_not_fetched(self) -> None:
        pdf = MediaPart("pdf", base64_source("application/pdf", b"%PDF-1.4 tiny"))
        assert media_caption(pdf, b"%PDF-1.4 tiny") == "pdf · application/pdf · 13 bytes"
        url = MediaPart("image", {"type": "url", "url": "https://example.com/cat.png"})
        assert media_caption(url, None) == "image · unknown media type · by url, not fetched"


# -- pairing calls with results ------------------------------------------------------


class TestPairs:
    def test_a_result_answers_the_call_with_its_id(self) -> None:
        pairs = build_call_pairs([says("q"), asks(call("a"), call("b")), answers("a", "b"), says("done")])
        assert list(pairs.call_message) == [1, 1] and list(pairs.answered_by) == [2, 2]
        assert list(pairs.result_message) == [2, 2] and list(pairs.answers) == [0, 1]
        assert pairs.calls_of(1) == range(0, 2) and pairs.calls_of(2) == range(2, 2)
        assert pairs.results_in(2) == range(0, 2) and pairs.results_in(1) == range(0, 0)

    def test_a_call_without_a_result_and_a_result_without_a_call(self) -> None:
        pairs = build_call_pairs([asks(call("a")), answers("zzz")])
        assert list(pairs.answered_by) == [-1] and list(pairs.answers) == [-1]

    def test_an_interrupted_call_does_not_take_the_result_of_a_later_call_with_its_id(self) -> None:
        pairs = build_call_pairs([asks(call("a")), says("again"), asks(call("a")), answers("a")])
        assert list(pairs.answered_by) == [-1, 3]

    def test_parallel_calls_sharing_an_id_are_answered_in_order(self) -> None:
        pairs = build_call_pairs([asks(call("wait"), call("wait")), answers("wait", "wait")])
        assert list(pairs.answers) == [0, 1] and list(pairs.answered_by) == [1, 1]

    def test_a_result_in_the_message_of_its_call_is_not_paired(self) -> None:
        both = Message.create("assistant", [call("a"), ToolResultPart("a", "x")])
        pairs = build_call_pairs([both])
        assert list(pairs.answered_by) == [-1] and list(pairs.answers) == [-1]

    def test_the_index_of_a_context_holds_its_pairs(self) -> None:
        context = Context.create("sys")
        for message in (says("q"), asks(call("a")), answers("a")):
            context.append(message)
        index = build_index(Session.create("Pairs", context), context)
        assert list(index.calls.answered_by) == [3] and index.page_of(3, False) == 1


# -- where the page puts each message --------------------------------------------------


class Reads(Sequence[Message]):
    """A message list that records which messages were read."""

    def __init__(self, messages: list[Message]) -> None:
        self.messages, self.read = messages, set[int]()

    def __len__(self) -> int:
        return len(self.messages)

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | Sequence[Message]:
        if isinstance(index, slice):
            raise TypeError("the page reads messages one at a time")
        self.read.add(index)
        return self.messages[index]

    def __iter__(self) -> Iterator[Message]:
        raise TypeError("the page must not walk the whole context")


def by_page(index: int) -> int:
    return page_of(index)


class TestPlacement:
    def test_a_result_on_the_page_is_nested_after_its_call_and_not_listed_again(self) -> None:
        messages = [says("q"), asks(call("a")), answers("a"), says("thanks", "assistant")]
        placed = place_page(build_call_pairs(messages), messages, range(4), by_page)
        assert [p.index for p in placed] == [0, 1, 3]
        [nested] = placed[1].nested.values()
        assert placed[1].nested == {0: nested} and nested.index == 2
        assert placed[1].results == {0: ResultLink(2, nested_here=True)}
        assert nested.calls == {0: CallLink(1, 0, nested=True)}
        assert placed_indices(placed) == [0, 1, 2, 3]

    def test_the_results_of_several_calls_follow_the_last_of_them(self) -> None:
        messages = [asks(call("a"), call("b"), call("c")), answers("a", "b", "c")]
        placed = place_page(build_call_pairs(messages), messages, range(2), by_page)
        [owner] = placed
        assert list(owner.nested) == [2] and owner.nested[2].index == 1
        assert owner.results[0] == ResultLink(1) and owner.results[2] == ResultLink(1, nested_here=True)

    def test_one_result_message_per_call_nests_each_under_its_call(self) -> None:
        messages = [asks(call("a"), call("b")), answers("a"), answers("b")]
        placed = place_page(build_call_pairs(messages), messages, range(3), by_page)
        [owner] = placed
        assert {at: p.index for at, p in owner.nested.items()} == {0: 1, 1: 2}

    def test_across_a_page_boundary_each_side_names_the_other_page(self) -> None:
        messages = [says(f"m{i}") for i in range(PAGE_SIZE - 1)] + [asks(call("a")), answers("a")]
        pairs = build_call_pairs(messages)
        first = place_page(pairs, messages, range(PAGE_SIZE), by_page)
        assert first[-1].results == {0: ResultLink(PAGE_SIZE, page=2)} and not first[-1].nested
        second = place_page(pairs, messages, [PAGE_SIZE], by_page)
        assert [p.index for p in second] == [PAGE_SIZE]
        assert second[0].calls == {0: CallLink(PAGE_SIZE - 1, 0, page=1)}

    def test_missing_results_and_calls_are_placed_on_their_own(self) -> None:
        messages = [asks(call("a")), answers("other")]
        placed = place_page(build_call_pairs(messages), messages, range(2), by_page)
        assert [p.index for p in placed] == [0, 1]
        assert placed[0].results == {0: ResultLink(None)} and placed[1].calls == {0: CallLink(None)}

    def test_only_the_pages_messages_and_the_calls_it_links_to_are_read(self) -> None:
        messages = []
        for i in range(300):
            messages += [says(f"q{i}"), asks(call(f"c{i}")), answers(f"c{i}")]
        reads = Reads(messages)
        pairs = build_call_pairs(messages)
        page = range(2 * PAGE_SIZE + 1, 3 * PAGE_SIZE + 1)  # it opens with a result: its call is before
        placed = place_page(pairs, reads, page, by_page)
        assert reads.read == set(page) | {page.start - 1}
        assert sorted(placed_indices(placed)) == list(page)

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.tuples(st.sampled_from("uacr"), st.integers(0, 4)), max_size=40), st.integers(1, 8))
    def test_every_message_of_a_page_is_shown_exactly_once(
        self, script: list[tuple[str, int]], size: int
    ) -> None:
        """Whatever the calls and results (ids repeated, missing, out of order), a page
        shows each of its messages once: at the top or nested in exactly one other."""
        messages = []
        for kind, n in script:
            if kind == "u":
                messages.append(says("q"))
            elif kind == "a":
                messages.append(asks(*[call(f"c{k}") for k in range(n % 3 + 1)]))
            elif kind == "c":
                messages.append(asks(call(f"c{n}")))
            else:
                messages.append(answers(*[f"c{(n + k) % 5}" for k in range(n % 2 + 1)]))
        pairs = build_call_pairs(messages)
        for start in range(0, len(messages), size):
            page = range(start, min(start + size, len(messages)))
            placed = place_page(pairs, messages, page, lambda i: i // size + 1)
            shown = placed_indices(placed)
            assert sorted(shown) == list(page)

    def test_placing_a_page_of_a_long_context_is_quick(self) -> None:
        messages = []
        for i in range(20_000 // 3):
            messages += [says(f"q{i}"), asks(call(f"c{i}")), answers(f"c{i}")]
        pairs = build_call_pairs(messages)
        started = time.perf_counter()
        for page in range(1, 400, 7):
            span = range((page - 1) * PAGE_SIZE, page * PAGE_SIZE)
            place_page(pairs, messages, span, by_page)
        assert (time.perf_counter() - started) / 57 < 0.01


# -- the system prompt over time -------------------------------------------------------


class TestPromptHistory:
    def test_the_prompt_is_listed_once_per_change(self) -> None:
        texts = ["A", "A", "B", "B", "B", "A"]
        prompts = [PromptAtCall(2 * k + 3, text, True) for k, text in enumerate(texts)]
        versions = prompt_versions(prompts)
        assert [(v.number, v.text, v.first_call, v.calls) for v in versions] == [
            (1, "A", 1, 2),
            (2, "B", 3, 3),
            (3, "A", 6, 1),
        ]
        assert (versions[1].first_message, versions[1].last_message) == (7, 11)
        assert prompt_history_label(versions) == "System prompt (changed 2 times over 6 calls)"
        assert versions[1].label == (
            "version 2 · calls 3–5 (the model's answer: messages #7–#11) · rebuilt from the call records"
        )
        assert versions[2].label.startswith("version 3 · call 6 (the model's answer: message #13)")

    def test_an_unchanged_prompt_and_a_prompt_without_a_log(self) -> None:
        same = prompt_versions([PromptAtCall(k, "A", True) for k in range(14)])
        assert len(same) == 1 and prompt_history_label(same) == "System prompt (the same at all 14 calls)"
        assert prompt_history_label(prompt_versions([PromptAtCall(3, "A", True)])) == "System prompt (1 call)"
        disk = prompt_versions([PromptAtCall(9, "A", False)])
        assert disk[0].label.endswith("as on disk (no call log)")
        assert prompt_history_label(disk).startswith("System prompt (as on disk")
        assert prompt_history_label([]) == "System prompt (none)"


# -- the page's CSS ------------------------------------------------------------------


class TestCss:
    def test_each_speaker_has_its_colour_and_the_linked_message_its_outline(self) -> None:
        css = transcript_css({0: "system", 1: "user", 2: "assistant", 3: "user"}, linked=2)
        assert ".st-key-message-1,.st-key-message-3 { border-left: 4px solid #1c83e1 !important; }" in css
        assert ".st-key-message-2 { border-left: 4px solid #ff8c00 !important; }" in css
        assert css.endswith(
            ".st-key-message-2 { border: 2px solid #ff4b4b !important; background: rgba(255, 75, 75, 0.06); }"
        )
        assert "#ff4b4b" not in transcript_css({0: "user"}, linked=7)  # not on the page: no outline

    def test_nothing_but_numbers_and_our_colours_goes_into_it(self) -> None:
        css = transcript_css({i: "user" for i in range(50)}, linked=None)
        assert css.startswith(BOX_CSS)
        assert set(css.removeprefix(BOX_CSS)) <= set(".-,{}:;!#() 0123456789abcdefghijklmnopqrstuvwxyz")


def test_a_thinking_part_is_no_call() -> None:
    """Thinking and text do not count as calls or results (the arrays stay empty)."""
    pairs = build_call_pairs([Message.create("assistant", [ThinkingPart("hm"), TextPart("ok")])])
    assert not pairs.call_message and not pairs.result_message
