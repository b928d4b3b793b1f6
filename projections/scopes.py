"""The scope catalogue: every scope with its settings, and who holds which role in it.

What ``GET /v1/scopes`` lists: one row per scope in scope id order (keyset pages), and one row
per (scope, principal, role). Which roles let a principal read a scope is the access policy's
answer (``application.queries``), never this view's; the view only finds the scopes where a
principal holds one of the roles it is given.
"""

from __future__ import annotations

import json
from abc import ABC
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking
from eventsourcing.projection import Projection

from domain.canonical import canonical_json
from domain.scope import Scope
from domain.text import check_scope_id
from projections.backends import PostgresProjectionView, SQLiteProjectionView
from projections.base import ProjectionSpec, ProjectionView
from projections.dialect import AGGREGATE_ID, POSITION, Columns, Row, column_names, stored_text
from projections.paging import KeyCursors, check_limit, documents_page, keyset_page
from projections.runnable import changes_no_row
from projections.times import from_micros, to_micros

DEFAULT_LIMIT = 20
ROLES = "_roles"
Holders = tuple[str, Collection[str]]  # a principal, and roles it must hold one of
CURSORS = KeyCursors("scopes", "scope id", 128, check_scope_id)  # ids are 1-128 ASCII

COLUMNS: Columns = (
    AGGREGATE_ID,
    ("scope_id", "key", "NOT NULL UNIQUE"),
    ("settings", "text", "NOT NULL"),
    ("created_at", "int", "NOT NULL"),
    ("updated_at", "int", "NOT NULL"),
    POSITION,
)
ROLE_COLUMNS: Columns = (
    ("scope_id", "key", "NOT NULL"),
    ("principal", "key", "NOT NULL"),
    ("role", "key", "NOT NULL"),
)
SUMMARY_COLUMNS = tuple(name for name in column_names(COLUMNS) if name != "aggregate_id")


@dataclass(frozen=True)
class ScopeSummary:
    scope_id: str
    settings: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    position: int  # the event that last changed the scope's settings

    @property
    def cursor(self) -> str:
        return CURSORS.encode(self.scope_id)


def _summary(row: Row) -> ScopeSummary:
    return ScopeSummary(row["scope_id"], json.loads(row["settings"]),
                        from_micros(row["created_at"]), from_micros(row["updated_at"]),
                        row["position"])


class ScopesView(ProjectionView, ABC):
    def view_tables(self) -> list[str]:
        return [self.table(), self.table(ROLES)]

    def view_statements(self) -> list[str]:
        return [
            self._table_ddl("", COLUMNS),
            self._table_ddl(ROLES, ROLE_COLUMNS, "PRIMARY KEY (principal, scope_id, role)"),
        ]

    # -- commands -------------------------------------------------------------------------------

    def scope_created(self, event: Scope.Created, tracking: Tracking) -> None:
        at = to_micros(event.timestamp)
        with self.tracked(tracking) as cursor:
            self._insert(cursor, "", {
                "aggregate_id": str(event.originator_id), "scope_id": event.scope_id,
                "settings": stored_text(canonical_json(event.settings)), "created_at": at,
                "updated_at": at, "position": tracking.notification_id})

    def settings_changed(self, event: Scope.SettingsChanged, tracking: Tracking) -> None:
        self._update_row(event.originator_id, tracking, "scope",
                         settings=stored_text(canonical_json(event.settings)),
                         updated_at=to_micros(event.timestamp))

    def role_granted(self, event: Scope.RoleGranted, tracking: Tracking) -> None:
        with self.tracked(tracking) as cursor:
            self._insert(cursor, ROLES, {"scope_id": self._scope_id(cursor, event),
                                         "principal": event.principal, "role": event.role})

    def role_revoked(self, event: Scope.RoleRevoked, tracking: Tracking) -> None:
        p = self.dialect.param
        with self.tracked(tracking) as cursor:
            cursor.execute(
                f"DELETE FROM {self.table(ROLES)} WHERE scope_id = {p('scope_id')} "
                f"AND principal = {p('principal')} AND role = {p('role')}",
                {"scope_id": self._scope_id(cursor, event), "principal": event.principal,
                 "role": event.role})

    def _scope_id(self, cursor: Any, event: Any) -> str:
        row = self._fetch_equal(cursor, ("scope_id",), {"aggregate_id": str(event.originator_id)})
        if row is None:
            raise self._missing("scope", event.originator_id)
        return str(row["scope_id"])

    # -- queries --------------------------------------------------------------------------------

    def list_scopes(self, *, holders_of: Holders | None = None, cursor: str | None = None,
                    limit: int = DEFAULT_LIMIT) -> tuple[list[ScopeSummary], str | None]:
        """One page in scope id order, and the cursor of the next (``None`` on the last).

        ``holders_of=(principal, roles)`` keeps the scopes where the principal holds one of
        ``roles``; without it, every scope."""
        page = self._page(", ".join(SUMMARY_COLUMNS), holders_of, cursor, limit)
        if page is None:
            return [], None
        return keyset_page(self._select(*page), limit, _summary)

    def list_documents(self, document: str, principal: str, *,
                       holders_of: Holders | None = None, cursor: str | None = None,
                       limit: int = DEFAULT_LIMIT) -> tuple[list[str], str | None]:
        """The page ``list_scopes`` gives, each scope as the JSON text the SQL expression
        ``document`` renders from its summary's columns and ``roles``, the JSON array of
        ``principal``'s roles in it (see :mod:`projections.json_sql`)."""
        p = self.dialect.param
        roles = self.dialect.json.sorted_texts(
            "role", f"FROM {self.table(ROLES)} AS held WHERE held.principal = "
                    f"{p('caller')} AND held.scope_id = {self.table()}.scope_id")
        page = self._page(f"{', '.join(SUMMARY_COLUMNS)}, {roles} AS roles", holders_of,
                          cursor, limit)
        if page is None:
            return [], None
        statement, params = page
        rows = self._select(f"SELECT {document} AS document, scope_id FROM ({statement}) "
                            "AS page ORDER BY scope_id", {**params, "caller": principal})
        return documents_page(rows, limit, lambda row: CURSORS.encode(row["scope_id"]))

    def _page(self, select: str, holders_of: Holders | None, cursor: str | None,
              limit: int) -> tuple[str, dict[str, object]] | None:
        """The query of ``select`` for one page's scopes and one more if a next page exists,
        and its parameters; ``None`` when the principal of ``holders_of`` may hold no role."""
        check_limit(limit)
        p = self.dialect.param
        params: dict[str, object] = {"limit": limit + 1}
        conditions: list[str] = []
        if cursor is not None:
            conditions.append(f"scope_id > {p('after')}")
            params["after"] = CURSORS.decode(cursor)
        if holders_of is not None:
            principal, roles = holders_of
            if not roles:
                return None
            names = [f"role_{n}" for n in range(len(roles))]
            params.update(zip(names, sorted(roles), strict=True), principal=principal)
            conditions.append(
                f"scope_id IN (SELECT scope_id FROM {self.table(ROLES)} WHERE principal = "
                f"{p('principal')} AND role IN ({', '.join(p(n) for n in names)}))")
        where = f"WHERE {' AND '.join(conditions)} " if conditions else ""
        return (f"SELECT {select} FROM {self.table()} {where}ORDER BY scope_id "
                f"LIMIT {p('limit')}", params)

    def roles_in(self, principal: str, scope_ids: Sequence[str]) -> dict[str, list[str]]:
        """The principal's roles in each of ``scope_ids`` that it holds any in, sorted."""
        if not scope_ids:
            return {}
        p = self.dialect.param
        names = [f"scope_{n}" for n in range(len(scope_ids))]
        params: dict[str, object] = dict(zip(names, scope_ids, strict=True))
        params["principal"] = principal
        held: dict[str, list[str]] = {}
        for row in self._select(
                f"SELECT scope_id, role FROM {self.table(ROLES)} WHERE principal = "
                f"{p('principal')} AND scope_id IN ({', '.join(p(n) for n in names)}) "
                f"ORDER BY scope_id, role", params):
            held.setdefault(row["scope_id"], []).append(row["role"])
        return held

    def count_scopes(self) -> int:
        return self._count()


class SQLiteScopesView(SQLiteProjectionView, ScopesView):
    """Tables ``scopes`` and ``scopes_roles`` in ``views/scopes.sqlite3``."""

    table_prefix = "scopes"


class PostgresScopesView(PostgresProjectionView, ScopesView):
    """Tables ``scopes`` and ``scopes_roles`` in the write model's database."""


class ScopesProjection(Projection[ScopesView]):
    """Scope events change rows; every other event only records its tracking position."""

    name = "scopes"

    @singledispatchmethod
    @changes_no_row
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.insert_tracking(tracking)

    @process_event.register
    def _created(self, domain_event: Scope.Created, tracking: Tracking) -> None:
        self.view.scope_created(domain_event, tracking)

    @process_event.register
    def _settings(self, domain_event: Scope.SettingsChanged, tracking: Tracking) -> None:
        self.view.settings_changed(domain_event, tracking)

    @process_event.register
    def _granted(self, domain_event: Scope.RoleGranted, tracking: Tracking) -> None:
        self.view.role_granted(domain_event, tracking)

    @process_event.register
    def _revoked(self, domain_event: Scope.RoleRevoked, tracking: Tracking) -> None:
        self.view.role_revoked(domain_event, tracking)


SCOPES = ProjectionSpec(ScopesProjection, sqlite_view=SQLiteScopesView,
                        postgres_view=PostgresScopesView)
