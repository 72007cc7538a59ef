"""replay: rematerialize the request behind any message, verify it, re-run it, diff the outputs.

Public names are re-exported here; the ``_modules`` behind them are private.
"""

from replay._diff import (
    ContextDiff,
    NoiseBand,
    Output,
    OutputDiff,
    diff_contexts,
    diff_outputs,
    distance,
    noise_band,
    word_diff,
)
from replay._materialize import (
    CallSite,
    Materialized,
    MaterializeError,
    PromptAtCall,
    call_site,
    materialize,
    origin_of,
    recorded_call,
    resolve_index,
    system_prompt_history,
)
from replay._peteos_body import PeteosBodyError, openai_tool_parameters, peteos_body
from replay._peteos_source import PETEOS_05, PETEOS_06, PeteosSource
from replay._refs import Reference, find_context, resolve_reference
from replay._run import Endpoint, Overrides, ReplayRun, replay, replay_messages, replay_parameters
from replay._runtime_source import RUNTIME_SOURCE, RuntimeSource, recorded_parameters, request_messages
from replay._sources import (
    ENTRY_POINT_GROUP,
    RequestSource,
    register_source,
    source_for,
    source_named,
    sources,
)
from replay._verify import Verification, request_differences, verify_session, verify_store
from soap_core import REPLAY_KEY

__all__ = [
    "ENTRY_POINT_GROUP",
    "PETEOS_05",
    "PETEOS_06",
    "REPLAY_KEY",
    "RUNTIME_SOURCE",
    "CallSite",
    "ContextDiff",
    "Endpoint",
    "MaterializeError",
    "Materialized",
    "NoiseBand",
    "Output",
    "OutputDiff",
    "Overrides",
    "PeteosBodyError",
    "PeteosSource",
    "PromptAtCall",
    "Reference",
    "ReplayRun",
    "RequestSource",
    "RuntimeSource",
    "Verification",
    "call_site",
    "diff_contexts",
    "diff_outputs",
    "distance",
    "find_context",
    "materialize",
    "noise_band",
    "openai_tool_parameters",
    "origin_of",
    "peteos_body",
    "recorded_call",
    "recorded_parameters",
    "register_source",
    "replay",
    "replay_messages",
    "replay_parameters",
    "request_differences",
    "request_messages",
    "resolve_index",
    "resolve_reference",
    "source_for",
    "source_named",
    "sources",
    "system_prompt_history",
    "verify_session",
    "verify_store",
    "word_diff",
]
