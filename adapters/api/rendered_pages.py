"""List pages the store renders as JSON (ADR-0041): each item the same object its response
model gives (``tests/test_rendered_pages.py`` holds the two equal), declared once here."""

from __future__ import annotations

import json
from functools import cache

from domain.dream_run import FAILURE_REASONS
from projections.dialect import Dialect

NOW = "now"  # the parameter of the request's time, in microseconds


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
def candidate_summary(dialect: Dialect) -> str:
    """A row of the review inbox as ``CandidateSummaryView``, its age as of parameter
    ``NOW``."""
    sql = dialect.json
    return sql.document((
        ("scope_id", sql.text("scope_id")),
        ("candidate_id", sql.text("candidate_id")),
        ("family", sql.text("family")),
        ("status", sql.text("status")),
        ("version", sql.number("version")),
        ("target", sql.raw("target")),
        ("reason", sql.text("reason")),
        ("conflict", sql.boolean("conflict")),
        ("conflict_code", sql.text("conflict_code")),
        ("proposer", sql.text("proposer")),
        ("run_id", sql.text("run_id")),
        ("proposed_at", sql.time("proposed_at")),
        ("updated_at", sql.time("updated_at")),
        ("decided_at", sql.time("decided_at")),
        ("age_seconds", sql.seconds_since("proposed_at", dialect.param(NOW))),
        ("result", sql.raw("result")),
        ("decided_by", sql.text("decided_by")),
        ("decision_reason", sql.text("decision_reason")),
        ("evidence_erased", sql.boolean("evidence_erased")),
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
