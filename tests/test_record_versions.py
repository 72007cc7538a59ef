"""Every version of the call and invocation records reads, through one upgrade path.

The fixtures under ``fixtures/records`` are frozen: each was written by the runtime of
its version (a pantry agent compacting with ``RollingTokenWindow(threshold=1800,
keep=0.5)``) and is never regenerated. A new record version adds its own fixture and a
step to ``soap_core._records.UPGRADES``; these tests then check that every older one
still loads, that upgrading twice changes nothing, and that a record of a version this
code does not know is refused with a message naming the file and both versions."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from analysis import ran_with, threshold_start
from soap_core import FormatError, Session, Store, read_calls, read_invocations
from soap_core._records import CALL_FORMAT, INVOCATION_FORMAT, UPGRADES, upgraded

RECORDS = Path(__file__).resolve().parent / "fixtures" / "records"
FIXTURES = sorted(RECORDS.glob("*.json"))
SOAP = Path(__file__).resolve().parent / "fixtures" / "soap"
SESSION = "20250611-3f0c2b6e-8a41-4d8e-9c1a-5b7d2e9f4a10"


def kind_of(path: Path) -> str:
    return path.stem.rsplit("-", 1)[0]


def test_there_is_a_frozen_fixture_for_every_version_of_every_record() -> None:
    have = {(kind_of(p), int(p.stem.rsplit("-", 1)[1])) for p in FIXTURES}
    want = {(kind, version) for kind, (current, _) in UPGRADES.items() for version in range(1, current + 1)}
    assert want <= have, f"no frozen fixture for {sorted(want - have)}"


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_upgrading_is_idempotent_and_ends_at_the_current_version(path: Path) -> None:
    data = json.loads(path.read_text("utf-8"))
    once = upgraded(data, path, kind_of(path))
    assert once["format"] == {"call": CALL_FORMAT, "invocation": INVOCATION_FORMAT}[kind_of(path)]
    assert upgraded(once, path, kind_of(path)) == once
    assert data == json.loads(path.read_text("utf-8"))  # the record read is not changed
    if data["format"] == once["format"]:
        assert once == data


def session_with(tmp_path: Path, *records: Path) -> Path:
    """A session folder holding ``records`` where the runtime writes them."""
    folder = tmp_path / "session"
    for record in records:
        target = folder / ("calls" if kind_of(record) == "call" else "invocations") / f"{record.stem}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(record, target)
    return folder


def test_a_version_1_call_reads_with_its_compaction_as_a_spec(tmp_path: Path) -> None:
    folder = session_with(tmp_path, RECORDS / "call-1.json", RECORDS / "call-2.json")
    calls = read_calls(folder)
    assert len(calls) == 2
    assert [(c.format, c.compaction) for c in calls] == [(CALL_FORMAT, "rolling-tokens:1800:0.5")] * 2
    session = Store(SOAP).load_session(SESSION)
    for call in calls:  # what the pages start from reads the same from both
        start = threshold_start(session, calls=[call])
        found = ran_with(session, calls=[call])
        assert (start.tokens, start.source) == (1800, "compaction")
        assert found is not None and found.spec == "rolling-tokens:1800:0.5"


def test_a_session_reads_its_own_call_log(tmp_path: Path) -> None:
    folder = session_with(tmp_path, RECORDS / "call-1.json", RECORDS / "call-2.json")
    session = Session("r")
    assert session.calls() == []  # made in memory: no folder, no log
    session.directory = folder
    assert session.calls() == read_calls(folder) and len(session.calls()) == 2


def test_a_version_1_invocation_reads_whole(tmp_path: Path) -> None:
    raw = json.loads((RECORDS / "invocation-1.json").read_text("utf-8"))
    [record] = read_invocations(session_with(tmp_path, RECORDS / "invocation-1.json"))
    assert (record.id, record.prompt, record.outcome, record.calls) == (
        raw["id"],
        raw["prompt"],
        raw["outcome"],
        raw["calls"],
    )


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_a_newer_version_is_refused_naming_the_file_and_both_versions(tmp_path: Path, path: Path) -> None:
    kind = kind_of(path)
    current, _ = UPGRADES[kind]
    data: dict[str, Any] = {**json.loads(path.read_text("utf-8")), "format": f"soapwb.{kind}/{current + 1}"}
    folder = session_with(tmp_path, path)
    written = next(folder.rglob("*.json"))
    written.write_text(json.dumps(data), "utf-8")
    with pytest.raises(FormatError) as caught:
        read_calls(folder) if kind == "call" else read_invocations(folder)
    message = str(caught.value)
    assert str(written) in message
    assert f"soapwb.{kind}/{current + 1}" in message and f"soapwb.{kind}/{current}" in message
    assert "newer" in message


@pytest.mark.parametrize(
    "written", ["soapwb.call", "soapwb.call/0", "soapwb.call/x", "soapwb.invocation/1", 7]
)
def test_a_format_that_names_no_call_version_is_no_call_record(written: object) -> None:
    with pytest.raises(FormatError, match=r"not a soapwb\.call record"):
        upgraded({"format": written}, Path("calls/x.json"), "call")


def test_a_session_keeps_loading_beside_a_newer_record(tmp_path: Path) -> None:
    """A newer invocation record is one error in the list the pages show; the older
    records beside it still read."""
    folder = session_with(tmp_path, RECORDS / "invocation-1.json")
    newer = folder / "invocations" / "20991231T000000000000-ffffffff.json"
    data = json.loads((RECORDS / "invocation-1.json").read_text("utf-8"))
    newer.write_text(json.dumps({**data, "id": newer.stem, "format": "soapwb.invocation/9"}), "utf-8")
    errors: list[Any] = []
    [record] = read_invocations(folder, errors=errors)
    assert record.id == data["id"] and len(errors) == 1 and "soapwb.invocation/9" in str(errors[0])
