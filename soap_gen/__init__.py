"""soap_gen: a deterministic generator of realistic stores, for benchmarks and scale tests
(``soapwb gen-store``); a tool beside the core, not part of it.

Public names are re-exported here; the ``_modules`` behind them are private.
"""

from soap_gen._generate import DEFAULT_START, GeneratedStore, generate_store

__all__ = ["DEFAULT_START", "GeneratedStore", "generate_store"]
