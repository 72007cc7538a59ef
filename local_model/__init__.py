"""local_model: a local OpenAI-compatible model server (llama.cpp serving SmolLM2) for the
tests, the demo and ``soapwb llm``/``ui``/``replay``; a tool beside the core, not part of it.

Public names are re-exported here; the ``_modules`` behind them are private. The server runs
as ``python -m local_model`` (llama.cpp's server with the workbench's chat format).
"""

from local_model._launcher import CHAT_FORMAT
from local_model._server import (
    DEFAULT_HOST,
    MODEL_FILE,
    MODEL_NAME,
    MODEL_PACKAGE,
    NO_API_KEY,
    LocalModelError,
    LocalModelServer,
    endpoint_from_env,
    find_model_file,
    free_port,
)

__all__ = [
    "CHAT_FORMAT",
    "DEFAULT_HOST",
    "MODEL_FILE",
    "MODEL_NAME",
    "MODEL_PACKAGE",
    "NO_API_KEY",
    "LocalModelError",
    "LocalModelServer",
    "endpoint_from_env",
    "find_model_file",
    "free_port",
]
