"""The workbench on a store on S3 (a moto server on 127.0.0.1): every page opens on the
bucket's session, through the mirror, as on a folder."""

from __future__ import annotations

import json

import pytest

from tests.apptest import PAGES, open_app_page
from tests.conftest import SESSION_UUID
from tests.s3_server import S3
from tests.test_store_backends import fixture_files


@pytest.mark.parametrize("page", PAGES)
def test_every_page_opens_on_a_store_on_s3(page: str, s3: S3, monkeypatch: pytest.MonkeyPatch) -> None:
    url = s3.fresh_prefix()
    for rel, data in fixture_files().items():
        s3.put(f"{url}/{rel}", data)
    monkeypatch.setenv("SOAPWB_STORAGE_OPTIONS", json.dumps(s3.options))  # as `soapwb ui` passes them
    at = open_app_page(url, page, timeout=120, session=SESSION_UUID)  # type: ignore[arg-type]
    assert not at.exception
    assert not [e.value for e in at.error], [e.value for e in at.error]
    shown = [*(m.value for m in at.markdown), *(t.value for t in at.text), *(c.value for c in at.caption)]
    assert not any("cache" in line and "remote" in line for line in shown)  # never the mirror's path
    if page == "sessions":
        [listing] = at.dataframe
        assert listing.value["session"].tolist() == [SESSION_UUID]
        assert listing.value["messages"].tolist() == [6]


def test_a_page_names_a_bucket_object_or_a_mirrored_file_relative_to_the_store(
    s3: S3, monkeypatch: pytest.MonkeyPatch
) -> None:
    from soap_core import FormatError, RemoteStoreError, open_store
    from workbench.views import error_first

    url = s3.fresh_prefix()
    for rel, data in fixture_files().items():
        s3.put(f"{url}/{rel}", data)
    store = open_store(url, s3.options)
    object_error = RemoteStoreError(f"{url}/agents/HelloPete/x/c.json", "cannot write: refused")
    assert error_first(object_error, url) == "cannot write: refused — agents/HelloPete/x/c.json"
    file_error = FormatError(store.root / "agents" / "HelloPete" / "c.json", "$", "not valid JSON")
    assert error_first(file_error, url) == "not valid JSON — agents/HelloPete/c.json"
