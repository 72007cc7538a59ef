"""Context page: one context of a session, read as a transcript.

Each message is a box in its speaker's colour, named first (``assistant · 57 tokens``);
ids, sequence numbers and anchors wait behind the details toggle. A tool result is
nested under the call that asked for it (:func:`~workbench.transcript.place_page`);
thinking and tool definitions are folded; the system prompt is listed once per change.

Everything read from the files is shown with elements that do not interpret it (text,
code, JSON, image bytes), never as Markdown or HTML, because message content is
whatever a model, a tool or a user wrote. (Outline labels quote message text in
widgets that show Markdown; there it is escaped, as in every error message.)

A context longer than one page (:data:`~workbench.context_views.PAGE_SIZE` messages) is
paged: ``?page=`` or the page of ``?message=`` is shown, with a pager and, in the
sidebar, an outline of the pages around it. The page reads the session from the shared
read-only cache (:func:`~workbench.loading.read_only_session`) and everything computed
over the whole context from :func:`~workbench.loading.context_index`, so turning a page
costs the page's messages only.
"""

from __future__ import annotations

import binascii
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import streamlit as st

from analysis import Attribution, Unit, latest_attribution
from replay import PromptAtCall, message_address, message_index, session_names
from soap_core import (
    AmbiguousSessionError,
    CallRecord,
    Context,
    MediaPart,
    Message,
    MessageRow,
    Part,
    Session,
    SessionNotFoundError,
    SoapError,
    TextPart,
    ThinkingPart,
    ToolPart,
    ToolResultPart,
    ToolUsePart,
    UnknownPart,
    part_to_dict,
)
from workbench.attribution_views import heat_strip, ranked_frame
from workbench.context_views import (
    ContextIndex,
    ForkPoint,
    Listing,
    OutlineEntry,
    choose_listing,
    fork_label,
    fork_tree_excerpt,
    forks_after,
    landmarks,
    outline_counts,
    outline_near,
    page_count,
    page_rows,
    parse_index,
    scroll_target,
    span_label,
)
from workbench.costs import call_line
from workbench.loading import (
    SCOPED,
    Scope,
    chosen_store,
    context_index,
    context_tokens,
    read_only_session,
    show_error_and_stop,
    system_prompts,
)
from workbench.openpoke_views import entry_choices, is_interaction, session_name, two_tracks
from workbench.selection import keep_in_url, selected_context, selected_session
from workbench.transcript import (
    STYLES,
    Placement,
    call_of,
    call_signature,
    details_line,
    media_caption,
    message_title,
    place_page,
    placed_indices,
    prompt_history_label,
    prompt_versions,
    short_value,
    speaker,
    transcript_css,
)
from workbench.views import (
    anchors_at_no_message,
    escape_markdown,
    load_error_line,
    media_file_name,
    session_heading,
    store_signature,
)


def show_value(value: Any) -> None:
    """JSON objects and arrays as st.json; strings and other values verbatim as code."""
    if isinstance(value, (dict, list)):
        st.json(value, expanded=2)
    elif value == "":
        st.text("(empty)")
    elif isinstance(value, str):
        st.code(value, language=None, wrap_lines=True)
    else:
        st.code(json.dumps(value), language=None)


def show_media(message: Message, index: int, part: MediaPart) -> None:
    """What the media part is and its size, then: an inline image as an image, other
    inline media as a download, url media as its url (not fetched)."""
    try:
        data = part.data()
    except (binascii.Error, ValueError) as exc:
        st.text(f"{part.type}  {part.media_type or 'unknown media type'}")
        st.warning(escape_markdown(f"cannot decode this {part.type}: {exc}"))
        return
    st.text(media_caption(part, data))
    if part.url is not None:
        st.code(part.url, language=None)
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


@dataclass(frozen=True)
class PageView:
    """What every message of one run of the page is drawn with."""

    root: str
    session: Session
    context: Context
    shown: Listing
    rows: dict[int, MessageRow]
    details: bool
    calls: Mapping[str, CallRecord]
    """Message id → the model call that produced it (the soapwb runtime records them)."""
    weights: Mapping[str, tuple[float, Unit]]
    """Message id → its weight in the linked answer's attribution and the unit it is of
    (none: no such answer)."""
    weight_meaning: str = ""
    """What those weights measure (:meth:`analysis.Attribution.weight_meaning`)."""


def show_tool_call(view: PageView, placement: Placement, at: int, part: ToolUsePart) -> None:
    """A call by name and arguments, then its result: nested right after it, or a link to
    the page holding it, or a note that none was recorded."""
    signature, whole = call_signature(part)
    st.text(f"tool call {signature}")
    if view.details:
        st.text(f"call_id {part.call_id}")
    if not whole:
        show_value(part.parsed_arguments())
    link = placement.results.get(at)
    nested = placement.nested.get(at)
    if nested is not None:
        show_message(view, nested)
    elif link is None or link.message is None:
        st.text("no result recorded")
    elif link.page is not None:
        jump_button(f"result on page {link.page:,}", f"result-of-{placement.index}-{at}", link.message, DOWN)
    elif link.message not in [p.index for p in placement.nested.values()]:
        jump_button(
            "result shown under another call", f"result-of-{placement.index}-{at}", link.message, DOWN
        )


DOWN, UP = ":material/arrow_downward:", ":material/arrow_upward:"


def jump_button(label: str, key: str, message: int, icon: str) -> None:
    """A quiet button that opens ``message`` (on its page, marked), for a call and its
    result that the page could not show together."""
    st.button(label, key=key, on_click=go_to_message, args=(message,), type="tertiary", icon=icon)


def show_tool_result(view: PageView, placement: Placement, at: int, part: ToolResultPart) -> None:
    """A result, named by the call it answers; where that call is elsewhere (or missing),
    say so."""
    link = placement.calls.get(at)
    call = call_of(view.context.message_view, link) if link is not None else None
    name = call_signature(call, 60)[0] if call is not None else part.name or "a tool"
    single = len(placement.calls) == 1
    if link is None or link.message is None:
        st.text(f"result of {name}: no call in this context asked for it")
    elif link.page is not None:
        st.text(f"result of {name}")
        jump_button(f"the call is on page {link.page:,}", f"call-of-{placement.index}-{at}", link.message, UP)
    elif not link.nested or not single:
        st.text(f"result of {name}")
    if view.details:
        st.text(f"call_id {part.call_id}")
    show_value(part.content)


def show_tool_definitions(message: Message, expanded: bool) -> None:
    """The tool definitions folded: their names in the label, each tool's description and
    parameters inside."""
    tools = message.tool_definitions()
    names = ", ".join(tool.name for tool in tools)
    label = f"{len(tools)} tool definition{'' if len(tools) == 1 else 's'}: {short_value(names, 80)}"
    with st.expander(escape_markdown(label), expanded=expanded):
        for tool in tools:
            st.text(f"{tool.name}: {tool.description}" if tool.description else tool.name)
            st.json(dict(tool.parameters), expanded=1)


def show_part(view: PageView, placement: Placement, at: int, part: Part, expanded: bool) -> None:
    """One content part, rendered for what it is; ``expanded`` opens what is folded."""
    message = view.context.message_view[placement.index]
    if isinstance(part, TextPart):
        st.text(part.text)
    elif isinstance(part, ThinkingPart):
        with st.expander("thinking", expanded=expanded):
            st.text(part.text)
    elif isinstance(part, ToolUsePart):
        show_tool_call(view, placement, at, part)
    elif isinstance(part, ToolResultPart):
        show_tool_result(view, placement, at, part)
    elif isinstance(part, ToolPart):
        with st.expander(escape_markdown(f"tool definition {part.name}"), expanded=expanded):
            st.json(part_to_dict(part), expanded=1)
    elif isinstance(part, MediaPart):
        show_media(message, at, part)
    elif isinstance(part, UnknownPart):
        st.text(f"unknown part type {part.type}")
        st.json(dict(part.data))


def linked_message(session: Session, context: Context) -> int | None:
    """The display index ``?message=`` names (links from search, traceback and replay),
    as the session's request source reads it (an OpenPoke session's N is log entry N);
    the URL is then written as that source names the message."""
    jump = st.session_state.pop(JUMP_KEY, None)  # a control of the page: a display index
    at = st.query_params.get("message")
    index = jump if isinstance(jump, int) else message_index(session, context, at) if at else None
    if index is not None and index < context.message_count:
        st.query_params["message"] = message_address(session, context, index)
    return index


# -- moving around: each control writes the URL, so the view survives a reload or a copied link


def go_to_page(page: int) -> None:
    st.query_params["page"] = str(page)
    st.query_params.pop("message", None)


def go_to_message(index: int) -> None:
    """A jump by a control of the page, to display index ``index``: the page run that
    follows writes it into ``?message=`` as the session's source names it."""
    st.session_state[JUMP_KEY] = index
    forget_position()


def page_typed() -> None:
    if st.session_state.get(PAGE_KEY) is not None:
        go_to_page(int(st.session_state[PAGE_KEY]))


def message_typed() -> None:
    if st.session_state.get(GOTO_KEY) is not None:
        go_to_message(int(st.session_state[GOTO_KEY]))


def turn_typed(turns: Sequence[int]) -> None:
    turn = st.session_state.get(TURN_KEY)
    if turn is not None and 1 <= turn <= len(turns):
        go_to_message(turns[int(turn) - 1])


def entry_picked(key: str, entries: list[OutlineEntry]) -> None:
    picked = st.session_state.get(key)
    if picked is not None:
        go_to_message(entries[picked].index)


def forget_position() -> None:
    """Another context: the page and message of the previous one mean nothing there."""
    st.query_params.pop("page", None)
    st.query_params.pop("message", None)


PAGE_KEY, GOTO_KEY, TURN_KEY = "context_page", "context_goto_message", "context_goto_turn"
JUMP_KEY = "_context_jump"
SCROLLED_KEY = "_context_scrolled_to"


def listing(session: Session, context: Context, index: ContextIndex, chronological: bool) -> Listing:
    """The page to show from ``?page=`` and ``?message=``; a message number past the end
    is reported, and the first page shown."""
    linked = linked_message(session, context)
    if linked is not None and linked >= index.messages:
        st.warning(
            escape_markdown(f"message {linked} is not in this context (it has {index.messages:,} messages)")
        )
        linked = None
    return choose_listing(index, chronological, parse_index(st.query_params.get("page")), linked)


def show_pager(shown: Listing, where: str) -> None:
    """First / previous / page number / next / last, and a field to jump to a message."""
    pages = page_count(shown.messages)
    with st.container(horizontal=True, vertical_alignment="bottom", key=f"pager-{where}"):
        st.button("First", key=f"first-{where}", on_click=go_to_page, args=(1,), disabled=shown.page == 1)
        st.button(
            "Previous",
            key=f"prev-{where}",
            on_click=go_to_page,
            args=(shown.page - 1,),
            disabled=shown.page == 1,
        )
        if where == "top":
            st.session_state[PAGE_KEY] = shown.page
            st.number_input(
                f"Page (of {pages:,})",
                1,
                pages,
                value=None,
                step=1,
                key=PAGE_KEY,
                on_change=page_typed,
                width=150,
            )
        st.button(
            "Next",
            key=f"next-{where}",
            on_click=go_to_page,
            args=(shown.page + 1,),
            disabled=shown.page == pages,
        )
        st.button(
            "Last", key=f"last-{where}", on_click=go_to_page, args=(pages,), disabled=shown.page == pages
        )
        if where == "top":
            st.session_state[GOTO_KEY] = shown.linked
            st.number_input(
                "Go to message #",
                0,
                shown.messages - 1,
                value=None,
                step=1,
                key=GOTO_KEY,
                on_change=message_typed,
                placeholder="display index",
                width=170,
            )
    st.caption(span_label(shown.span, shown.messages, shown.page, shown.chronological))


def show_message(view: PageView, placement: Placement) -> None:
    """One message: who speaks and its size, its details when asked for, its parts, and
    the results of its calls nested under them. A model output links to the Replay page,
    where it can be replayed or the agent re-run from it."""
    index = placement.index
    message = view.context.message_view[index]
    style = STYLES[speaker(message)]
    linked = index == view.shown.linked
    with st.container(border=True, key=f"message-{index}"), st.chat_message(style.label, avatar=style.avatar):
        if linked:
            address = message_address(view.session, view.context, index)
            named = "" if address == str(index) else f" (?message={address})"
            st.text(f"▶ message {index}, as linked{named}")
        st.text(message_title(view.rows[index], message))
        weighed = view.weights.get(message.id)
        if weighed is not None:
            weight, unit = weighed
            piece = "" if unit.piece_name is None else f" (its {unit.piece_name})"
            st.badge(
                f"{weight:+.2f} to the answer at message {view.shown.linked}{piece}",
                icon=":material/thermostat:",
                color="red" if weight > 0 else "blue" if weight < 0 else "gray",
                help=view.weight_meaning,
            )
        if view.details:
            st.text(details_line(view.rows[index]))
        call = view.calls.get(message.id) if message.role == "assistant" else None
        if call is not None:
            st.text(call_line(call))
        if message.role == "assistant":
            st.page_link(
                "workbench/pages/replay.py",
                label="Replay it, or re-run the agent from here",
                icon=":material/replay:",
                query_params={
                    "store": view.root,
                    "session": view.session.uuid,
                    "context": view.context.id,
                    "message": message_address(view.session, view.context, index),
                },
            )
        if not message.content:
            st.text("(no content)")
        if message.message_type == "ToolDefinitionsMessage" and message.tool_definitions():
            show_tool_definitions(message, expanded=linked)
        for at, part in enumerate(message.content):
            if message.message_type != "ToolDefinitionsMessage" or not isinstance(part, ToolPart):
                show_part(view, placement, at, part, expanded=linked)


def show_after(view: PageView, placement: Placement, forks: dict[int, list[ForkPoint]]) -> None:
    """After a message (and those nested in it): the anchors they end, with the details,
    and the forks that branched off after them."""
    for index in placed_indices([placement]):
        if view.details:
            for name in view.rows[index].anchors_after:
                st.text(f"──── end of anchor {name} ────")
        for fork in forks.get(index, ()):
            st.text(f"──── forked here: {fork_label(fork)} ────")


@st.cache_data(show_spinner=False, max_entries=16, hash_funcs=SCOPED)
def produced_by(scope: Scope) -> dict[str, CallRecord]:
    """Message id → the session's own model call that produced it, read once per store state."""
    try:
        calls = scope.session.calls()
    except SoapError:
        return {}  # the Replay page names a broken call record; the transcript goes on without times
    return {c.message_id: c for c in calls if c.message_id}


@st.cache_data(show_spinner=False, max_entries=32, hash_funcs=SCOPED)
def linked_attribution(scope: Scope, linked: int | None) -> Attribution | None:
    """The newest attribution of the linked message, when it is a model answer that has
    one (the scope's key moves with the session's attributions folder)."""
    if linked is None or linked >= scope.chosen.message_count:
        return None
    return latest_attribution(scope.session, scope.chosen.id, linked)


def show_why(scope: Scope, linked: int | None) -> None:
    """Above the transcript of a linked answer: what it leans on (its newest attribution,
    as the Replay page shows it) and where to make one."""
    attribution = linked_attribution(scope, linked)
    if linked is None or scope.chosen.message_view[linked].role != "assistant":
        return
    if attribution is None:
        st.caption(
            f"The answer at message {linked} is not attributed yet: the Replay page's 'Why this answer' "
            "measures which messages it leans on."
        )
        return
    with st.expander(f"Why the answer at message {linked}", expanded=True):
        summary = attribution.summary()
        st.markdown(escape_markdown(summary[:1].upper() + summary[1:] + "."))
        st.plotly_chart(heat_strip(attribution), key="context_heat")
        st.caption(
            escape_markdown(
                attribution.trust() + ". Each message the answer saw carries its weight below, on this page "
                "and the others of the transcript."
            )
        )
        st.dataframe(ranked_frame(attribution), hide_index=True, key="context_ranked")


def show_messages(scope: Scope, shown: Listing, index: ContextIndex, details: bool) -> list[Placement]:
    """The messages of the page as a transcript, each followed by the anchors it ends and
    the forks that branched off after it. Returns how they were placed."""
    context = scope.chosen
    placements = place_page(
        index.calls, context.message_view, shown.indices, lambda at: index.page_of(at, shown.chronological)
    )
    rows = {row.index: row for row in page_rows(context, placed_indices(placements))}
    attribution = linked_attribution(scope, shown.linked)
    weights = attribution.message_weights() if attribution is not None else {}
    meaning = attribution.weight_meaning() if attribution is not None else ""
    view = PageView(
        scope.root, scope.session, context, shown, rows, details, produced_by(scope), weights, meaning
    )
    forks = forks_after(index)
    for placement in placements:
        show_message(view, placement)
        show_after(view, placement, forks)
    others = anchors_at_no_message(context.anchor_points, context.message_count)
    if others and details:
        st.text("anchors that end at no message: " + ", ".join(others))
    return placements


def show_outline(index: ContextIndex, context: Context, shown: Listing) -> None:
    """In the sidebar: counts, a jump to a turn, the compactions and forks, and the
    outline of the pages around this one (never the whole outline of a long context)."""
    sidebar = st.sidebar
    sidebar.subheader("Outline")
    sidebar.caption(escape_markdown(outline_counts(index)))
    if index.turns:
        st.session_state[TURN_KEY] = index.turn_number(shown.linked) if shown.linked is not None else None
        sidebar.number_input(
            f"Go to turn (1–{len(index.turns):,})",
            1,
            len(index.turns),
            value=None,
            step=1,
            key=TURN_KEY,
            on_change=turn_typed,
            args=(index.turns,),
        )
    marks = landmarks(index, context, shown.page, shown.chronological)
    if marks:
        outline_radio(sidebar, "Compactions and forks", "outline_landmark", marks, shown.linked)
    near = outline_near(index, context, shown.page, shown.chronological)
    if near:
        outline_radio(sidebar, "Around this page", "outline_near", near, shown.linked)


def outline_radio(place: Any, label: str, key: str, entries: list[OutlineEntry], linked: int | None) -> None:
    """Entries as a radio list: the linked message's entry is the one selected, and
    picking another opens its page. Labels quote message text, escaped (a radio shows
    Markdown)."""
    st.session_state[key] = next((k for k, e in enumerate(entries) if e.index == linked), None)
    place.radio(
        label,
        range(len(entries)),
        index=None,
        format_func=lambda k: escape_markdown(entries[k].label),
        key=key,
        on_change=entry_picked,
        args=(key, entries),
    )


def style_page(context: Context, shown: Listing) -> None:
    """Each message's left border in its speaker's colour, and a border around the
    linked message. Sent before the messages so that it shows with them (Streamlit
    holds back an HTML element of style alone until the run ends), in an element that
    hides itself. Only our own fixed CSS with message numbers goes into this HTML,
    never anything read from the files."""
    speakers = {index: speaker(context.message_at(index)) for index in shown.indices}
    st.html(f"<style>{transcript_css(speakers, shown.linked)} {HIDE_OURS}</style>{OURS}")


# Our own HTML elements carry OURS, and HIDE_OURS takes their element containers out of the
# layout (no gap for them). A string statement here would be shown: Streamlit's magic.
OURS = '<span class="soapwb-page-html"></span>'
HIDE_OURS = '[data-testid="stElementContainer"]:has(.soapwb-page-html) { display: none; }'


def scroll_into_view(context: Context, shown: Listing) -> None:
    """Bring the linked message (or, after turning a page, the page's first message)
    into view, once per change of view, so that a rerun for anything else leaves the
    scroll position alone. Every run of the same view carries the same script, named by
    the view, and the browser runs it once: a rerun that comes before the browser drew
    the first run (the URL taking the context's id makes one) would otherwise lose it.
    The script is ours and fixed but for a message number and a digest."""
    view = (context.id, shown.page, shown.linked, shown.chronological)
    kept = st.session_state.get(SCROLLED_KEY)
    if kept is not None and kept[0] == view:
        target = kept[1]
    else:
        target = scroll_target(None if kept is None else kept[0], view, shown)
        st.session_state[SCROLLED_KEY] = (view, target)
    if target is not None:
        named = hashlib.sha256(repr(view).encode("utf-8", "surrogatepass")).hexdigest()[:16]
        script = SCROLL_SCRIPT.replace("TARGET", f"st-key-message-{target}").replace("VIEW", named)
        st.html(script.replace("HIDE", HIDE_OURS).replace("OURS", OURS), unsafe_allow_javascript=True)


SCROLL_SCRIPT = """<style>[class*='st-key-message-'] { scroll-margin-top: 4.5rem; } HIDE</style>OURS<script>
(() => {
  if (window.soapwbScrolledFor === "VIEW") return;  // this view's script ran in this tab
  window.soapwbScrolledFor = "VIEW";
  // Keep the message where it was scrolled to while what loads around it moves it: for
  // 30 s, or until the person scrolls, types or clicks (then the page is theirs).
  let tries = 0, last = null, theirs = false;
  const inputs = ["wheel", "touchmove", "keydown", "mousedown"];
  const yours = () => { theirs = true; };
  inputs.forEach((kind) => window.addEventListener(kind, yours, {passive: true}));
  const timer = setInterval(() => {
    const found = theirs ? null : document.getElementsByClassName("TARGET")[0];
    if (found && (last === null || Math.abs(found.getBoundingClientRect().top - last) >= 1)) {
      found.style.scrollMarginTop = "4.5rem";  // below the header, whenever this style sheet is gone
      found.scrollIntoView({block: "start"});
      last = found.getBoundingClientRect().top;
    }
    if (theirs || ++tries > 200) {
      clearInterval(timer);
      inputs.forEach((kind) => window.removeEventListener(kind, yours));
    }
  }, 150);
})();
</script>"""


def show_two_tracks(session: Session) -> None:
    """For an imported OpenPoke conversation: the raw log, the chosen entry marked, above
    the working memory as the model saw it at that entry; stacked, each full width."""
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
    where = f"line {tracks.entry_line_number}" if tracks.entry_line_number else "not in the log"
    st.text(f"The conversation log ({tracks.raw_source}), up to entry {entry} ({where}), marked ▶:")
    st.code(tracks.marked_tail, language=None, wrap_lines=True)
    with st.expander(f"The whole log up to entry {entry} ({tracks.lines:,} lines, as in the file)"):
        st.code(
            tracks.raw_log, language=None, wrap_lines=True, height=400 if tracks.lines > 30 else "content"
        )
    for line in tracks.skipped:
        st.text(f"✗ skipped by OpenPoke: {line}")
    st.text(f"The working memory as the model saw it at entry {entry}: {tracks.rule}")
    st.code(tracks.working_memory, language=None, wrap_lines=True)
    for note in tracks.notes:
        st.text(f"note: {note}")


def show_system_prompts(prompts: list[PromptAtCall], linked: int | None) -> None:
    """The system prompt once per change: each distinct version and the calls it was sent
    with (the version of the linked message's call opened)."""
    if not prompts:
        return
    versions = prompt_versions(prompts)
    with st.expander(prompt_history_label(versions)):
        for version in versions:
            st.text(version.label)
            if linked is not None and version.first_message <= linked <= version.last_message:
                st.text(f"▶ the version in force at message {linked}, as linked")
            st.code(version.text, language=None, wrap_lines=True)


def show_session(scope: Scope) -> None:
    """The session's identity, unreadable files, fork tree and the chosen context.

    The page of messages is drawn before the token total and the call log: the first
    time a long context is opened those take seconds, and its messages need not wait.
    """
    root, session = scope.root, scope.session
    name = session_name(session)
    if name is not None:
        st.text(name)
    st.text(session_heading(session))
    for file, error in session.load_errors.items():
        st.warning(escape_markdown(load_error_line(file, error, root)))
    names = session_names(session).names
    if not session.contexts:
        st.info("This session has no readable context.")
        st.text("\n".join(fork_tree_excerpt(session_names(session).nodes, names=names)))
        st.stop()
    scope = selected_context(scope, key=None, on_change=forget_position)
    context = scope.chosen
    with st.expander(f"Fork tree ({len(names)} contexts)", expanded=len(names) <= 6):
        st.text("\n".join(fork_tree_excerpt(session_names(session).nodes, shown_id=context.id, names=names)))
    prompts_slot = st.container()
    if is_interaction(session):
        show_two_tracks(session)
    st.subheader("Messages")
    with st.container(horizontal=True):
        chronological = st.toggle("Chronological order (by sequence number)", key="chronological")
        details = show_details_toggle()
    totals = st.empty()
    index = context_index(scope)
    shown = listing(session, context, index, chronological)
    if shown.paged:
        show_pager(shown, "top")
    style_page(context, shown)
    show_why(scope, shown.linked)
    show_messages(scope, shown, index, details)
    if shown.paged:
        show_pager(shown, "bottom")
    tokens = context_tokens(scope)
    totals.text(f"{index.messages:,} messages, {tokens:,} tokens (cl100k_base)")
    if shown.paged:
        show_outline(index, context, shown)
    scroll_into_view(context, shown)
    with prompts_slot:
        show_system_prompts(system_prompts(scope), shown.linked)


DETAILS_KEY = "details"


def show_details_toggle() -> bool:
    """The toggle that shows ids, sequence numbers, call ids and anchors; kept in
    ``?details=1`` so that a copied link shows what its sender saw."""
    details = st.toggle(
        "Show details (ids, sequence numbers, anchors)",
        value=st.query_params.get(DETAILS_KEY) == "1",
        key=DETAILS_KEY,
    )
    keep_in_url(DETAILS_KEY, "1" if details else None)
    return details


st.title("Context")
root = chosen_store()
ref = st.query_params.get("session")
signature = store_signature(root)  # once a run: it stats every file of the store
try:
    if not ref:
        raise SessionNotFoundError(Path(root), "no session chosen")
    loaded = read_only_session(root, ref, signature)
except (SessionNotFoundError, AmbiguousSessionError):
    # A link naming no session, or one this store does not have: the picker, not a dead end.
    loaded = selected_session(root, signature, read_only=True)
except SoapError as exc:
    show_error_and_stop(exc)
show_session(Scope.of(root, signature, loaded))
