"""analysis: token budgets over time and the compaction lab, as pure functions over sessions.

Public names are re-exported here; the ``_modules`` behind them are private.
"""

from analysis._budget import (
    CATEGORIES,
    CallBudget,
    CompactionEvent,
    MessageBudget,
    SessionSpend,
    call_budgets,
    chain_budget,
    context_makeup,
    makeup,
    message_budgets,
)
from analysis._lab import (
    FunctionStrategy,
    History,
    Item,
    NoCompaction,
    RollingMessages,
    RollingTokens,
    SimPoint,
    Simulation,
    StripThinking,
    SummarizeOlder,
    history_of,
    items_of,
    parse_strategy,
    simulate,
    simulate_items,
)

__all__ = [
    "CATEGORIES",
    "CallBudget",
    "CompactionEvent",
    "FunctionStrategy",
    "History",
    "Item",
    "MessageBudget",
    "NoCompaction",
    "RollingMessages",
    "RollingTokens",
    "SessionSpend",
    "SimPoint",
    "Simulation",
    "StripThinking",
    "SummarizeOlder",
    "call_budgets",
    "chain_budget",
    "context_makeup",
    "history_of",
    "items_of",
    "makeup",
    "message_budgets",
    "parse_strategy",
    "simulate",
    "simulate_items",
]
