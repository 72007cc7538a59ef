"""How long the Sessions page's data takes for a store of N sessions (default 1,000).

Run: .venv/bin/python benchmarks/bench_store_listing.py [N]

Builds N copies of the sample session (each with its two context files) in a temporary
store, then times what the Sessions page computes: the listing (session.json files
only), then the overview of every session (its active context, tokens counted).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

from soap_core import Store, session_overview

SAMPLE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "soap" / "agents" / "HelloPete"


def build(root: Path, sessions: int) -> None:
    [template] = list(SAMPLE.iterdir())
    for _ in range(sessions):
        name = f"20250611-{uuid.uuid4()}"
        target = root / "agents" / "HelloPete" / name
        shutil.copytree(template, target)
        data = json.loads((target / "session.json").read_text())
        data["uuid"] = name
        (target / "session.json").write_text(json.dumps(data, indent=2))


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000
    with tempfile.TemporaryDirectory() as tmp:
        build(Path(tmp), count)
        store = Store(tmp)
        started = time.perf_counter()
        summaries = store.sessions()
        listed = time.perf_counter() - started
        started = time.perf_counter()
        rows = [session_overview(store, s) for s in summaries]
        overviews = time.perf_counter() - started
    print(f"{count} sessions: listing {listed:.2f} s, overviews (active contexts, tokens) {overviews:.2f} s")
    assert len(rows) == count


if __name__ == "__main__":
    main()
