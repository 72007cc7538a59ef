"""replay: rematerialize the request behind any message, verify it, re-run it, diff the outputs.

Public names are re-exported here; the ``_modules`` behind them are private.
"""

from replay import (
    _peteos_source as _peteos_source,  # imported for its effect: it registers the peteos sources
)
from replay._address import (
    AddressError,
    AddressingSource,
    materialize_at,
    message_address,
    message_index,
    number_of,
)
from replay._batch import NOISE_LABEL, Batch, batches_from_saved, run_batch, run_output
from replay._branch import BranchDiff, Turn, branch_distance, branch_noise_band, branch_turns, diff_branches
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
    CallLog,
    MaterializeError,
    PromptAtCall,
    call_site,
    materialize,
    origin_of,
    resolve_index,
    sent_prefix,
    system_prompt_history,
)
from replay._names import (
    ForkRun,
    SessionNames,
    change_phrases,
    minute,
    replay_marks,
    replay_runs,
    session_names,
    short_id,
)
from replay._phrases import (
    EMPTY_OUTPUTS,
    ORIGINAL_AND_RUN,
    call_texts,
    counted,
    inline_call,
    marked_runs,
    marked_words,
    output_sentences,
    output_words,
    row_changes,
)
from replay._ranges import MessageRangeError, message_ranges_text, parse_message_ranges
from replay._refs import Reference, find_context, resolve_reference
from replay._request import Materialized
from replay._rerun import RerunResult, continue_branch, diff_rerun, rerun, rerun_noise_band
from replay._run import Endpoint, Overrides, ReplayRun, replay, replay_messages, unchanged_band
from replay._runtime_source import RUNTIME_SOURCE, request_messages
from replay._saved import (
    INTERRUPTED_RUN,
    SavedRerun,
    SavedRun,
    diff_saved_rerun,
    overrides_from_record,
    replay_batches,
    saved_reruns,
    saved_runs,
)
from replay._sources import ENTRY_POINT_GROUP, RequestSource, built_as, register_source, sources
from replay._tool_modes import RerunError, ToolModes, injected_results
from replay._verify import request_differences, verify_session, verify_store
from soap_core import REPLAY_KEY

__all__ = [
    "EMPTY_OUTPUTS",
    "ENTRY_POINT_GROUP",
    "INTERRUPTED_RUN",
    "NOISE_LABEL",
    "ORIGINAL_AND_RUN",
    "REPLAY_KEY",
    "RUNTIME_SOURCE",
    "AddressError",
    "AddressingSource",
    "Batch",
    "BranchDiff",
    "CallLog",
    "ContextDiff",
    "Endpoint",
    "ForkRun",
    "MaterializeError",
    "Materialized",
    "MessageRangeError",
    "NoiseBand",
    "Output",
    "OutputDiff",
    "Overrides",
    "PromptAtCall",
    "Reference",
    "ReplayRun",
    "RequestSource",
    "RerunError",
    "RerunResult",
    "SavedRerun",
    "SavedRun",
    "SessionNames",
    "ToolModes",
    "Turn",
    "batches_from_saved",
    "branch_distance",
    "branch_noise_band",
    "branch_turns",
    "built_as",
    "call_site",
    "call_texts",
    "change_phrases",
    "continue_branch",
    "counted",
    "diff_branches",
    "diff_contexts",
    "diff_outputs",
    "diff_rerun",
    "diff_saved_rerun",
    "distance",
    "find_context",
    "injected_results",
    "inline_call",
    "marked_runs",
    "marked_words",
    "materialize",
    "materialize_at",
    "message_address",
    "message_index",
    "message_ranges_text",
    "minute",
    "noise_band",
    "number_of",
    "origin_of",
    "output_sentences",
    "output_words",
    "overrides_from_record",
    "parse_message_ranges",
    "register_source",
    "replay",
    "replay_batches",
    "replay_marks",
    "replay_messages",
    "replay_runs",
    "request_differences",
    "request_messages",
    "rerun",
    "rerun_noise_band",
    "resolve_index",
    "resolve_reference",
    "row_changes",
    "run_batch",
    "run_output",
    "saved_reruns",
    "saved_runs",
    "sent_prefix",
    "session_names",
    "short_id",
    "sources",
    "system_prompt_history",
    "unchanged_band",
    "verify_session",
    "verify_store",
    "word_diff",
]
