"""The runs read model: one row per DreamRun, listed newest first with keyset pagination.

``RunsProjection`` turns DreamRun events into row changes; every other event only advances the
tracking position, so ``wait(position)`` works for any command's position. The table is plain
SQL for analysts (``docs/read-models.md``); times are integer microseconds since the Unix
epoch, UTC.

Pages are ordered ``accepted_at DESC, run_id DESC`` and continue strictly after the previous
page's last row (a keyset, not an offset), so runs admitted between two fetches sort before
the cursor and never shift, duplicate or hide rows of later pages.

Each row also keeps its item as the runs list shows it (``document``,
:mod:`projections.kept_documents`).
"""

from __future__ import annotations

import re
from abc import ABC
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any
from uuid import UUID

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking
from eventsourcing.projection import Projection

from domain.canonical import canonical_json
from domain.dream_run import FAILURE_REASONS, TERMINAL, DreamRun, RunStatus, RunTrigger
from domain.text import has_control_characters
from projections.backends import PostgresProjectionView, SQLiteProjectionView
from projections.base import ProjectionSpec
from projections.dialect import (
    AGGREGATE_ID,
    POSITION,
    SCOPE_ID,
    Column,
    Columns,
    Dialect,
    Row,
    column_names,
    row_values,
)
from projections.kept_documents import DOCUMENT, KeptDocuments
from projections.paging import (
    bad_cursor,
    check_limit,
    cursor_max_chars,
    decode_cursor_text,
    documents_page,
    encode_cursor_text,
    keyset_page,
)
from projections.runnable import changes_no_row
from projections.times import optional_micros, to_micros

DEFAULT_LIMIT = 20
RUN_ID_MAX = 64
MAX_STAMP = 2**63 - 1  # a PostgreSQL bigint
# "<stamp>:<run_id>" in UTF-8: up to 4 bytes a character of the run id.
_CURSOR_MAX_CHARS = cursor_max_chars(len(str(MAX_STAMP)) + 1 + RUN_ID_MAX * 4)
_STAMP = re.compile(r"[0-9]{1,19}")

# Runs admitted before triggers existed were all requested.
TRIGGER_COLUMN: Column = ("trigger", "text", f"NOT NULL DEFAULT '{RunTrigger.REQUEST.value}'")
COLUMNS: Columns = (
    AGGREGATE_ID,
    SCOPE_ID,
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
    POSITION,
    ("lease_expires_at", "int", ""),
    TRIGGER_COLUMN,
    DOCUMENT,  # the row as the runs list shows it (see item_document)
)
SUMMARY_COLUMNS = column_names(COLUMNS, excluding=("aggregate_id", "lease_expires_at",
                                                   "document"))
KEYSET = "accepted_at DESC, run_id DESC"
REQUESTS_FIRST = f"CASE WHEN trigger = '{RunTrigger.AUTOMATIC}' THEN 1 ELSE 0 END"


@cache
def item_document(dialect: Dialect) -> str:
    """The SQL rendering a row as the runs list's item (``DreamRunSummary``)."""
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
    trigger: str = RunTrigger.REQUEST.value

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
    trigger: str = RunTrigger.REQUEST.value


# -- cursors ----------------------------------------------------------------------------------


def encode_cursor(accepted_at_us: int, run_id: str) -> str:
    """Opaque to clients: ``"<accepted_at_us>:<run_id>"`` (see :mod:`projections.paging`)."""
    return encode_cursor_text(f"{accepted_at_us}:{run_id}")


def decode_cursor(cursor: str) -> tuple[int, str]:
    """``(accepted_at_us, run_id)``; anything this service did not issue is ``invalid_cursor``."""
    text = decode_cursor_text(cursor, _CURSOR_MAX_CHARS)
    stamp, colon, run_id = text.partition(":")
    if not colon:
        raise bad_cursor("the cursor has no separator")
    if not _STAMP.fullmatch(stamp) or int(stamp) > MAX_STAMP:
        raise bad_cursor("the cursor's timestamp is not a non-negative 64-bit integer")
    if not 1 <= len(run_id) <= RUN_ID_MAX:
        raise bad_cursor(f"the cursor's run id must be 1-{RUN_ID_MAX} characters")
    if has_control_characters(run_id):
        raise bad_cursor("the cursor's run id has control characters")
    return int(stamp), run_id


# -- the view ---------------------------------------------------------------------------------


class RunsView(KeptDocuments, ABC):
    """Commands take the ``Tracking`` of the event they apply; queries read committed rows.

    The SQL lives here once, written against the backend's ``dialect``; ``SQLiteRunsView`` and
    ``PostgresRunsView`` only say where the tables are.
    """

    # -- schema ---------------------------------------------------------------------------------

    # A table made before runs had a trigger (its rows were all requested runs), or before
    # rows kept their item, gains the column.
    added_columns = (TRIGGER_COLUMN, DOCUMENT)

    def view_tables(self) -> list[str]:
        return [self.table()]

    def item_document(self) -> str:
        return item_document(self.dialect)

    def view_statements(self) -> list[str]:
        return [
            self._table_ddl("", COLUMNS, "UNIQUE (scope_id, run_id)"),
            self._index_ddl("keyset", "", f"scope_id, {KEYSET}"),
            self._index_ddl("status", "", f"scope_id, status, {KEYSET}"),
            self._index_ddl("operation", "", f"scope_id, operation, {KEYSET}"),
            # The workers' inbox: unfinished runs, oldest first within each scope.
            self._index_ddl("inbox", "", "status, scope_id, operation, accepted_at, run_id"),
        ]

    # -- commands -------------------------------------------------------------------------------

    def run_accepted(self, run: NewRun, tracking: Tracking) -> None:
        values: dict[str, object] = {
            "aggregate_id": str(run.aggregate_id), "scope_id": run.scope_id,
            "run_id": run.run_id, "operation": run.operation, "status": RunStatus.QUEUED,
            "outcome": None, "error": None,
            "target": None if run.target is None else canonical_json(run.target),
            "candidate_id": None, "candidate_version": None,
            "accepted_at": to_micros(run.accepted_at), "started_at": None,
            "completed_at": None, "attempt_count": 0, "model_config_id": None,
            "reused": False, "principal_key": run.principal_key,
            "position": tracking.notification_id, "lease_expires_at": None,
            "trigger": run.trigger,
        }
        with self.tracked(tracking) as cursor:
            self._insert(cursor, "", values)
            self._row_written(cursor, run.aggregate_id)

    def run_started(self, aggregate_id: UUID, attempt_count: int, started_at: datetime,
                    model_config_id: str, tracking: Tracking,
                    lease_expires_at: datetime | None = None) -> None:
        self._change(aggregate_id, tracking, status=RunStatus.RUNNING, attempt_count=attempt_count,
                     started_at=to_micros(started_at), model_config_id=model_config_id,
                     lease_expires_at=optional_micros(lease_expires_at))

    def lease_renewed(self, aggregate_id: UUID, lease_expires_at: datetime,
                      tracking: Tracking) -> None:
        self._change(aggregate_id, tracking, lease_expires_at=to_micros(lease_expires_at))

    def run_requeued(self, aggregate_id: UUID, tracking: Tracking) -> None:
        self._change(aggregate_id, tracking, status=RunStatus.QUEUED, lease_expires_at=None)

    def run_succeeded(self, aggregate_id: UUID, outcome: str,
                      candidate: Mapping[str, Any] | None, reused: bool,
                      completed_at: datetime, tracking: Tracking) -> None:
        self._change(aggregate_id, tracking, status=RunStatus.SUCCEEDED, outcome=outcome,
                     candidate_id=None if candidate is None else candidate["candidate_id"],
                     candidate_version=None if candidate is None else candidate["version"],
                     reused=reused, completed_at=to_micros(completed_at),
                     lease_expires_at=None)

    def run_failed(self, aggregate_id: UUID, error: str, completed_at: datetime,
                   tracking: Tracking) -> None:
        self._change(aggregate_id, tracking, status=RunStatus.FAILED, error=error,
                     completed_at=to_micros(completed_at), lease_expires_at=None)

    def _change(self, aggregate_id: UUID, tracking: Tracking, **columns: object) -> None:
        self._update_row(aggregate_id, tracking, "run", **columns)

    # -- queries --------------------------------------------------------------------------------

    def list_runs(self, scope_id: str, *, status: str | None = None,
                  operation: str | None = None, cursor: str | None = None,
                  limit: int = DEFAULT_LIMIT) -> tuple[list[RunSummary], str | None]:
        """One page, newest first; the cursor for the next page, or ``None`` on the last."""
        rows = self._page(", ".join(SUMMARY_COLUMNS), scope_id, status, operation, cursor, limit)
        return keyset_page(rows, limit, _summary)

    def list_documents(self, scope_id: str, *, status: str | None = None,
                       operation: str | None = None, cursor: str | None = None,
                       limit: int = DEFAULT_LIMIT) -> tuple[list[str], str | None]:
        """The page ``list_runs`` gives, each run as the JSON text of the list's item, as its
        row keeps it."""
        rows = self._page("document, accepted_at, run_id", scope_id, status, operation,
                          cursor, limit)
        return documents_page(rows, limit,
                              lambda row: encode_cursor(row["accepted_at"], row["run_id"]))

    def _page(self, select: str, scope_id: str, status: str | None, operation: str | None,
              cursor: str | None, limit: int) -> list[Row]:
        """``select`` of the rows of one page, and of one more if a next page exists."""
        check_limit(limit)
        after = None if cursor is None else decode_cursor(cursor)
        p = self.dialect.param
        filters = {"scope_id": scope_id, "status": status, "operation": operation}
        conditions = self._filters(filters)
        params: dict[str, object] = {**filters, "limit": limit + 1}
        if after is not None:
            # Row-value comparison: strictly after the cursor in (accepted_at, run_id) DESC order.
            conditions.append(f"(accepted_at, run_id) < ({p('after_at')}, {p('after_run')})")
            params["after_at"], params["after_run"] = after
        return self._select(
            f"SELECT {select} FROM {self.table()} "
            f"WHERE {' AND '.join(conditions)} ORDER BY {KEYSET} LIMIT {p('limit')}", params)

    def get_run_summary(self, scope_id: str, run_id: str) -> RunSummary | None:
        rows = self._select_equal(SUMMARY_COLUMNS, {"scope_id": scope_id, "run_id": run_id})
        return _summary(rows[0]) if rows else None

    def count_runs(self, scope_id: str | None = None, status: str | None = None) -> int:
        """Rows in one scope (or the whole view), with ``status`` if given."""
        values = {"scope_id": scope_id, "status": status}
        return self._count("", self._filters(values), values)

    def claimable(self, now: datetime, limit: int = 64) -> list[RunSummary]:
        """The oldest claimable run of each (scope, operation), oldest first.

        Claimable: queued, or running with an expired lease (a crashed worker's run). One run
        per scope and operation is what makes scheduling fair: a scope with a thousand queued
        runs offers one, like every other scope. Requested runs come before automatic ones,
        which never starve them.
        """
        p = self.dialect.param
        columns = ", ".join(SUMMARY_COLUMNS)
        return [_summary(row) for row in self._select(
            f"SELECT {columns} FROM (SELECT {columns}, ROW_NUMBER() OVER (PARTITION BY "
            f"scope_id, operation ORDER BY accepted_at, run_id) AS turn FROM {self.table()} "
            f"WHERE status = '{RunStatus.QUEUED}' OR (status = '{RunStatus.RUNNING}' "
            f"AND lease_expires_at < {p('now')})) AS inbox "
            f"WHERE turn = 1 ORDER BY {REQUESTS_FIRST}, accepted_at, run_id "
            f"LIMIT {p('limit')}",
            {"now": to_micros(now), "limit": limit})]

    def unfinished_automatic(self) -> int:
        """Automatic runs queued or running, in every scope (the scheduler's pace)."""
        rows = self._select(
            f"SELECT COUNT(*) AS n FROM {self.table()} WHERE status IN "
            f"('{RunStatus.QUEUED}', '{RunStatus.RUNNING}') AND trigger = "
            f"'{RunTrigger.AUTOMATIC}'", {})
        return int(rows[0]["n"])


def _summary(row: Row) -> RunSummary:
    return RunSummary(**row_values(
        row, SUMMARY_COLUMNS, json_columns=("target",), bool_columns=("reused",),
        time_columns=("accepted_at", "started_at", "completed_at")))


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
    @changes_no_row
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
                   accepted_at=domain_event.accepted_at,
                   trigger=getattr(domain_event, "trigger", RunTrigger.REQUEST.value)),
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


RUNS = ProjectionSpec(RunsProjection, sqlite_view=SQLiteRunsView, postgres_view=PostgresRunsView,
                      announced=True)  # workers in other processes claim from it
