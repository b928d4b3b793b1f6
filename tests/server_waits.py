"""Counting a PostgreSQL connection's waits on the server, by psycopg's own names for what it
waits on (its private names, pinned by the psycopg 3 requirement)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

Counted = Callable[[psycopg.Connection[Any], str], bool]


def counted_waits(monkeypatch: pytest.MonkeyPatch, counted: Counted) -> list[str]:
    """The names of the waits ``counted(connection, name)`` accepts, from now to the test's
    end."""
    waited: list[str] = []
    wait = psycopg.Connection.wait

    def counting(self: psycopg.Connection[Any], *args: Any, **kwargs: Any) -> Any:
        name = getattr(args[0], "__qualname__", "")
        if counted(self, name):
            waited.append(name)
        return wait(self, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "wait", counting)
    return waited
