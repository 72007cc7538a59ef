"""A damaged or hostile file costs about what an intact one of the same size does:
each test times both in the same run (or counts the files opened) and compares."""

from __future__ import annotations

import base64
import json
import os
import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from soap_core import FormatError, InvocationRecord, Message, Party, Store, TextPart, write_invocation
from soap_core._jsonio import JSON5_LIMIT, unsynced_writes
from soap_core._parts import MediaPart, base64_source
from soap_core._tokens import LONG_RUN, count_text, get_encoding
from soap_core.runtime import invocation_chain
from tests.conftest import SESSION_UUID, session_dir

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
