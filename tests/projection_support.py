"""Helpers shared by the read-model tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing, contextmanager
from typing import Any

from adapters.settings import Settings
from adapters.store.view_batches import open_view, rebuild
from projections.base import ProjectionSpec


@contextmanager
def rebuilt_view(spec: ProjectionSpec[Any], settings: Settings, head: int) -> Iterator[Any]:
    """The view of ``spec`` rebuilt from every event (which must reach ``head``), open."""
    assert rebuild(spec, settings) == head
    with closing(open_view(spec, settings)) as view:
        yield view
