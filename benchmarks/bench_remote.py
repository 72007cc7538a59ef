"""Stores on object storage: what a listing of a store on S3 costs once mirrored.

A generated store is put into a moto S3 server on 127.0.0.1 (started here), then listed
through :func:`soap_core.open_store` as ``soapwb ls`` does. The first listing downloads
every object; the figures are the next ones, as ratios to the same listing of the same
store in a local folder: the mirror adds one bucket listing (a request per 1,000
objects) and downloads only what changed.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from benchmarks._harness import Bench, best_time
from benchmarks._stores import shared_store
from soap_core import RemoteStore, Store, open_store
from soap_core._catalog import is_catalog_file


def _upload(s3: object, root: Path, url: str) -> int:
    count = 0
    for path in sorted(root.rglob("*")):
        if path.is_file() and not is_catalog_file(path) and ".soapwb" not in path.as_posix():
            s3.put(f"{url}/{path.relative_to(root).as_posix()}", path.read_bytes())  # type: ignore[attr-defined]
            count += 1
    return count


def run(bench: Bench) -> None:
    from tests.s3_server import start_server

    sessions = bench.scale(2_000, 100)
    root = shared_store(
        bench,
        f"store-remote-{sessions}",
        sessions=sessions,
        messages=20,
        fork_rate=0.2,
        chain_depth=3,
        seed=12,
    )
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        os.environ.setdefault(name, value)
    os.environ["SOAPWB_CACHE_DIR"] = tempfile.mkdtemp(prefix="soapwb-remote-bench-")
    servers = start_server()
    s3 = next(servers)
    try:
        url = s3.fresh_prefix()
        objects = _upload(s3, root, url)
        prefix = url.removeprefix("s3://")
        store = open_store(url, s3.options)
        assert isinstance(store, RemoteStore)
        cold = best_time(store.sessions, 1)
        cold_gets = s3.log.count(prefix)

        def warm_listing() -> None:
            store.refresh(force=True)
            store.sessions()

        warm = best_time(warm_listing, 3)
        warm_gets = s3.log.count(prefix) - cold_gets
        listing = best_time(store.remote.listing, 3)
        local = Store(root)
        local.sessions()
        baseline = best_time(local.sessions, 3)
        bench.ratio(
            f"listing {sessions:,} sessions on S3, nothing changed, besides the bucket's own listing",
            max(warm - listing, 0.0),
            baseline,
            3,
            baseline_is="the same listing of the same store in a local folder, warm catalog",
            note=f"{(warm - listing) * 1000:.0f} ms vs {baseline * 1000:.0f} ms: comparing {objects:,} "
            f"ETags with the manifest, then the catalog's stat walk; {warm_gets} objects downloaded",
        )
        bench.figure(
            f"the bucket listing itself ({objects:,} objects, moto on 127.0.0.1)",
            listing,
            "s",
            note="one request per 1,000 objects; moto, a pure-Python server, scans the whole bucket for "
            "each page, so this is moto's figure, not S3's (tens of ms a page)",
        )
        bench.figure(
            f"objects downloaded by a listing of {sessions:,} unchanged sessions",
            warm_gets,
            "GETs",
            "0",
            warm_gets == 0,
            note=f"the first listing downloaded {cold_gets:,} of {objects:,} objects in {cold:.1f} s "
            "(identical objects are fetched once: the blob cache is keyed by ETag)",
        )
    finally:
        next(servers, None)
