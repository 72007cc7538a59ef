"""Partition tasks for the engine tests: module-level, so that every engine's workers
can import them. A marker file tells a retried attempt from the first one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fleet import Location


def troubled_task(location: Location, partition: dict[str, Any]) -> dict[str, Any]:
    """``partition["trouble"]``: ``once`` raises on the first attempt, ``die`` kills its
    worker on the first attempt, ``always`` raises every time; else it answers."""
    marker = Path(partition["marker"])
    trouble = partition.get("trouble")
    if trouble == "always":
        raise ValueError(f"partition {partition['key']} is broken")
    if trouble in ("once", "die") and not marker.exists():
        marker.write_text("tried", "utf-8")
        if trouble == "die":
            os._exit(1)
        raise RuntimeError("the first attempt fails")
    return {"key": partition["key"], "store": location.url, "square": partition["n"] ** 2}
