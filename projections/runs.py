"""The runs read model: one row per DreamRun, listed newest first with keyset pagination.

``RunsProjection`` turns DreamRun events into row changes; every other event only advances the
tracking position, so ``wait(position)`` works for any command's position. The table is plain
SQL for analysts (``docs/read-models.md``); times are integer microseconds since the Unix
epoch, UTC.

Pages are ordered ``accepted_at DESC, run_id DESC`` and continue strictly after the previous
page's last row (a keyset, not an offset), so runs admitted between two fetches sort before
the cursor and never shift, duplicate or hide rows of later pages.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from abc import ABC
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking
from eventsourcing.projection import Projection

from domain.dream_run import FAILED, QUEUED, RUNNING, SUCCEEDED, TERMINAL, DreamRun
from domain.errors import InvalidCursorError, InvalidRequestError
from domain.identity import canonical_json
from domain.text import has_control_characters
from projections.base import (
    PostgresProjectionView,
    ProjectionSpec,
    ProjectionView,
    Row,
    SQLiteProjectionView,
)

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
RUN_ID_MAX = 64
MAX_STAMP = 2**63 - 1  # a PostgreSQL bigint
_CURSOR_MAX_BYTES = len(str(MAX_STAMP)) + 1 + RUN_ID_MAX * 4  # UTF-8: up to 4 bytes a char
_CURSOR_MAX_CHARS = 4 * -(-_CURSOR_MAX_BYTES // 3)
_CURSOR_CHARS = re.compile(r"[A-Za-z0-9_-]+")
_STAMP = re.compile(r"[0-9]{1,19}")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)

# (column, type, constraint). Types are the dialect's: key (byte-ordered text), text, int, bool.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("aggregate_id", "key", "PRIMARY KEY"),
    ("scope_id", "key", "NOT NULL"),
    ("run_id", "key", "NOT NULL"),
    ("operation", "text", "NOT NULL"),
    ("status", "text", "NOT NULL"),
    ("outcome", "text", ""),
    ("error", "text", ""),
    ("target", "text", ""),
    ("candidate_id", "text", ""),
    ("candidate_version", "int", ""),
    ("accepted_at", "int", "NOT NULL"),
    ("started_at", "int", ""),
    ("completed_at", "int", ""),
    ("attempt_count", "int", "NOT NULL"),
    ("model_config_id", "text", ""),
    ("reused", "bool", "NOT NULL"),
    ("principal_key", "text", "NOT NULL"),
    ("position", "int", "NOT NULL"),
    ("lease_expires_at", "int", ""),
)
SUMMARY_COLUMNS = tuple(name for name, _, _ in COLUMNS
                        if name not in ("aggregate_id", "lease_expires_at"))
KEYSET = "accepted_at DESC, run_id DESC"


# -- values -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSummary:
    """One row of the runs view: a run's state without its manifest, usage or budget."""

    scope_id: str
    run_id: str
    operation: str
    status: str
    outcome: str | None
    error: str | None
    target: Mapping[str, Any] | None
    candidate_id: str | None
    candidate_version: int | None
    accepted_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    attempt_count: int
    model_config_id: str | None
    reused: bool
    principal_key: str
    position: int

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def cursor(self) -> str:
        """The cursor of the page that continues after this run."""
        return encode_cursor(to_micros(self.accepted_at), self.run_id)


@dataclass(frozen=True)
class NewRun:
    """What admission puts in a fresh row (status ``queued``, no attempt yet)."""

    aggregate_id: UUID
    scope_id: str
    run_id: str
    operation: str
    principal_key: str
    target: Mapping[str, Any] | None
    accepted_at: datetime


def to_micros(moment: datetime) -> int:
    """Integer microseconds since the Unix epoch, UTC (a naive time is taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - EPOCH) // MICROSECOND


def from_micros(stamp: int) -> datetime:
    return EPOCH + stamp * MICROSECOND


def _optional_micros(moment: datetime | None) -> int | None:
    return None if moment is None else to_micros(moment)


# -- cursors ----------------------------------------------------------------------------------


def encode_cursor(accepted_at_us: int, run_id: str) -> str:
    """Opaque to clients: unpadded URL-safe base64 of ``"<accepted_at_us>:<run_id>"``."""
    raw = f"{accepted_at_us}:{run_id}".encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> tuple[int, str]:
    """``(accepted_at_us, run_id)``; anything this service did not issue is ``invalid_cursor``."""
    text = _cursor_text(cursor)
    stamp, colon, run_id = text.partition(":")
    if not colon:
        raise _bad_cursor("the cursor has no separator")
    if not _STAMP.fullmatch(stamp) or int(stamp) > MAX_STAMP:
        raise _bad_cursor("the cursor's timestamp is not a non-negative 64-bit integer")
    if not 1 <= len(run_id) <= RUN_ID_MAX:
        raise _bad_cursor(f"the cursor's run id must be 1-{RUN_ID_MAX} characters")
    if has_control_characters(run_id):
        raise _bad_cursor("the cursor's run id has control characters")
    return int(stamp), run_id


def _cursor_text(cursor: object) -> str:
    if (not isinstance(cursor, str) or not 0 < len(cursor) <= _CURSOR_MAX_CHARS
            or not _CURSOR_CHARS.fullmatch(cursor) or len(cursor) % 4 == 1):
        raise _bad_cursor("the cursor is not URL-safe base64 of the expected size")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        return raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise _bad_cursor("the cursor does not decode") from None


def _bad_cursor(reason: str) -> InvalidCursorError:
    return InvalidCursorError("cursor is not one this service issued; start again without it",
                              field="cursor", reason=reason)


def check_limit(limit: object) -> int:
    if type(limit) is not int or not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequestError(f"limit must be an integer in [1, {MAX_LIMIT}]",
                                  field="limit", limit=limit, maximum=MAX_LIMIT)
    return limit


# -- the view ---------------------------------------------------------------------------------


class RunsView(ProjectionView, ABC):
    """Commands take the ``Tracking`` of the event they apply; queries read committed rows.

    The SQL lives here once, written against the backend's ``dialect``; ``SQLiteRunsView`` and
    ``PostgresRunsView`` only say where the tables are.
    """

    # -- schema ---------------------------------------------------------------------------------

    def view_tables(self) -> list[str]:
        return [self.table()]

    def view_statements(self) -> list[str]:
        kinds = {"key": self.dialect.sortable_text, "text": self.dialect.text,
                 "int": self.dialect.integer, "bool": self.dialect.boolean}
        columns = ", ".join(f"{name} {kinds[kind]} {constraint}".rstrip()
                            for name, kind, constraint in COLUMNS)
        table = self.table()
        return [
            f"CREATE TABLE IF NOT EXISTS {table} ({columns}, UNIQUE (scope_id, run_id))",
            f"CREATE INDEX IF NOT EXISTS {self.index('keyset')} ON {table} (scope_id, {KEYSET})",
            f"CREATE INDEX IF NOT EXISTS {self.index('status')} "
            f"ON {table} (scope_id, status, {KEYSET})",
            f"CREATE INDEX IF NOT EXISTS {self.index('operation')} "
            f"ON {table} (scope_id, operation, {KEYSET})",
            # The workers' inbox: unfinished runs, oldest first within each scope.
            f"CREATE INDEX IF NOT EXISTS {self.index('inbox')} "
            f"ON {table} (status, scope_id, operation, accepted_at, run_id)",
        ]

    # -- commands -------------------------------------------------------------------------------

    def run_accepted(self, run: NewRun, tracking: Tracking) -> None:
        values: dict[str, object] = {
            "aggregate_id": str(run.aggregate_id), "scope_id": run.scope_id,
            "run_id": run.run_id, "operation": run.operation, "status": QUEUED,
            "outcome": None, "error": None,
            "target": None if run.target is None else canonical_json(run.target),
            "candidate_id": None, "candidate_version": None,
            "accepted_at": to_micros(run.accepted_at), "started_at": None,
            "completed_at": None, "attempt_count": 0, "model_config_id": None,
            "reused": False, "principal_key": run.principal_key,
            "position": tracking.notification_id, "lease_expires_at": None,
        }
        names = ", ".join(values)
        params = ", ".join(self.dialect.param(name) for name in values)
        with self.tracked(tracking) as cursor:
            cursor.execute(f"INSERT INTO {self.table()} ({names}) VALUES ({params})", values)

    def run_started(self, aggregate_id: UUID, attempt_count: int, started_at: datetime,
                    model_config_id: str, tracking: Tracking,
                    lease_expires_at: datetime | None = None) -> None:
        self._change(aggregate_id, tracking, status=RUNNING, attempt_count=attempt_count,
                     started_at=to_micros(started_at), model_config_id=model_config_id,
                     lease_expires_at=None if lease_expires_at is None
                     else to_micros(lease_expires_at))

    def lease_renewed(self, aggregate_id: UUID, lease_expires_at: datetime,
                      tracking: Tracking) -> None:
        self._change(aggregate_id, tracking, lease_expires_at=to_micros(lease_expires_at))

    def run_requeued(self, aggregate_id: UUID, tracking: Tracking) -> None:
        self._change(aggregate_id, tracking, status=QUEUED, lease_expires_at=None)

    def run_succeeded(self, aggregate_id: UUID, outcome: str,
                      candidate: Mapping[str, Any] | None, reused: bool,
                      completed_at: datetime, tracking: Tracking) -> None:
        self._change(aggregate_id, tracking, status=SUCCEEDED, outcome=outcome,
                     candidate_id=None if candidate is None else candidate["candidate_id"],
                     candidate_version=None if candidate is None else candidate["version"],
                     reused=reused, completed_at=to_micros(completed_at),
                     lease_expires_at=None)

    def run_failed(self, aggregate_id: UUID, error: str, completed_at: datetime,
                   tracking: Tracking) -> None:
        self._change(aggregate_id, tracking, status=FAILED, error=error,
                     completed_at=to_micros(completed_at), lease_expires_at=None)

    def _change(self, aggregate_id: UUID, tracking: Tracking, **columns: object) -> None:
        self._update_row(aggregate_id, tracking, "run", **columns)

    # -- queries --------------------------------------------------------------------------------

    def list_runs(self, scope_id: str, *, status: str | None = None,
                  operation: str | None = None, cursor: str | None = None,
                  limit: int = DEFAULT_LIMIT) -> tuple[list[RunSummary], str | None]:
        """One page, newest first; the cursor for the next page, or ``None`` on the last."""
        check_limit(limit)
        after = None if cursor is None else decode_cursor(cursor)
        params: dict[str, object] = {"scope_id": scope_id, "status": status,
                                     "operation": operation, "limit": limit + 1}
        if after is not None:
            params["after_at"], params["after_run"] = after
        rows = self._select(self._page_sql(status=status is not None,
                                           operation=operation is not None,
                                           after=after is not None), params)
        page = [_summary(row) for row in rows[:limit]]
        return page, (page[-1].cursor if len(rows) > limit else None)

    def get_run_summary(self, scope_id: str, run_id: str) -> RunSummary | None:
        p = self.dialect.param
        rows = self._select(
            f"SELECT {', '.join(SUMMARY_COLUMNS)} FROM {self.table()} "
            f"WHERE scope_id = {p('scope_id')} AND run_id = {p('run_id')}",
            {"scope_id": scope_id, "run_id": run_id})
        return _summary(rows[0]) if rows else None

    def count_runs(self, scope_id: str | None = None) -> int:
        """Rows in one scope, or in the whole view."""
        where = "" if scope_id is None else f" WHERE scope_id = {self.dialect.param('scope_id')}"
        rows = self._select(f"SELECT COUNT(*) AS n FROM {self.table()}{where}",
                            {"scope_id": scope_id})
        return int(rows[0]["n"])

    def claimable(self, now: datetime, limit: int = 64) -> list[RunSummary]:
        """The oldest claimable run of each (scope, operation), oldest first.

        Claimable: queued, or running with an expired lease (a crashed worker's run). One run
        per scope and operation is what makes scheduling fair: a scope with a thousand queued
        runs offers one, like every other scope.
        """
        p = self.dialect.param
        columns = ", ".join(SUMMARY_COLUMNS)
        return [_summary(row) for row in self._select(
            f"SELECT {columns} FROM (SELECT {columns}, ROW_NUMBER() OVER (PARTITION BY "
            f"scope_id, operation ORDER BY accepted_at, run_id) AS turn FROM {self.table()} "
            f"WHERE status = '{QUEUED}' OR (status = '{RUNNING}' AND lease_expires_at < "
            f"{p('now')})) AS inbox WHERE turn = 1 ORDER BY accepted_at, run_id "
            f"LIMIT {p('limit')}", {"now": to_micros(now), "limit": limit})]

    def _page_sql(self, *, status: bool, operation: bool, after: bool) -> str:
        p = self.dialect.param
        conditions = [f"scope_id = {p('scope_id')}"]
        if status:
            conditions.append(f"status = {p('status')}")
        if operation:
            conditions.append(f"operation = {p('operation')}")
        if after:
            # Row-value comparison: strictly after the cursor in (accepted_at, run_id) DESC order.
            conditions.append(f"(accepted_at, run_id) < ({p('after_at')}, {p('after_run')})")
        return (f"SELECT {', '.join(SUMMARY_COLUMNS)} FROM {self.table()} "
                f"WHERE {' AND '.join(conditions)} ORDER BY {KEYSET} LIMIT {p('limit')}")


def _summary(row: Row) -> RunSummary:
    values = {name: row[name] for name in SUMMARY_COLUMNS}
    values["target"] = None if row["target"] is None else json.loads(row["target"])
    values["reused"] = bool(row["reused"])
    values["accepted_at"] = from_micros(row["accepted_at"])
    for name in ("started_at", "completed_at"):
        values[name] = None if row[name] is None else from_micros(row[name])
    return RunSummary(**values)


class SQLiteRunsView(SQLiteProjectionView, RunsView):
    """Table ``runs`` in ``<data_dir>/views/runs.sqlite3``."""

    table_prefix = "runs"


class PostgresRunsView(PostgresProjectionView, RunsView):
    """Table ``runs`` (the projection's name) next to ``runs_tracking``, in the write model's
    database."""


# -- the projection ---------------------------------------------------------------------------


class RunsProjection(Projection[RunsView]):
    """DreamRun events change rows; every other event still records its tracking position.
    ``topics`` stays empty: see :class:`projections.base.ProjectionSpec`.
    """

    name = "runs"

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        """Events that do not change a run row (other aggregates, manifest, usage)."""
        self.view.insert_tracking(tracking)

    @process_event.register
    def _accepted(self, domain_event: DreamRun.Accepted, tracking: Tracking) -> None:
        target = domain_event.request.get("target")
        self.view.run_accepted(
            NewRun(aggregate_id=domain_event.originator_id, scope_id=domain_event.scope_id,
                   run_id=domain_event.run_id, operation=domain_event.operation,
                   principal_key=domain_event.principal_key,
                   target=target if isinstance(target, Mapping) else None,
                   accepted_at=domain_event.accepted_at),
            tracking)

    @process_event.register
    def _started(self, domain_event: DreamRun.AttemptStarted, tracking: Tracking) -> None:
        self.view.run_started(domain_event.originator_id, domain_event.attempt,
                              domain_event.started_at, domain_event.model_config_id, tracking,
                              domain_event.lease_expires_at)

    @process_event.register
    def _lease_renewed(self, domain_event: DreamRun.LeaseRenewed, tracking: Tracking) -> None:
        # A live attempt's heartbeat: the run is not offered to other workers meanwhile.
        self.view.lease_renewed(domain_event.originator_id, domain_event.lease_expires_at,
                                tracking)

    @process_event.register
    def _requeued(self, domain_event: DreamRun.Requeued, tracking: Tracking) -> None:
        self.view.run_requeued(domain_event.originator_id, tracking)

    @process_event.register
    def _succeeded(self, domain_event: DreamRun.Succeeded, tracking: Tracking) -> None:
        self.view.run_succeeded(domain_event.originator_id, domain_event.outcome,
                                domain_event.candidate, domain_event.reused,
                                domain_event.completed_at, tracking)

    @process_event.register
    def _failed(self, domain_event: DreamRun.Failed, tracking: Tracking) -> None:
        self.view.run_failed(domain_event.originator_id, domain_event.error,
                             domain_event.completed_at, tracking)


RUNS = ProjectionSpec(RunsProjection, sqlite_view=SQLiteRunsView, postgres_view=PostgresRunsView)
