"""What one model call cost: its time, its tokens, and its price when the model's is known.

Prices come from ``genai-prices`` (Pydantic's table of providers' published prices, shipped
inside the package: nothing is fetched), matched on the model the response names, else
the one the request asked for. A model it does not know (the local SmolLM2, a private
deployment) gets no price rather than a guess.
"""

from __future__ import annotations

import functools
from decimal import Decimal
from typing import Any

from soap_core import CallRecord


@functools.lru_cache(maxsize=1024)
def price_of(model: str, input_tokens: int, output_tokens: int) -> tuple[Decimal, str] | None:
    """The price of a call in USD and whose prices were used (``gpt 4o mini, OpenAI``);
    None when the model is not in the table."""
    from genai_prices import Usage, calc_price  # imported on first use: a large table

    try:
        found = calc_price(Usage(input_tokens=input_tokens, output_tokens=output_tokens), model_ref=model)
    except (LookupError, ValueError):
        return None
    return found.total_price, f"{found.model.name}, {found.provider.name}"


def _tokens(usage: dict[str, Any] | None, *keys: str) -> int | None:
    for key in keys:
        value = (usage or {}).get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def call_model(call: CallRecord) -> str | None:
    """The model that answered (the response's name), else the one asked for."""
    for source in (call.response or {}, call.request):
        model = source.get("model") if isinstance(source, dict) else None
        if isinstance(model, str) and model:
            return model
    return None


def call_line(call: CallRecord) -> str:
    """``model call: 1.23 s · 412 in + 35 out tokens · $0.00021 (gpt 4o mini, OpenAI)``,
    each part only when recorded; a failed call says so."""
    parts = []
    if call.latency_s is not None:
        parts.append(f"{call.latency_s:.2f} s")
    prompt = _tokens(call.usage, "prompt_tokens", "input_tokens")
    completion = _tokens(call.usage, "completion_tokens", "output_tokens")
    if prompt is not None and completion is not None:
        parts.append(f"{prompt:,} in + {completion:,} out tokens")
        model = call_model(call)
        priced = price_of(model, prompt, completion) if model else None
        if priced is not None:
            amount = f"{priced[0]:.6f}".rstrip("0").rstrip(".")
            parts.append(f"${amount} ({priced[1]} prices)")
        elif model:
            parts.append(f"no price known for {model}")
    if call.error:
        return "model call failed: " + " · ".join([*parts, call.error])
    return "model call: " + (" · ".join(parts) if parts else "no timing or usage recorded")
