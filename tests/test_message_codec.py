"""Reading messages and parts builds what their constructors build, and a bad value is
named by its JSON path whichever way it is read.

``Message.from_dict`` and ``part_from_dict`` set the objects' attributes at once, not
through ``__init__`` (a first indexing reads every message of a store this way): these
tests fail if a new attribute is added to one and not the other, or if a value of the
wrong type slips through the path that trusts plain JSON types."""

from __future__ import annotations

from typing import Any

import pytest

from soap_core import FormatError
from soap_core._message import Message
from soap_core._parts import (
    MediaPart,
    Part,
    TextPart,
    ThinkingPart,
    ToolPart,
    ToolResultPart,
    ToolUsePart,
    UnknownPart,
    part_from_dict,
    part_to_dict,
)

PARTS: list[tuple[dict[str, Any], Part]] = [
    ({"type": "text", "text": "hi"}, TextPart("hi")),
    ({"type": "thinking", "text": "hmm"}, ThinkingPart("hmm")),
    (
        {"type": "image", "source": {"type": "url", "url": "u"}},
        MediaPart("image", {"type": "url", "url": "u"}),
    ),
    ({"type": "tool_use", "call_id": "c", "name": "n", "arguments": "{}"}, ToolUsePart("c", "n", "{}")),
    ({"type": "tool_result", "call_id": "c", "content": [1]}, ToolResultPart("c", [1])),
    ({"type": "tool_result", "call_id": "c", "content": "x", "name": "n"}, ToolResultPart("c", "x", "n")),
    ({"name": "t", "description": "d", "parameters": {}}, ToolPart("t", "d", {})),
    ({"type": "text", "text": "hi", "cache": 1}, TextPart("hi", extra={"cache": 1})),
    ({"type": "audio_v9", "blob": 1}, UnknownPart({"type": "audio_v9", "blob": 1})),
]


@pytest.mark.parametrize(("raw", "made"), PARTS, ids=[str(raw) for raw, _ in PARTS])
def test_a_part_read_is_the_part_its_constructor_makes(raw: dict[str, Any], made: Part) -> None:
    read = part_from_dict(raw)
    assert read == made
    assert type(read) is type(made)
    assert vars(read) == {**vars(made), "_raw": raw}  # a part made has the class's _raw, None
    assert read._raw is raw  # written back as read, to the letter
    assert part_to_dict(read) == raw
    with pytest.raises(AttributeError):
        read.type = "changed"  # type: ignore[misc]  # still frozen


MESSAGE = {
    "role": "assistant",
    "content": [
        {"type": "text", "text": "a"},
        {"type": "tool_use", "call_id": "c", "name": "n", "arguments": "{}"},
    ],
    "_type": "Message",
    "id": "m1",
    "_hook_ids": ["h"],
    "creation_timestamp": "2026-01-01T00:00:00",
    "metadata": {"k": 1},
    "_sequence_number": 3,
    "token_count": 7,
    "later": True,
}


def test_a_message_read_has_what_its_constructor_gives_it() -> None:
    read = Message.from_dict(MESSAGE)
    made = Message(
        "assistant",
        [TextPart("a"), ToolUsePart("c", "n", "{}")],
        id="m1",
        hook_ids=["h"],
        creation_timestamp="2026-01-01T00:00:00",
        sequence_number=3,
        token_count=7,
        metadata={"k": 1},
    )
    assert vars(read).keys() == vars(made).keys()
    assert read.content == made.content
    assert (read.role, read.id, read.hook_ids, read.sequence_number, read.token_count, read.metadata) == (
        "assistant",
        "m1",
        ["h"],
        3,
        7,
        {"k": 1},
    )
    assert read.extra == {"later": True}
    assert read.to_dict() == MESSAGE
    assert list(read.to_dict()) == list(MESSAGE)  # keys in the file's order
    read.record_token_count()
    assert read.count_tokens() == read.token_count  # its caches are its own
    assert Message.from_dict(MESSAGE).count_tokens() == read.count_tokens()


def test_a_message_without_content_or_optional_keys_reads_back_as_it_was() -> None:
    bare = {"role": "user", "id": "m", "_type": "Message"}
    read = Message.from_dict(bare)
    assert read.content == () and not read.has_content_key
    assert read.hook_ids is None and read.creation_timestamp is None
    assert read.to_dict() == bare
    old_prompt = {"_static_text": "s", "_type": "SystemPromptMessage", "id": "p", "content": []}
    assert Message.from_dict(old_prompt).role == "system"


class Name(str):
    pass


class Count(int):
    pass


def test_subclasses_of_the_json_types_are_taken_as_they_always_were() -> None:
    read = Message.from_dict({**MESSAGE, "role": Name("user"), "token_count": Count(2), "id": Name("x")})
    assert (read.role, read.token_count, read.id) == ("user", 2, "x")
    part = part_from_dict({"type": Name("text"), "text": "hi", "cache": 1})
    assert part == TextPart("hi", extra={"cache": 1})


@pytest.mark.parametrize(
    ("key", "value", "where", "says"),
    [
        ("role", 5, "$.messages[4].role", "expected str, got int"),
        ("role", None, "$.messages[4]", "missing key 'role'"),
        ("id", None, "$.messages[4]", "missing key 'id'"),
        ("id", ["m"], "$.messages[4].id", "expected str, got list"),
        ("content", "text", "$.messages[4].content", "expected list, got str"),
        ("_hook_ids", "h", "$.messages[4]._hook_ids", "expected list, got str"),
        ("creation_timestamp", 1, "$.messages[4].creation_timestamp", "expected str, got int"),
        ("_sequence_number", True, "$.messages[4]._sequence_number", "expected int, got bool"),
        ("_sequence_number", 1.5, "$.messages[4]._sequence_number", "expected int, got float"),
        ("token_count", "7", "$.messages[4].token_count", "expected int, got str"),
        ("metadata", [], "$.messages[4].metadata", "expected dict, got list"),
        ("_static_text", 0, "$.messages[4]._static_text", "expected str, got int"),
        ("_type", "Other", "$.messages[4]._type", "unknown message _type 'Other'"),
    ],
)
def test_a_value_of_the_wrong_type_is_named_by_its_path(key: str, value: Any, where: str, says: str) -> None:
    data = {**MESSAGE, key: value}
    if value is None:
        del data[key]
    with pytest.raises(FormatError) as caught:
        Message.from_dict(data, "$.messages[4]")
    assert caught.value.json_path == where
    assert says in str(caught.value)


@pytest.mark.parametrize(
    ("part", "where"),
    [
        ({"type": "text", "text": 1}, "$.messages[2].content[1].text"),
        ({"type": "tool_use", "call_id": "c", "name": "n"}, "$.messages[2].content[1]"),
        ({"type": "tool_result", "call_id": "c", "content": 1, "name": 2}, "$.messages[2].content[1].name"),
        ({"type": "image", "source": "u"}, "$.messages[2].content[1].source"),
        ("text", "$.messages[2].content[1]"),
    ],
)
def test_a_bad_part_is_named_by_its_index(part: Any, where: str) -> None:
    data = {**MESSAGE, "content": [{"type": "text", "text": "fine"}, part]}
    with pytest.raises(FormatError) as caught:
        Message.from_dict(data, "$.messages[2]")
    assert caught.value.json_path == where
