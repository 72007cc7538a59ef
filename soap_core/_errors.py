"""Typed errors for everything that reads or writes a sOAP store.

Every error carries the file (and, where it applies, the JSON path inside it) that it
concerns, so that a command line or a page can show one clear line instead of a
traceback, and a listing can mark one broken session while still showing the rest.
"""

from __future__ import annotations

from pathlib import Path


class SoapError(Exception):
    """Base class of every error soap_core raises on purpose."""


class FormatError(SoapError):
    """A file exists but its content is not what the sOAP format allows."""

    def __init__(self, path: Path | str | None, json_path: str, problem: str) -> None:
        self.path = Path(path) if path is not None else None
        self.json_path = json_path
        self.problem = problem
        where = str(self.path) if self.path is not None else "<memory>"
        super().__init__(f"{where}: at {json_path}: {problem}")

    def __reduce__(self) -> tuple[type[FormatError], tuple[Path | None, str, str]]:
        return (type(self), (self.path, self.json_path, self.problem))  # picklable for caches

    def at(self, path: Path | str) -> FormatError:
        """The same error, now naming the file it was found in."""
        return FormatError(path, self.json_path, self.problem)


class StoreError(SoapError):
    """The store itself cannot be used: a missing directory, an unwritable file."""

    def __init__(self, path: Path | str, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

    def __reduce__(self) -> tuple[type[StoreError], tuple[Path, str]]:
        return (type(self), (self.path, self.problem))


class SessionNotFoundError(StoreError):
    """No session matches the uuid or prefix that was asked for."""


class AmbiguousSessionError(StoreError):
    """A uuid prefix matches more than one session."""


class ContextNotFoundError(StoreError):
    """A session names a context (active, or asked for) that has no readable file."""
