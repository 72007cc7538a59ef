"""``dump_json`` writes what ``json.dumps(value, indent=2)`` writes (peteos' files),
taking orjson's text only where the two agree: any JSON value, floats, NaN, non-ASCII
text, DEL, huge integers and non-string keys included."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soap_core import _jsonio
from soap_core._jsonio import dump_json

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None)
@given(JSON)
def test_any_value_is_dumped_as_json_dumps_with_indent_2_dumps_it(value: Any) -> None:
    assert dump_json(value) == json.dumps(value, indent=2)


@pytest.mark.parametrize(
    "value",
    [
        {"small": 1e-05},
        {"big": 1e16},
        {"nan": float("nan")},
        {"inf": [float("inf")]},
        {"text": "caf\u00e9 \U0001f600"},
        {"del": "\x7f"},
        {"huge": 2**70},
        {"tuple": (1, 2)},
        {1: "an int key"},
        {"quoted": 'he wrote "1.5": 2'},
        {"escapes": 'line\nbreak\t"x"\\'},
    ],
)
def test_the_values_orjson_spells_otherwise_are_dumped_by_python(value: Any) -> None:
    assert dump_json(value) == json.dumps(value, indent=2)


def test_a_plain_context_dict_takes_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ints, strings, lists and dicts (a context file's usual content) never reach
    Python's encoder, whose indented form is pure Python (seconds for a long context)."""
    called = []
    monkeypatch.setattr(_jsonio.json, "dumps", lambda *a, **k: called.append(1) or "")
    value = {
        "messages": [
            {"id": f"m{i}", "role": "user", "content": [{"type": "text", "text": "hi"}]} for i in range(50)
        ]
    }
    assert json.loads(dump_json(value)) == value
    assert called == []
