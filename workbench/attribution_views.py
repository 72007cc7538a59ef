"""What the attribution panel shows, computed without Streamlit: the heat strip (one
cell per unit of the request, a message or a part or sentence of one, coloured by how
much the answer leans on it) and the ranked list. Text from the files reaches plotly's
hover labels escaped."""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go

from analysis import Attribution, Isolation
from replay import short_id

RANKED_COLUMNS = ("weight", "at", "kind", "unit", "text")
ISOLATION_COLUMNS = ("run", "removed", "check", "fork", "answer")
_HOVER_TEXT = 120


def ranked_frame(attribution: Attribution) -> pd.DataFrame:
    """The units, the most relied on first."""
    rows = [(round(w, 2), u.at, u.kind, u.label, u.preview) for u, w in attribution.ranked()]
    return pd.DataFrame(rows, columns=list(RANKED_COLUMNS))


def heat_strip(attribution: Attribution) -> go.Figure:
    """One cell per unit in request order, red where keeping it raises the answer's
    log-odds, blue where it lowers them; the colour scale is centred on zero."""
    units = attribution.units
    reach = max((abs(w) for w in attribution.weights), default=0.0) or 1.0
    hover = [
        html.escape(f"{u.at} {u.label}: {w:+.2f} — {u.preview[:_HOVER_TEXT]}", quote=False)
        for u, w in zip(units, attribution.weights, strict=True)
    ]
    figure = go.Figure(
        go.Heatmap(
            z=[attribution.weights],
            x=[u.at for u in units],
            y=["answer"],
            text=[hover],
            hoverinfo="text",
            colorscale="RdBu",
            reversescale=True,
            zmin=-reach,
            zmax=reach,
            colorbar={"title": {"text": "weight"}, "thickness": 12},
        )
    )
    figure.update_layout(
        height=150,
        margin={"l": 10, "r": 10, "t": 10, "b": 30},
        xaxis={"type": "category", "title": None},
        yaxis={"visible": False},
    )
    return figure


def isolation_frame(made: Isolation) -> pd.DataFrame:
    """Every run of an isolation: the unchanged ones, then ddmin's, each with what it took
    out, what the check said and its fork."""
    rows = [
        (
            "unchanged" if n < len(made.noise) else "ddmin",
            made.removed_labels(t),
            "failed" if t.holds is None else ("holds" if t.holds else "does not hold"),
            short_id(t.fork_id) if t.fork_id else "-",
            (t.error or t.text).replace("\n", " ")[:120],
        )
        for n, t in enumerate([*made.noise, *made.trials])
    ]
    return pd.DataFrame(rows, columns=list(ISOLATION_COLUMNS))
