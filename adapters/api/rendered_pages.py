"""List pages the store renders as JSON (ADR-0041): each item the same object its response
model gives (``tests/test_rendered_pages.py`` holds the two equal), declared once here. The
review inbox's item is declared by its view, which keeps it rendered in the row (ADR-0042)."""

from __future__ import annotations

import json
from functools import cache

from domain.dream_run import FAILURE_REASONS
from projections.dialect import Dialect


@cache
def run_summary(dialect: Dialect) -> str:
    """A row of the runs view as ``DreamRunSummary``."""
    sql = dialect.json
    return sql.document((
        ("scope_id", sql.text("scope_id")),
        ("run_id", sql.text("run_id")),
        ("operation", sql.text("operation")),
        ("status", sql.text("status")),
        ("outcome", sql.text("outcome")),
        ("target", sql.raw("target")),
        ("candidate", sql.present("candidate_id", sql.object((
            ("candidate_id", sql.text("candidate_id")),
            ("version", sql.number("candidate_version")))))),
        ("error", sql.text("error")),
        ("reason", sql.mapped("error", FAILURE_REASONS, "The run failed (", ").")),
        ("accepted_at", sql.time("accepted_at")),
        ("started_at", sql.time("started_at")),
        ("completed_at", sql.time("completed_at")),
        ("attempt_count", sql.number("attempt_count")),
        ("reused", sql.boolean("reused")),
        ("trigger", sql.text("trigger")),
    ))


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
