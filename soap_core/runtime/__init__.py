"""The agentic runtime: classes, objects, sessions and invoke over an LLM endpoint.

Public names are re-exported here; the ``_modules`` behind them are private.
"""

from soap_core._records import (
    CallRecord,
    InvocationRecord,
    Party,
    read_calls,
    read_invocation,
    read_invocations,
)
from soap_core.runtime._agentic import AgenticObject, agentic
from soap_core.runtime._compaction import (
    Compaction,
    ContextBudget,
    RollingSequenceWindow,
    RollingTokenWindow,
    Summarize,
)
from soap_core.runtime._invoke import (
    RERUN,
    TOOL_FAILURES_KEY,
    InvocationError,
    IterationLimitError,
    RerunStopped,
    assistant_message,
    build_system_prompt,
    class_path,
    close_call,
    offer_tools,
    open_call,
    rerun_invocation,
)
from soap_core.runtime._llm import (
    DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_TIMEOUT_S,
    Completion,
    LLMEndpoint,
    LLMError,
)
from soap_core.runtime._locks import ActiveSessionError
from soap_core.runtime._object import ModelSettings, Runtime
from soap_core.runtime._tools import ToolSpec, tool
from soap_core.runtime._trace import (
    InvocationChain,
    InvocationTrace,
    TraceFrame,
    invocation_chain,
    invocation_chains,
)

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_TIMEOUT_S",
    "RERUN",
    "TOOL_FAILURES_KEY",
    "ActiveSessionError",
    "AgenticObject",
    "CallRecord",
    "Compaction",
    "Completion",
    "ContextBudget",
    "InvocationChain",
    "InvocationError",
    "InvocationRecord",
    "InvocationTrace",
    "IterationLimitError",
    "LLMEndpoint",
    "LLMError",
    "ModelSettings",
    "Party",
    "RerunStopped",
    "RollingSequenceWindow",
    "RollingTokenWindow",
    "Runtime",
    "Summarize",
    "ToolSpec",
    "TraceFrame",
    "agentic",
    "assistant_message",
    "build_system_prompt",
    "class_path",
    "close_call",
    "invocation_chain",
    "invocation_chains",
    "offer_tools",
    "open_call",
    "read_calls",
    "read_invocation",
    "read_invocations",
    "rerun_invocation",
    "tool",
]
