"""Ids as a person reads them (issue 23): every page names a session or context by its short
id, with the full one a hover away, and prints no full uuid in its running text (the
fork tree's node details are the one place a full id is shown, to be copied)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from replay import short_id
from soap_core import Store
from tests.apptest import open_app_page

FULL_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
PAGES = ["context", "traceback", "token_budget", "replay", "compaction", "object_state"]


def analyst_uuid(root: Path) -> str:
    [summary] = [s for s in Store(root).sessions() if s.role == "Analyst"]
    return summary.uuid


@pytest.mark.parametrize("page", PAGES)
def test_running_text_shows_short_ids_and_the_full_one_on_hover(page: str, workbench_store: Path) -> None:
    uuid = analyst_uuid(workbench_store)
    at = open_app_page(workbench_store, page, session=uuid)
    assert not at.exception
    shown = [
        *(t.value for t in at.text),
        *(c.value for c in at.caption),
        *(m.value.replace("\\", "") for m in at.markdown),
        *(e.value for kind in (at.info, at.warning, at.error, at.subheader) for e in kind),
    ]
    full = [line for line in shown if FULL_ID.search(line)]
    assert not full, full
    if page in ("token_budget", "compaction", "object_state"):
        [line] = [t for t in at.text if t.value.startswith(f"Analyst / {short_id(uuid)}")]
        assert line.proto.help == f"session id {uuid}"
