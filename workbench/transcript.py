"""The Context page as a transcript: who speaks, which result answers which call, what
an image is, and how the system prompt changed.

A person reads a context as a conversation (as in Langfuse's session view or Inspect's
transcript viewer), not as a list of records: the roles look different, each tool result
sits under the call that asked for it, names come before ids, and the system prompt is
shown once per change instead of once per call.

Pairing calls with results must not cost a pass over a 100,000-message context on each
rerun, so ``soap_core.build_call_pairs`` makes one pass when the context is indexed (its
result is part of :class:`~workbench.context_views.ContextIndex`; the catalog keeps it
for a big context file), and
:func:`place_page` works out the page's layout from the page's own messages and that.

Plain functions without Streamlit, so that a test can check what the page shows.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from replay import PromptAtCall
from soap_core import (
    CallPairs,
    MediaPart,
    Message,
    MessageRow,
    TextPart,
    ToolResultPart,
    ToolUsePart,
)
from soap_core.runtime._compaction import SUMMARY_PREFIX

# -- who speaks ------------------------------------------------------------------------

Speaker = Literal["user", "assistant", "system", "tools", "tool result", "summary", "other"]


@dataclass(frozen=True)
class SpeakerStyle:
    """How one kind of message looks: its name in the heading, its avatar, its colour."""

    label: str
    avatar: str
    """What ``st.chat_message`` takes: ``user``/``assistant`` or a Material icon."""
    colour: str
    """The CSS colour of the message box's left border (our own fixed CSS)."""


STYLES: dict[Speaker, SpeakerStyle] = {
    "user": SpeakerStyle("user", "user", "#1c83e1"),
    "assistant": SpeakerStyle("assistant", "assistant", "#ff8c00"),
    "system": SpeakerStyle("system prompt", ":material/settings:", "#7d7d7d"),
    "tools": SpeakerStyle("tool definitions", ":material/build:", "#7d7d7d"),
    "tool result": SpeakerStyle("tool result", ":material/output:", "#21a366"),
    "summary": SpeakerStyle("compaction summary", ":material/compress:", "#9c27b0"),
    "other": SpeakerStyle("message", ":material/chat:", "#bdbdbd"),
}


def speaker(message: Message) -> Speaker:
    """Who a message is from, as the transcript names it: the special messages by what
    they are, a user message that opens with the compaction prefix as a summary, tool
    results by the role peteos gives them (``tool_result``) or the OpenAI one (``tool``
    outside the definitions message)."""
    if message.message_type == "SystemPromptMessage" or message.role == "system":
        return "system"
    if message.message_type == "ToolDefinitionsMessage":
        return "tools"
    if message.role in ("tool_result", "tool"):
        return "tool result"
    if message.role == "user" and message.tool_results() and not message.text():
        return "tool result"  # Anthropic's layout: results travel in a user message
    if message.role == "user":
        first = next((p.text for p in message.content if isinstance(p, TextPart)), "")
        return "summary" if first.startswith(SUMMARY_PREFIX) else "user"
    if message.role == "assistant":
        return "assistant"
    return "other"


def tokens_label(row: MessageRow) -> str:
    """``57 tokens``; a stale count cached in the file is named beside the true one."""
    unit = "token" if row.tokens == 1 else "tokens"
    if row.stale:
        return f"{row.tokens:,} {unit} (the file caches a stale {row.cached_tokens:,})"
    return f"{row.tokens:,} {unit}"


def message_title(row: MessageRow, message: Message) -> str:
    """The heading of a message, names first: ``assistant · 57 tokens``. The role is
    added where the transcript's name for the message hides it (a summary is a user
    message, a message of an unknown role keeps its role)."""
    who = speaker(message)
    label = STYLES[who].label
    if who == "other":
        label = f"{message.role} message"
    return f"{label} · {tokens_label(row)}"


def details_line(row: MessageRow) -> str:
    """What the details toggle adds to a heading: ``#12  seq 12  id …  SystemPromptMessage``
    (display index first, so that a reader can jump to it)."""
    seq = "-" if row.sequence_number is None else str(row.sequence_number)
    kind = "" if row.message_type == "Message" else f"  {row.message_type}"
    return f"#{row.index}  seq {seq}  role {row.role}  id {row.id}{kind}"


SIGNATURE_WIDTH = 100
"""Characters of a call's one-line signature before it is cut."""


def call_signature(part: ToolUsePart, width: int = SIGNATURE_WIDTH) -> tuple[str, bool]:
    """``search(query="cats", limit=5)`` and whether that is the whole call: the arguments
    as keyword arguments with JSON values, or the raw argument string when it is not a
    JSON object; cut to ``width`` characters with an ellipsis."""
    arguments = part.parsed_arguments()
    if isinstance(arguments, dict):
        inner = ", ".join(
            f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in arguments.items()
        )
    elif part.arguments.strip() in ("", "{}"):
        inner = ""
    else:
        inner = part.arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    whole = f"{part.name}({inner})"
    if len(whole) <= width and "\n" not in whole:
        return whole, True
    cut = whole.replace("\n", " ")[: width - 2]
    return cut + "…)", False


# -- media ---------------------------------------------------------------------------


def size_label(count: int) -> str:
    """``13 bytes``, ``12.3 kB``, ``4.5 MB`` (powers of 1,000)."""
    if count < 1_000:
        return f"{count:,} byte{'' if count == 1 else 's'}"
    for unit, scale in (("kB", 1e3), ("MB", 1e6), ("GB", 1e9)):
        if count < scale * 1_000 or unit == "GB":
            return f"{count / scale:.1f} {unit}"
    raise AssertionError("unreachable")


def image_dimensions(data: bytes) -> tuple[int, int] | None:
    """(width, height) in pixels if PIL can read the image's header, else None (SVG, or
    not an image at all). Only the header is read, not the pixels."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.size
    except (UnidentifiedImageError, OSError, ValueError):
        return None


def media_caption(part: MediaPart, data: bytes | None) -> str:
    """``image · image/png · 640×480 px · 12.3 kB``: what a media part is and how big.
    A url part is named by its type only (the page does not fetch it)."""
    pieces = [part.type, part.media_type or "unknown media type"]
    if data is None:
        pieces.append("by url, not fetched" if part.url is not None else "no data")
        return " · ".join(pieces)
    if part.type == "image":
        found = image_dimensions(data)
        pieces.append(f"{found[0]}×{found[1]} px" if found else "size unknown (not an image PIL reads)")
    pieces.append(size_label(len(data)))
    return " · ".join(pieces)


# -- calls and their results -----------------------------------------------------------


@dataclass(frozen=True)
class ResultLink:
    """Where the result of one call stands, seen from the call."""

    message: int | None
    """Display index of the message holding the result; None: no result recorded."""
    page: int | None = None
    """Its page, when that is not the page shown."""
    nested_here: bool = False
    """The result message is shown right after this call part."""


@dataclass(frozen=True)
class CallLink:
    """Which call one result answers, seen from the result."""

    message: int | None
    """Display index of the message that made the call; None: no call asked for it."""
    part: int | None = None
    """Position of that call's part in its message."""
    page: int | None = None
    """The call's page, when that is not the page shown."""
    nested: bool = False
    """The result is shown under that call."""


@dataclass(frozen=True)
class Placement:
    """One message as the transcript places it: its calls' results and its results' calls
    (by part position), and the messages shown nested in it (by the call part they follow)."""

    index: int
    results: dict[int, ResultLink]
    calls: dict[int, CallLink]
    nested: dict[int, Placement]


def _part_positions(message: Message, kind: type) -> list[int]:
    return [p for p, part in enumerate(message.content) if isinstance(part, kind)]


def place_page(
    pairs: CallPairs, messages: Sequence[Message], indices: Sequence[int], page_of: Callable[[int], int]
) -> list[Placement]:
    """The page's messages as the transcript shows them, in the order of ``indices``.

    A result message whose call is on the page is nested under the message that made
    the call, after the last of that message's calls it answers (so that a message of
    three calls shows the three calls, then their results), and is not listed again on
    its own. Everything else is listed where it stands. Only the page's messages are
    read; ``page_of`` gives the page of a display index in the order shown.
    """
    on_page = set(indices)
    owner: dict[int, tuple[int, int]] = {}  # nested message -> (owner, call number it follows)
    for j in indices:
        for r in pairs.results_in(j):
            call = pairs.answers[r]
            i = pairs.call_message[call] if call >= 0 else -1
            if i in on_page and j not in owner:
                owner[j] = (i, max(k for k in pairs.calls_of(i) if pairs.answered_by[k] == j))
    follows: dict[tuple[int, int], int] = {place: j for j, place in owner.items()}

    def place(index: int) -> Placement:
        message = messages[index]
        calls = pairs.calls_of(index)
        results: dict[int, ResultLink] = {}
        nested: dict[int, Placement] = {}
        for call, p in zip(calls, _part_positions(message, ToolUsePart), strict=False):
            j = pairs.answered_by[call]
            if j < 0:
                results[p] = ResultLink(None)
            elif j not in on_page:
                results[p] = ResultLink(j, page=page_of(j))
            else:
                inside = follows.get((index, call))
                results[p] = ResultLink(j, nested_here=inside == j)
                if inside is not None:
                    nested[p] = place(inside)
        answered: dict[int, CallLink] = {}
        for r, p in zip(pairs.results_in(index), _part_positions(message, ToolResultPart), strict=False):
            answered[p] = call_link(pairs, pairs.answers[r], messages, on_page, owner.get(index), page_of)
        return Placement(index, results, answered, nested)

    return [place(index) for index in indices if index not in owner]


def call_link(
    pairs: CallPairs,
    call: int,
    messages: Sequence[Message],
    on_page: set[int],
    owner: tuple[int, int] | None,
    page_of: Callable[[int], int],
) -> CallLink:
    """The :class:`CallLink` of a result answering call number ``call`` (-1: none)."""
    if call < 0:
        return CallLink(None)
    i = pairs.call_message[call]
    calls = pairs.calls_of(i)
    part = _part_positions(messages[i], ToolUsePart)[call - calls.start]
    if i not in on_page:
        return CallLink(i, part, page=page_of(i))
    return CallLink(i, part, nested=owner is not None and owner[0] == i)


def call_of(messages: Sequence[Message], link: CallLink) -> ToolUsePart | None:
    """The call part a :class:`CallLink` points at (one message read, wherever it is)."""
    if link.message is None or link.part is None:
        return None
    part = messages[link.message].content[link.part]
    return part if isinstance(part, ToolUsePart) else None


def placed_indices(placements: Sequence[Placement]) -> list[int]:
    """Every display index a page shows, nested ones after their owner, in order."""
    found: list[int] = []
    for placement in placements:
        found.append(placement.index)
        found += placed_indices(list(placement.nested.values()))
    return found


# -- the system prompt over time -------------------------------------------------------


@dataclass(frozen=True)
class PromptVersion:
    """One text the system prompt had, and the consecutive calls it was sent with."""

    number: int
    """1 for the first version."""
    text: str
    first_call: int
    """1-based number of the first call (in call order) that was sent this text."""
    calls: int
    first_message: int
    last_message: int
    """Display indices of the messages the first and the last of those calls produced."""
    recorded: bool
    """Rebuilt from the calls' records (False: the text on disk, no call log)."""

    @property
    def label(self) -> str:
        """``version 2 · calls 6–14 (messages #13–#40) · rebuilt from the call records``."""
        last = self.first_call + self.calls - 1
        span = f"call {self.first_call}" if self.calls == 1 else f"calls {self.first_call}–{last}"
        produced = (
            f"message #{self.first_message}"
            if self.first_message == self.last_message
            else f"messages #{self.first_message}–#{self.last_message}"
        )
        source = "rebuilt from the call records" if self.recorded else "as on disk (no call log)"
        return f"version {self.number} · {span} (the model's answer: {produced}) · {source}"


def prompt_versions(prompts: Sequence[PromptAtCall]) -> list[PromptVersion]:
    """The system prompt once per change: runs of consecutive calls sent the same text
    (a prompt that changes and changes back is a new version again)."""
    versions: list[PromptVersion] = []
    for number, prompt in enumerate(prompts, start=1):
        last = versions[-1] if versions else None
        if last is not None and last.text == prompt.text and last.recorded == prompt.recorded:
            versions[-1] = PromptVersion(
                last.number,
                last.text,
                last.first_call,
                last.calls + 1,
                last.first_message,
                prompt.message_index,
                last.recorded,
            )
        else:
            versions.append(
                PromptVersion(
                    len(versions) + 1,
                    prompt.text,
                    number,
                    1,
                    prompt.message_index,
                    prompt.message_index,
                    prompt.recorded,
                )
            )
    return versions


def prompt_history_label(versions: Sequence[PromptVersion]) -> str:
    """``System prompt (changed 2 times over 14 calls)``, or what is known without a log."""
    calls = sum(v.calls for v in versions)
    if not versions:
        return "System prompt (none)"
    if not any(v.recorded for v in versions):
        return "System prompt (as on disk: no call log records what each call was sent)"
    plural = "call" if calls == 1 else "calls"
    if len(versions) == 1:
        return f"System prompt (the same at all {calls} {plural})" if calls > 1 else "System prompt (1 call)"
    changes = len(versions) - 1
    return f"System prompt (changed {changes} time{'' if changes == 1 else 's'} over {calls} {plural})"


def short_value(value: Any, width: int = 60) -> str:
    """A one-line glimpse of a value, for labels (the caller escapes it)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


LINKED_CSS = "border: 2px solid #ff4b4b !important; background: rgba(255, 75, 75, 0.06);"
BOX_CSS = (
    "[class*='st-key-message-'] [data-testid='stChatMessage'] { padding: 0.25rem 0.5rem; }"
    # a result nested under its call is scrolled to with the call's line above it
    " [class*='st-key-message-'] [class*='st-key-message-'] { scroll-margin-top: 9rem; }"
)
"""Our fixed CSS for every message box: less padding inside the chat message."""


def transcript_css(speakers: dict[int, Speaker], linked: int | None) -> str:
    """Our fixed CSS for one page: each message box's left border in its speaker's
    colour, and the linked message outlined. Nothing but display indices and our own
    colours goes into it, never text from the files."""
    by_colour: dict[str, list[int]] = {}
    for index, who in speakers.items():
        by_colour.setdefault(STYLES[who].colour, []).append(index)
    rules = [
        ",".join(f".st-key-message-{i}" for i in indices)
        + f" {{ border-left: 4px solid {colour} !important; }}"
        for colour, indices in by_colour.items()
    ]
    if linked is not None and linked in speakers:
        rules.append(f".st-key-message-{linked} {{ {LINKED_CSS} }}")
    return " ".join([BOX_CSS, *rules])
