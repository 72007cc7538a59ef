"""Outputs as a person reads them: tool calls as text, their differences as sentences."""

from __future__ import annotations

from replay import EMPTY_OUTPUTS, ContextDiff, Output, diff_outputs, output_sentences, row_changes
from replay._phrases import (
    argument_sentences,
    call_text,
    marked_output,
    output_text,
    path_text,
    tool_call_sentences,
)
from workbench.replay_views import context_diff_table
from workbench.views import coloured_words


def search(query: str, **more: object) -> tuple[str, dict[str, object]]:
    return ("search", {"query": query, **more})


class TestToolCallsAsText:
    def test_a_call_reads_as_its_name_and_one_line_per_argument(self) -> None:
        assert call_text(1, "search", {"query": "weather in Paris", "limit": 5}) == (
            'tool call 1: search\n  query = "weather in Paris"\n  limit = 5'
        )

    def test_nested_and_odd_arguments_stay_readable(self) -> None:
        assert (
            call_text(2, "tag", {"tags": ["a", "b"]})
            == 'tool call 2: tag\n  tags = [\n      "a",\n      "b"\n    ]'
        )
        assert call_text(1, "f", {}) == "tool call 1: f\n  (no arguments)"
        assert call_text(1, "f", "{not json") == "tool call 1: f\n  arguments (not JSON): {not json"

    def test_an_output_of_tool_calls_only_is_never_empty_text(self) -> None:
        output = Output("", (search("x"),))
        assert output_text(output) == 'tool call 1: search\n  query = "x"'
        assert marked_output(output, output) == 'tool call 1: search query = "x"'
        assert marked_output(Output(""), Output("")) == EMPTY_OUTPUTS

    def test_a_changed_argument_shows_word_by_word(self) -> None:
        a, b = Output("", (search("weather in Paris"),)), Output("", (search("Paris weather"),))
        assert marked_output(a, b) == 'tool call 1: search query = [-"weather in Paris"-] {+"Paris weather"+}'


class TestColouredWords:
    def test_runs_are_red_and_green_and_escaped_so_text_never_becomes_markup(self) -> None:
        words = [("equal", "see"), ("delete", "[here](https://evil.example)"), ("insert", "**now** :red[x]")]
        shown = coloured_words(words)
        assert shown.startswith("see :red-background[\\[\\-") and ":green-background[\\{\\+" in shown
        for raw in ("](", "**", ":red[x]", "https://"):  # no link, no bold, no directive of its own
            assert raw not in shown, raw
        assert coloured_words([]) == ""


class TestSentences:
    def test_a_changed_argument_says_from_what_to_what(self) -> None:
        a, b = [search("weather in Paris")], [search("Paris weather")]
        assert tool_call_sentences(a, b) == [
            'tool call 1 search: argument query changed from "weather in Paris" to "Paris weather"'
        ]

    def test_arguments_added_removed_and_retyped(self) -> None:
        assert argument_sentences({"limit": 5, "q": "x"}, {"q": "x", "page": 2}) == [
            "argument limit removed (was 5)",
            "argument page added: 2",
        ]
        assert argument_sentences({"limit": 5}, {"limit": "5"}) == [
            'argument limit changed from 5 (a number) to "5" (text)'
        ]
        assert argument_sentences({"tags": ["a"]}, {"tags": ["a", "b"]}) == ['argument tags[1] added: "b"']
        assert argument_sentences({"tags": ["a", "b"]}, {"tags": ["a"]}) == [
            'argument tags[1] removed (was "b")'
        ]
        assert argument_sentences({"q": "x"}, "raw") == [
            'the arguments changed from {"q": "x"} (an object) to "raw" (text)'
        ]

    def test_a_path_reads_as_a_person_writes_it(self) -> None:
        assert path_text(["filters", "tags", 0, "name"]) == "filters.tags[0].name"

    def test_a_call_added_in_the_middle_is_one_call_added(self) -> None:
        a = [search("x"), ("save", {"id": 1})]
        b = [search("x"), ("lookup", {"id": 1}), ("save", {"id": 1})]
        assert tool_call_sentences(a, b) == ["tool call 2 lookup added: lookup(id=1)"]

    def test_a_removed_call_and_a_renamed_one(self) -> None:
        assert tool_call_sentences([search("x"), ("save", {})], [search("x")]) == [
            "tool call 2 save removed (was save())"
        ]
        assert tool_call_sentences([search("x")], [("lookup", {"q": "x"})]) == [
            'tool call 1 changed from search(query="x") to lookup(q="x")'
        ]

    def test_a_call_that_moved_names_both_places(self) -> None:
        a = [("save", {}), search("x")]
        b = [search("y")]
        assert tool_call_sentences(a, b) == [
            "tool call 1 save removed (was save())",
            'tool call 1 (2 in the original) search: argument query changed from "x" to "y"',
        ]

    def test_whole_outputs_are_summed_up(self) -> None:
        a = Output("", (search("weather in Paris"),))
        b = Output("It rains.", (search("weather in Paris"), ("lookup", {"city": "Paris"})))
        assert output_sentences(a, b) == [
            "text added: 2 words (the original had no text)",
            "the run makes 2 tool calls, the original made 1",
            'tool call 2 lookup added: lookup(city="Paris")',
        ]
        assert output_sentences(a, a) == ["the run is the same as the original: the same text and tool calls"]
        assert output_sentences(Output("a b c"), Output("a x c"), ("A", "B")) == [
            "text changed: 1 word removed, 1 added"
        ]
        assert output_sentences(Output("a", (search("x"),)), Output("b", (search("x"),))) == [
            "text changed: 1 word removed, 1 added",
            "tool calls: the same (1)",
        ]

    def test_tool_calls_are_never_summed_up_as_both_empty(self) -> None:
        a, b = Output("", (search("x"),)), Output("", (search("y"),))
        sentences = output_sentences(a, b)
        assert sentences and EMPTY_OUTPUTS not in sentences
        assert "(both empty)" not in marked_output(a, b)
        assert diff_outputs(a, b).tool_calls  # the raw DeepDiff the page keeps behind an expander


class TestContextDiffRows:
    def row(
        self, text: str = "", calls: list[list[object]] | None = None, role: str = "assistant"
    ) -> dict[str, object]:
        return {"role": role, "id": "m", "text": text, "tool_calls": calls or []}

    def test_a_row_says_which_argument_changed(self) -> None:
        a, b = self.row(calls=[["search", {"query": "x"}]]), self.row(calls=[["search", {"query": "y"}]])
        assert row_changes(a, b) == 'tool call 1 search: argument query changed from "x" to "y"'

    def test_a_row_on_one_side_or_differing_elsewhere_says_so(self) -> None:
        assert row_changes(self.row("hi"), None) == "only in A"
        assert row_changes(None, self.row("hi")) == "only in B"
        assert row_changes(self.row(role="tool_result"), self.row(role="tool_result")).startswith(
            "same text and tool calls; other parts differ"
        )
        assert (
            row_changes(self.row("hi", role="user"), self.row("hi")) == "role changed from user to assistant"
        )

    def test_a_row_of_tool_calls_shows_them_as_its_text(self) -> None:
        a = {"index": 6, "same": False, "words": [], "a": self.row(calls=[["search", {"q": "x"}]]), "b": None}
        table = context_diff_table(ContextDiff(6, 1, [a]))
        assert table["a text"].tolist() == ['search(q="x")'] and table["changes"].tolist() == ["only in A"]
