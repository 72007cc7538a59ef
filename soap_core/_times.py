"""The store's times as a person reads them: to the second, in a given time zone, with how long ago.

Records carry ISO 8601 stamps with microseconds and an offset (``2026-12-03T21:04:09.123456
+00:00``); message timestamps written by peteos and our runtime are naive local times of
the machine that wrote them. The first kind is shown in the reader's zone (the browser's
on a page, this machine's on the command line), the second as written, since no zone is
known for it. Plain functions, so a test gives the zone and the moment it calls "now".
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo

NO_TIME = "—"
"""What a missing time is shown as (never the word None)."""


def parse_stamp(stamp: str | None) -> datetime | None:
    """An ISO stamp as an aware time: one without a zone is in this machine's (what peteos
    and our runtime meant by it); None for none or for text that is not a time."""
    if not stamp:
        return None
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.astimezone()


def age_text(seconds: float) -> str:
    """How long ago, in the largest whole unit: ``just now``, ``42 s ago``, ``5 min ago``,
    ``3 h ago``, ``2 days ago``; a moment ahead of now says ``in the future``."""
    if seconds < -5:
        return "in the future"
    if seconds < 5:
        return "just now"
    for size, unit in ((86_400, "day"), (3_600, "h"), (60, "min")):
        if seconds >= size:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if unit == 'day' and count != 1 else ''} ago"
    return f"{int(seconds)} s ago"


def time_text(
    stamp: str | None, zone: tzinfo | None = None, now: datetime | None = None, *, age: bool = True
) -> str:
    """``2026-12-03 22:04:09 (5 min ago)``: an ISO stamp with an offset in ``zone`` (UTC
    when None; UTC is always marked so), to the second; a naive stamp as written, to the second,
    without an age (its zone is unknown); :data:`NO_TIME` for none; text that is no ISO
    stamp as it is."""
    if not stamp:
        return NO_TIME
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return stamp
    if moment.tzinfo is None:
        return moment.strftime("%Y-%m-%d %H:%M:%S")
    utc = zone is None or str(zone) in ("UTC", "Etc/UTC", "Universal", "Zulu")
    shown = moment.astimezone(zone or UTC).strftime("%Y-%m-%d %H:%M:%S") + (" UTC" if utc else "")
    if not age:
        return shown
    elapsed = ((now or datetime.now(UTC)) - moment).total_seconds()
    return f"{shown} ({age_text(elapsed)})"
