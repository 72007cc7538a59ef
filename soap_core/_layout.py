"""Where a store keeps its sessions: the two on-disk generations of peteos.

* peteos <= 0.5 (and our runtime): ``<config_dir>/agents/<role>/<session_uuid>/``. The
  role is the folder name.
* peteos 0.6: ``<CONFIG_DIR>/sessions/<session_uuid>/`` beside
  ``<CONFIG_DIR>/instances/<name>/agentic_object.json``. A session folder says nothing
  about its object; an instance's ``thread_store`` (thread id -> session uuid) and its
  ``class.qualname`` are the only link, so the role of a session comes from there, and a
  session no instance claims has :data:`UNKNOWN_ROLE`.

``CONFIG_DIR`` is the folder holding ``peteos.json`` when peteos found it in a dedicated
place (XDG, /etc), and ``<that folder>/.peteos`` when it came from ``$PETEOS_CONFIG`` or
the working directory (``peteos/config.py``, ``_resolve_config_path``). A user may point
the workbench at any of: the folder holding ``peteos.json``, its ``.peteos``, or the
``agents`` / ``sessions`` folder itself; :func:`locate` resolves all of them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from soap_core._errors import SoapError, StoreError
from soap_core._jsonio import read_json
from soap_core._paths import OutsideStoreError, inside, outside_problem

AGENTS_DIR = "agents"
SESSIONS_DIR = "sessions"
INSTANCES_DIR = "instances"
INSTANCE_FILE = "agentic_object.json"
PETEOS_CONFIG_FILE = "peteos.json"
DOT_PETEOS = ".peteos"
UNKNOWN_ROLE = "(unknown)"
"""The role of a 0.6 session that no instance's ``thread_store`` names."""

Layout = Literal["agents", "sessions"]
"""``agents``: peteos <= 0.5 and our runtime; ``sessions``: peteos 0.6."""


@dataclass(frozen=True)
class StoreLayout:
    """The folders of one store: where sessions of each generation live."""

    config_dir: Path
    """CONFIG_DIR: the folder holding ``agents/``, ``sessions/`` and ``instances/``."""
    agents_dir: Path
    sessions_dir: Path

    @property
    def instances_dir(self) -> Path:
        return self.config_dir / INSTANCES_DIR

    @property
    def peteos_json(self) -> Path | None:
        """The ``peteos.json`` this config dir belongs to, where there is one."""
        for candidate in (self.config_dir / PETEOS_CONFIG_FILE, self.config_dir.parent / PETEOS_CONFIG_FILE):
            if candidate.is_file() and (
                candidate.parent == self.config_dir or self.config_dir.name == DOT_PETEOS
            ):
                return candidate
        return None


def locate(path: Path) -> StoreLayout:
    """The layout of the store at ``path`` (which need not exist yet)."""
    if path.name == AGENTS_DIR and not (path / AGENTS_DIR).is_dir():
        return StoreLayout(path.parent, path, path.parent / SESSIONS_DIR)
    if path.name == SESSIONS_DIR and not (path / SESSIONS_DIR).is_dir():
        return StoreLayout(path.parent, path.parent / AGENTS_DIR, path)
    config_dir = path
    dot = path / DOT_PETEOS
    if dot.is_dir() and not (path / SESSIONS_DIR).is_dir() and not (path / AGENTS_DIR).is_dir():
        config_dir = dot
    return StoreLayout(config_dir, config_dir / AGENTS_DIR, config_dir / SESSIONS_DIR)


@dataclass(frozen=True)
class InstanceClaim:
    """What an instance file says about one session it owns."""

    role: str
    instance: str
    thread_id: str


def _class_name(data: Any) -> str | None:
    cls = data.get("class") if isinstance(data, dict) else None
    qualname = cls.get("qualname") if isinstance(cls, dict) else None
    if not isinstance(qualname, str) or not qualname:
        return None
    return qualname.rsplit(".", 1)[-1]  # peteos names the role after ``__name__``


def read_instances(instances_dir: Path) -> tuple[dict[str, InstanceClaim], list[SoapError]]:
    """Session uuid -> the instance that claims it, from every instance file (read once).

    A broken instance file is reported, never fatal: its sessions are then listed with
    :data:`UNKNOWN_ROLE`; so is one that a link leads outside the store to (not read).
    """
    claims: dict[str, InstanceClaim] = {}
    errors: list[SoapError] = []
    try:
        entries = sorted(e.name for e in os.scandir(instances_dir) if e.is_dir() and e.name[0] != ".")
    except OSError:
        return claims, errors
    for name in entries:
        path = instances_dir / name / INSTANCE_FILE
        if not inside(instances_dir, path):  # a link out of the store: reported, not read
            errors.append(OutsideStoreError(path, outside_problem(path, "instance file")))
            continue
        if not path.is_file():
            continue
        try:
            data = read_json(path)
        except SoapError as exc:
            errors.append(exc)
            continue
        role = _class_name(data)
        store = data.get("thread_store") if isinstance(data, dict) else None
        if role is None or not isinstance(store, dict):
            errors.append(StoreError(path, "no class.qualname or thread_store: its sessions have no role"))
            continue
        for thread_id, session_uuid in store.items():
            if isinstance(session_uuid, str):
                claims.setdefault(session_uuid, InstanceClaim(role, name, str(thread_id)))
    return claims, errors
