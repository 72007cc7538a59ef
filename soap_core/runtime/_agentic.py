"""Agentic classes and objects, and the runtime they run in.

An agentic class is a blueprint: a system prompt, tools (methods marked ``@tool``),
model settings and a compaction strategy. An agentic object is an instance with its own
state in its public attributes, which its tools read and change. Invoking an object
runs one turn of one of its sessions (a new one, or the one of a named thread) against
the runtime's LLM endpoint and store.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from soap_core._errors import SoapError
from soap_core.runtime._invoke import run_invocation
from soap_core.runtime._object import Compaction, ModelSettings, Runtime
from soap_core.runtime._tools import ToolSpec, tool_specs

C = TypeVar("C", bound=type)


class AgenticObject:
    """Base class of agentic classes. Subclasses set the class attributes below."""

    role: ClassVar[str] = "AgenticObject"
    """The role name: the folder under ``agents/``; the class name unless set."""
    system_prompt: ClassVar[str] = "You are a helpful assistant."
    settings: ClassVar[ModelSettings] = ModelSettings()
    compaction: Compaction | None = None
    """Runs before every model call; None applies the context-limit budget rule. A class
    sets it for all its objects; an object may set its own (a threshold, a summarizer)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "role" not in cls.__dict__:
            cls.role = cls.__name__

    def __init__(self, *, runtime: Runtime | None = None, object_id: str | None = None) -> None:
        self.bind(runtime, object_id=object_id)

    def bind(self, runtime: Runtime | None, *, object_id: str | None = None) -> AgenticObject:
        """Attach the runtime (and a stable object id, which thread reuse keys on)."""
        self._soap_runtime = runtime
        if object_id is not None or not hasattr(self, "_soap_object_id"):
            self._soap_object_id = object_id or f"{type(self).role}-{uuid.uuid4().hex[:8]}"
        return self

    @property
    def runtime(self) -> Runtime:
        runtime: Runtime | None = getattr(self, "_soap_runtime", None)
        if runtime is None:
            raise SoapError(
                f"{type(self).role} object is not bound to a runtime: pass runtime= or call bind()"
            )
        return runtime

    @property
    def object_id(self) -> str:
        if not hasattr(self, "_soap_object_id"):
            self.bind(getattr(self, "_soap_runtime", None))
        return str(self._soap_object_id)

    def tools(self) -> list[ToolSpec]:
        return tool_specs(type(self))

    def system_prompt_hooks(self) -> list[str]:
        """Dynamic additions to the system prompt, recomputed before every call."""
        return []

    def state(self) -> dict[str, Any]:
        """The public instance attributes, as JSON values (others shown by repr)."""
        public = {k: v for k, v in vars(self).items() if not k.startswith("_")}
        value = json.loads(json.dumps(public, default=_state_value))
        return value if isinstance(value, dict) else {}

    @classmethod
    def rebuild(cls, state: Mapping[str, Any], *, runtime: Runtime, object_id: str) -> AgenticObject:
        """An object of this class in the recorded ``state``, for a re-run.

        It is built as ``cls(runtime=..., object_id=...)`` and then given the recorded
        value of each public attribute that holds plain JSON data (attributes standing for
        other objects keep what the constructor made). A class whose constructor needs
        more arguments overrides this (and can read them from ``state``).
        """
        try:
            obj = cls(runtime=runtime, object_id=object_id)
        except TypeError as exc:
            raise SoapError(
                f"cannot rebuild a {cls.__qualname__} for a re-run ({exc}): "
                "give the class a rebuild(state, *, runtime, object_id) classmethod"
            ) from None
        obj.restore(state)
        return obj

    def restore(self, state: Mapping[str, Any]) -> None:
        """Give each public attribute that holds plain JSON data its value in ``state``."""
        for name, value in state.items():
            current = getattr(self, name, None)
            if not name.startswith("_") and _is_plain_json(current) and _is_plain_json(value):
                setattr(self, name, value)

    def invoke(
        self,
        prompt: str,
        thread: str | None = None,
        output_schema: Any = None,
        *,
        tool_choice: Any = "auto",
        follow_up: Any = "auto",
    ) -> Any:
        """Run one turn: a new session, or the session of ``thread`` for this object.

        Returns the model's final text, or with ``output_schema`` (a JSON schema or
        one of str, int, float, bool, list, dict) the validated value.
        ``tool_choice`` applies to the first model call ("auto", "none", "required" or
        a tool name to call), ``follow_up`` to the calls after tool results: code can
        drive a small model through a task where a large one would decide by itself.
        """
        return run_invocation(self, prompt, thread, output_schema, tool_choice, follow_up)


_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def _is_plain_json(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float | str | list | dict)


def _state_value(value: Any) -> str:
    """A stable stand-in for an attribute that is not JSON: another agentic object by its
    role and id, anything else by its repr without memory addresses (which would make
    two processes' states differ where nothing did)."""
    if isinstance(value, AgenticObject):
        return f"<{type(value).role} {value.object_id}>"
    return _ADDRESS.sub("", repr(value))


def agentic(cls: C | None = None, *, role: str | None = None) -> Any:
    """Class decorator: make ``cls`` an agentic class (and optionally name its role)."""

    def wrap(klass: C) -> C:
        if not issubclass(klass, AgenticObject):
            namespace = {"__module__": klass.__module__, "__qualname__": klass.__qualname__}
            klass = type(klass.__name__, (klass, AgenticObject), namespace)  # type: ignore[assignment]
        if role is not None:
            klass.role = role  # type: ignore[attr-defined]
        return klass

    return wrap(cls) if cls is not None else wrap
