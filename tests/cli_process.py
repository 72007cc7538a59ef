"""``soapwb`` in a process of its own, importing this checkout (for tests that need real
output bytes, exit codes and environments rather than the in-process ``main``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).parents[1]


def soapwb(*argv: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The command line in a process of its own, importing this checkout; the store is
    only what ``argv`` names (``SOAPWB_STORE`` is dropped)."""
    environ = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    environ.pop("SOAPWB_STORE", None)
    return subprocess.run(
        [sys.executable, "-m", "soapwb.cli", *map(str, argv)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
        check=False,
    )
