"""A local mirror of a store on object storage, kept in sync with its bucket.

The store code works on folders (atomic renames, save locks, a SQLite catalog), so a
store at ``s3://bucket/prefix`` is a folder in the user's cache that this module keeps
equal to the bucket:

* :meth:`Mirror.pull` lists the bucket once (``fs.find``) and downloads only the objects
  whose ETag changed since the manifest noted them; an unchanged object keeps its file,
  so the catalog, which looks at file signatures, reads nothing it read before. What a
  pull takes and holds back, so that no half-saved session shows, is
  :mod:`soap_core._pull_plan`'s rule.
* Downloaded bytes go through ``blobs/``, a cache of immutable files named by ETag: the
  tree's file is a hard link to its blob, and a version seen before is never fetched
  again.
* Every file the store writes under the mirror is put to the bucket as soon as it is
  replaced (:mod:`soap_core._write_hooks`), in the store's own order (contexts first,
  ``session.json`` last). An object the mirror holds is put only if the bucket still has
  the version the mirror read (S3 ``If-Match``; a new one with ``If-None-Match: *``);
  otherwise the file is fetched back and :class:`SaveConflictError` names the object.
  Other filesystems have no conditional PUT here: the version is checked with a HEAD
  just before the PUT, which leaves a window of one request between the two.
* The workbench's own files (catalog, save locks, temp files: names starting with
  ``.soapwb`` or temp names) are never put, and the manifest holds keys and versions
  only: no storage option, no credential, is written anywhere.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from soap_core._errors import StoreError
from soap_core._pull_plan import (
    SEAL_FILE,
    SESSION_FILE,
    ObjectVersion,
    PullPlan,
    plan_pull,
    session_folder,
    session_prefixes,
)
from soap_core._saves import SaveConflictError
from soap_core._tempfiles import is_temp_name, temp_prefix
from soap_core._write_hooks import listen, stop_listening


class _NamedByURL(StoreError):
    """An error about an object or a store on object storage: its message starts with the
    URL (``path`` would mangle ``s3://`` into ``s3:/``), and it survives pickling, so a
    batch worker's error reaches the command whole."""

    def __init__(self, url: str, problem: str) -> None:
        super().__init__(url, problem)
        self.url = url
        self.args = (f"{url}: {problem}",)

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple[type[_NamedByURL], tuple[str, str]]:  # type: ignore[override]
        return (type(self), (self.url, self.problem))


class RemoteSaveConflictError(_NamedByURL, SaveConflictError):
    """:class:`SaveConflictError` for an object on the bucket: names its URL."""


class RemoteStoreError(_NamedByURL):
    """A store on object storage cannot be reached, listed or written: names the URL."""


def describe(exc: BaseException) -> str:
    """One line for a storage library's error (its type, then its message's first line)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def is_private(key: str) -> bool:
    """The workbench's own files (catalog, save and run locks, temp files): never put."""
    return any(part.startswith(".soapwb") or is_temp_name(part) for part in key.split("/"))


def is_safe_key(key: str) -> bool:
    """Whether the object key ``key`` stays inside the mirror as a path: no empty, ``.``
    or ``..`` part, no backslash or NUL (an S3 key may hold any of them)."""
    return not ("\\" in key or "\x00" in key) and all(part not in ("", ".", "..") for part in key.split("/"))


def _precondition_failed(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        response = getattr(seen, "response", None)
        if isinstance(response, dict) and response.get("Error", {}).get("Code") == "PreconditionFailed":
            return True
        seen = seen.__cause__ or seen.__context__
    return isinstance(exc, FileExistsError)


def version_of(info: dict[str, Any]) -> ObjectVersion:
    """An object's version from a listing entry: the ETag where the filesystem has one
    (S3 ``ETag``, GCS ``etag``/``generation``), else its size and modification time."""
    size = int(info.get("size") or 0)
    stamp = info.get("LastModified") or info.get("mtime") or info.get("updated") or info.get("created")
    if isinstance(stamp, datetime):
        stamp = stamp.timestamp()
    modified = float(stamp) if isinstance(stamp, int | float) else None
    etag = info.get("ETag") or info.get("etag") or info.get("generation")
    token = str(etag).strip('"') if etag else f"{size}:{modified}"
    return ObjectVersion(token, size, modified)


class Manifest:
    """Key -> the version the mirror holds (SQLite: a pull or a write changes one row)."""

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS objects (key TEXT PRIMARY KEY, etag TEXT, size INTEGER, modified REAL)"
            )
            self._db.execute("CREATE TABLE IF NOT EXISTS files (key TEXT PRIMARY KEY, signature TEXT)")

    def note_file(self, key: str, signature: str | None) -> None:
        """The mirrored file's signature once it holds the version noted for ``key``."""
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO files VALUES (?, ?)", (key, signature))

    def file_signatures(self, under: str = "") -> dict[str, str | None]:
        with self._lock:
            rows = self._db.execute(
                "SELECT key, signature FROM files WHERE substr(key, 1, ?) = ?", (len(under), under)
            ).fetchall()
        return dict(rows)

    def versions(self, under: str = "") -> dict[str, ObjectVersion]:
        with self._lock:
            rows = self._db.execute(
                "SELECT key, etag, size, modified FROM objects WHERE substr(key, 1, ?) = ?",
                (len(under), under),
            ).fetchall()
        return {key: ObjectVersion(etag, size, modified) for key, etag, size, modified in rows}

    def get(self, key: str) -> ObjectVersion | None:
        with self._lock:
            row = self._db.execute("SELECT etag, size, modified FROM objects WHERE key=?", (key,)).fetchone()
        return ObjectVersion(*row) if row else None

    def put(self, key: str, version: ObjectVersion) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO objects VALUES (?, ?, ?, ?)",
                (key, version.etag, version.size, version.modified),
            )

    def drop(self, key: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM objects WHERE key=?", (key,))
            self._db.execute("DELETE FROM files WHERE key=?", (key,))

    def close(self) -> None:
        with self._lock:
            self._db.close()


class Mirror:
    """The folder ``root`` (under ``cache_dir``) kept equal to the objects under ``url``.

    ``fs`` is the fsspec filesystem and ``fs_root`` the URL's path in it."""

    def __init__(self, url: str, fs: Any, fs_root: str, cache_dir: Path) -> None:
        self.url = url.rstrip("/")
        self.fs = fs
        self.fs_root = fs_root.rstrip("/")
        self.cache_dir = cache_dir
        name = self.fs_root.rsplit("/", 1)[-1] or "root"
        self.root = cache_dir / "tree" / name
        self.blobs = cache_dir / "blobs"
        for folder in (self.root, self.blobs):
            folder.mkdir(parents=True, exist_ok=True)
        self.manifest = Manifest(cache_dir / "manifest.sqlite3")
        self._lock = threading.RLock()
        self._unsealed: set[str] = set()
        """Session folders with an object put since their last seal."""
        self._created: list[str] | None = None
        """While :meth:`saving`: the objects the save created (none stood there before)."""
        self._conditional = bool({"s3", "s3a"} & set(_protocols(fs)))
        self.last_pull = float("-inf")
        listen(self.root, self)

    def close(self) -> None:
        stop_listening(self.root)
        self.manifest.close()

    # -- names ------------------------------------------------------------------------

    def key_of(self, path: Path | str) -> str:
        return os.path.relpath(os.path.abspath(path), os.path.abspath(self.root)).replace(os.sep, "/")

    def url_of(self, key: str) -> str:
        return f"{self.url}/{key}" if key else self.url

    def _remote(self, key: str) -> str:
        return f"{self.fs_root}/{key}" if key else self.fs_root

    def _prefixes(self, keys: list[str]) -> tuple[str | None, str | None]:
        tops = {key.split("/", 1)[0] for key in keys}
        tops.update(entry.name for entry in os.scandir(self.root) if entry.is_dir())
        return session_prefixes(self.root.name, tops)

    # -- pulling ----------------------------------------------------------------------

    def listing(self, under: str = "") -> dict[str, ObjectVersion]:
        """Every object under ``under`` (a key prefix) by key, as the bucket has it now."""
        base = self._remote(under.rstrip("/"))
        self.fs.invalidate_cache()
        try:
            found = self.fs.find(base, detail=True)
        except FileNotFoundError:
            found = {}
        except Exception as exc:  # any storage library's error: one line naming the URL
            raise RemoteStoreError(self.url_of(under), f"cannot list: {describe(exc)}") from None
        listed = {}
        for path, info in found.items():
            if not str(path).startswith(self.fs_root):
                continue
            key = str(path)[len(self.fs_root) :].lstrip("/")
            sealed = key.rsplit("/", 1)[-1] == SEAL_FILE  # listed for the plan, never mirrored
            if (
                info.get("type", "file") != "directory"
                and key.startswith(under)
                and is_safe_key(key)
                and (sealed or not is_private(key))
            ):
                listed[key] = version_of(info)
        return listed

    def check_reachable(self) -> None:
        """RemoteStoreError when the bucket (or the URL's first folder) is missing."""
        container = self.fs_root.lstrip("/").split("/", 1)[0]
        if not container or not set(_protocols(self.fs)) & _BUCKETED:
            return  # a filesystem without buckets: its listing says what is there
        try:
            self.fs.info(container)
        except FileNotFoundError:
            raise RemoteStoreError(self.url, f"no such bucket: {container}") from None
        except Exception as exc:
            raise RemoteStoreError(self.url, f"cannot reach the storage: {describe(exc)}") from None

    def pull(self, under: str = "", *, hold_back: bool = True) -> PullPlan:
        """Bring the mirror (the part under the key prefix ``under``) to what the bucket
        holds now; what it fetched, removed and held back."""
        with self._lock, self._pull_lock():
            listed = self.listing(under)
            plan = plan_pull(
                listed,
                self.manifest.versions(under),
                self._prefixes(list(listed)),
                time.time(),
                hold_back=hold_back,
            )
            for key in plan.remove:
                with contextlib.suppress(FileNotFoundError):
                    (self.root / key).unlink()
                self.manifest.drop(key)
            for key in plan.refresh:
                self.manifest.put(key, listed[key])
            for key in [*self._changed_here(listed, plan, under), *plan.fetch]:
                self._fetch(key, listed[key])
            if not under:
                self.last_pull = time.monotonic()
            return plan

    def _changed_here(self, listed: dict[str, ObjectVersion], plan: PullPlan, under: str) -> list[str]:
        """Mirrored files that no longer are what was fetched or put (a writer killed
        between its local write and its PUT, a hand edit): fetched back, mostly from the
        blob cache, so the mirror never serves what the bucket does not hold."""
        pending = {*plan.fetch, *plan.held}
        noted = self.manifest.file_signatures(under)
        return sorted(
            key
            for key, signature in noted.items()
            if key in listed and key not in pending and _file_signature(self.root / key) != signature
        )

    @contextlib.contextmanager
    def _pull_lock(self) -> Iterator[None]:
        """One pull at a time among the processes sharing this mirror."""
        fd = os.open(self.cache_dir / "pull.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _fetch(self, key: str, version: ObjectVersion) -> None:
        """Put the object's bytes at its place in the tree, through the blob cache."""
        blob = self.blobs / _blob_name(version)
        if not blob.exists():
            try:
                data = self.fs.cat_file(self._remote(key))
            except Exception as exc:
                raise RemoteStoreError(self.url_of(key), f"cannot read: {describe(exc)}") from None
            actual = hashlib.md5(data, usedforsecurity=False).hexdigest()
            if _is_md5(version.etag) and actual != version.etag:  # changed since it was listed
                version = ObjectVersion(actual, len(data), None)
                blob = self.blobs / _blob_name(version)
            _write_new(blob, data)
        target = self.root / key
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = target.parent / f"{temp_prefix(target)}{secrets.token_hex(4)}.tmp"
        try:
            os.link(blob, staging)
        except OSError:
            shutil.copyfile(blob, staging)
        os.replace(staging, target)
        self.manifest.put(key, version)
        self.manifest.note_file(key, _file_signature(target))

    def prune_blobs(self) -> int:
        """Remove the blobs no tree file links to any more; how many went."""
        removed = 0
        for entry in os.scandir(self.blobs):
            with contextlib.suppress(OSError):
                if entry.stat().st_nlink == 1:
                    os.unlink(entry.path)
                    removed += 1
        return removed

    # -- pushing (soap_core._write_hooks calls these) ----------------------------------

    def file_written(self, path: Path) -> None:
        key = self.key_of(path)
        if is_private(key) or key.startswith(".."):
            return
        with self._lock:
            self._put(key, path.read_bytes())
            folder = session_folder(key, self._prefixes([key]))
            if folder is not None and "/" not in key[len(folder) + 1 :]:
                self._unsealed.add(folder)

    def folder_made(self, path: Path) -> None:
        """A new session folder: its files put, ``session.json`` last."""
        files = sorted(
            (p for p in path.rglob("*") if p.is_file() and not is_private(self.key_of(p))),
            key=lambda p: (p.name == SESSION_FILE and p.parent == path, str(p)),
        )
        for file in files:
            self.file_written(file)

    @contextlib.contextmanager
    def saving(self) -> Iterator[None]:
        """A save: if it fails part way (a conflict on a later object), the objects it
        created are deleted again, so no fork of a refused save is left on the bucket.
        (An object it replaced stays replaced: whole, and merged as a local save's.)"""
        with self._lock:
            self._created = []
            try:
                yield
            except BaseException:
                for key in self._created:
                    with contextlib.suppress(Exception):
                        self.fs.rm_file(self._remote(key))
                    with contextlib.suppress(OSError):
                        (self.root / key).unlink()
                    self.manifest.drop(key)
                raise
            finally:
                self._created = None

    def seal(self, folder_path: Path) -> None:
        """End a save of the session folder: if anything was put into it since its last
        seal, put a new seal, so that readers take the save whole
        (:mod:`soap_core._pull_plan`)."""
        folder = self.key_of(folder_path)
        with self._lock:
            if folder not in self._unsealed:
                return
            key = f"{folder}/{SEAL_FILE}"
            try:
                answer = self.fs.pipe_file(self._remote(key), secrets.token_hex(8).encode())
            except Exception as exc:
                raise RemoteStoreError(self.url_of(key), f"cannot write: {describe(exc)}") from None
            etag = answer.get("ETag") if isinstance(answer, dict) else None
            self.manifest.put(key, ObjectVersion(str(etag).strip('"') if etag else "?", 16))
            self._unsealed.discard(folder)

    def _put(self, key: str, data: bytes) -> None:
        held = self.manifest.get(key)
        remote = self._remote(key)
        try:
            if self._conditional:
                condition = {"IfMatch": f'"{held.etag}"'} if held else {"IfNoneMatch": "*"}
                answer = self.fs.pipe_file(remote, data, **condition)
            else:
                self._check_unchanged(key, held)
                answer = self.fs.pipe_file(remote, data)
        except SaveConflictError:
            raise
        except Exception as exc:
            if _precondition_failed(exc):
                self._conflict(key)
            self._unsent(key, held)
            raise RemoteStoreError(self.url_of(key), f"cannot write: {describe(exc)}") from None
        if held is None and self._created is not None:
            self._created.append(key)
        etag = answer.get("ETag") if isinstance(answer, dict) else None
        if etag:
            version = ObjectVersion(str(etag).strip('"'), len(data), None)
        else:
            self.fs.invalidate_cache()
            version = version_of(self.fs.info(remote))
        self.manifest.put(key, version)
        self.manifest.note_file(key, _file_signature(self.root / key))

    def _unsent(self, key: str, held: ObjectVersion | None) -> None:
        """A file the bucket did not take: the mirror must not keep it as if it had. A
        new file goes; an old one is fetched again by the next pull."""
        if held is None:
            with contextlib.suppress(OSError):
                (self.root / key).unlink()
        else:
            self.manifest.drop(key)

    def _check_unchanged(self, key: str, held: ObjectVersion | None) -> None:
        self.fs.invalidate_cache()
        try:
            now: ObjectVersion | None = version_of(self.fs.info(self._remote(key)))
        except FileNotFoundError:
            now = None
        if (now is None) != (held is None) or (
            now is not None and held is not None and not now.same_as(held)
        ):
            self._conflict(key)

    def _conflict(self, key: str) -> None:
        """The bucket's object changed under this save: fetch it back, then refuse."""
        self.manifest.drop(key)
        remote = self._remote(key)
        self.fs.invalidate_cache()
        with contextlib.suppress(FileNotFoundError):
            self._fetch(key, version_of(self.fs.info(remote)))
        raise RemoteSaveConflictError(
            self.url_of(key),
            "changed on the bucket by another writer since it was read: not overwritten "
            "(load the session again and redo the change)",
        )


_BUCKETED = {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss"}
"""Filesystems whose URLs start with a bucket (or container) that must exist."""


def _protocols(fs: Any) -> tuple[str, ...]:
    protocol = getattr(fs, "protocol", ())
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


def _file_signature(path: Path) -> str | None:
    """Size, modification time and inode: not the change time, which a hard link to the
    same blob moves without changing the file."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return f"{info.st_size}:{info.st_mtime_ns}:{info.st_ino}"


def _is_md5(etag: str) -> bool:
    return len(etag) == 32 and all(c in "0123456789abcdef" for c in etag)


def _blob_name(version: ObjectVersion) -> str:
    return hashlib.sha256(f"{version.etag}\n{version.size}".encode()).hexdigest()[:40]


def _write_new(path: Path, data: bytes) -> None:
    staging = path.parent / f"{temp_prefix(path)}{secrets.token_hex(4)}.tmp"
    with open(staging, "wb") as handle:
        handle.write(data)
    os.chmod(staging, 0o644)
    os.replace(staging, path)
