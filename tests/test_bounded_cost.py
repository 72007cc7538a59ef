"""A damaged or hostile file costs about what an intact one of the same size does:
each test times both in the same run (or counts the files opened) and compares. A
hostile shape (a context naming 100,000 children, thousands of forks in a chain,
thousands of invocations each made by the one before, thousands of contexts in one
session) costs linear work: each test counts the work at n and at n / 8 and compares."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from analysis import chain_budget
from replay import replay_marks, session_names
from soap_core import (
    FormatError,
    InvocationRecord,
    Message,
    Party,
    Session,
    Store,
    TextPart,
    fork_tree,
    write_invocation,
)
from soap_core._jsonio import JSON5_LIMIT, unsynced_writes
from soap_core._parts import MediaPart, base64_source
from soap_core._tokens import LONG_RUN, count_text, get_encoding
from soap_core.runtime import TraceFrame, invocation_chain, invocation_chains
from soapwb.cli import main
from tests.conftest import SESSION_UUID, session_dir
from tests.test_hostile_shapes import (
    ROOT_ID,
    chain_session,
    chain_store,
    context_id,
    fan_out_store,
    invocation_chain_store,
    many_contexts_store,
    wide_session,
    wide_store,
)
from workbench.context_views import fork_tree_excerpt
from workbench.fork_tree_views import DISCARDED_SHOWN, fork_tree_figure, node_table, tree_items
from workbench.traceback_views import load_traces

RATIO = 5.0


def best_of(action: Callable[[], object], runs: int = 3) -> float:
    """The fastest of a few runs: the least noisy figure on a shared machine."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return min(times)


def big_context(messages: int) -> bytes:
    body = [
        {
            "role": "user" if i % 2 else "assistant",
            "content": [{"type": "text", "text": f"message {i}: a few words of ordinary text, {i * 7}"}],
            "_type": "Message",
            "id": f"{i:08d}-7c3f-4e59-a0b8-2f6d91c4e7a3",
            "_hook_ids": [],
            "creation_timestamp": "2025-06-11T14:05:42.640118",
            "_sequence_number": i,
        }
        for i in range(messages)
    ]
    return json.dumps({"messages": body, "id": "b1d6e0a2-7c3f-4e59-a0b8-2f6d91c4e7a3"}, indent=2).encode()


DAMAGE = {
    "cut-by-one-byte": lambda raw: raw[:-1],
    "cut-in-half": lambda raw: raw[: len(raw) // 2],
    "trailing-comma": lambda raw: raw[:-2] + b",\n}",
    "comment": lambda raw: b"// edited\n" + raw,
    "unquoted-key": lambda raw: raw[:-2] + b",\n  note: 1\n}",
}


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_a_damaged_context_file_reads_in_a_few_times_an_intact_one(
    tmp_path: Path, damage: Callable[[bytes], bytes]
) -> None:
    intact = big_context(3000)  # 1 MB: json5 alone takes 10 s
    assert len(intact) > 10 * JSON5_LIMIT
    store = Store(tmp_path, use_catalog=False)
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_bytes(intact)
    bad.write_bytes(damage(intact))

    def read_bad() -> None:
        try:
            store.read_context(bad)
        except FormatError as exc:
            assert exc.path == bad and "line" in exc.problem

    assert best_of(read_bad) < RATIO * best_of(lambda: store.read_context(good))


def test_a_small_file_with_json5_syntax_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text("{'id': 'b1d6e0a2-7c3f-4e59-a0b8-2f6d91c4e7a3', messages: [], /* hand */ children: [],}")
    assert Store(tmp_path, use_catalog=False).read_context(path).id == "b1d6e0a2-7c3f-4e59-a0b8-2f6d91c4e7a3"


def image_message(data: bytes) -> Message:
    return Message(
        "user", [TextPart("Media loaded from x.png."), MediaPart("image", base64_source("image/png", data))]
    )


def test_an_image_of_zeros_counts_in_about_the_time_of_a_random_one() -> None:
    size = 2 * 1024 * 1024
    zeros, noise = image_message(bytes(size)), image_message(random.Random(1).randbytes(size))
    zeros_time = best_of(lambda: Message.from_dict(zeros.to_dict()).count_tokens(), runs=2)
    noise_time = best_of(lambda: Message.from_dict(noise.to_dict()).count_tokens(), runs=2)
    assert zeros_time < 2.0 * noise_time  # it took 3.5 times as long, and 2.7 GB at 50 MB


@pytest.mark.parametrize("char", ["A", "/", "=", " ", "\n", "é", "中", "0"])
def test_counting_long_runs_gives_tiktokens_count(char: str) -> None:
    rng = random.Random(ord(char))
    encoder = get_encoding()
    for _ in range(2):
        around = ["".join(rng.choice('ab =\n1"{') for _ in range(rng.randint(0, 12))) for _ in range(3)]
        runs = [char * rng.randint(LONG_RUN, 3 * LONG_RUN), "x" * rng.randint(LONG_RUN, 2 * LONG_RUN)]
        text = around[0] + runs[0] + around[1] + runs[1] + around[2]
        assert count_text(text) == len(encoder.encode_ordinary(text))


def test_base64_of_random_bytes_has_no_long_runs_and_counts_as_before() -> None:
    text = base64.b64encode(os.urandom(200_000)).decode()
    assert count_text(text) == len(get_encoding().encode_ordinary(text))


def _chain(directory: Path, count: int) -> None:
    """``count`` invocations, each made by the one before, all in one session."""
    parent = None
    for n in range(count):
        record_id = f"20250611T000000{n:06d}-{n:08x}"
        write_invocation(
            [directory],
            InvocationRecord(
                id=record_id,
                callee=Party("HelloPete", "pete", SESSION_UUID),
                caller=Party("HelloPete", "pete", SESSION_UUID, None, n, None) if parent else None,
                prompt=f"step {n}",
                thread=None,
                started_at=f"2025-06-11T00:00:00.{n:06d}+00:00",
                parent_invocation_id=parent,
                outcome="ok",
            ),
        )
        parent = record_id


def test_a_trace_opens_each_invocation_record_once(store_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with unsynced_writes():
        _chain(session_dir(store_copy), 300)
    opened: list[Path] = []
    real = Path.read_bytes

    def counting(self: Path) -> bytes:
        if self.parent.name == "invocations":
            opened.append(self)
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", counting)
    traces = invocation_chain(Store(store_copy), SESSION_UUID)
    assert len(traces) == 300
    assert [len(t.callers) for t in traces[:3]] == [0, 1, 2] and len(traces[-1].callees) == 0
    # once for the catalog's index of the records, once for the walk (n^2 / 2 before)
    assert len(opened) == 2 * 300


# -- hostile shapes: the same code at n and at n / 8 ---------------------------------------------
#
# Linear code does 8 times the work at 8 times the size; LINEAR allows for what does not
# grow (a store opened, a header printed) and for rounding. The work is counted, never
# timed: id operations (the hashes and comparisons of context ids, which C-level list scans
# make too), lines of our own code run, bytes printed, files read. A count past the budget
# stops the run there, so that quadratic code fails in a second, not in a minute.

LINEAR = 12


class OverBudget(BaseException):
    """Raised inside the code measured once its count passes the budget (a BaseException:
    the command line turns every Exception into an exit status)."""


class CountedId(str):
    """A context id that counts its hashes and comparisons."""

    operations = 0
    budget: int | None = None

    def _count(self) -> None:
        CountedId.operations += 1
        if CountedId.budget is not None and CountedId.operations > CountedId.budget:
            raise OverBudget

    def __hash__(self) -> int:
        self._count()
        return str.__hash__(self)

    def __eq__(self, other: object) -> bool:
        self._count()
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)


def id_operations(action: Callable[[], object], budget: int | None = None) -> int:
    """How many hashes and comparisons of CountedIds ``action`` made (more than
    ``budget``: stopped there)."""
    CountedId.operations, CountedId.budget = 0, budget
    try:
        action()
    except OverBudget:
        pass
    finally:
        CountedId.budget = None
    return CountedId.operations


OUR_CODE = tuple(str(Path(__file__).resolve().parents[1] / d) for d in ("soap_core", "soapwb", "workbench"))


def lines_run(action: Callable[[], object], budget: int | None = None) -> int:
    """Lines of our own code (soap_core, soapwb, workbench) that ``action`` ran, loops and
    generator steps included (more than ``budget``: stopped there)."""
    count = 0

    def line(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
            if budget is not None and count > budget:
                raise OverBudget
        return line

    def call(frame: Any, event: str, arg: Any) -> Any:
        return line if frame.f_code.co_filename.startswith(OUR_CODE) else None

    sys.settrace(call)
    try:
        action()
    except OverBudget:
        pass
    finally:
        sys.settrace(None)
    return count


class ByteCount(io.TextIOBase):
    """A stdout that keeps nothing but the number of characters written to it."""

    def __init__(self) -> None:
        self.written = 0

    def write(self, text: str) -> int:
        self.written += len(text)
        return len(text)


def printed(*argv: str | Path) -> int:
    """Characters ``soapwb argv`` printed on stdout (it must succeed)."""
    out = ByteCount()
    with contextlib.redirect_stdout(out):
        assert main([str(a) for a in argv]) == 0
    return out.written


def counted_ids(n: int) -> list[str]:
    return [CountedId(context_id(i)) for i in range(n)]


@pytest.mark.parametrize("shape", [wide_session, chain_session], ids=["100,000-children", "fork-chain"])
def test_the_fork_tree_costs_linear_id_operations_on_a_wide_or_deep_session(
    shape: Callable[[list[str]], Session],
) -> None:
    small = id_operations(lambda: fork_tree(shape(counted_ids(500))))
    big = id_operations(lambda: fork_tree(shape(counted_ids(4000))), budget=LINEAR * small)
    assert big <= LINEAR * small  # 60 times (wide) and 62 times (chain) before: n^2 / 2


@pytest.mark.parametrize("shape", [wide_session, chain_session], ids=["100,000-children", "fork-chain"])
def test_the_fork_tree_page_figures_cost_linear_id_operations(shape: Callable[[list[str]], Session]) -> None:
    def page(ids: list[str]) -> None:  # what workbench/pages/fork_tree.py computes and draws
        session = shape(ids)
        names = session_names(session)
        items = tree_items(names)
        fork_tree_figure(items, replay_marks(session), names.names)
        node_table(items)

    small = id_operations(lambda: page(counted_ids(500)))
    big = id_operations(lambda: page(counted_ids(4000)), budget=LINEAR * small)
    assert big <= LINEAR * small


def test_the_fork_tree_page_draws_a_bounded_number_of_discarded_children() -> None:
    def markers(children: int) -> int:
        session = wide_session([context_id(i) for i in range(children)])
        figure = fork_tree_figure(tree_items(session_names(session)))
        return sum(len(trace.x) for trace in figure.data if trace.name not in ("edges", "active"))

    assert markers(16_000) == markers(2_000) == 1 + DISCARDED_SHOWN + 1  # 16,001 and 2,001 before


def counting_ids_as_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every context read from a file holds CountedIds: its id, origin and children."""
    real = Store.read_context

    def read(self: Store, path: Path) -> Any:
        context = real(self, path)
        context.id = CountedId(context.id)
        context.children = [CountedId(c) for c in context.children]
        if context.origin_context_id is not None:
            context.origin_context_id = CountedId(context.origin_context_id)
        return context

    monkeypatch.setattr(Store, "read_context", read)


@pytest.mark.parametrize("shape", [wide_store, chain_store], ids=["100,000-children", "fork-chain"])
def test_tree_costs_and_prints_linear_in_the_contexts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: Callable[[Path, int], Path]
) -> None:
    small, big = shape(tmp_path / "small", 64), shape(tmp_path / "big", 512)
    for root in (small, big):
        Store(root).sessions()  # the catalog's first build reads every file once: not what is measured
    small_bytes = printed("tree", SESSION_UUID, "--store", small)
    big_bytes = printed("tree", SESSION_UUID, "--store", big)
    assert big_bytes <= LINEAR * small_bytes  # the chain: 47 times before (indented 4 spaces a level)
    counting_ids_as_read(monkeypatch)
    small_work = id_operations(lambda: printed("tree", SESSION_UUID, "--store", small))
    big_work = id_operations(
        lambda: printed("tree", SESSION_UUID, "--store", big), budget=LINEAR * small_work
    )
    assert big_work <= LINEAR * small_work  # a membership test on a growing list, a walk up per context


def test_trace_of_a_deep_invocation_chain_prints_each_invocation_once(tmp_path: Path) -> None:
    small, big = (
        invocation_chain_store(tmp_path / "small", 100),
        invocation_chain_store(tmp_path / "big", 800),
    )
    for argv in (["trace"], ["trace", "--json"]):
        small_bytes = printed(*argv, SESSION_UUID, "--store", small)
        big_bytes = printed(*argv, SESSION_UUID, "--store", big)
        assert big_bytes <= LINEAR * small_bytes, argv  # about 64 times before: n stacks of n frames
    small_lines = lines_run(lambda: printed("trace", SESSION_UUID, "--store", small))
    big_lines = lines_run(lambda: printed("trace", SESSION_UUID, "--store", big), budget=LINEAR * small_lines)
    assert big_lines <= LINEAR * small_lines


def test_the_traceback_page_builds_each_frame_of_a_deep_chain_a_bounded_number_of_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small, big = (
        invocation_chain_store(tmp_path / "small", 100),
        invocation_chain_store(tmp_path / "big", 800),
    )
    built = 0
    real = TraceFrame.__init__

    def counting(self: TraceFrame, *args: Any, **kwargs: Any) -> None:
        nonlocal built
        built += 1
        real(self, *args, **kwargs)

    monkeypatch.setattr(TraceFrame, "__init__", counting)

    def frames(root: Path) -> int:
        nonlocal built
        built = 0
        traced = load_traces(str(root), SESSION_UUID)  # what workbench/pages/traceback.py caches
        traced.trace(traced.invocations[-1])  # and the stack it shows first: 800 deep
        return built

    assert frames(big) <= LINEAR * frames(small)  # 4 frames an invocation, where 400 were built


def test_the_chain_budget_builds_each_frame_of_a_deep_chain_a_bounded_number_of_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small, big = (
        invocation_chain_store(tmp_path / "small", 100),
        invocation_chain_store(tmp_path / "big", 800),
    )
    built = 0
    real = TraceFrame.__init__

    def counting(self: TraceFrame, *args: Any, **kwargs: Any) -> None:
        nonlocal built
        built += 1
        real(self, *args, **kwargs)

    monkeypatch.setattr(TraceFrame, "__init__", counting)

    def frames(root: Path) -> int:
        nonlocal built
        built = 0
        assert [s.session for s in chain_budget(Store(root), SESSION_UUID)] == [SESSION_UUID]
        return built

    assert frames(big) <= LINEAR * frames(small)  # the Token budget page: n stacks of n frames before


@pytest.mark.parametrize("shape", ["chain", "fan-out callee", "fan-out caller"])
def test_the_frames_on_a_chains_stacks_are_those_of_every_trace_through_it(
    tmp_path: Path, shape: str
) -> None:
    if shape == "chain":
        root, session = invocation_chain_store(tmp_path / "store", 30), SESSION_UUID
    else:
        root, callee = fan_out_store(tmp_path / "store", 40)
        session = callee if shape == "fan-out callee" else SESSION_UUID
    store = Store(root)
    stacked = [f for chain in invocation_chains(store, session) for f in chain.stacks()]
    traced: dict[str, int] = {}
    for trace in invocation_chain(store, session):
        for frame in [*trace.callers, *([trace.invocation] if trace.invocation else []), *trace.callees]:
            traced.setdefault(frame.invocation_id, frame.depth)
    assert [(f.invocation_id, f.depth) for f in stacked] == list(traced.items())
    assert len(traced) == (30 if shape == "chain" else 41)


@pytest.mark.parametrize("context", [None, "0000001f"], ids=["active", "by-prefix"])
def test_show_reads_one_context_file_whatever_the_session_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, context: str | None
) -> None:
    small, big = many_contexts_store(tmp_path / "small", 40), many_contexts_store(tmp_path / "big", 320)
    read: list[Path] = []
    real = Store.read_context

    def counting(self: Store, path: Path) -> Any:
        read.append(path)
        return real(self, path)

    for root in (small, big):
        Store(root).sessions()  # the catalog's first build (ls does it) reads every file once
    monkeypatch.setattr(Store, "read_context", counting)
    for root in (small, big):
        read.clear()
        argv: list[str | Path] = [
            "show",
            SESSION_UUID,
            *(["--context", context] if context else []),
            "--store",
            root,
        ]
        assert printed(*argv) > 0
        assert [p.name for p in read] == [f"{context_id(0x1F) if context else ROOT_ID}.json"]  # 320 before


def test_the_context_page_lists_a_bounded_excerpt_of_a_long_chain_of_forks() -> None:
    def listed(contexts: int) -> int:
        ids = [context_id(i) for i in range(contexts)]
        named = session_names(chain_session(ids))
        return len("\n".join(fork_tree_excerpt(named.nodes, ids[contexts // 2], named.names)))

    assert listed(8000) <= 1.2 * listed(1000)  # all 8,000, indented by depth: 128 MB, before
