"""Where the workers find the store: a location string and its storage options.

Every worker opens the store itself from a :class:`Location` (a path or an fsspec URL
such as ``s3://bucket/prefix``, through :func:`soap_core.open_store`): the location
travels to the workers, never an open store, and its storage options (credentials,
endpoints) travel with it in the task's arguments, never written to disk, so that the
workers of a cluster started elsewhere (``--address``) reach the bucket too."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from soap_core import Store, open_store


@dataclass(frozen=True)
class Location:
    """A store's location and the options its filesystem needs (picklable plain data)."""

    url: str
    storage_options: Mapping[str, Any] = field(default_factory=dict, repr=False)
    """Kept out of ``repr`` so that no log or error message shows a credential."""


def open_location(location: Location) -> Store:
    """The store at ``location``: the one place workers open a store."""
    return open_store(location.url, dict(location.storage_options) or None)
