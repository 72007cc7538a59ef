"""Each model output in the transcript says what its call took: time, tokens, and the
price when the model's is known (issue 23, point 4)."""

from __future__ import annotations

from pathlib import Path

from genai_prices import Usage, calc_price

from soap_core import CallRecord, Store, read_calls
from tests.apptest import open_app_page
from workbench.costs import call_line


def record(model: str, usage: dict | None, latency: float | None, error: str | None = None) -> CallRecord:  # type: ignore[type-arg]
    return CallRecord(
        id="c1",
        session="s",
        role="r",
        context_id="x",
        message_index=3,
        request={"model": model, "messages": []},
        request_hash="h",
        latency_s=latency,
        response={"model": model} if usage else None,
        usage=usage,
        error=error,
    )


def test_a_priced_model_call_says_its_time_tokens_and_price() -> None:
    line = call_line(record("gpt-4o-mini", {"prompt_tokens": 1200, "completion_tokens": 80}, 1.234))
    price = calc_price(Usage(input_tokens=1200, output_tokens=80), model_ref="gpt-4o-mini")
    amount = f"{price.total_price:.6f}".rstrip("0").rstrip(".")
    assert line == (
        f"model call: 1.23 s · 1,200 in + 80 out tokens · ${amount} "
        f"({price.model.name}, {price.provider.name} prices)"
    )


def test_an_unknown_model_gets_no_price_and_a_failed_call_says_so() -> None:
    assert call_line(record("local", {"prompt_tokens": 10, "completion_tokens": 2}, 0.5)) == (
        "model call: 0.50 s · 10 in + 2 out tokens · no price known for local"
    )
    assert call_line(record("local", None, None, error="timeout: 2 s")) == "model call failed: timeout: 2 s"
    assert "None" not in call_line(record("local", None, None))


def test_the_transcript_shows_each_answers_call(workbench_store: Path) -> None:
    [summary] = [s for s in Store(workbench_store).sessions() if s.role == "Analyst"]
    session = Store(workbench_store).load_session(summary.uuid)
    produced = {c.message_id: c for c in read_calls(session.directory or Path()) if c.message_id}
    at = open_app_page(workbench_store, "context", session=summary.uuid)
    shown = [t.value for t in at.text if t.value.startswith("model call")]
    expected = [
        call_line(produced[m.id])
        for m in session.active_context.messages
        if m.role == "assistant" and m.id in produced
    ]
    assert expected and shown == expected
