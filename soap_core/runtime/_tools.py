"""Tools: plain methods of an agentic class, described to the model by JSON schemas.

The schema of a tool comes from its signature (type hints → JSON types, parameters
without a default are required) and its docstring (the first paragraph describes the
tool, an ``Args:`` section describes the parameters), so a tool is written once, as
ordinary Python.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, get_args, get_origin

from soap_core._parts import ToolPart

F = TypeVar("F", bound=Callable[..., Any])
_MARK = "__soap_tool__"
_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean"}


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model sees it, and the method that runs it."""

    name: str
    description: str
    parameters: dict[str, Any]
    method_name: str

    def as_part(self) -> ToolPart:
        return ToolPart(self.name, self.description, self.parameters)


def tool(fn: F | None = None, *, name: str | None = None) -> Any:
    """Mark a method of an agentic class as a tool the model may call."""

    def mark(method: F) -> F:
        setattr(method, _MARK, name or method.__name__)
        return method

    return mark(fn) if fn is not None else mark


def json_type(annotation: Any) -> dict[str, Any]:
    """The JSON schema of a Python type hint (the common cases; anything else: any)."""
    if annotation in _SIMPLE:
        return {"type": _SIMPLE[annotation]}
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        return json_type(options[0]) if len(options) == 1 else {"anyOf": [json_type(a) for a in options]}
    if annotation is list or origin is list:
        return {"type": "array", "items": json_type(args[0])} if args else {"type": "array"}
    if annotation is dict or origin is dict:
        return {"type": "object"}
    return {}


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The description (first paragraph) and the ``Args:`` descriptions of a docstring."""
    text = inspect.cleandoc(doc or "")
    description = " ".join(text.split("\n\n", 1)[0].split()) if text else ""
    params: dict[str, str] = {}
    section = re.search(r"^(?:Args|Arguments|Parameters):\s*\n((?:[ \t]+.*\n?)+)", text, re.MULTILINE)
    if section:
        current = None
        for line in section.group(1).splitlines():
            match = re.match(r"\s+(\w+)(?:\s*\([^)]*\))?:\s*(.*)", line)
            if match and len(line) - len(line.lstrip()) <= 4:
                current = match.group(1)
                params[current] = match.group(2).strip()
            elif current and line.strip():
                params[current] += " " + line.strip()
    return description, params


def spec_for(method: Callable[..., Any], name: str) -> ToolSpec:
    description, arg_docs = parse_docstring(method.__doc__)
    hints = typing.get_type_hints(method)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(method).parameters.values():
        if param.name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        schema = json_type(hints.get(param.name, Any))
        if param.name in arg_docs:
            schema["description"] = arg_docs[param.name]
        properties[param.name] = schema
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
    parameters = {"type": "object", "properties": properties, "required": required}
    return ToolSpec(name, description, parameters, method.__name__)


def tool_specs(cls: type) -> list[ToolSpec]:
    """The tools of a class, base classes' first, each name once (subclasses override)."""
    found: dict[str, ToolSpec] = {}
    for klass in reversed(cls.__mro__):
        for value in vars(klass).values():
            tool_name = getattr(value, _MARK, None)
            if isinstance(tool_name, str):
                found[tool_name] = spec_for(value, tool_name)
    return list(found.values())


def run_tool(target: Any, spec: ToolSpec, arguments: str) -> tuple[Any, str | None]:
    """Call a tool with the model's JSON arguments: (result, None) or (None, error text).

    Bad arguments are the model's mistake, not the program's: they come back as an
    error the model can read and correct.
    """
    try:
        # strict=False: grammar-constrained servers let raw newlines into strings
        args = json.loads(arguments, strict=False) if arguments.strip() else {}
    except json.JSONDecodeError as exc:
        return None, f"arguments are not valid JSON ({exc.msg}): {arguments[:200]}"
    if not isinstance(args, dict):
        return None, f"arguments must be a JSON object, got {type(args).__name__}"
    known = set(spec.parameters["properties"])
    unknown = sorted(set(args) - known)
    missing = [p for p in spec.parameters["required"] if p not in args]
    if unknown or missing:
        problems = ([f"unknown {', '.join(unknown)}"] if unknown else []) + (
            [f"missing {', '.join(missing)}"] if missing else []
        )
        return None, f"bad arguments for {spec.name}: {'; '.join(problems)}"
    return getattr(target, spec.method_name)(**args), None
