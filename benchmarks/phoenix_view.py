"""The UI a user would pick instead, side by side: the same sessions exported to a real
Arize Phoenix with our OpenTelemetry export (``soapwb export otel``), its Sessions list
against our Sessions page, in the same headless Chromium (issue 28 point 4).

Phoenix runs from its side venv (``tests/peers/venvs.py``, peer ``phoenix``) on
127.0.0.1, as the tests start it (``tests/peers/phoenix.py``). What is timed is what a
user waits for once both hold the sessions: a new tab opened on the list, until its
first row is drawn (Phoenix: the first row of its sessions table, the time range set to
the sessions' dates in the link; ours: the table of the Sessions page, its catalog
built). Best of three tabs each.

The store is smaller than the 10,000 sessions of the pages' other figures: each model
call is a span that carries its whole request, so 200 sessions export as 87 MB of OTLP,
and 10,000 would take Phoenix longer to ingest than the whole benchmark may run.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks._harness import Bench
from soap_core import Store

if TYPE_CHECKING:
    from playwright.sync_api import Browser

TRIES = 3
INGEST_TIMEOUT_S = 900
SESSIONS_RANGE = "timeRangeStart=2000-01-01T00:00:00.000Z&timeRangeEnd=2100-01-01T00:00:00.000Z"
"""Phoenix shows the last 7 days unless the link says otherwise; generated sessions are older."""
FIRST_ROW = "tbody tr"


def _graphql(url: str, query: str) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{url}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        document: dict[str, Any] = json.loads(answer.read())
    return document


def _project(url: str) -> dict[str, Any] | None:
    """The default project's id and counts, once Phoenix has made it."""
    edges = _graphql(url, "{ projects { edges { node { id name traceCount sessionCount } } } }")["data"][
        "projects"
    ]["edges"]
    return next((e["node"] for e in edges if e["node"]["name"] == "default"), None)


def _ingested(url: str, traces: int) -> dict[str, Any]:
    """The default project once it holds ``traces`` traces (Phoenix ingests behind its
    answer to the export)."""
    deadline = time.monotonic() + INGEST_TIMEOUT_S
    while True:
        project = _project(url)
        if project is not None and project["traceCount"] >= traces:
            return project
        if time.monotonic() > deadline:
            raise RuntimeError(f"Phoenix holds {project} after {INGEST_TIMEOUT_S} s, not {traces} traces")
        time.sleep(0.5)


def side_by_side(bench: Bench, browser: Browser, url: str, root: Path, sessions: int) -> None:
    """Phoenix's Sessions list of the store ``root`` exported to it, against our Sessions
    page of the same store served at ``url``: goal ≤ 1x."""
    from benchmarks.bench_pages import time_until_visible
    from importers.otel._export import export_otel
    from tests.peers.phoenix import phoenix_server
    from tests.peers.venvs import PeerUnavailable, ensure_peer

    try:
        peer = ensure_peer("phoenix")
    except PeerUnavailable as exc:
        bench.figure(
            "Phoenix: not measured", float("nan"), "", "", None, note=f"no arize-phoenix here ({exc})"
        )
        return
    Store(root).sessions()  # our catalog, as after the first listing
    limit = bench.scale(300, 120)
    table = '[data-testid="stDataFrame"]'
    with phoenix_server(peer.root, bench.workdir / "phoenix") as phoenix:
        started = time.perf_counter()
        report = export_otel(Store(root), endpoint=phoenix.url)
        exported = time.perf_counter() - started
        project = _ingested(phoenix.url, report.traces)
        ingested = time.perf_counter() - started
        link = f"{phoenix.url}/projects/{project['id']}/sessions?{SESSIONS_RANGE}"
        theirs, ours = [], []
        for _ in range(TRIES):
            tab = browser.new_context(viewport={"width": 1400, "height": 1000})
            try:
                theirs.append(time_until_visible(tab, link, FIRST_ROW, limit))
            finally:
                tab.close()
            tab = browser.new_context(viewport={"width": 1400, "height": 1000})
            try:
                ours.append(time_until_visible(tab, f"{url}/?store={root}", table, limit))
            finally:
                tab.close()
    spans = sum(report.spans.values())
    bench.ratio(
        f"Sessions page against Phoenix's Sessions list, {sessions:,} sessions exported to it: a new tab to the "
        "list drawn",
        min(ours),
        min(theirs),
        1,
        baseline_is=f"Arize Phoenix {peer.spec.peer.split('==')[-1]} on 127.0.0.1, the same sessions sent by `soapwb export otel`",
        note=f"ours {min(ours):.2f} s (tries {', '.join(f'{s:.2f}' for s in ours)}), theirs {min(theirs):.2f} s "
        f"(tries {', '.join(f'{s:.2f}' for s in theirs)}); the same Chromium, a new tab each try, every try after "
        f"both hold the sessions. Phoenix lists {project['sessionCount']:,} sessions: it groups traces by the "
        "session of their root span, so a session another one's invocation reached is within its caller's",
    )
    bench.figure(
        f"the export to Phoenix of {sessions:,} sessions, until it holds every trace",
        ingested,
        "s",
        note=f"{report.traces:,} traces, {spans:,} spans ({', '.join(f'{k} {v:,}' for k, v in report.spans.items())}); "
        f"sent in {exported:.1f} s (OTLP/HTTP protobuf, a request per trace), ingested {ingested - exported:.1f} s later",
    )
