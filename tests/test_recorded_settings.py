"""The compaction settings a session ran with, read from its call log: the threshold a
field starts at (or the context window, saying why), and the lab's spec for the strategy."""

from __future__ import annotations

from pathlib import Path

from analysis import parse_strategy, ran_with, threshold_start
from soap_core import CallRecord, Store

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "soap"
SESSION = "20250611-3f0c2b6e-8a41-4d8e-9c1a-5b7d2e9f4a10"


def call(compaction: str | None, limit: int | None = 4096, replay: bool = False) -> CallRecord:
    return CallRecord(
        id="20250101T000000000000-00000000",
        session="s",
        role="r",
        context_id="c",
        message_index=1,
        request={},
        request_hash="h",
        compaction=compaction,
        context_limit=limit,
        replay={"label": "x"} if replay else None,
    )


class TestThresholdStart:
    SESSION = Store(FIXTURE).load_session(SESSION)

    def test_a_summarizer_s_threshold_is_the_outer_one(self) -> None:
        start = threshold_start(
            self.SESSION,
            calls=[
                call(
                    "Summarize(summarizer=<Memory compaction=RollingTokenWindow(threshold=5)>, threshold=1300, keep_last=4)"
                )
            ],
        )
        assert (start.tokens, start.source) == (1300, "compaction")

    def test_the_latest_setting_counts_and_several_are_said(self) -> None:
        start = threshold_start(
            self.SESSION,
            calls=[
                call("RollingTokenWindow(threshold=600, keep=0.5)"),
                call("RollingTokenWindow(threshold=800, keep=0.5)"),
            ],
        )
        assert start.tokens == 800 and "ran with 2 settings; this is the latest" in start.note

    def test_the_default_rule_falls_back_to_the_context_window(self) -> None:
        start = threshold_start(self.SESSION, calls=[call("ContextBudget()", 8192)])
        assert (start.tokens, start.source) == (8192, "context window")
        assert "the reserve is not recorded" in start.note

    def test_replays_are_not_what_the_session_ran_with(self) -> None:
        start = threshold_start(
            self.SESSION, calls=[call("RollingTokenWindow(threshold=600, keep=0.5)", replay=True)]
        )
        assert (start.tokens, start.source) == (None, "none")


class TestRanWith:
    SESSION = Store(FIXTURE).load_session(SESSION)

    def test_the_runtime_strategies_read_as_the_labs_specs(self) -> None:
        for recorded, spec in (
            ("RollingTokenWindow(threshold=1800, keep=0.5)", "rolling-tokens:1800:0.5"),
            ("RollingSequenceWindow(n=6)", "rolling-messages:6"),
            ("Summarize(summarizer=<WorkingMemory object>, threshold=1300, keep_last=4)", "summarize:1300:4"),
        ):
            found = ran_with(self.SESSION, calls=[call(recorded)])
            assert found is not None and (found.spec, found.recorded) == (spec, recorded)
            assert parse_strategy(found.spec).name == spec

    def test_the_default_rule_and_no_log_have_no_spec(self) -> None:
        assert ran_with(self.SESSION, calls=[call("ContextBudget()")]) is None
        assert ran_with(self.SESSION, calls=[]) is None
