"""What a pull of a bucket takes and holds back (soap_core._pull_plan), without a bucket."""

from __future__ import annotations

from soap_core._pull_plan import (
    HOLD_BACK_S,
    SEAL_FILE,
    ObjectVersion,
    plan_pull,
    session_folder,
    session_prefixes,
)

NOW = 1_000_000.0
S = "agents/Pete/20250611-s1"
PREFIXES = session_prefixes("store", {"agents"})


def v(etag: str, at: float = NOW - 5) -> ObjectVersion:
    return ObjectVersion(etag, 10, at)


SAVED = {f"{S}/session.json": v("s1", NOW - 60), f"{S}/c1.json": v("c1", NOW - 61)}


def test_session_folders_are_found_in_both_layouts_and_under_dot_peteos() -> None:
    assert session_folder(f"{S}/c1.json", PREFIXES) == S
    assert session_folder(f"{S}/calls/x.json", PREFIXES) == S
    assert session_folder("agents/Pete", PREFIXES) is None
    assert session_folder("sessions/u1/c.json", PREFIXES) == "sessions/u1"
    dot = session_prefixes("proj", {".peteos"})
    assert session_folder(".peteos/agents/Pete/u/c.json", dot) == ".peteos/agents/Pete/u"
    assert session_folder("Pete/u/c.json", session_prefixes("agents", {"Pete"})) == "Pete/u"


def test_a_context_put_before_its_save_is_sealed_is_held_back() -> None:
    listed = {**SAVED, f"{S}/c2.json": v("c2")}
    plan = plan_pull(listed, SAVED, PREFIXES, NOW)
    assert plan.held == [f"{S}/c2.json"] and plan.fetch == []


def test_the_seal_brings_the_save_in_with_session_json_last() -> None:
    listed = {**SAVED, f"{S}/c2.json": v("c2"), f"{S}/session.json": v("s2"), f"{S}/{SEAL_FILE}": v("x")}
    plan = plan_pull(listed, SAVED, PREFIXES, NOW)
    assert plan.fetch == [f"{S}/c2.json", f"{S}/session.json"]
    assert plan.refresh == [f"{S}/{SEAL_FILE}"] and plan.held == []


def test_a_seal_alone_is_enough_when_session_json_did_not_change() -> None:
    listed = {**SAVED, f"{S}/c1.json": v("c1b"), f"{S}/{SEAL_FILE}": v("x")}
    assert plan_pull(listed, SAVED, PREFIXES, NOW).fetch == [f"{S}/c1.json"]


def test_a_context_put_after_the_seal_waits_for_the_next_seal() -> None:
    listed = {**SAVED, f"{S}/{SEAL_FILE}": v("x", NOW - 20), f"{S}/c3.json": v("c3", NOW - 10)}
    assert plan_pull(listed, SAVED, PREFIXES, NOW).held == [f"{S}/c3.json"]


def test_a_new_session_without_session_json_is_held_back_until_its_writer_is_long_gone() -> None:
    fresh = {"agents/Pete/new/c.json": v("c")}
    assert plan_pull(fresh, {}, PREFIXES, NOW).held == ["agents/Pete/new/c.json"]
    old = {"agents/Pete/new/c.json": v("c", NOW - HOLD_BACK_S - 1)}
    assert plan_pull(old, {}, PREFIXES, NOW).fetch == ["agents/Pete/new/c.json"]


def test_records_and_files_outside_sessions_are_taken_at_once() -> None:
    listed = {**SAVED, f"{S}/calls/r.json": v("r"), "instances/x/agentic_object.json": v("i")}
    plan = plan_pull(listed, SAVED, PREFIXES, NOW)
    assert plan.fetch == [f"{S}/calls/r.json", "instances/x/agentic_object.json"]


def test_an_unchanged_listing_fetches_nothing_and_a_vanished_object_goes() -> None:
    assert plan_pull(SAVED, SAVED, PREFIXES, NOW).fetch == []
    plan = plan_pull({f"{S}/session.json": SAVED[f"{S}/session.json"]}, SAVED, PREFIXES, NOW)
    assert plan.remove == [f"{S}/c1.json"] and plan.fetch == []


def test_an_object_this_mirror_put_is_the_same_once_listed_with_its_time() -> None:
    mine = {f"{S}/session.json": ObjectVersion("s1", 10, None), f"{S}/c1.json": ObjectVersion("c1", 10, None)}
    plan = plan_pull(SAVED, mine, PREFIXES, NOW)
    assert plan.fetch == [] and sorted(plan.refresh) == sorted(SAVED)


def test_a_first_pull_takes_everything_sealed() -> None:
    assert plan_pull(SAVED, {}, PREFIXES, NOW).fetch == [f"{S}/c1.json", f"{S}/session.json"]
