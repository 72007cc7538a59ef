"""The app's code, named ``MODULE:ATTR`` (an agent, a compiled graph), imported as
``uvicorn`` and ``celery`` import an app: from the installed packages or, failing that,
from the current directory, which the ``soapwb`` script's ``sys.path`` does not hold (a
user runs it from the app's folder, as they would run the app)."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any


def import_code(code: str) -> Any:
    """The object at ``MODULE:ATTR``; ValueError for another shape, ImportError or
    AttributeError (with Python's own message) when it cannot be found."""
    module_name, _, attr = code.partition(":")
    if not module_name or not attr:
        raise ValueError(f"{code!r} is not MODULE:ATTR")
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.append(here)  # after the installed packages: never shadows one of them
    found: Any = importlib.import_module(module_name)
    for name in attr.split("."):
        found = getattr(found, name)
    return found
