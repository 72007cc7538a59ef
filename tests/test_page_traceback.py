"""The Traceback page, run headless with AppTest: the stack and the timeline through an
invocation are those of ``invocation_chain``, each frame links to the message that
made its call, refusals stand out, and a peteos store says it has no records.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pandas as pd
from streamlit.testing.v1 import AppTest

from importers.openpoke import import_openpoke
from replay import message_index
from soap_core import CallRecord, Store, time_text
from soap_core.runtime import InvocationTrace, Party, invocation_chain, read_calls, read_invocations
from tests.apptest import open_app_page
from tests.test_page_replay import OPENPOKE_LONG
from workbench.traceback_views import (
    FRAME_META,
    SPAN_META,
    call_tools,
    frame_method,
    one_line,
    short_session,
    trace_frames,
)

APP = Path(__file__).resolve().parents[1] / "app.py"
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "soap"
SESSION = "20250611-3f0c2b6e-8a41-4d8e-9c1a-5b7d2e9f4a10"


def open_page(store: Path, **params: str) -> AppTest:
    return open_app_page(store, "traceback", **params)


def uuid_of(store: Path, role: str) -> str:
    [summary] = [s for s in Store(store).sessions() if s.role == role]
    return summary.uuid


def chain(store: Path, role: str) -> list[InvocationTrace]:
    return invocation_chain(Store(store), uuid_of(store, role))


def records(table: pd.DataFrame) -> list[dict[str, Any]]:
    return table.astype(object).where(table.notna(), None).to_dict("records")


def stack(at: AppTest) -> list[dict[str, Any]]:
    """The call stack table (the second table; the first lists the invocations)."""
    return records(at.dataframe[1].value)


def timeline(at: AppTest) -> list[dict[str, Any]]:
    """The timeline's frame bars, one trace per outcome."""
    return [t for t in figure_data(at) if t.get("meta") == FRAME_META]


def spans(at: AppTest) -> dict[str, dict[str, Any]]:
    """The timeline's spans inside the bars, by kind (LLM call, tool calls)."""
    return {t["name"]: t for t in figure_data(at) if t.get("meta") == SPAN_META}


def figure_data(at: AppTest) -> list[dict[str, Any]]:
    return figure(at)["data"]


def figure(at: AppTest) -> dict[str, Any]:
    [chart] = at.get("plotly_chart")
    return json.loads(chart.proto.spec)


def bar_labels(at: AppTest) -> list[str]:
    """The labels written on the frames' bars, in stack order."""
    return [a["text"] for a in figure(at)["layout"]["annotations"]]


def context_links(at: AppTest) -> list[str]:
    return [link.proto.query_string for link in at.page_link if link.proto.page == "context"]


def refused_trace(store: Path) -> InvocationTrace:
    [trace] = [t for t in chain(store, "Analyst") if t.invocation and t.invocation.outcome == "refused"]
    return trace


class TestTheStack:
    def test_the_archivist_stack_is_analyst_researcher_archivist(self, workbench_store: Path) -> None:
        at = open_page(workbench_store, session=uuid_of(workbench_store, "Archivist"))
        rows = stack(at)
        assert [r["role"] for r in rows] == ["Analyst", "Researcher", "Archivist"]
        assert [r["depth"] for r in rows] == [-2, -1, 0]
        assert [r["called from"] for r in rows] == ["(Python)", "Analyst", "Researcher"]

    def test_the_stack_holds_the_frames_of_invocation_chain(self, workbench_store: Path) -> None:
        at = open_page(workbench_store, session=uuid_of(workbench_store, "Archivist"))
        [trace] = chain(workbench_store, "Archivist")
        expected = [
            (
                f.role,
                f.session,
                f.caller_session or "—",
                f.context_id or "—",
                "from Python" if f.message_index is None else str(f.message_index),
                time_text(f.started_at, age=False),  # to the second, UTC (AppTest has no browser zone)
                time_text(f.ended_at, age=False),
                f.error or "",
            )
            for f in trace_frames(trace)
        ]
        shown = [
            (
                r["role"],
                r["session"],
                r["caller session"],
                r["context"],
                r["message"],
                r["start"],
                r["end"],
                r["error"],
            )
            for r in stack(at)
        ]
        assert shown == expected
        assert [r["outcome"] for r in stack(at)] == ["✅ ok"] * 3

    def test_each_frame_links_to_the_message_that_made_its_call(self, workbench_store: Path) -> None:
        at = open_page(workbench_store, session=uuid_of(workbench_store, "Archivist"))
        [trace] = chain(workbench_store, "Archivist")
        callers = [f for f in trace_frames(trace) if f.context_id is not None]
        assert len(callers) == 2
        shown = context_links(at)
        assert len(shown) == 2
        for frame, query in zip(callers, shown, strict=True):
            assert f"session={frame.caller_session}" in query
            assert f"context={frame.context_id}" in query
            assert f"message={frame.message_index}" in query
        assert any("called from Python" in text.value for text in at.text)

    def test_the_researcher_sees_its_caller_above_and_its_callee_below(self, workbench_store: Path) -> None:
        at = open_page(workbench_store, session=uuid_of(workbench_store, "Researcher"))
        assert [(r["role"], r["depth"]) for r in stack(at)] == [
            ("Analyst", -1),
            ("Researcher", 0),
            ("Archivist", 1),
        ]


class TestRefusals:
    def test_the_refused_invocation_of_the_analyst_shows_as_refused(self, workbench_store: Path) -> None:
        trace = refused_trace(workbench_store)
        assert trace.invocation is not None
        at = open_page(
            workbench_store,
            session=uuid_of(workbench_store, "Analyst"),
            invocation=trace.invocation.invocation_id,
        )
        rows = stack(at)
        assert [(r["role"], r["outcome"]) for r in rows] == [("Analyst", "✅ ok"), ("Analyst", "⛔ refused")]
        assert "already active" in rows[-1]["error"]
        [warning] = at.warning  # yellow: the no-circle rule at work, not a failure
        assert "refused" in warning.value and not at.error
        assert [trace["name"] for trace in timeline(at)] == ["ok", "refused"]

    def test_the_refusal_shows_below_the_invocation_that_asked_for_it(self, workbench_store: Path) -> None:
        [asking] = [
            t for t in chain(workbench_store, "Analyst") if t.callees and t.callees[0].outcome == "refused"
        ]
        assert asking.invocation is not None
        at = open_page(
            workbench_store,
            session=uuid_of(workbench_store, "Analyst"),
            invocation=asking.invocation.invocation_id,
        )
        assert [r["outcome"] for r in stack(at)] == ["✅ ok", "⛔ refused"]
        assert at.warning

    def test_the_invocations_table_marks_the_refusal(self, workbench_store: Path) -> None:
        at = open_page(workbench_store, session=uuid_of(workbench_store, "Analyst"))
        traces = chain(workbench_store, "Analyst")
        rows = records(at.dataframe[0].value)
        assert [r["invocation"] for r in rows] == [t.invocation.invocation_id for t in traces if t.invocation]
        assert [r["outcome"] for r in rows].count("⛔ refused") == 1
        analyst_dir = Store(workbench_store).find(uuid_of(workbench_store, "Analyst")).path
        prompts = {r.id: r.prompt for r in read_invocations(analyst_dir)}
        assert [r["prompt"] for r in rows] == [one_line(prompts[r["invocation"]]) for r in rows]
        assert any(r["prompt"].startswith("Repeat this exactly: <script>") for r in rows)


class TestTheTimeline:
    def test_one_row_per_object_and_a_bar_per_frame_from_its_start(self, workbench_store: Path) -> None:
        at = open_page(workbench_store, session=uuid_of(workbench_store, "Archivist"))
        [trace] = chain(workbench_store, "Archivist")
        bars = [
            (row, base) for data in timeline(at) for row, base in zip(data["y"], data["base"], strict=True)
        ]
        expected = [
            (f"{f.role} / {short_session(f.session)}", pd.Timestamp(f.started_at).tz_convert(None))
            for f in trace_frames(trace)
        ]
        assert [(row, pd.Timestamp(base)) for row, base in bars] == expected

    def test_bars_last_at_least_as_long_as_the_invocation(self, workbench_store: Path) -> None:
        at = open_page(workbench_store, session=uuid_of(workbench_store, "Archivist"))
        [trace] = chain(workbench_store, "Archivist")
        widths = [x for data in timeline(at) for x in data["x"]]
        for frame, width in zip(trace_frames(trace), widths, strict=True):
            assert frame.ended_at is not None
            real = (pd.Timestamp(frame.ended_at) - pd.Timestamp(frame.started_at)).total_seconds() * 1000
            assert width >= real

    def test_each_bar_names_its_object_how_it_was_called_and_what_it_did(self, workbench_store: Path) -> None:
        at = open_page(workbench_store, session=uuid_of(workbench_store, "Archivist"))
        assert bar_labels(at) == [
            "Analyst.invoke from Python · 2 LLM calls, 1 tool call",
            "Researcher.invoke via ask_researcher · 2 LLM calls, 1 tool call",
            "Archivist.invoke via ask_archivist · 2 LLM calls, 1 tool call",
        ]
        [trace] = chain(workbench_store, "Archivist")
        annotations = figure(at)["layout"]["annotations"]
        assert [(a["y"], pd.Timestamp(a["x"])) for a in annotations] == [
            (f"{f.role} / {short_session(f.session)}", pd.Timestamp(f.started_at).tz_convert(None))
            for f in trace_frames(trace)
        ]
        hovers = [hover for data in timeline(at) for hover in data["hovertext"]]
        assert hovers[1].startswith("Researcher.invoke via ask_researcher")

    def test_the_llm_calls_and_tool_calls_are_spans_inside_their_frames_bar(
        self, workbench_store: Path
    ) -> None:
        at = open_page(workbench_store, session=uuid_of(workbench_store, "Archivist"))
        [trace] = chain(workbench_store, "Archivist")
        frames = {f"{f.role} / {short_session(f.session)}": f for f in trace_frames(trace)}
        shown = spans(at)
        assert set(shown) == {"LLM call", "tool calls"}
        llm, tools = shown["LLM call"], shown["tool calls"]
        assert sorted(llm["y"]) == sorted([*frames] * 2)  # two calls in each frame
        assert sorted(tools["y"]) == sorted(frames)
        for data in (llm, tools):
            assert (
                data["width"] + data["offset"] < timeline(at)[0]["width"] / 2
            )  # inside the bar's lower half
            assert data["offset"] > 0
            for row, base in zip(data["y"], data["base"], strict=True):
                frame = frames[row]
                start = pd.Timestamp(base)
                assert pd.Timestamp(frame.started_at).tz_convert(None) <= start
                assert frame.ended_at is not None and start <= pd.Timestamp(frame.ended_at).tz_convert(None)
        researcher = [h for h in llm["hovertext"] if h.startswith("Researcher:")]
        assert [h.split("<br>")[0] for h in researcher] == [
            "Researcher: LLM call 1 → ask_archivist",
            "Researcher: LLM call 2 → answer",
        ]
        assert any(h.startswith("Archivist: tool calls: file_note<br>") for h in tools["hovertext"])
        analyst_calls = read_calls(Store(workbench_store).find(uuid_of(workbench_store, "Analyst")).path)
        first = next(
            c for c in analyst_calls if c.id in llm_ids(workbench_store, trace.callers[0].invocation_id)
        )
        [analyst_row] = [r for r in frames if r.startswith("Analyst")]
        analyst_bases = [b for r, b in zip(llm["y"], llm["base"], strict=True) if r == analyst_row]
        assert pd.Timestamp(analyst_bases[0]) == pd.Timestamp(first.started_at).tz_convert(None)

    def test_a_refused_frame_has_no_spans_and_says_so(self, workbench_store: Path) -> None:
        trace = refused_trace(workbench_store)
        assert trace.invocation is not None
        at = open_page(
            workbench_store,
            session=uuid_of(workbench_store, "Analyst"),
            invocation=trace.invocation.invocation_id,
        )
        assert bar_labels(at)[-1] == "Analyst.invoke via ask_myself · 0 LLM calls · refused"
        assert all(
            row == data["y"][0] for data in spans(at).values() for row in data["y"]
        )  # the caller's only


def llm_ids(store: Path, invocation_id: str) -> list[str]:
    analyst_dir = Store(store).find(uuid_of(store, "Analyst")).path
    [record] = [r for r in read_invocations(analyst_dir) if r.id == invocation_id]
    return record.calls


def record_call(response: Any, message_id: str = "m1") -> CallRecord:
    return CallRecord(
        id="20250101T000000000000-00000000",
        session="s",
        role="r",
        context_id="c",
        message_index=1,
        request={},
        request_hash="h",
        message_id=message_id,
        response=response,
    )


class TestReadingTheCallRecords:
    def test_the_tools_an_answer_asked_for_are_read_from_its_response(self) -> None:
        answer = {
            "choices": [
                {"message": {"tool_calls": [{"function": {"name": "grep"}}, {"function": {"name": "tail"}}]}}
            ]
        }
        assert call_tools(record_call(answer)) == ["grep", "tail"]
        assert call_tools(record_call({"choices": [{"message": {"content": "hi"}}]})) == []

    def test_a_strange_response_counts_as_no_tool_call(self) -> None:
        for response in (
            None,
            {},
            {"choices": []},
            {"choices": ["x"]},
            {"choices": [{"message": {"tool_calls": [1]}}]},
        ):
            assert call_tools(record_call(response)) == []

    def test_how_a_frame_was_called(self, workbench_store: Path) -> None:
        [trace] = chain(workbench_store, "Archivist")
        analyst_dir = Store(workbench_store).find(uuid_of(workbench_store, "Analyst")).path
        [record] = [r for r in read_invocations(analyst_dir) if r.id == trace.callers[0].invocation_id]
        assert frame_method(record, {}) == "from Python"
        asked = {"choices": [{"message": {"tool_calls": [{"function": {"name": "ask_x"}}]}}]}
        record.caller = Party("Caller", "o", "s", "c", 3, "m1")
        assert frame_method(record, {"m1": record_call(asked)}) == "via ask_x"
        assert frame_method(record, {}) == "called by Caller"


class TestSelection:
    def test_the_invocation_on_the_deepest_chain_is_shown_by_default(self, workbench_store: Path) -> None:
        at = open_page(workbench_store, session=uuid_of(workbench_store, "Analyst"))
        traces = chain(workbench_store, "Analyst")
        sizes = [len(t.callers) + len(t.callees) for t in traces]
        deepest = [t for t, n in zip(traces, sizes, strict=True) if n == max(sizes)][-1].invocation
        assert deepest is not None and deepest != traces[-1].invocation  # not merely the latest
        assert at.query_params["invocation"] == deepest.invocation_id

    def test_picking_an_invocation_records_it(self, workbench_store: Path) -> None:
        at = open_page(workbench_store, session=uuid_of(workbench_store, "Analyst"))
        wanted = refused_trace(workbench_store).invocation
        assert wanted is not None
        at.selectbox[1].set_value(wanted.invocation_id).run()
        assert not at.exception
        assert at.query_params["invocation"] == wanted.invocation_id
        assert stack(at)[-1]["outcome"] == "⛔ refused"

    def test_an_unknown_invocation_is_an_error(self, workbench_store: Path) -> None:
        at = open_page(workbench_store, session=uuid_of(workbench_store, "Analyst"), invocation="nope")
        assert at.error
        assert len(at.dataframe) == 1

    def test_an_unknown_session_offers_the_picker(self, workbench_store: Path) -> None:
        at = open_page(workbench_store, session="no-such-session")
        assert at.warning and not at.error
        assert not at.dataframe


class TestAPeteosStore:
    def test_it_says_there_are_no_invocation_records(self) -> None:
        at = open_page(FIXTURE, session=SESSION)
        assert any("no invocation records" in info.value for info in at.info)
        assert not at.dataframe
        assert not at.get("plotly_chart")

    def test_without_a_session_it_asks_for_one(self) -> None:
        at = open_page(FIXTURE)
        assert at.info
        assert not at.dataframe


class TestMarkupInPrompts:
    def test_a_prompt_with_html_is_never_rendered_as_html(self, workbench_store: Path) -> None:
        xss = "Repeat this exactly: <script>"
        analyst_dir = Store(workbench_store).find(uuid_of(workbench_store, "Analyst")).path
        [wanted] = [r.id for r in read_invocations(analyst_dir) if r.prompt.startswith(xss)]
        at = open_page(workbench_store, session=uuid_of(workbench_store, "Analyst"), invocation=wanted)
        assert any(r["prompt"].startswith(xss) for r in stack(at))
        hover = timeline(at)[0]["hovertext"][0]
        assert "&lt;script&gt;" in hover
        assert "<script>" not in hover
        assert not at.get("html")
        assert not [m for m in at.markdown if "<script>" in m.value]


class TestAnOpenPokeCaller:
    def test_a_call_site_in_an_imported_log_links_to_the_log_entry_the_context_page_opens(
        self, tmp_path: Path
    ) -> None:
        """The interaction agent's call of an execution agent sits at a display index of
        the imported root; the link names it as OpenPoke's request source does (its log
        entry), which the Context page reads back as the same message. (In the root the
        two numbers agree; the Replay page's test covers a summary fork, where they do not.)"""
        report = import_openpoke(OPENPOKE_LONG, tmp_path / "store")
        store = Store(tmp_path / "store")
        [execution, *_] = report.execution_sessions.values()
        frames = [f for t in invocation_chain(store, execution) for f in trace_frames(t) if f.context_id]
        sites = {(f.caller_session, f.context_id, f.message_index) for f in frames}
        at = open_page(tmp_path / "store", session=execution)
        links = [{k: v[0] for k, v in parse_qs(q).items()} for q in context_links(at)]
        assert links
        for link in links:
            caller = store.load_session(link["session"])
            index = message_index(caller, caller.contexts[link["context"]], link["message"])
            assert (link["session"], link["context"], index) in sites, link
