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
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks._harness import Bench, best_time
from benchmarks._stores import shared_store
from soap_core import RemoteStore, Store, open_store
from soap_core._catalog import is_catalog_file
from soap_core._pull_plan import plan_pull


def _upload(s3: object, root: Path, url: str) -> int:
    files = [
        p
        for p in sorted(root.rglob("*"))
        if p.is_file() and not is_catalog_file(p) and ".soapwb" not in p.as_posix()
    ]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda p: s3.put(f"{url}/{p.relative_to(root).as_posix()}", p.read_bytes()), files))  # type: ignore[attr-defined]
    return len(files)


def _client_side(store: RemoteStore) -> tuple[Callable[[], object], float]:
    """A pull and a listing with the bucket's listing already in hand: the mirror's own
    work (ETags against the manifest, the plan, the catalog's walk); and how long the
    bucket's listing took (moto's figure: a pure-Python server, seconds for a few
    thousand objects, so it is timed once)."""
    begun = time.perf_counter()
    listed = store.remote.listing()
    listing = time.perf_counter() - begun

    def work() -> None:
        plan_pull(listed, store.remote.manifest.versions(), store.remote._prefixes(list(listed)), time.time())
        store.remote.last_pull = time.monotonic()  # the listing is in hand: no pull of its own
        store.sessions()

    return work, listing


def run(bench: Bench) -> None:
    from tests.s3_server import start_server

    # moto serves some hundred requests a second: the upload and the first pull are most of this section
    sessions = bench.scale(500, 100)
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

        warm = best_time(warm_listing, 1)
        warm_gets = s3.log.count(prefix) - cold_gets
        work, listing = _client_side(store)
        client = best_time(work, 3)
        local = Store(root)
        local.sessions()
        baseline = best_time(local.sessions, 3)
        bench.ratio(
            f"listing {sessions:,} sessions on S3, nothing changed, besides the bucket's own listing",
            client,
            baseline,
            3,
            baseline_is="the same listing of the same store in a local folder, warm catalog",
            note=f"{client * 1000:.0f} ms vs {baseline * 1000:.0f} ms: {objects:,} ETags compared with the "
            f"manifest, then the catalog's stat walk; {warm_gets} objects downloaded; the whole warm "
            f"listing with the bucket's listing: {warm:.1f} s",
        )
        bench.figure(
            f"the bucket listing itself ({objects:,} objects, moto on 127.0.0.1)",
            listing,
            "s",
            note=f"one request per 1,000 objects, {listing / max(objects / 1000, 1) * 1000:.0f} ms each from moto "
            "(a pure-Python server on this machine): the server's figure, not the mirror's",
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
