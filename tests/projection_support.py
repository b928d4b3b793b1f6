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


def tamper(settings: Settings, spec: ProjectionSpec[Any], statement: str) -> None:
    """Change a live view behind its runner's back (an auditor's check is only worth something
    if it can fail): ``statement``, with ``{table}`` standing for the view's main table."""
    with closing(open_view(spec, settings)) as view, view._writing() as cursor:
        cursor.execute(statement.format(table=view.table()), {})
