"""The two rules every path the store builds or opens obeys, kept in one place.

* **A name is one path component.** A session uuid, a role, a context id or a record id
  becomes a file or folder name; whether a user typed it or a file held it, it must be a
  plain name (no separator, not ``.`` or ``..`` nor anything else starting with a dot,
  which would be hidden from every listing, no control character, no lone surrogate,
  which has no UTF-8 form, not too long for a file name).
  :func:`safe_name` refuses anything else *before* it is joined to a path, on the write
  and the lookup side; the readers refuse such ids while parsing, by the same rule
  (:mod:`soap_core._ids`).
* **A path stays inside the store.** A symlink in a store (a role or session folder, a
  context file, a record folder) may point anywhere; following one that leads outside
  would read, or write forks and records, into somebody else's files. :func:`inside`
  says where a path really leads, and :func:`confine` refuses a path that leads out;
  listings report such a link as a broken entry instead of following it.

Links that stay inside the store (a role folder linked to another) are followed as
before, and so is a store whose own folder, or whose ``agents``/``sessions`` folder, is a
link: that is where the user put it.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path

from soap_core._errors import StoreError

MAX_NAME_BYTES = 200
"""Room for ``.json`` and the temp-file decoration within a 255-byte file name."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


class UnsafeNameError(StoreError):
    """An id that would not stay one path component (``../x``, ``a/b``, ...): refused."""


class OutsideStoreError(StoreError):
    """A path that leads outside the store once symlinks are followed: not followed."""


def unsafe_reason(name: object) -> str | None:
    """Why ``name`` cannot be used as one path component, or None if it can."""
    if not isinstance(name, str):
        return f"not a string but {type(name).__name__}"
    if not name:
        return "empty"
    if name in (".", ".."):
        return f"{name!r} names a folder, not an entry"
    if "/" in name or "\\" in name:
        return "holds a path separator"
    control = _CONTROL.search(name)
    if control is not None:
        return "holds a NUL character" if control.group() == "\x00" else "holds a control character"
    if _SURROGATE.search(name):
        return "holds a lone surrogate (no Unicode character)"
    if name.startswith("."):
        return "starts with a dot: a hidden entry, which readers skip"
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"longer than {MAX_NAME_BYTES} bytes"
    return None


def is_safe_name(name: object) -> bool:
    return unsafe_reason(name) is None


def safe_name(name: object, what: str, where: Path | str) -> str:
    """``name`` if it is a plain file name; UnsafeNameError naming ``where`` otherwise.

    ``what`` says which id it is ("session uuid", "active_context_id"), ``where`` the
    file or folder it came from or was meant for."""
    reason = unsafe_reason(name)
    if reason is not None:
        raise UnsafeNameError(where, f"{what} {name!r} is not a plain name ({reason}): refused")
    assert isinstance(name, str)
    return name


def real(path: Path | str) -> str:
    """Where ``path`` leads with every symlink followed (it need not exist)."""
    return os.path.realpath(path)


_resolved: dict[str, tuple[tuple[bool, int, int], str]] = {}


def real_folders(paths: Iterable[Path | str]) -> list[str]:
    """:func:`real` of each of a store's folders, resolved again only when it no longer
    leads to the same folder (device and inode, one ``stat``), or, for one that does not
    exist (a 0.5 store has no ``sessions``), when its parent no longer does: resolving
    walks every component with ``lstat``, and a cold load confines each file it opens
    (a third of its time went to resolving the same three folders)."""
    return [_real_folder(os.fspath(path)) for path in paths]


_RESOLVED_KEPT = 65_536
"""How many folders' resolutions :func:`_real_folder` keeps (all are forgotten past it)."""


def _real_folder(name: str) -> str:
    identity = _identity(name)
    kept = _resolved.get(name)
    if kept is not None and identity is not None and kept[0] == identity:
        return kept[1]
    resolved = real(name)
    if identity is not None:
        if len(_resolved) >= _RESOLVED_KEPT:
            _resolved.clear()
        _resolved[name] = (identity, resolved)
    return resolved


def real_entry(path: Path | str) -> str:
    """:func:`real` of ``path``, its folder's resolution kept as :func:`real_folders`
    keeps a store's: an entry that is not itself a link leads to where its folder leads,
    plus its name (one ``lstat`` and one ``stat``, where resolving walks every component:
    a load confines each file it opens). A link, a name that is not plain, or anything
    that cannot be looked at is resolved whole."""
    name = os.fspath(path)
    folder, _, leaf = name.rpartition(os.sep)
    if not folder or leaf in ("", ".", ".."):
        return real(name)
    try:
        if stat.S_ISLNK(os.lstat(name).st_mode):
            return real(name)
    except OSError:
        return real(name)
    return os.path.join(_real_folder(folder), leaf)


def _identity(path: str) -> tuple[bool, int, int] | None:
    """(exists, device, inode) of the folder ``path`` leads to, or of its parent when
    nothing is there (not even a dangling link): where it resolves to depends on nothing
    else. None when neither can be told."""
    try:
        info = os.stat(path)
        return True, info.st_dev, info.st_ino
    except FileNotFoundError:
        pass
    except OSError:
        return None
    try:
        os.lstat(path)
    except FileNotFoundError:
        try:
            parent = os.stat(os.path.dirname(path) or ".")
        except OSError:
            return None
        return False, parent.st_dev, parent.st_ino
    except OSError:
        return None
    return None  # a dangling link: resolved every time


def _within(target: str, root: str) -> bool:
    return target == root or target.startswith(root.rstrip(os.sep) + os.sep)


def inside(root: Path | str, path: Path | str) -> bool:
    """Whether ``path``, symlinks followed, is ``root`` (symlinks followed) or below it."""
    return _within(real(path), real(root))


def inside_any(roots: Iterable[str], path: Path | str) -> bool:
    """:func:`inside` for roots already resolved with :func:`real`."""
    target = real_entry(path)
    return any(_within(target, root) for root in roots)


def confine(roots: Iterable[str], path: Path | str, what: str = "path") -> Path:
    """``path`` if it leads inside one of ``roots`` (resolved); OutsideStoreError if not."""
    resolved = list(roots)
    if not inside_any(resolved, path):
        raise OutsideStoreError(path, outside_problem(path, what))
    return Path(path)


def outside_problem(path: Path | str, what: str = "path") -> str:
    """The one-line reason a listing or an error gives for a link leading out."""
    kind = "a symlink" if os.path.islink(path) else "a path through a symlink"
    return f"{what} is {kind} leading outside the store (to {real(path)}): not followed"


def link_escapes(roots: Iterable[str], path: Path | str) -> bool:
    """True when ``path`` is itself a symlink whose target is outside ``roots``: the
    cheap check for entries of a folder already known to be inside (one ``lstat``)."""
    return os.path.islink(path) and not inside_any(roots, path)
