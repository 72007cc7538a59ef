"""soap_gen: a deterministic generator of realistic stores, for benchmarks and scale tests
(``soapwb gen-store``), and of planted-fact sessions for attribution's tests and
benchmark; a tool beside the core, not part of it.

Public names are re-exported here; the ``_modules`` behind them are private.
"""

from soap_gen._generate import DEFAULT_START, GeneratedStore, generate_store
from soap_gen._planted import DISTRACTORS, planted_paragraph, planted_session

__all__ = [
    "DEFAULT_START",
    "DISTRACTORS",
    "GeneratedStore",
    "generate_store",
    "planted_paragraph",
    "planted_session",
]
