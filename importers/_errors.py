"""The one error an importer raises on purpose."""

from __future__ import annotations

from pathlib import Path

from soap_core import SoapError


class ImporterError(SoapError):
    """A source cannot be imported: no such directory, not the expected layout, a file
    that its own framework could not read either. Carries the path it concerns, so the
    command line shows one line: ``<path>: <problem>``."""

    def __init__(self, path: Path | str, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

    def __reduce__(self) -> tuple[type[ImporterError], tuple[Path, str]]:
        return (type(self), (self.path, self.problem))
