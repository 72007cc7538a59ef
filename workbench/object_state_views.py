"""The Object state page's figures: an object's public state after each invocation of a
session, and the difference between any two of those states.

Plain functions without Streamlit. The states come from the invocation records
(``state_after``, the object's public attributes as JSON), which only the soapwb
runtime writes; a session written by peteos has none.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import tzinfo
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from deepdiff import DeepDiff
from deepdiff.helper import NotPresent
from plotly.subplots import make_subplots

from soap_core import time_text
from soap_core.runtime import InvocationRecord, read_invocations
from workbench.views import open_store

BASE_COLUMNS = ("time", "prompt", "outcome", "invocation")
DIFF_COLUMNS = ("attribute", "change", "before", "after")

_CHANGE_OF_REPORT = {
    "values_changed": "changed",
    "type_changes": "changed",
    "dictionary_item_added": "added",
    "iterable_item_added": "added",
    "attribute_added": "added",
    "set_item_added": "added",
    "dictionary_item_removed": "removed",
    "iterable_item_removed": "removed",
    "attribute_removed": "removed",
    "set_item_removed": "removed",
}


@dataclass(frozen=True)
class StateChange:
    """One difference between two states: where, what kind, and the values either side."""

    attribute: str
    change: str
    """``changed``, ``added`` or ``removed``."""
    before: Any = None
    after: Any = None


def session_invocations(session_dir: Path, session_uuid: str) -> list[InvocationRecord]:
    """The invocations of the session's own object, oldest first.

    A session folder also holds the records of calls it made to other objects (written
    into both sessions); their ``state_after`` is the other object's, so they are left out.
    """
    return [r for r in read_invocations(session_dir) if r.callee.session == session_uuid]


def agent_records(records: Sequence[InvocationRecord]) -> list[InvocationRecord]:
    """The agent's own invocations: the workbench's re-runs and continues (their record
    carries ``rerun``) are not part of the object's history and its states."""
    return [r for r in records if r.rerun is None]


def load_session_invocations(root: str, session_uuid: str) -> list[InvocationRecord]:
    """The session's own invocation records, read from its folder in the store at ``root``;
    raises SoapError for an unknown session or a broken record."""
    return session_invocations(open_store(root).find(session_uuid).path, session_uuid)


def state_cell(value: Any) -> Any:
    """A state value as a table cell: scalars as they are, anything else as JSON text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def one_type_per_column(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """``frame`` with each of ``columns`` that mixes value types (3 in one row, "three"
    in another) shown as text throughout: a table column holds one type, and streamlit
    would otherwise fail to convert it and print the error in the terminal."""
    for column in columns:
        values = [None if _missing(v) else v for v in frame[column]]
        if len({type(v) for v in values if v is not None}) > 1:
            text = [v if v is None or isinstance(v, str) else json.dumps(v) for v in values]
            frame[column] = pd.Series(text, index=frame.index, dtype=object)
    return frame


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def state_keys(records: Sequence[InvocationRecord]) -> list[str]:
    """Every attribute any recorded state has, in order of first appearance."""
    keys: dict[str, None] = {}
    for record in records:
        keys.update(dict.fromkeys(record.state_after or {}))
    return list(keys)


def state_table(records: Sequence[InvocationRecord], zone: tzinfo | None = None) -> pd.DataFrame:
    """One row per invocation (time, prompt, outcome, the attributes, id), one column
    per attribute.

    An invocation that recorded no state (refused, or failed before it ran) has empty
    attribute cells. An attribute named like a base column gets " (state)" appended.
    """
    keys = state_keys(records)
    rows = []
    for record in records:
        state = record.state_after or {}
        cells = [state_cell(state.get(key)) for key in keys]
        rows.append(
            (time_text(record.started_at, zone, age=False), record.prompt, record.outcome, *cells, record.id)
        )
    columns = [key if key not in BASE_COLUMNS else f"{key} (state)" for key in keys]
    frame = pd.DataFrame.from_records(rows, columns=[*BASE_COLUMNS[:3], *columns, BASE_COLUMNS[3]]).astype(
        {column: object for column in columns}
    )
    return one_type_per_column(frame, columns)


def _attribute_path(parts: Sequence[Any]) -> str:
    """A deepdiff path as ``a.b[2]`` (top-level attributes by their bare name)."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "(whole state)"


def _present(value: Any) -> Any:
    return None if isinstance(value, NotPresent) else value


def state_changes(before: dict[str, Any] | None, after: dict[str, Any] | None) -> list[StateChange]:
    """What changed from one state to the other, attribute by attribute (nested values
    down to the element that differs), sorted by attribute."""
    diff = DeepDiff(before or {}, after or {}, verbose_level=2)
    changes = [
        StateChange(
            _attribute_path(level.path(output_format="list")),
            _CHANGE_OF_REPORT.get(report, report),
            _present(level.t1),
            _present(level.t2),
        )
        for report, levels in diff.tree.items()
        for level in levels
    ]
    return sorted(changes, key=lambda c: (c.attribute, c.change))


def diff_table(changes: Sequence[StateChange]) -> pd.DataFrame:
    """The changes as a table; values that are not scalars are shown as JSON text."""
    rows = [(c.attribute, c.change, state_cell(c.before), state_cell(c.after)) for c in changes]
    frame = pd.DataFrame.from_records(rows, columns=list(DIFF_COLUMNS)).astype(
        {"before": object, "after": object}
    )
    return one_type_per_column(frame, ["before", "after"])


def invocation_label(record: InvocationRecord, zone: tzinfo | None = None) -> str:
    """How an invocation is named in a picker: start time, outcome and prompt (no age: a
    picker whose labels change between two runs loses what was picked)."""
    prompt = " ".join(record.prompt.split())
    prompt = prompt if len(prompt) <= 60 else prompt[:59] + "…"
    return f"{time_text(record.started_at, zone, age=False)}  {record.outcome}  {prompt}"


def numeric_series(records: Sequence[InvocationRecord]) -> pd.DataFrame:
    """The numeric attributes (not booleans) after each invocation that recorded a state,
    in long form: invocation number, start time, attribute, value."""
    rows = [
        (number, record.started_at, key, value)
        for number, record in enumerate(records, start=1)
        for key, value in (record.state_after or {}).items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    ]
    return pd.DataFrame.from_records(rows, columns=["invocation", "time", "attribute", "value"])


MAX_PLOTTED = 8
"""Numeric attributes drawn at most, each on its own axis (the first ones, in record order)."""


def numeric_figure(records: Sequence[InvocationRecord]) -> go.Figure | None:
    """One small chart per numeric attribute, one above the other over the same
    invocations, each on its own scale: on one axis a setting of 1,300 flattened counts
    of 1 to 3 into a line on zero. None when there is no numeric attribute."""
    series = numeric_series(records)
    if series.empty:
        return None
    groups = list(series.groupby("attribute", sort=False))[:MAX_PLOTTED]
    names = [html.escape(str(attribute), quote=False) for attribute, _ in groups]  # plotly reads some HTML
    figure = make_subplots(
        rows=len(groups), cols=1, shared_xaxes=True, vertical_spacing=0.08, subplot_titles=names
    )
    for row, ((_, group), name) in enumerate(zip(groups, names, strict=True), start=1):
        figure.add_trace(
            go.Scatter(x=list(group["invocation"]), y=list(group["value"]), mode="lines+markers", name=name),
            row=row,
            col=1,
        )
    figure.update_layout(
        height=80 + 150 * len(groups), margin={"l": 20, "r": 20, "t": 30, "b": 20}, showlegend=False
    )
    figure.update_xaxes(dtick=1)
    figure.update_xaxes(title_text="invocation (in order)", row=len(groups), col=1)
    return figure


def records_summary(records: Sequence[InvocationRecord]) -> str:
    """One line counting the invocations and those without a recorded state."""
    missing = sum(1 for r in records if r.state_after is None)
    text = f"{len(records)} invocation{'' if len(records) == 1 else 's'}"
    return text + (f", {missing} without a recorded state (refused or failed)" if missing else "")
