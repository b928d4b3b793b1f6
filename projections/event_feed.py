"""The event feed: each scope's events in store order, with their public fields only.

What another system follows instead of polling the lists: every event of an aggregate that
belongs to a scope, named (``Source.Recorded``, ``Candidate.Approved``...), with its position,
its aggregate's version and time, and the fields that identify and classify — ids, families,
revisions, statuses, outcomes, hashes. Free text (Source and entry text, proposals, reasons,
payloads, request bodies) never enters this view: a follower who may read it reads it from the
resource itself, with that resource's access rules.

An aggregate's scope is named by its first event; later events are matched through the
``owners`` table. Deployment-wide aggregates (principals, tokens) have no scope and no feed.
"""

from __future__ import annotations

import json
from abc import ABC
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking
from eventsourcing.projection import Projection

from domain.canonical import canonical_json
from projections.backends import PostgresProjectionView, SQLiteProjectionView
from projections.base import ProjectionSpec, ProjectionView
from projections.dialect import (
    AGGREGATE_ID,
    SCOPE_ID,
    Columns,
    ViewCursor,
    column_names,
    stored_text,
)
from projections.memo import memo_of
from projections.paging import check_limit
from projections.times import from_micros, to_micros

DEFAULT_LIMIT = 50
OWNERS = "_owners"
ENVELOPE = {"originator_id", "originator_version", "timestamp", "originator_topic"}
# Fields shown besides ids (``*_id``): what classifies an event without telling its content.
PUBLIC_FIELDS = frozenset({
    "family", "revision", "version", "status", "outcome", "operation", "trigger", "kind",
    "source_type", "eligibility", "attempt", "content_hash", "code", "error", "result",
    "target", "reused", "admin", "role", "principal", "requester", "proposer", "approver",
    "reviewer", "model_calls", "input_tokens", "output_tokens", "idempotency_key"})

COLUMNS: Columns = (
    ("position", "int", "PRIMARY KEY"),
    SCOPE_ID,
    ("aggregate_id", "key", "NOT NULL"),
    ("aggregate_version", "int", "NOT NULL"),
    ("event", "text", "NOT NULL"),
    ("recorded_at", "int", "NOT NULL"),
    ("fields", "text", "NOT NULL"),
)
OWNER_COLUMNS: Columns = (AGGREGATE_ID, SCOPE_ID)
FEED_NAMES = column_names(COLUMNS)


@dataclass(frozen=True)
class FeedEvent:
    position: int
    scope_id: str
    aggregate_id: str
    aggregate_version: int
    event: str
    recorded_at: datetime
    fields: dict[str, Any]


def public_fields(event: Any) -> dict[str, Any]:
    """The event's identifying and classifying fields, as JSON values; no free text."""
    shown: dict[str, Any] = {}
    for name, value in vars(event).items():
        if name in ENVELOPE or not (name.endswith("_id") or name in PUBLIC_FIELDS):
            continue
        plain = value.to_dict() if hasattr(value, "to_dict") else value
        if plain is None or isinstance(plain, str | int | float | bool | dict):
            shown[name] = plain
    return shown


def event_name(event: Any) -> str:
    """``Source.Recorded``: the aggregate's class and the event's."""
    return type(event).__qualname__


class EventFeedView(ProjectionView, ABC):
    def view_tables(self) -> list[str]:
        return [self.table(), self.table(OWNERS)]

    def view_statements(self) -> list[str]:
        return [
            self._table_ddl("", COLUMNS),
            self._index_ddl("scope_position", "", "scope_id, position"),
            self._table_ddl(OWNERS, OWNER_COLUMNS),
        ]

    # -- commands -----------------------------------------------------------------------------

    def record(self, event: Any, tracking: Tracking) -> None:
        """Add the event to its scope's feed (nothing, for a deployment-wide aggregate)."""
        aggregate = str(event.originator_id)
        with self.tracked(tracking) as cursor:
            scope = getattr(event, "scope_id", None)
            if isinstance(scope, str) and event.originator_version == 1:
                self._insert(cursor, OWNERS, {"aggregate_id": aggregate, "scope_id": scope})
                memo_of(self, OWNERS).remember(aggregate, scope)
            else:
                scope = self._owner(cursor, aggregate)
            if scope is None:
                return
            self._insert(cursor, "", {
                "position": tracking.notification_id, "scope_id": scope,
                "aggregate_id": aggregate, "aggregate_version": event.originator_version,
                "event": event_name(event), "recorded_at": to_micros(event.timestamp),
                "fields": stored_text(canonical_json(public_fields(event)))})

    def _owner(self, cursor: ViewCursor, aggregate: str) -> str | None:
        """The scope of an aggregate whose first event this view applied (an owner row never
        changes: remembered)."""

        def read() -> str | None:
            row = self._fetch_equal(cursor, ("scope_id",), {"aggregate_id": aggregate}, OWNERS)
            return None if row is None else str(row["scope_id"])

        scope: str | None = memo_of(self, OWNERS).recall(aggregate, read)
        return scope

    # -- queries ------------------------------------------------------------------------------

    def events_after(self, scope_id: str, after: int, limit: int = DEFAULT_LIMIT
                     ) -> list[FeedEvent]:
        """The scope's events after position ``after``, oldest first."""
        check_limit(limit)
        p = self.dialect.param
        rows = self._select(
            f"SELECT {', '.join(FEED_NAMES)} FROM {self.table()} "
            f"WHERE scope_id = {p('scope_id')} AND position > {p('after')} "
            f"ORDER BY position LIMIT {p('limit')}",
            {"scope_id": scope_id, "after": after, "limit": limit})
        return [FeedEvent(row["position"], row["scope_id"], row["aggregate_id"],
                          row["aggregate_version"], row["event"],
                          from_micros(row["recorded_at"]), json.loads(row["fields"]))
                for row in rows]


class SQLiteEventFeedView(SQLiteProjectionView, EventFeedView):
    """Tables ``event_feed`` and ``event_feed_owners`` in ``views/event_feed.sqlite3``."""

    table_prefix = "event_feed"


class PostgresEventFeedView(PostgresProjectionView, EventFeedView):
    """Tables ``event_feed`` and ``event_feed_owners`` in the write model's database."""


class EventFeedProjection(Projection[EventFeedView]):
    """Every event is offered to the feed; ``topics`` stays empty (see ProjectionSpec)."""

    name = "event_feed"

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.record(domain_event, tracking)


EVENT_FEED = ProjectionSpec(EventFeedProjection, sqlite_view=SQLiteEventFeedView,
                            postgres_view=PostgresEventFeedView)

