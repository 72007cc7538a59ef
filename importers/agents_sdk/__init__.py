"""OpenAI Agents SDK ``SQLiteSession`` databases in (issue 26).

:func:`import_agents_sdk` reads the SDK's ``agent_sessions``/``agent_messages`` tables
(read-only) into a store: a session per ``session_id``, its items as messages, a recorded
call per model answer. The ``openai-agents`` request source (``_source.py``, an entry
point) rebuilds each call as the SDK's Chat Completions model sends it, from the file
alone or, with the app's starting agent, whole; with the agent a re-run runs the SDK's own
``Runner`` (``_code.py``, the only module that imports the SDK).
"""

from importers.agents_sdk._import import ImportReport, SessionReport, import_agents_sdk
from importers.agents_sdk._items import AgentCodeError, ItemError

__all__ = ["AgentCodeError", "ImportReport", "ItemError", "SessionReport", "import_agents_sdk"]
