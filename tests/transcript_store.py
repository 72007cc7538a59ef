"""A small store whose one context has every shape the transcript lays out.

Built with the model classes the way the sOAP runner records a tool-call flow
(``Context.append_tool_results``): a call with thinking and its result, two calls
answered by one result message, a call left without a result, an image, a result
without a call, and a call whose result falls on the next page (the call is the page's
last message).
"""

from __future__ import annotations

import io
import os
import time
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from soap_core import (
    Context,
    MediaPart,
    Message,
    Session,
    Store,
    TextPart,
    ThinkingPart,
    ToolPart,
    ToolResultPart,
    ToolUsePart,
    base64_source,
)
from workbench.context_views import PAGE_SIZE

TOOLS = [
    ToolPart(
        "search",
        "Search the catalogue.",
        {"type": "object", "properties": {"query": {"type": "string"}}},
    ),
    ToolPart("clock", "Tell the time.", {"type": "object", "properties": {}}),
]


@dataclass(frozen=True)
class Landmarks:
    """Display indices of the messages the tests look at."""

    call: int
    """An assistant message with thinking and one call (``search``)."""
    result: int
    """Its result."""
    pair: int
    """An assistant message with two calls, answered by one message."""
    pair_result: int
    unanswered: int
    """A call that never got a result."""
    image: int
    orphan: int
    """A result no call asked for."""
    boundary_call: int
    """The last message of page 1: a call whose result opens page 2."""
    boundary_result: int


def png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), "navy").save(out, "PNG")
    return out.getvalue()


IMAGE = png(64, 48)


def transcript_context() -> tuple[Context, Landmarks]:
    context = Context.create("You are a careful librarian.", TOOLS)
    context.append(Message.create("user", [TextPart("How many books about cats do we have?")]))
    call = context.append(
        Message.create(
            "assistant",
            [
                ThinkingPart("The catalogue knows; search it first."),
                ToolUsePart("call_cats", "search", '{"query": "cats"}'),
            ],
        )
    )
    result = context.append_tool_results(call, [ToolResultPart("call_cats", "12 books")])
    pair = context.append(
        Message.create(
            "assistant",
            [
                ToolUsePart("call_dogs", "search", '{"query": "dogs"}'),
                ToolUsePart("call_time", "clock", "{}"),
            ],
        )
    )
    pair_result = context.append_tool_results(
        pair, [ToolResultPart("call_dogs", "7 books"), ToolResultPart("call_time", "10:04")]
    )
    unanswered = context.append(Message.create("assistant", [ToolUsePart("call_lost", "clock", "{}")]))
    image = context.append(
        Message.create(
            "user", [TextPart("And this cover?"), MediaPart("image", base64_source("image/png", IMAGE))]
        )
    )
    orphan = context.append(Message.create("tool_result", [ToolResultPart("call_nobody", "stray")]))
    context.append(Message.create("assistant", [TextPart("We have 12 books about cats.")]))
    while len(context.messages) < PAGE_SIZE - 1:
        n = len(context.messages)
        role = "user" if n % 2 else "assistant"
        context.append(Message.create(role, [TextPart(f"small talk {n}")]))  # type: ignore[arg-type]
    boundary = context.append(
        Message.create("assistant", [ToolUsePart("call_edge", "search", '{"query": "edge"}')])
    )
    boundary_result = context.append_tool_results(boundary, [ToolResultPart("call_edge", "0 books")])
    context.append(Message.create("assistant", [TextPart("Nothing on the edge.")]))
    at = {m.id: i for i, m in enumerate(context.messages)}
    marks = Landmarks(
        at[call.id],
        at[result.id],
        at[pair.id],
        at[pair_result.id],
        at[unanswered.id],
        at[image.id],
        at[orphan.id],
        at[boundary.id],
        at[boundary_result.id],
    )
    assert marks.boundary_call == PAGE_SIZE - 1 and marks.boundary_result == PAGE_SIZE
    return context, marks


def transcript_store(root: Path) -> tuple[Session, Landmarks]:
    """A store at ``root`` holding one session of :func:`transcript_context`."""
    context, marks = transcript_context()
    session = Session.create("Librarian", context)
    Store(root).save_session(session)
    then = time.time() - 60  # the catalog does not trust files written in the last seconds
    for path in [root, *root.rglob("*")]:
        os.utime(path, (then, then))
    return session, marks
