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
    Materialized,
    MaterializeError,
    PromptAtCall,
    materialize,
    origin_of,
    resolve_index,
    system_prompt_history,
)
from replay._refs import Reference, find_context, resolve_reference
from replay._run import Endpoint, Overrides, ReplayRun, replay, replay_messages, replay_parameters
from replay._verify import Verification, request_differences, verify_session, verify_store
from soap_core import REPLAY_KEY

__all__ = [
    "REPLAY_KEY",
    "ContextDiff",
    "Endpoint",
    "MaterializeError",
    "Materialized",
    "NoiseBand",
    "Output",
    "OutputDiff",
    "Overrides",
    "PromptAtCall",
    "Reference",
    "ReplayRun",
    "Verification",
    "diff_contexts",
    "diff_outputs",
    "distance",
    "find_context",
    "materialize",
    "noise_band",
    "origin_of",
    "replay",
    "replay_messages",
    "replay_parameters",
    "request_differences",
    "resolve_index",
    "resolve_reference",
    "system_prompt_history",
    "verify_session",
    "verify_store",
    "word_diff",
]
