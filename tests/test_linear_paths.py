"""Replay and analysis passes stay linear in the session, and give what they gave before.

A pass (verify, the budgets, the compaction lab, the system prompt at each call) reads
each message of a context a bounded number of times, serializes it once, and extends one
running hash from call to call. Equality is checked against the straightforward
computation (the prefix rebuilt from scratch and hashed whole, the sizes summed message by
message) at every index of several contexts, in several orders; linearity by counting the
work (messages visited, chat messages built, bytes hashed, call records read), never by
timing.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, SupportsIndex, overload

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import analysis._budget as budget_module
import replay._runtime_source as runtime_source
from analysis import call_budgets, context_makeup, history_of, simulate
from importers.openpoke import import_openpoke
from replay import MaterializeError, materialize, request_messages, system_prompt_history, verify_session
from replay._materialize import CallLog, resolve_index, sent_prefix
from replay._runtime_source import body_ends, chat_items
from soap_core import (
    OBJECT_KEY,
    CallRecord,
    Context,
    MediaPart,
    Message,
    Session,
    SoapError,
    Store,
    TextPart,
    ThinkingPart,
    ToolPart,
    ToolResultPart,
    ToolUsePart,
    canonical_json,
    chat_request,
    read_calls,
    request_hash,
)
from soap_core.runtime import AgenticObject, ModelSettings, RollingTokenWindow, Runtime, tool
from tests.peers.fixtures import PeerStore, peteos05_store, peteos06_store, peteos_stub  # noqa: F401
from tests.scripted import ScriptedEndpoint, calls, says
from tests.test_peteos_peer import _bodies as peteos_bodies
from tests.test_peteos_peer import explained

OPENPOKE_SHORT = Path(__file__).parent / "fixtures" / "openpoke" / "short"
_NOT_PARAMETERS = ("model", "messages", "tools")


# -- counting -------------------------------------------------------------------------------------


class Counted(list[Any]):
    """A list that counts every element read through Python: iteration, indexing, and
    each element of a slice (a slice copies them all)."""

    reads = 0

    def __iter__(self) -> Iterator[Any]:
        for item in super().__iter__():
            Counted.reads += 1
            yield item

    @overload
    def __getitem__(self, key: SupportsIndex) -> Any: ...

    @overload
    def __getitem__(self, key: slice) -> list[Any]: ...

    def __getitem__(self, key: SupportsIndex | slice) -> Any:
        value = super().__getitem__(key)
        Counted.reads += len(value) if isinstance(key, slice) else 1
        return value


def counted(session: Session) -> Session:
    for context in session.contexts.values():
        context.messages = Counted(context.messages)
    return session


class Work:
    """What a pass did (in its ``with`` block): elements of counted lists read (messages
    and call records), chat messages built, make-ups computed, bytes hashed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.chat_messages = 0
        self.makeups = 0
        self.hashed = 0
        self.reads = 0
        chat_message, makeup = runtime_source.chat_message, budget_module.makeup

        def counting_chat_message(message: Message) -> list[dict[str, Any]]:
            self.chat_messages += 1
            return chat_message(message)

        def counting_makeup(message: Message) -> dict[str, int]:
            self.makeups += 1
            return makeup(message)

        work = self

        class Hasher:
            def __init__(self, data: bytes = b"", inner: Any = None) -> None:
                import hashlib

                self.inner = inner or hashlib.sha256()
                self.update(data)

            def update(self, data: bytes) -> None:
                work.hashed += len(data)
                self.inner.update(data)

            def copy(self) -> Hasher:
                return Hasher(inner=self.inner.copy())

            def hexdigest(self) -> str:
                return str(self.inner.hexdigest())

        class Hashlib:
            sha256 = Hasher

        monkeypatch.setattr(runtime_source, "chat_message", counting_chat_message)
        monkeypatch.setattr(budget_module, "makeup", counting_makeup)
        monkeypatch.setattr(runtime_source, "hashlib", Hashlib)

    def __enter__(self) -> Work:
        Counted.reads = 0
        return self

    def __exit__(self, *_: object) -> None:
        self.reads = Counted.reads


# -- sessions ---------------------------------------------------------------------------------------

TEXTS = (
    'plain words, "quoted", back\\slash and a tab\there',
    "line one\nline two\r\n\u2028 after a line separator",
    "café naïve 東京 → ✓ and an emoji 🦀 beyond the BMP",
    "a control character \x01 and \x1f, DEL \x7f",
    "",
)
PARAMETERS = {"max_tokens": 64, "temperature": 0.25, "seed": 11, "frequency_penalty": 0.5}


def synthetic_session(turns: int, *, changing_hooks: bool = False, seed: int = 3) -> Session:
    """A runtime session built in-process: every kind of part the chat mapping turns into
    a request (text, thinking, tool calls, results as text and as JSON, an image), and a
    call record per answer with the request as the runtime built it. With
    ``changing_hooks`` the system prompt's hook output differs at every call."""
    rng = random.Random(seed)
    tools = [ToolPart("note", "Write a note.", {"type": "object", "properties": {"t": {"type": "string"}}})]
    context = Context.create(Message.system_prompt("You keep notes.", ["0 notes"]), tools)
    listing = context.record_hook_output(json.dumps([{"name": "note", "description": "Write a note."}]))
    session = Session.create("Synthetic", context, thread_id="t")
    session.state_data[OBJECT_KEY] = "synthetic"
    records: list[CallRecord] = []
    for turn in range(turns):
        user: list[Any] = [TextPart(rng.choice(TEXTS) + f" turn {turn}")]
        if turn % 7 == 3:
            user.append(MediaPart("image", {"type": "base64", "media_type": "image/png", "data": "iVBORw0K"}))
        context.append(Message.create("user", user))
        if turn % 3 == 1:
            use = ToolUsePart(f"c{turn}", "note", json.dumps({"t": rng.choice(TEXTS)}))
            answer = Message.create("assistant", [ThinkingPart("let me write it"), use])
            _record(session, context, answer, records, turn, changing_hooks, listing)
            content: Any = {"ok": True, "n": turn, "x": 0.1 * turn} if turn % 2 else rng.choice(TEXTS)
            context.append_tool_results(answer, [ToolResultPart(f"c{turn}", content)])
        answer = Message.create("assistant", [TextPart(rng.choice(TEXTS))])
        _record(session, context, answer, records, turn, changing_hooks, listing)
    session.extra["records"] = records  # kept beside the session for the tests below
    return session


def _record(
    session: Session,
    context: Context,
    answer: Message,
    records: list[CallRecord],
    turn: int,
    changing: bool,
    listing: str,
) -> None:
    hook = context.record_hook_output(f"{turn if changing else 0} notes")
    call = CallRecord(
        id=f"call-{len(records):05d}",
        session=session.uuid,
        role=session.role,
        context_id=context.id,
        message_index=len(context.messages),
        request={},
        request_hash="",
        message_id=answer.id,
        system_prompt_hooks=[hook],
        tool_list_hook=listing,
    )
    messages = request_messages(context, len(context.messages), call, [])
    call.request = chat_request(messages, model="m", parameters={**PARAMETERS, "tool_choice": "auto"})
    call.request_hash = request_hash(call.request)
    records.append(call)
    context.append(answer)


def records_of(session: Session) -> list[CallRecord]:
    records: list[CallRecord] = session.extra["records"]
    return records


class Notebook(AgenticObject):
    system_prompt = 'You keep "notes".\nUse your tools.'
    settings = ModelSettings(max_tokens=32, temperature=0.0, seed=3)
    compaction = RollingTokenWindow(threshold=260, keep=0.6)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.notes: list[str] = []

    def system_prompt_hooks(self) -> list[str]:
        return [f"Notes so far: {len(self.notes)}"]

    @tool
    def write(self, text: str) -> dict[str, Any]:
        """Write a note down.

        Args:
            text: the note.
        """
        self.notes.append(text)
        return {"count": len(self.notes), "last": text}


@pytest.fixture(scope="module")
def recorded_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store our runtime wrote (scripted answers): tool calls, a hook output that changes
    when a note is written, and compaction forks."""
    root = tmp_path_factory.mktemp("linear") / "store"
    answers: list[dict[str, Any]] = []
    for turn in range(9):
        if turn % 2 == 0:
            answers.append(calls("write", json.dumps({"text": TEXTS[turn % len(TEXTS)]}), f"w{turn}"))
        answers.append(says(f"Noted, turn {turn}: {TEXTS[(turn + 2) % len(TEXTS)]}"))
    endpoint = ScriptedEndpoint(*answers)
    notebook = Notebook(runtime=Runtime(root, endpoint), object_id="nb")  # type: ignore[arg-type]
    for turn in range(9):
        notebook.invoke(f"Turn {turn}: {TEXTS[turn % len(TEXTS)]}", thread="n")
    return root


def recorded_session(root: Path) -> Session:
    store = Store(root)
    [summary] = [s for s in store.sessions() if s.role == "Notebook"]
    return store.load_session(summary.uuid, require_active=False)


# -- the straightforward computation ----------------------------------------------------------------


def plain_materialize(
    session: Session, context: Context, index: int, records: Sequence[CallRecord]
) -> tuple[dict[str, Any], str, list[Message], list[str], str]:
    """What materialize gave before: the call site found by scanning, the prefix rebuilt
    whole, the request hashed whole. (request, hash, messages, notes, context id)."""
    notes: list[str] = []
    site, at = context, index
    if index < len(context.messages):
        message_id = context.messages[index].id
        seen = {context.id}
        while site.origin_context_id in session.contexts and site.origin_context_id not in seen:
            parent = session.contexts[site.origin_context_id]
            found = next((i for i, m in enumerate(parent.messages) if m.id == message_id), None)
            if found is None:
                break
            seen.add(parent.id)
            site, at = parent, found
        if site.id != context.id:
            notes.append(f"message {index} was copied by a fork: the call was made from context {site.id}")
        if context.messages[index].role != "assistant":
            notes.append(f"message {index} is a {context.messages[index].role} message, not a model output")
    call = None
    if at < len(site.messages):
        produced = site.messages[at].id
        call = next((c for c in records if c.context_id == site.id and c.message_id == produced), None)
    if call is None:
        notes.append("no recorded call: model and sampling parameters are unknown")
        parameters: dict[str, Any] = {}
    else:
        parameters = {k: v for k, v in call.request.items() if k not in ("messages", "tools")}
    messages = request_messages(site, at, call, notes)
    request = chat_request(
        messages,
        model=parameters.get("model"),
        parameters={k: v for k, v in parameters.items() if k not in _NOT_PARAMETERS},
    )
    return request, request_hash(request), messages, notes, site.id


def assert_same_as_plain(session: Session, context: Context, index: int, calls: Sequence[CallRecord]) -> None:
    found = materialize(session, context, index, calls=calls)
    request, hashed, messages, notes, site = plain_materialize(session, context, index, records_in(calls))
    where = f"index {index} of context {context.id}"
    assert json.dumps(found.request) == json.dumps(request), where  # key order included
    assert found.request_hash == hashed == request_hash(found.request), where
    assert found.messages == messages and found.notes == notes and found.context_id == site, where


def records_in(calls: Sequence[CallRecord]) -> list[CallRecord]:
    return list(calls.records) if isinstance(calls, CallLog) else list(calls)


def orders(count: int) -> dict[str, list[int]]:
    positions = list(range(count + 1))
    shuffled = positions[:]
    random.Random(count).shuffle(shuffled)
    return {"ascending": positions, "descending": positions[::-1], "shuffled": shuffled}


# -- equality at every index --------------------------------------------------------------------------


@pytest.mark.parametrize("order", ["ascending", "descending", "shuffled"])
@pytest.mark.parametrize("changing_hooks", [False, True], ids=["stable hooks", "a new hook output per call"])
def test_materialize_gives_the_plain_request_and_hash_at_every_index(
    order: str, changing_hooks: bool
) -> None:
    session = synthetic_session(24, changing_hooks=changing_hooks)
    context = session.active_context
    log = CallLog(records_of(session))
    for index in orders(len(context.messages))[order]:
        assert_same_as_plain(session, context, index, log)  # one pass
        assert_same_as_plain(session, context, index, records_of(session))  # a call on its own


def test_every_context_of_a_store_our_runtime_wrote_materializes_as_before(recorded_store: Path) -> None:
    session = recorded_session(recorded_store)
    assert session.directory is not None
    records = CallLog(read_calls(session.directory))
    assert len(session.contexts) > 1, "the scripted run should have compacted"
    for context in session.contexts.values():
        for index in orders(len(context.messages))["shuffled"]:
            assert_same_as_plain(session, context, index, records)
    results = verify_session(session)
    assert results and all(r.match for r in results)
    assert len({c.request_hash for c in records}) == len(records)


def test_what_a_call_was_sent_is_what_materialize_builds() -> None:
    session = synthetic_session(20, changing_hooks=True)
    context = session.active_context
    log = CallLog(records_of(session))
    for index in orders(len(context.messages))["shuffled"]:
        sent = sent_prefix(session, context, index, calls=log)
        found = materialize(session, context, index, calls=log)
        assert sent is not None
        assert sent.messages() == found.messages and sent.request_hash() == found.request_hash
        assert sent.special_messages() == [m for m in found.messages if m.is_special]


def test_a_message_changed_between_two_materializations_is_serialized_again() -> None:
    session = synthetic_session(12)
    context = session.active_context
    records = records_of(session)
    end = len(context.messages)
    changes = [
        lambda: setattr(context.messages[5], "content", [TextPart("an edited text")]),
        lambda: context.messages.__setitem__(7, Message.create("user", [TextPart("a new message")])),
        lambda: context.messages.insert(3, Message.create("user", [TextPart("inserted")])),
        lambda: setattr(context.messages[4], "role", "system"),
        lambda: context.messages.pop(9),
    ]
    for change in changes:
        materialize(session, context, end, calls=records)  # the prefix is built ...
        change()  # ... then the context changes
        end = len(context.messages)
        for index in (end, end - 1, 6, 2):
            assert_same_as_plain(session, context, index, records)


def test_a_log_answers_as_the_scans_did() -> None:
    context = Context.create("prompt")
    for message_id in ("m1", "m10", "m2", "m2", "x"):
        message = Message.create("user", [TextPart(message_id)])
        message.id = message_id
        context.append(message)
    calls_made = [
        CallRecord("a", "s", "r", context.id, 2, {}, "h", message_id="m10"),
        CallRecord("b", "s", "r", context.id, 2, {}, "h", message_id="m10"),
    ]
    log = CallLog(calls_made)
    for _ in range(2):  # the first question scans; later ones use the indexes
        for at in ("m1", "m10", "m2", "x", "nothing", "", "1", "-1"):
            expected: Any
            try:
                expected = resolve_index(context, at)
            except MaterializeError as exc:
                expected = str(exc)
            try:
                got: Any = resolve_index(context, at, calls=log)
            except MaterializeError as exc:
                got = str(exc)
            assert got == expected, at
        assert log.produced(context, 2) is calls_made[0]
        assert log.produced(context, 1) is None and log.produced(context, 6) is None


# -- the other request sources: the same answers within a pass ------------------------------------------


def same_answers(session: Session, shared: CallLog, own: list[CallRecord]) -> None:
    for context in session.contexts.values():
        for index in orders(len(context.messages))["shuffled"]:
            results = []
            for calls_given in (shared, own):
                try:
                    found = materialize(session, context, index, calls=calls_given)
                    sent = [(m.role, m.message_type, m.raw_content()) for m in found.messages]
                    results.append(json.dumps([found.as_dict(), sent]))  # OpenPoke's are made anew
                    assert found.request_hash == request_hash(found.request)
                except SoapError as exc:
                    results.append(f"{type(exc).__name__}: {exc}")
            assert results[0] == results[1], f"index {index} of context {context.id}"


@pytest.mark.parametrize("layout", ["0.5", "0.6"])
def test_peteos_positions_within_a_pass_are_the_bodies_peteos_builds(
    layout: str, request: pytest.FixtureRequest
) -> None:
    """peteos's body is built in full at every position (no running hash): within a pass
    it is still the body peteos's own ``_build_body`` gives (its ground truth), and what
    a materialize on its own gives."""
    peer: PeerStore = request.getfixturevalue("peteos05_store" if layout == "0.5" else "peteos06_store")
    store = Store(peer.path)
    bodies = peteos_bodies(peer)
    checked = 0
    for truth in peer.ground_truth["sessions"]:
        session = store.load_session(truth["uuid"])
        own = read_calls(session.directory) if session.directory else []
        log = CallLog(own)
        same_answers(session, log, own)
        for context in session.contexts.values():
            assert sent_prefix(session, context, 0, calls=log) is None
            for index in orders(len(context.messages))["shuffled"]:
                got = materialize(session, context, index, calls=log)
                sent_id, sent_length = got.sent_from or (got.context_id, got.index)
                if sent_id in bodies and sent_length < len(bodies[sent_id]):
                    assert explained(got, bodies[sent_id][sent_length]) is None, (context.id, index)
                    checked += 1
    assert checked


def test_openpoke_positions_are_the_same_within_a_pass(tmp_path: Path) -> None:
    report = import_openpoke(OPENPOKE_SHORT, tmp_path / "store")
    assert report.interaction_session is not None
    session = Store(tmp_path / "store").load_session(report.interaction_session, require_active=False)
    own = read_calls(session.directory) if session.directory else []
    same_answers(session, CallLog(own), own)


# -- the canonical JSON, piece by piece -------------------------------------------------------------------

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(st.characters(exclude_categories=["Cs"])),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(st.characters(exclude_categories=["Cs"]), max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(st.text(max_size=8), JSON, max_size=4), max_size=5), JSON)
def test_a_body_hashed_in_pieces_is_the_body_hashed_whole(chat: list[dict[str, Any]], extra: Any) -> None:
    chat = [{k.encode("utf-8", "ignore").decode(): v for k, v in d.items()} for d in chat]
    body: dict[str, Any] = {"max_tokens": 5, "messages": chat, "model": "m", "zz": extra, "a": extra}
    head, tail = body_ends(body)
    items = b",".join(item for item in (chat_items([d]) for d in chat) if item)
    assert head + items + tail == canonical_json(body).encode("utf-8")
    assert chat_items(chat) == canonical_json(chat).encode("utf-8")[1:-1] or not chat


def test_floats_and_non_ascii_serialize_as_canonical_json() -> None:
    odd = {"f": [0.1, 1e16, -0.0, math.inf, -math.inf, 1 / 3], "s": "é\u2028\x00🦀", "n": None}
    assert chat_items([odd]) == canonical_json(odd).encode("utf-8")
    nan = chat_items([{"x": math.nan}])
    assert nan == canonical_json({"x": math.nan}).encode("utf-8") == b'{"x":NaN}'


# -- linear, by counting ---------------------------------------------------------------------------------


def verify_work(
    turns: int, monkeypatch: pytest.MonkeyPatch, *, changing: bool = False
) -> tuple[Work, int, int]:
    session = counted(synthetic_session(turns, changing_hooks=changing))
    records = Counted(records_of(session))
    with monkeypatch.context() as patched, Work(patched) as work:
        results = verify_session(session, calls=records)
    assert results and all(r.match for r in results)
    return work, len(session.active_context.messages), len(records)


def test_verify_reads_serializes_and_hashes_each_message_once(monkeypatch: pytest.MonkeyPatch) -> None:
    small, messages, records = verify_work(60, monkeypatch)
    large, _, _ = verify_work(120, monkeypatch)
    session = synthetic_session(60)
    last = materialize(session, session.active_context, len(session.active_context.messages), calls=[])
    whole = len(canonical_json(last.request).encode("utf-8"))
    head, tail = body_ends({k: v for k, v in last.request.items() if k != "messages"} | {"messages": []})
    assert small.chat_messages <= messages + 2  # each message once, and the rebuilt system prompt
    assert small.hashed <= whole + records * (len(head) + len(tail) + 1)
    assert small.reads <= 6 * messages + 10 * records  # a few looks per message and per call
    assert large.reads <= 2.1 * small.reads and large.chat_messages <= 2.1 * small.chat_messages
    assert large.hashed <= 2.2 * small.hashed


def test_with_a_new_system_prompt_at_every_call_only_the_hashing_grows_with_each_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """sha256 cannot skip a prefix that starts differently: each call's bytes are hashed
    once, as the runtime hashed them when it sent the call; nothing else is redone."""
    work, messages, records = verify_work(60, monkeypatch, changing=True)
    session = synthetic_session(60, changing_hooks=True)
    sent = sum(len(canonical_json(c.request).encode("utf-8")) for c in records_of(session))
    assert work.hashed <= sent
    assert work.chat_messages <= messages + 2 * records
    assert work.reads <= 6 * messages + 10 * records


def budget_work(turns: int, monkeypatch: pytest.MonkeyPatch) -> Work:
    session = counted(synthetic_session(turns))
    for context in session.contexts.values():
        for message in context.messages:
            message.count_tokens()
            message.part_token_counts()
    records = Counted(records_of(session))
    with monkeypatch.context() as patched, Work(patched) as work:
        budgets = call_budgets(session, calls=records)
        simulate(session, ["rolling-tokens:300", "rolling-messages:6"], calls=records)
    assert len(budgets) == len(records)
    return work


def test_budgets_and_the_lab_do_a_bounded_work_per_message(monkeypatch: pytest.MonkeyPatch) -> None:
    small, large = budget_work(60, monkeypatch), budget_work(120, monkeypatch)
    assert small.chat_messages == 0 and small.hashed == 0  # no request is built, nothing hashed
    assert large.reads <= 2.1 * small.reads and large.makeups <= 2.1 * small.makeups


def plain_budgets(session: Session, records: list[CallRecord]) -> list[tuple[int, dict[str, int]]]:
    """Per call: the tokens and make-up of the messages materialize says it was sent."""
    sizes = []
    for call in records:
        context = session.contexts[call.context_id]
        if call.message_id is None:
            messages = context.messages[: call.message_index]
        else:
            messages = materialize(session, context, call.message_id, calls=records).messages
        sizes.append((sum(m.count_tokens() for m in messages), context_makeup(messages)))
    return sizes


def test_budgets_equal_the_sums_over_what_each_call_was_sent(recorded_store: Path) -> None:
    for session in (recorded_session(recorded_store), synthetic_session(20, changing_hooks=True)):
        records = [c for c in (read_calls(session.directory) if session.directory else records_of(session))]
        budgets = call_budgets(session, calls=records)
        assert [(b.tokens, b.makeup) for b in budgets] == plain_budgets(session, records)
        if session.directory is not None:
            assert [b.as_dict() for b in call_budgets(session)] == [b.as_dict() for b in budgets]
            assert any(b.compactions_before for b in budgets)


def test_the_labs_calls_are_the_budgets_calls(recorded_store: Path) -> None:
    session = recorded_session(recorded_store)
    history = history_of(session)
    position = {item.id: i for i, item in enumerate(history.items)}
    from_budgets = sorted({position[b.message_id] for b in call_budgets(session) if b.message_id in position})
    assert history.calls == from_budgets and history.calls


def test_the_system_prompt_at_each_call_is_the_materialized_one(recorded_store: Path) -> None:
    session = recorded_session(recorded_store)
    assert session.directory is not None
    records = read_calls(session.directory)
    texts = set()
    for context in session.contexts.values():
        expected = []
        mine = [c for c in records if c.context_id == context.id and c.message_id and not c.replay]
        for call in sorted(mine, key=lambda c: c.message_index):
            found = materialize(session, context, str(call.message_id), calls=records)
            system = next(m for m in found.messages if m.message_type == "SystemPromptMessage")
            expected.append((found.index, system.text()))
        history = system_prompt_history(session, context)
        if expected:
            assert [(p.message_index, p.text) for p in history] == expected
        texts |= {text for _, text in expected}
    assert len(texts) > 1  # the hook output changed between calls
