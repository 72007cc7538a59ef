"""LangGraph ``SqliteSaver`` checkpoints in (issue 26).

:func:`import_langgraph` writes a database's threads into a store as sessions (the
checkpoint lineage as contexts and forks, a recorded call per model answer), decoding
the blobs with LangGraph's serializer or, without LangGraph, plain msgpack
(:func:`read_threads`). The ``langgraph`` request source (``_source.py``, an entry
point) rebuilds each call as ChatOpenAI sends it: the messages from the file alone, the
whole body with the app's graph (``--graph MODULE:ATTR``), with which it also re-runs a
thread from any message with LangGraph itself (``_graph.py``).
"""

from importers.langgraph._checkpoints import Checkpoint, LcMessage, Thread, decode_plain, read_threads
from importers.langgraph._import import ImportReport, SessionReport, import_langgraph

__all__ = [
    "Checkpoint",
    "ImportReport",
    "LcMessage",
    "SessionReport",
    "Thread",
    "decode_plain",
    "import_langgraph",
    "read_threads",
]
