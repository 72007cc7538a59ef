"""Times to the second, in the viewer's zone, with how long ago (issue 23, point 4)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import given
from hypothesis import strategies as st

from soap_core import NO_TIME, age_text, parse_stamp, time_text

NOW = datetime(2026, 12, 3, 22, 0, 0, tzinfo=UTC)


def test_a_record_stamp_is_shown_to_the_second_in_the_viewers_zone_with_its_age() -> None:
    stamp = "2026-12-03T21:55:09.123456+00:00"
    assert time_text(stamp, ZoneInfo("Europe/Paris"), NOW) == "2026-12-03 22:55:09 (4 min ago)"
    assert time_text(stamp, None, NOW) == "2026-12-03 21:55:09 UTC (4 min ago)"
    assert time_text(stamp, ZoneInfo("UTC"), NOW) == "2026-12-03 21:55:09 UTC (4 min ago)"
    assert time_text(stamp, ZoneInfo("America/New_York"), NOW, age=False) == "2026-12-03 16:55:09"


def test_a_naive_stamp_is_shown_as_written_and_nothing_is_none() -> None:
    assert time_text("2025-06-11T14:03:27.5", ZoneInfo("Asia/Tokyo"), NOW) == "2025-06-11 14:03:27"
    assert time_text(None) == NO_TIME and time_text("") == NO_TIME
    assert time_text("not a time") == "not a time"


def test_ages_use_the_largest_whole_unit() -> None:
    assert [age_text(s) for s in (1, 42, 61, 3_600 * 3 + 5, 86_400, 86_400 * 9, -60)] == [
        "just now",
        "42 s ago",
        "1 min ago",
        "3 h ago",
        "1 day ago",
        "9 days ago",
        "in the future",
    ]


@given(st.integers(min_value=0, max_value=10**9))
def test_the_shown_time_is_the_stamp_to_the_second(seconds: int) -> None:
    moment = NOW - timedelta(seconds=seconds, microseconds=654_321)
    shown = time_text(moment.isoformat(), UTC, NOW, age=False)
    assert shown == moment.strftime("%Y-%m-%d %H:%M:%S UTC") and "." not in shown


def test_a_stamp_is_read_in_its_own_zone_or_else_in_this_machine_s() -> None:
    aware = parse_stamp("2026-12-03T21:04:09.123456+02:00")
    assert aware is not None and aware.utcoffset() == timedelta(hours=2) and aware.microsecond == 123456
    naive = parse_stamp("2026-12-03T21:04:09")
    assert naive == datetime(2026, 12, 3, 21, 4, 9).astimezone()  # local, as peteos meant it
    assert [parse_stamp(x) for x in (None, "", "yesterday")] == [None, None, None]
