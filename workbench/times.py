"""The browser's time zone, in which the pages show the store's times
(:func:`soap_core.time_text`)."""

from __future__ import annotations

from datetime import UTC, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


def viewer_zone() -> tzinfo:
    """The browser's time zone as Streamlit reports it, else UTC (a headless test, or a
    zone name this machine's tz database does not know)."""
    import streamlit as st

    name = None
    try:
        name = st.context.timezone
    except (AttributeError, RuntimeError):  # outside a script run
        name = None
    if not name:
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return UTC
