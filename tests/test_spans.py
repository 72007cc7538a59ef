"""Big context files read through the catalog's message spans (soap_core._spans).

A context file of at least ``SPANNED_FROM`` messages that the catalog indexed is loaded
without parsing its messages; each is parsed from its byte span when first asked for.
The ground truth is the same store read without a catalog (every message parsed), and
files peteos itself wrote. The Context page's first open of a long context builds only
the messages of its page.
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

from soap_core import FormatError, Session, Store, TextPart, facts_of, read_json
from soap_core import _catalog as catalog_module
from soap_core._catalog import is_catalog_file
from soap_core._spans import SPANNED_FROM, SpannedMessages, message_spans, without_messages
from tests.apptest import APP
from tests.peers.fixtures import PeerStore, peteos05_store, peteos06_store, peteos_stub  # noqa: F401
from tests.test_page_context_long import long_store, written_a_minute_ago
from workbench import loading
from workbench.context_views import PAGE_SIZE, build_index

MESSAGES = SPANNED_FROM + 500


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Session]:
    root = tmp_path_factory.mktemp("spans") / "store"
    return root, long_store(root, MESSAGES)


def context_files(root: Path) -> list[Path]:
    return sorted(
        p
        for p in root.rglob("*.json")
        if p.name not in ("session.json", "instances.json")
        and not is_catalog_file(p)
        and "calls" not in p.parts
    )


def fresh_copy(root: Path, target: Path) -> Path:
    """The store's files without its catalog, with their modification times."""
    for path in root.rglob("*"):
        if path.is_file() and not is_catalog_file(path):
            copy = target / path.relative_to(root)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes(path.read_bytes())
            os.utime(copy, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns))
    return target


def load(root: Path, uuid: str, *, catalog: bool = True) -> Session:
    store = Store(root, use_catalog=catalog)
    store.sessions()  # index first, as every page does
    return store.load_session(uuid, require_active=False)


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file() and not is_catalog_file(p)
    }


# -- the spans themselves ---------------------------------------------------------------


def test_the_spans_of_a_file_frame_each_message_and_the_rest_is_the_context_without_them() -> None:
    data = {
        "messages": [
            {"id": "a", "content": [{"type": "text", "text": "    }\n    {"}]},
            {"id": "b", "x": {"y": {}}},
        ],
        "id": "c",
        "anchor_points": [["messages", 2]],
    }
    raw = json.dumps(data, indent=2).encode()
    spans = message_spans(raw, 2)
    assert spans is not None
    assert [orjson.loads(raw[spans[i] : spans[i + 1]]) for i in (2, 4)] == data["messages"]
    assert orjson.loads(without_messages(raw, spans)) == {**data, "messages": []}


@pytest.mark.parametrize(
    "raw",
    [
        json.dumps({"messages": [{"id": "a"}, {"id": "b"}], "id": "c"}).encode(),  # one line
        json.dumps({"messages": [{"id": "a"}, {"id": "b"}], "id": "c"}, indent=4).encode(),
        json.dumps({"messages": [{"id": "a"}, {}], "id": "c"}, indent=2).encode(),  # an empty object
        json.dumps({"id": "c", "nested": {"messages": [{"id": "a"}, {"id": "b"}]}}, indent=2).encode(),
    ],
    ids=["compact", "indent-4", "empty-message", "not-top-level"],
)
def test_a_file_laid_out_otherwise_gets_no_spans(raw: bytes) -> None:
    assert message_spans(raw, 2) is None


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(
    messages=st.lists(
        st.dictionaries(st.text(max_size=8), JSON, min_size=1, max_size=5), min_size=1, max_size=8
    ),
    rest=st.dictionaries(st.text(max_size=8).filter(lambda k: k != "messages"), JSON, max_size=4),
    ascii_only=st.booleans(),
)
def test_the_spans_of_any_file_written_with_indent_2_frame_its_messages(
    messages: list[dict[str, Any]], rest: dict[str, Any], ascii_only: bool
) -> None:
    """Whatever the messages hold (strings with braces, newlines, indentation; nested
    objects and arrays; keys before and after ``messages``), the file json.dump writes."""
    data = {**dict(list(rest.items())[:1]), "messages": messages, **dict(list(rest.items())[1:])}
    raw = json.dumps(data, indent=2, ensure_ascii=ascii_only).encode()
    spans = message_spans(raw, len(messages))
    assert spans is not None
    assert [json.loads(raw[spans[i] : spans[i + 1]]) for i in range(2, len(spans), 2)] == messages
    assert json.loads(without_messages(raw, spans)) == {**data, "messages": []}


def test_a_count_that_is_not_the_files_gets_no_spans() -> None:
    raw = json.dumps({"messages": [{"id": "a"}, {"id": "b"}]}, indent=2).encode()
    assert message_spans(raw, 1) is None
    assert message_spans(raw, 3) is None


@pytest.fixture(params=["0.5", "0.6"], ids=["peteos-0.5.8", "peteos-0.6.13"])
def peer(request: pytest.FixtureRequest) -> PeerStore:
    store: PeerStore = request.getfixturevalue(
        "peteos05_store" if request.param == "0.5" else "peteos06_store"
    )
    return store


def test_the_spans_frame_every_message_of_every_context_file_peteos_wrote(peer: PeerStore) -> None:
    checked = 0
    for path in context_files(peer.path):
        raw = path.read_bytes()
        data = json.loads(raw)
        if not isinstance(data, dict) or not isinstance(data.get("messages"), list) or not data["messages"]:
            continue
        spans = message_spans(raw, len(data["messages"]))
        assert spans is not None, f"{path}: no spans"
        parsed = [json.loads(raw[spans[i] : spans[i + 1]]) for i in range(2, len(spans), 2)]
        assert parsed == data["messages"], path
        assert json.loads(without_messages(raw, spans)) == {**data, "messages": []}, path
        checked += 1
    assert checked >= 5, f"only {checked} context files with messages in the peer store"


def test_a_peteos_store_read_through_spans_is_what_a_full_parse_reads_and_saves_unchanged(
    peer: PeerStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every file spanned, each loaded context equals the catalog-less load, and
    saving every session rewrites no byte of what peteos wrote."""
    monkeypatch.setattr(catalog_module, "SPANNED_FROM", 1)
    root = peer.copy_to(tmp_path / "store").path
    written_a_minute_ago(root)  # the catalog vouches only for files that have settled
    before = snapshot(root)
    store = Store(root)
    spanned = 0
    for summary in store.sessions():
        if summary.error:
            continue
        session = store.load_session(summary.uuid, require_active=False)
        truth = Store(root, use_catalog=False).load_session(summary.uuid, require_active=False)
        for context_id, context in session.contexts.items():
            if not context.messages_built and isinstance(context._unread.raw, SpannedMessages):  # type: ignore[union-attr]
                spanned += 1
                assert store.message_facts(context) == facts_of(truth.contexts[context_id].messages)
            assert context.to_dict() == truth.contexts[context_id].to_dict()
        store.save_session(session)
    assert spanned >= 5
    assert snapshot(root) == before


# -- a big context ----------------------------------------------------------------------


def test_a_big_context_loads_without_building_its_messages(big: tuple[Path, Session]) -> None:
    root, saved = big
    session = load(root, saved.uuid)
    context = session.active_context
    assert not context.messages_built
    assert isinstance(context._unread.raw, SpannedMessages)  # type: ignore[union-attr]
    truth = load(root, saved.uuid, catalog=False).active_context

    assert context.message_count == MESSAGES
    assert context.total_token_count() == truth.total_token_count()
    index = build_index(session, context, Store(root).message_facts)
    for at in (0, 1, 777, MESSAGES - 1, -1):
        assert context.message_at(at).to_dict() == truth.messages[at].to_dict()
    assert not context.messages_built, "the index or one message built them all"
    assert len(context._built) == 4
    assert index == build_index(load(root, saved.uuid, catalog=False), truth)

    kept = context.message_at(777)
    assert context.messages[777] is kept, "the whole list must hold the message built alone"
    assert [m.to_dict() for m in context.messages] == [m.to_dict() for m in truth.messages]


def test_an_unchanged_big_context_is_not_rewritten_and_a_changed_one_is_as_a_full_parse_writes_it(
    big: tuple[Path, Session], tmp_path: Path
) -> None:
    root, saved = big
    ours, theirs = fresh_copy(root, tmp_path / "ours"), fresh_copy(root, tmp_path / "theirs")
    before = snapshot(ours)
    Store(ours).save_session(load(ours, saved.uuid))
    assert snapshot(ours) == before, "saving a session read through spans rewrote a file"
    session = load(ours, saved.uuid)
    assert len(session.active_context.messages) == MESSAGES  # all built, none changed
    assert session.active_context.saved_fingerprint is not None
    Store(ours).save_session(session)
    assert snapshot(ours) == before, "saving a session whose messages were all built rewrote a file"

    for where, catalog in ((ours, True), (theirs, False)):
        session = load(where, saved.uuid, catalog=catalog)
        message = session.active_context.message_at(900) if catalog else session.active_context.messages[900]
        message.content = [TextPart("changed after reading")]
        Store(where, use_catalog=catalog).save_session(session)
    name = saved.context_files[saved.active_context_id] if saved.context_files else None
    changed = [p for p in context_files(ours) if (p.name == name if name else True)]
    for path in changed:
        assert path.read_bytes() == (theirs / path.relative_to(ours)).read_bytes(), path
    assert "changed after reading" in json.dumps(read_json(changed[0]))


def test_a_file_changed_under_the_catalogs_signature_names_the_file_and_spares_the_others(
    big: tuple[Path, Session], tmp_path: Path
) -> None:
    """Same size, same modification time, different bytes in message 1,200, and a
    signature the catalog cannot tell apart (the change time moved, so the collision is
    made by hand, as a clock set back would make it): its span no longer holds JSON, nor
    does the file. Asking for that message raises a FormatError naming the file; other
    messages still read; the file is not rewritten."""
    root, saved = big
    copy = fresh_copy(root, tmp_path / "store")
    load(copy, saved.uuid)  # indexed
    path = next(
        p
        for p in context_files(copy)
        if p.stat().st_size == max(q.stat().st_size for q in context_files(copy))
    )
    raw = path.read_bytes()
    spans = message_spans(raw, MESSAGES)
    assert spans is not None
    start = spans[2 + 2 * 1200]
    broken = raw[:start] + b"[" + raw[start + 1 :]
    info = path.stat()
    path.write_bytes(broken)
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    catalog = Store(copy).catalog()
    assert catalog is not None
    signature = f"{info.st_size}:{info.st_mtime_ns}:{path.stat().st_ctime_ns}:{info.st_ino}"
    catalog._db.execute("UPDATE context_files SET sig = ? WHERE file = ?", (signature, path.name))
    catalog.close()

    context = load(copy, saved.uuid).contexts[json.loads(raw)["id"]]
    assert context.message_at(1199).id
    with pytest.raises(FormatError) as error:
        context.message_at(1200)
    assert str(path) in str(error.value)
    assert path.read_bytes() == broken


def test_a_big_file_laid_out_otherwise_loads_whole(big: tuple[Path, Session], tmp_path: Path) -> None:
    root, saved = big
    copy = fresh_copy(root, tmp_path / "store")
    path = max(context_files(copy), key=lambda p: p.stat().st_size)
    data: Any = json.loads(path.read_bytes())
    path.write_text(json.dumps(data))  # one line: no spans
    session = load(copy, saved.uuid)
    context = session.contexts[data["id"]]
    assert context.message_count == MESSAGES
    assert not isinstance(getattr(context._unread, "raw", None), SpannedMessages)
    assert [m.to_dict() for m in context.messages] == data["messages"]


# -- the page ---------------------------------------------------------------------------


def test_the_context_pages_first_open_builds_only_the_messages_it_shows(big: tuple[Path, Session]) -> None:
    """The page, its index, its outline and its token total build the fifty messages of
    the page (and the few the outline names around it), never all of them."""
    root, saved = big
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.query_params.update(store=str(root), session=saved.uuid, message=str(MESSAGES // 2))
    at.run()
    at.switch_page("workbench/pages/context.py").run()
    assert not at.exception, at.exception
    shown = "\n".join(t.value for t in at.text) + "\n".join(m.value for m in at.markdown)
    assert f"{MESSAGES:,} messages" in shown
    context = loading.read_only_session(str(root), saved.uuid).active_context
    assert not context.messages_built, "the page built every message of the context"
    assert len(context._built) <= 3 * PAGE_SIZE, f"{len(context._built)} messages built for one page"
    assert MESSAGES // 2 in context._built


def test_a_long_session_read_through_the_catalog_is_copied_whole_by_the_pages_cache(
    big: tuple[Path, Session], tmp_path: Path
) -> None:
    """``st.cache_data`` (workbench.loading.load_session, the Replay page's) pickles the
    session: an unbuilt context's spans went with the catalog's callback, locks and all,
    and every such page failed. The copy holds the same messages as the file."""
    root = fresh_copy(big[0], tmp_path / "store")
    uuid = big[1].uuid
    session = load(root, uuid)
    assert not session.active_context.messages_built  # spans of the bytes, as a page finds them
    copy = pickle.loads(pickle.dumps(session))
    expected = [m.to_dict() for m in load(root, uuid, catalog=False).active_context.messages]
    assert [m.to_dict() for m in copy.active_context.messages] == expected
    cached = loading.load_session(str(root), uuid)
    assert [m.to_dict() for m in cached.active_context.messages] == expected
