"""Where the workers find the store: a location string and its storage options.

Every worker opens the store itself from a :class:`Location` (a path today, an
``s3://`` URL once ``soap_core.open_store`` lands): the location travels to the
workers, never an open store, and its storage options (credentials, endpoints) travel
with it in memory only, never written to disk."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from soap_core import Store


@dataclass(frozen=True)
class Location:
    """A store's location and the options its filesystem needs (picklable plain data)."""

    url: str
    storage_options: Mapping[str, Any] = field(default_factory=dict, repr=False)
    """Kept out of ``repr`` so that no log or error message shows a credential."""


def open_location(location: Location) -> Store:
    """The store at ``location``: the one place workers open a store, so that object
    storage needs a change here only."""
    return Store(location.url)
