"""One opener for every store a user names: a folder, or a URL on object storage.

``open_store("path/to/store")`` and ``open_store("file:///path")`` give the folder's
:class:`~soap_core.Store` as before. Any other fsspec URL (``s3://bucket/prefix``,
``gs://...``) gives a :class:`RemoteStore`: the same store code on a local mirror of the
bucket (:mod:`soap_core._mirror`) that pulls before it answers and puts every file the
store writes. Credentials and endpoint come from where boto3 and s3fs read them
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_PROFILE``...) or from storage
options (``--storage-option endpoint_url=http://...``); they are handed to fsspec and
never written anywhere.

The mirror lives in the user's cache (``$SOAPWB_CACHE_DIR``, else ``$XDG_CACHE_HOME``
or ``~/.cache``, then ``soapwb/remote/<digest of the URL and endpoint>/``); its catalog
and save locks sit beside the mirrored files there, never in the bucket.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from soap_core._catalog import Catalog, _cache_home
from soap_core._mirror import Mirror, RemoteStoreError, describe
from soap_core._session import Session
from soap_core._store import SessionSummary, Store

REFRESH_EVERY_S = float(os.environ.get("SOAPWB_REMOTE_REFRESH_S", "2"))
"""A remote store pulls at most this often on its own (a listing per page run would cost
one request per 1,000 objects each time); :meth:`RemoteStore.refresh` pulls at once."""
STORAGE_OPTIONS_ENV = "SOAPWB_STORAGE_OPTIONS"
"""The storage options as a JSON object, for processes started by ``soapwb ui``."""
_LOCAL_PROTOCOLS = ("file", "local")
_PROTOCOL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+$")

_mirrors: dict[tuple[str, str], Mirror] = {}
_mirrors_lock = threading.Lock()


def is_remote(location: str | os.PathLike[str]) -> bool:
    """Whether ``location`` is a URL of a filesystem other than the local one."""
    protocol, sep, _ = os.fspath(location).partition("://")
    return bool(sep and _PROTOCOL.match(protocol)) and protocol.lower() not in _LOCAL_PROTOCOLS


def parse_storage_options(pairs: Iterable[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings as fsspec storage options; ``true``/``false`` become booleans.
    ValueError naming a pair without ``=``."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"storage option {pair!r} is not KEY=VALUE")
        lowered = value.strip().lower()
        options[key.strip()] = {"true": True, "false": False}.get(lowered, value)
    return options


_defaults: dict[str, Any] | None = None


def use_storage_options(options: Mapping[str, Any] | None) -> None:
    """The storage options :func:`open_store` uses when it is given none, for the whole
    process (the command line sets them once from ``--storage-option``)."""
    global _defaults
    _defaults = dict(options) if options is not None else None


def default_storage_options() -> dict[str, Any]:
    """What :func:`use_storage_options` set, else :data:`STORAGE_OPTIONS_ENV`'s."""
    return dict(_defaults) if _defaults is not None else storage_options_from_env()


def storage_options_from_env() -> dict[str, Any]:
    """The storage options a parent process passed in :data:`STORAGE_OPTIONS_ENV`."""
    text = os.environ.get(STORAGE_OPTIONS_ENV)
    if not text:
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {}


def open_store(location: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None) -> Store:
    """The store at ``location``: a folder (or ``file://`` URL) as :class:`Store`, any
    other fsspec URL as a :class:`RemoteStore` on a freshly pulled mirror. A bucket that
    cannot be reached, listed or found raises :class:`RemoteStoreError` naming the URL."""
    text = os.fspath(location)
    if not is_remote(text):
        if "://" in text:
            text = text.partition("://")[2]
        return Store(Path(text).expanduser())
    options = dict(storage_options) if storage_options is not None else default_storage_options()
    mirror = _mirror_for(text.rstrip("/"), options)
    return RemoteStore(mirror)


def _endpoint(options: Mapping[str, Any]) -> str:
    client = options.get("client_kwargs")
    from_client = client.get("endpoint_url") if isinstance(client, dict) else None
    return str(
        options.get("endpoint_url")
        or from_client
        or os.environ.get("AWS_ENDPOINT_URL_S3")
        or os.environ.get("AWS_ENDPOINT_URL")
        or ""
    )


def mirror_dir(url: str, storage_options: Mapping[str, Any] | None = None) -> Path:
    """Where the mirror of ``url`` lives: named by a digest of the URL and the endpoint
    (the same bucket name on two endpoints is two stores), never by a credential."""
    key = f"{url.rstrip('/')}\n{_endpoint(storage_options or {})}".encode("utf-8", "surrogatepass")
    return _cache_home() / "remote" / hashlib.sha256(key).hexdigest()[:24]


def _filesystem(url: str, options: dict[str, Any]) -> tuple[Any, str]:
    try:
        from fsspec.core import url_to_fs  # type: ignore[import-untyped]
    except ImportError:
        raise RemoteStoreError(
            url, "stores on object storage need fsspec: pip install 'soap-workbench[remote]'"
        ) from None
    protocol = url.partition("://")[0].lower()
    if protocol in ("s3", "s3a"):  # fail fast on an endpoint that does not answer
        options.setdefault("config_kwargs", {"connect_timeout": 5, "retries": {"max_attempts": 2}})
    try:
        fs, path = url_to_fs(url, **options)
    except ImportError as exc:
        raise RemoteStoreError(url, f"no filesystem for this URL: {describe(exc)}") from None
    except Exception as exc:
        raise RemoteStoreError(url, f"cannot open: {describe(exc)}") from None
    return fs, str(path)


def _mirror_for(url: str, options: dict[str, Any]) -> Mirror:
    """The process's one mirror of ``url`` (every opener shares it), pulled now."""
    cache_dir = mirror_dir(url, options)
    with _mirrors_lock:
        mirror = _mirrors.get((url, str(cache_dir)))
        if mirror is None:
            fs, path = _filesystem(url, options)
            cache_dir.mkdir(parents=True, exist_ok=True)
            mirror = Mirror(url, fs, path, cache_dir)
            try:
                mirror.check_reachable()
                mirror.prune_blobs()
            except BaseException:
                mirror.close()
                raise
            _mirrors[(url, str(cache_dir))] = mirror
    if time.monotonic() - mirror.last_pull >= REFRESH_EVERY_S:
        mirror.pull()
    return mirror


def forget_mirrors() -> None:
    """Close every mirror this process opened (tests start each with a fresh cache)."""
    with _mirrors_lock:
        for mirror in _mirrors.values():
            mirror.close()
        _mirrors.clear()


def local_root(location: str) -> str:
    """The folder of the open mirror of the store URL ``location``, else ``location``."""
    with _mirrors_lock:
        for mirror in _mirrors.values():
            if mirror.url == location.rstrip("/"):
                return str(mirror.root)
    return location


def shown(text: str) -> str:
    """``text`` with each open mirror's folder replaced by its store's URL: what error
    messages and the command line show instead of a cache path."""
    with _mirrors_lock:
        roots = [(str(m.root), m.url) for m in _mirrors.values()]
    for root, url in roots:
        if root in text:
            text = text.replace(root, url)
    return text


class RemoteStore(Store):
    """A :class:`Store` on the mirror of a bucket: it pulls (at most every
    :data:`REFRESH_EVERY_S`) before it lists, finds or loads, pulls a session's objects
    again before saving it, and its writes go to the bucket as they reach the mirror."""

    def __init__(self, mirror: Mirror, *, use_catalog: bool = True) -> None:
        super().__init__(mirror.root, use_catalog=use_catalog)
        self.remote = mirror
        self.url = mirror.url

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    def refresh(self, *, force: bool = False) -> None:
        """Pull what changed on the bucket (if the last pull is older than
        :data:`REFRESH_EVERY_S`, or ``force``)."""
        if force or time.monotonic() - self.remote.last_pull >= REFRESH_EVERY_S:
            self.remote.pull()

    def catalog(self) -> Catalog | None:
        self.refresh()
        return super().catalog()

    def scan_sessions(self) -> list[SessionSummary]:
        self.refresh()
        return super().scan_sessions()

    def save_session(self, session: Session) -> list[Path]:
        """Save as :meth:`Store.save_session` does, against the bucket's newest state of
        the session (pulled first, so the save merges with or refuses another writer's),
        then seal the save so readers take it whole (:meth:`Mirror.seal`)."""
        directory = session.directory or self.session_dir(session.role, session.uuid)
        self.remote.pull(self.remote.key_of(directory) + "/", hold_back=False)
        with self.remote.saving():
            written = super().save_session(session)
        self.remote.seal(directory)
        return written
