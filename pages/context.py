"""Context page: one context of a session, message by message, part by part.

Everything read from the files is shown with elements that do not interpret it (text,
code, JSON, image bytes), never as Markdown or HTML, because message content is
whatever a model, a tool or a user wrote.
"""

from __future__ import annotations

import binascii
import json
from typing import Any

import streamlit as st

from replay import system_prompt_history
from soap_core import (
    Context,
    MediaPart,
    Message,
    Part,
    Session,
    SoapError,
    TextPart,
    ThinkingPart,
    ToolPart,
    ToolResultPart,
    ToolUsePart,
    UnknownPart,
    fork_tree,
    message_rows,
    part_to_dict,
)
from workbench.loading import chosen_store, load_session, show_error_and_stop
from workbench.openpoke_views import entry_choices, is_interaction, two_tracks
from workbench.views import (
    anchors_at_no_message,
    context_label,
    escape_markdown,
    fork_tree_lines,
    media_file_name,
    message_heading,
)


def show_value(value: Any) -> None:
    """JSON objects and arrays as st.json; strings and other values verbatim as code."""
    if isinstance(value, (dict, list)):
        st.json(value, expanded=2)
    elif value == "":
        st.text("(empty)")
    elif isinstance(value, str):
        st.code(value, language=None)
    else:
        st.code(json.dumps(value), language=None)


def show_media(message: Message, index: int, part: MediaPart) -> None:
    """Inline images as images, other inline media as downloads, url media as its url."""
    st.text(f"{part.type}  {part.media_type or 'unknown media type'}")
    if part.url is not None:
        st.code(part.url, language=None)
        return
    try:
        data = part.data()
    except (binascii.Error, ValueError) as exc:
        st.warning(escape_markdown(f"cannot decode this {part.type}: {exc}"))
        return
    if data is None:
        st.json(dict(part.source))
        return
    if part.type == "image":
        try:
            st.image(data)
            return
        except OSError:  # PIL cannot read these bytes (SVG, or not an image at all)
            st.text("Streamlit cannot show this image; download it instead.")
    name = media_file_name(message.id, index, part)
    st.download_button(f"Download {part.type}", data, file_name=name, mime=part.media_type)


def show_part(message: Message, index: int, part: Part) -> None:
    """One content part, rendered for what it is."""
    if isinstance(part, TextPart):
        st.text(part.text)
    elif isinstance(part, ThinkingPart):
        with st.expander("thinking", expanded=False):
            st.text(part.text)
    elif isinstance(part, ToolUsePart):
        st.text(f"tool call {part.name}  call_id {part.call_id}")
        show_value(part.parsed_arguments())
    elif isinstance(part, ToolResultPart):
        name = f" {part.name}" if part.name else ""
        st.text(f"tool result{name}  call_id {part.call_id}")
        show_value(part.content)
    elif isinstance(part, ToolPart):
        st.text(f"tool definition {part.name}")
        st.json(part_to_dict(part), expanded=1)
    elif isinstance(part, MediaPart):
        show_media(message, index, part)
    elif isinstance(part, UnknownPart):
        st.text(f"unknown part type {part.type}")
        st.json(dict(part.data))


def selected_message() -> int | None:
    """The display index in ``?message=`` (links from search, traceback and replay)."""
    raw = st.query_params.get("message")
    return int(raw) if raw is not None and raw.lstrip("-").isdigit() else None


def show_messages(root: str, session: Session, context: Context, chronological: bool) -> None:
    """Every message with its heading, its parts, and the anchors it ends; a model output
    links to the Replay page, where it can be replayed or the agent re-run from it."""
    chosen = selected_message()
    for row in message_rows(context, chronological=chronological):
        message = context.messages[row.index]
        with st.container(border=True):
            if row.index == chosen:
                st.text(f"▶ message {row.index}, as linked")
            st.text(message_heading(row, message.message_type))
            if message.role == "assistant":
                st.page_link(
                    "pages/replay.py",
                    label="Replay it, or re-run the agent from here",
                    icon=":material/replay:",
                    query_params={
                        "store": root,
                        "session": session.uuid,
                        "context": context.id,
                        "message": str(row.index),
                    },
                )
            if not message.content:
                st.text("(no content)")
            for index, part in enumerate(message.content):
                show_part(message, index, part)
        for name in row.anchors_after:
            st.text(f"──── end of anchor {name} ────")
    others = anchors_at_no_message(context.anchor_points, len(context.messages))
    if others:
        st.text("anchors that end at no message: " + ", ".join(others))


def pick_context(session: Session) -> Context:
    """The context from ``?context=`` (id or prefix), else the active one, else the first."""
    ids = list(session.contexts)
    wanted = st.query_params.get("context")
    try:
        default = session.context(wanted).id if wanted else session.active_context_id
    except SoapError as exc:
        show_error_and_stop(exc)
    if default is None:
        default = ids[0]
    elif default not in session.contexts:
        st.warning(escape_markdown(f"the active context {default} has no readable file"))
        default = ids[0]
    chosen = st.selectbox(
        "Context", ids, index=ids.index(default), format_func=lambda cid: context_label(session, cid)
    )
    st.query_params["context"] = chosen
    return session.contexts[chosen]


def show_two_tracks(session: Session) -> None:
    """For an imported OpenPoke conversation: the raw log beside the working memory as
    the model saw it, at a chosen entry."""
    choices = entry_choices(session)
    if not choices:
        return
    st.subheader("OpenPoke: the log and the working memory")
    labels = dict(choices)
    wanted = st.query_params.get("entry")
    indices = [index for index, _ in choices]
    default = int(wanted) if wanted and wanted.isdigit() and int(wanted) in labels else indices[-1]
    entry = st.selectbox(
        "At entry", indices, index=indices.index(default), format_func=labels.__getitem__, key="entry"
    )
    st.query_params["entry"] = str(entry)
    tracks = two_tracks(session, entry)
    left, right = st.columns(2)
    with left:
        st.text(f"conversation log ({tracks.raw_source})")
        st.code(tracks.raw_log, language=None)
        for line in tracks.skipped:
            st.text(f"skipped by OpenPoke: {line}")
    with right:
        st.text(f"working memory as the model saw it: {tracks.rule}")
        st.code(tracks.working_memory, language=None)
        for note in tracks.notes:
            st.text(f"note: {note}")


def show_system_prompts(session: Session, context: Context) -> None:
    """The system prompt as it read at each call made from this context."""
    prompts = system_prompt_history(session, context)
    if not prompts:
        return
    with st.expander(f"System prompt at each call ({len(prompts)})"):
        for prompt in prompts:
            source = "rebuilt from the call's record" if prompt.recorded else "as on disk (no call log)"
            st.text(f"call that produced message {prompt.message_index}: {source}")
            st.code(prompt.text, language=None)


def show_session(root: str, session: Session) -> None:
    """The session's identity, unreadable files, fork tree and the chosen context."""
    st.text(f"{session.role} / {session.uuid}  thread {session.thread_id or '-'}")
    for name, error in session.load_errors.items():
        st.warning(escape_markdown(f"unreadable context file {name}: {error}"))
    if not session.contexts:
        st.info("This session has no readable context.")
        st.text("\n".join(fork_tree_lines(fork_tree(session))))
        st.stop()
    context = pick_context(session)
    st.subheader("Fork tree")
    st.text("\n".join(fork_tree_lines(fork_tree(session), shown_id=context.id)))
    show_system_prompts(session, context)
    if is_interaction(session):
        show_two_tracks(session)
    st.subheader("Messages")
    chronological = st.toggle("Chronological order (by sequence number)", key="chronological")
    st.text(f"{len(context.messages)} messages, {context.total_token_count()} tokens (cl100k_base)")
    show_messages(root, session, context, chronological)


st.title("Context")
root = chosen_store()
ref = st.query_params.get("session")
if not ref:
    st.info("No session selected: pick one on the Sessions page.")
    st.page_link("pages/sessions.py", label="Sessions", icon=":material/list:")
    st.stop()
try:
    loaded = load_session(root, ref)
except SoapError as exc:
    show_error_and_stop(exc)
show_session(root, loaded)
