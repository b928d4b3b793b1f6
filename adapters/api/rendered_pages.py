"""List pages the store renders as JSON (ADR-0041): each item the same object its response
model gives (``tests/test_rendered_pages.py`` holds the two equal), declared once here. The
runs list's and the review inbox's items are declared by their views, which keep them
rendered in the rows (ADR-0042)."""

from __future__ import annotations

import json
from functools import cache

from projections.dialect import Dialect


@cache
def scope_summary(dialect: Dialect) -> str:
    """A row of the scope catalogue, with the caller's ``roles``, as ``ScopeSummaryView``."""
    sql = dialect.json
    return sql.document((
        ("scope_id", sql.text("scope_id")),
        ("settings", sql.raw("settings")),
        ("created_at", sql.time("created_at")),
        ("updated_at", sql.time("updated_at")),
        ("roles", sql.raw("roles")),
        ("position", sql.number("position")),
    ))


def page_body(items: str, documents: list[str], next_cursor: str | None) -> bytes:
    """A page ``{items: [...], "next_cursor": ...}`` around documents rendered by the store."""
    return (f'{{"{items}":[{",".join(documents)}],'
            f'"next_cursor":{json.dumps(next_cursor)}}}').encode()
