"""The record log of automatic dreaming: each scope's records by store position, and the
scopes the scheduler may find due.

One row per task Source and per Memory entry version, at the position of the event that
recorded it. ``counted`` says whether automatic dreaming counts it now: an eligible Source that
is not a sub-agent's and not withdrawn, or a version of an active entry. ``latest`` marks an
entry's current version (the one a run of Sources only may select). A scope's records after its
cursor are one indexed range read, never a scan of the event store.
"""

from __future__ import annotations

import json
from abc import ABC
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking
from eventsourcing.projection import Projection

from domain.artifact import Artifact
from domain.auto_dream import (
    AutoDream,
    AutoSettings,
    PendingRecord,
    RecordKind,
    retry_backoff,
)
from domain.canonical import canonical_json
from domain.refs import ArtifactFamily, ArtifactRef, MemoryCitation, SourceRef
from domain.scope import Scope
from domain.source import Eligibility, Source
from projections.backends import PostgresProjectionView, SQLiteProjectionView
from projections.base import ProjectionSpec, ProjectionView
from projections.dialect import POSITION, SCOPE_ID, Columns, Row, ViewCursor, row_values
from projections.memo import memo_of
from projections.runnable import changes_no_row
from projections.times import from_micros, to_micros

COLUMNS: Columns = (
    ("record_key", "key", "PRIMARY KEY"),  # the Source's aggregate id, or memory:entry version
    SCOPE_ID,
    ("owner", "key", "NOT NULL"),  # the Source's or the Memory artifact's aggregate id
    ("entry_id", "text", ""),
    ("kind", "text", "NOT NULL"),
    ("ref", "text", "NOT NULL"),  # the SourceRef or MemoryCitation, as JSON
    ("recorded_at", "int", "NOT NULL"),  # when it was last written (settling)
    ("counted", "bool", "NOT NULL"),
    ("latest", "bool", "NOT NULL"),
    POSITION,  # where it was recorded: the cursor's order
)
MEMORIES: Columns = (("owner", "key", "PRIMARY KEY"), SCOPE_ID, ("memory_id", "text", "NOT NULL"))
# One row per scope: what the scheduler needs to find the scopes that may be due without
# evaluating every scope (the exact evaluation is the write model's, in ``check_and_run``).
SCOPES: Columns = (
    ("scope_id", "key", "PRIMARY KEY"),
    ("scope_key", "key", "NOT NULL"),  # the Scope's aggregate id
    ("auto_key", "key", ""),  # the AutoDream's aggregate id, once it exists
    ("enabled", "bool", "NOT NULL"),
    ("min_hours", "int", "NOT NULL"),
    ("min_new", "int", "NOT NULL"),
    ("cursor_position", "int", "NOT NULL"),  # the scope's cursor
    ("window_open", "bool", "NOT NULL"),
    ("last_success_at", "int", ""),  # the time gate counts from here
    ("released_at", "int", ""),  # the last release since then, if any
    ("retries", "int", "NOT NULL"),  # windows released since the last success
    ("retry_at", "int", ""),  # released_at + the retry backoff
    ("pending", "int", "NOT NULL"),  # counted records after the cursor
    ("first_pending", "int", ""),  # the oldest of them: the scheduler's order
    ("ready", "bool", "NOT NULL"),  # pending > 0 and pending >= min_new: indexed with the order
)
HOUR_MICROS = 3_600_000_000
MEMORY_TABLE = "_memories"
DueKey = tuple[int, str]  # (the oldest pending record's position, scope id): the order


SCHEDULE_COLUMNS = ("enabled", "cursor_position", "window_open", "pending", "first_pending")


@dataclass(frozen=True)
class ScopeSchedule:
    enabled: bool
    cursor_position: int
    window_open: bool
    pending: int  # counted records after the cursor
    first_pending: int | None  # the oldest of them


class AutoRecordsView(ProjectionView, ABC):
    def view_tables(self) -> list[str]:
        return [self.table(), self.table(MEMORY_TABLE), self.table("_scopes")]

    def view_statements(self) -> list[str]:
        return [
            self._table_ddl("", COLUMNS),
            self._table_ddl(MEMORY_TABLE, MEMORIES),
            self._table_ddl("_scopes", SCOPES),
            # The scopes with enough records, oldest first: a tick never walks the others.
            self._index_ddl("due", "_scopes", "enabled, window_open, ready, first_pending"),
            self._index_ddl("pending", "", "scope_id, counted, position"),
            self._index_ddl("entry", "", "owner, entry_id"),
        ]

    # -- commands -------------------------------------------------------------------------------

    def source_recorded(self, event: Source.Recorded, tracking: Tracking) -> None:
        ref = SourceRef(event.source_type, event.source_id)
        counted = (event.eligibility == Eligibility.ELIGIBLE
                   and not getattr(event, "sub_agent", False))
        with self.tracked(tracking) as cursor:
            self._insert(cursor, "", self._row(
                str(event.originator_id), event.scope_id, event.originator_id, None,
                RecordKind.SOURCE, ref.to_dict(), event.timestamp, counted, tracking))
            if counted:
                self._adjust_pending(cursor, event.scope_id, [tracking.notification_id], +1)

    def source_amended(self, owner: UUID, recorded_at: datetime, tracking: Tracking) -> None:
        """Still being written: it settles again from now."""
        with self.tracked(tracking) as cursor:
            self._set(cursor, {"owner": str(owner)}, {"recorded_at": to_micros(recorded_at)})

    def source_withdrawn(self, owner: UUID, tracking: Tracking) -> None:
        with self.tracked(tracking) as cursor:
            self._stop_counting(cursor, {"owner": str(owner)})

    def memory_created(self, owner: UUID, scope_id: str, memory_id: str,
                       tracking: Tracking) -> None:
        with self.tracked(tracking) as cursor:
            self._insert(cursor, MEMORY_TABLE, {"owner": str(owner), "scope_id": scope_id,
                                                 "memory_id": memory_id})
            memo_of(self, MEMORY_TABLE).remember(str(owner), (scope_id, memory_id))

    def entry_written(self, event: Artifact.EntryAdded, tracking: Tracking) -> None:
        with self.tracked(tracking) as cursor:
            memory = self._memory(cursor, str(event.originator_id))
            if memory is None:
                return  # entries live only in Memory artifacts
            scope_id, memory_id = memory
            entry = {"owner": str(event.originator_id), "entry_id": event.entry_id}
            self._set(cursor, entry, {"latest": False})
            citation = MemoryCitation(
                ArtifactRef(ArtifactFamily.MEMORY, memory_id, event.revision),
                event.entry_id, event.entry_version_id)
            self._insert(cursor, "", self._row(
                f"{event.originator_id}:{event.entry_version_id}", scope_id,
                event.originator_id, event.entry_id, RecordKind.MEMORY_ENTRY,
                citation.to_dict(), event.timestamp, True, tracking))
            self._adjust_pending(cursor, scope_id, [tracking.notification_id], +1)

    def entry_status(self, owner: UUID, entry_id: str, active: bool,
                     tracking: Tracking) -> None:
        """Deactivation stops every version of the entry from counting; reactivation counts
        its current version again."""
        entry = {"owner": str(owner), "entry_id": entry_id}
        with self.tracked(tracking) as cursor:
            if not active:
                self._stop_counting(cursor, entry)
                return
            latest = {**entry, "latest": True, "counted": False}
            row = self._fetch_equal(cursor, ("scope_id", "position"), latest)
            if row is not None:
                self._set(cursor, latest, {"counted": True})
                self._adjust_pending(cursor, row["scope_id"], [int(row["position"])], +1)

    def scope_created(self, scope_key: UUID, scope_id: str, settings: Mapping[str, Any],
                      tracking: Tracking) -> None:
        with self.tracked(tracking) as cursor:
            self._insert(cursor, "_scopes", {
                "scope_id": scope_id, "scope_key": str(scope_key), "auto_key": None,
                **_scheduling(settings), "cursor_position": 0, "window_open": False,
                "last_success_at": None, "released_at": None, "retries": 0, "retry_at": None,
                "pending": 0, "first_pending": None, "ready": False})

    def scope_settings(self, scope_key: UUID, settings: Mapping[str, Any],
                       tracking: Tracking) -> None:
        where = {"scope_key": str(scope_key)}
        with self.tracked(tracking) as cursor:
            self._set(cursor, where, _scheduling(settings), "_scopes")
            self._mark_ready(cursor, where)

    def auto_started(self, auto_key: UUID, scope_id: str, tracking: Tracking) -> None:
        with self.tracked(tracking) as cursor:
            self._set(cursor, {"scope_id": scope_id}, {"auto_key": str(auto_key)}, "_scopes")

    def window_opened(self, auto_key: UUID, tracking: Tracking) -> None:
        with self.tracked(tracking) as cursor:
            self._set(cursor, {"auto_key": str(auto_key)}, {"window_open": True}, "_scopes")

    def window_succeeded(self, auto_key: UUID, cursor_position: int, completed_at: datetime,
                         tracking: Tracking) -> None:
        """The cursor moved: recount what is pending after it; the time gate restarts."""
        where = {"auto_key": str(auto_key)}
        with self.tracked(tracking) as cursor:
            self._set(cursor, where, {
                "window_open": False, "cursor_position": cursor_position,
                "last_success_at": to_micros(completed_at), "released_at": None, "retries": 0,
                "retry_at": None}, "_scopes")
            row = self._fetch_equal(cursor, ("scope_id",), where, "_scopes")
            if row is not None:
                self._recount(cursor, row["scope_id"])

    def window_released(self, auto_key: UUID, completed_at: datetime,
                        tracking: Tracking) -> None:
        """The cursor stays; the scope retries after its backoff."""
        where = {"auto_key": str(auto_key)}
        with self.tracked(tracking) as cursor:
            row = self._fetch_equal(cursor, ("retries",), where, "_scopes")
            retries = 1 + (0 if row is None else int(row["retries"]))
            self._set(cursor, where, {
                "window_open": False, "released_at": to_micros(completed_at),
                "retries": retries,
                "retry_at": to_micros(completed_at + retry_backoff(retries))}, "_scopes")

    def _memory(self, cursor: ViewCursor, owner: str) -> tuple[str, str] | None:
        """``(scope_id, memory_id)`` of a Memory artifact whose creation this view applied (a
        row that never changes: remembered, ADR-0037); None for any other artifact."""

        def read() -> tuple[str, str] | None:
            row = self._fetch_equal(cursor, ("scope_id", "memory_id"), {"owner": owner},
                                    MEMORY_TABLE)
            return None if row is None else (str(row["scope_id"]), str(row["memory_id"]))

        memory: tuple[str, str] | None = memo_of(self, MEMORY_TABLE).recall(owner, read)
        return memory

    def _stop_counting(self, cursor: ViewCursor, where: Mapping[str, object]) -> None:
        """The counted rows matching ``where`` count no more."""
        counted = {**where, "counted": True}
        cursor.execute(self._select_equal_sql(("scope_id", "position"), counted, ""), counted)
        rows = cursor.fetchall()
        if rows:
            self._set(cursor, counted, {"counted": False})
            positions = [int(row["position"]) for row in rows]
            self._adjust_pending(cursor, rows[0]["scope_id"], positions, -1)

    def _adjust_pending(self, cursor: ViewCursor, scope_id: str, positions: Sequence[int],
                        sign: int) -> None:
        """Records at ``positions`` started (+1) or stopped (-1) counting: the scope's pending
        count moves by those after its cursor; its oldest pending record is one index seek.
        One statement, which compares the positions with the cursor itself: a read first
        would cost a round trip on PostgreSQL for every Source and entry applied."""
        cursor.execute(
            self._statement(("pending", len(positions), sign),
                            lambda: self._adjust_pending_sql(len(positions), sign)),
            {"scope_id": scope_id, "yes": True,
             **{f"p{i}": position for i, position in enumerate(positions)}})

    def _adjust_pending_sql(self, count: int, sign: int) -> str:
        p = self.dialect.param
        scopes = self.table("_scopes")
        after_cursor = " + ".join(f"(CASE WHEN {p(f'p{i}')} > cursor_position THEN 1 ELSE 0 END)"
                                  for i in range(count))
        moved = f"pending {'+' if sign > 0 else '-'} ({after_cursor})"
        oldest = self._pending_sql("MIN(position)", f"{scopes}.cursor_position")
        return (f"UPDATE {scopes} SET pending = {moved}, first_pending = ({oldest}), "
                f"ready = ({moved} > 0 AND {moved} >= min_new) "
                f"WHERE scope_id = {p('scope_id')} AND ({after_cursor}) > 0")

    def _recount(self, cursor: ViewCursor, scope_id: str) -> None:
        """The scope's counted records after its (moved) cursor: how many, and the oldest."""
        scope = self._fetch_equal(cursor, ("cursor_position",), {"scope_id": scope_id},
                                  "_scopes")
        if scope is None:
            return
        cursor.execute(self._pending_sql("COUNT(*) AS n, MIN(position) AS first"),
                       {"scope_id": scope_id, "yes": True, "after": scope["cursor_position"]})
        counts = cursor.fetchone()
        self._set(cursor, {"scope_id": scope_id},
                  {"pending": int(counts["n"]), "first_pending": counts["first"]}, "_scopes")
        self._mark_ready(cursor, {"scope_id": scope_id})

    def _mark_ready(self, cursor: ViewCursor, where: Mapping[str, object]) -> None:
        """Whether the scope has enough pending records, after its count or threshold moved."""
        cursor.execute(f"UPDATE {self.table('_scopes')} SET ready = (pending > 0 AND "
                       f"pending >= min_new) WHERE {' AND '.join(self._equal(where))}", where)

    def _pending_sql(self, columns: str, after: str | None = None) -> str:
        """``columns`` over the scope's counted records after ``after`` (a parameter by
        default; or an expression)."""
        p = self.dialect.param
        return (f"SELECT {columns} FROM {self.table()} WHERE scope_id = {p('scope_id')} "
                f"AND counted = {p('yes')} AND position > {after or p('after')}")

    def _row(self, key: str, scope_id: str, owner: UUID, entry_id: str | None, kind: str,
             ref: dict[str, Any], recorded_at: datetime, counted: bool,
             tracking: Tracking) -> dict[str, object]:
        return {"record_key": key, "scope_id": scope_id, "owner": str(owner),
                "entry_id": entry_id, "kind": kind, "ref": canonical_json(ref),
                "recorded_at": to_micros(recorded_at), "counted": counted, "latest": True,
                "position": tracking.notification_id}

    def _set(self, cursor: ViewCursor, where: Mapping[str, object],
             values: Mapping[str, object], suffix: str = "") -> None:
        """Set ``values`` on every row of ``table(suffix)`` whose columns equal ``where``."""
        assignments = ", ".join(f"{name} = {self.dialect.param('set_' + name)}"
                                for name in values)
        cursor.execute(f"UPDATE {self.table(suffix)} SET {assignments} "
                       f"WHERE {' AND '.join(self._equal(where))}",
                       {**where, **{f"set_{name}": value for name, value in values.items()}})

    # -- queries --------------------------------------------------------------------------------

    def pending(self, scope_id: str, after: int, limit: int) -> list[PendingRecord]:
        p = self.dialect.param
        rows = self._select(
            f"SELECT kind, ref, recorded_at, position FROM {self.table()} "
            f"WHERE scope_id = {p('scope_id')} AND counted = {p('counted')} "
            f"AND position > {p('after')} ORDER BY position LIMIT {p('limit')}",
            {"scope_id": scope_id, "counted": True, "after": after, "limit": limit})
        return [_pending(row) for row in rows]

    def current_entries(self, scope_id: str, limit: int) -> list[MemoryCitation]:
        p = self.dialect.param
        rows = self._select(
            f"SELECT ref FROM {self.table()} WHERE scope_id = {p('scope_id')} "
            f"AND counted = {p('yes')} AND latest = {p('yes')} AND kind = {p('kind')} "
            f"ORDER BY position DESC LIMIT {p('limit')}",
            {"scope_id": scope_id, "yes": True, "kind": RecordKind.MEMORY_ENTRY.value,
             "limit": limit})
        return [MemoryCitation.from_dict(json.loads(row["ref"])) for row in rows]

    def count_records(self, scope_id: str | None = None) -> int:
        return self._count_in_scope(scope_id)

    def due_scopes(self, now: datetime, limit: int,
                   after: DueKey | None = None) -> list[DueKey]:
        """Scopes that may be due now, the oldest pending record first (continuing strictly
        after ``after``): enabled, idle, past their hours and retry backoff, with enough
        pending records.
        Settling, selection and capacity are checked by the write model's exact evaluation."""
        p = self.dialect.param
        params: dict[str, object] = {"yes": True, "no": False, "now": to_micros(now),
                                     "limit": limit}
        continued = ""
        if after is not None:
            continued = f"AND (first_pending, scope_id) > ({p('after_at')}, {p('after_id')}) "
            params["after_at"], params["after_id"] = after
        rows = self._select(
            f"SELECT first_pending, scope_id FROM {self.table('_scopes')} "
            f"WHERE enabled = {p('yes')} AND window_open = {p('no')} AND ready = {p('yes')} "
            f"AND (last_success_at IS NULL OR last_success_at + "
            f"min_hours * {HOUR_MICROS} <= {p('now')}) AND (retry_at IS NULL OR retry_at <= "
            f"{p('now')} OR released_at + min_hours * {HOUR_MICROS} <= {p('now')}) {continued}"
            f"ORDER BY first_pending, scope_id LIMIT {p('limit')}", params)
        return [(int(row["first_pending"]), row["scope_id"]) for row in rows]

    def schedule_of(self, scope_id: str) -> ScopeSchedule | None:
        """What the scheduler knows of one scope."""
        rows = self._select_equal(SCHEDULE_COLUMNS, {"scope_id": scope_id}, suffix="_scopes")
        if not rows:
            return None
        return ScopeSchedule(**row_values(rows[0], SCHEDULE_COLUMNS,
                                          bool_columns=("enabled", "window_open")))

    def open_windows(self, limit: int) -> list[str]:
        """Scopes with an automatic window in flight, to settle."""
        p = self.dialect.param
        rows = self._select(
            f"SELECT scope_id FROM {self.table('_scopes')} WHERE window_open = {p('yes')} "
            f"ORDER BY scope_id LIMIT {p('limit')}", {"yes": True, "limit": limit})
        return [row["scope_id"] for row in rows]


def _scheduling(settings: Mapping[str, Any]) -> dict[str, object]:
    auto = AutoSettings.of(settings)
    return {"enabled": auto.enabled, "min_hours": auto.min_hours,
            "min_new": auto.min_new_records}


def _pending(row: Row) -> PendingRecord:
    ref = json.loads(row["ref"])
    kind = RecordKind(row["kind"])
    parsed = (SourceRef.from_dict(ref) if kind == RecordKind.SOURCE
              else MemoryCitation.from_dict(ref))
    return PendingRecord(int(row["position"]), from_micros(row["recorded_at"]), kind, parsed)


class SQLiteAutoRecordsView(SQLiteProjectionView, AutoRecordsView):
    """Tables ``auto_records`` and ``auto_records_memories`` in
    ``<data_dir>/views/auto_records.sqlite3``."""

    table_prefix = "auto_records"


class PostgresAutoRecordsView(PostgresProjectionView, AutoRecordsView):
    """Tables ``auto_records`` and ``auto_records_memories`` next to
    ``auto_records_tracking``, in the write model's database."""


class AutoRecordsProjection(Projection[AutoRecordsView]):
    """Source and Memory entry events change rows; every other event still records its
    tracking position (``topics`` stays empty: see :class:`projections.base.ProjectionSpec`)."""

    name = "auto_records"

    @singledispatchmethod
    @changes_no_row
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.insert_tracking(tracking)

    @process_event.register
    def _recorded(self, domain_event: Source.Recorded, tracking: Tracking) -> None:
        self.view.source_recorded(domain_event, tracking)

    @process_event.register
    def _amended(self, domain_event: Source.Amended, tracking: Tracking) -> None:
        self.view.source_amended(domain_event.originator_id, domain_event.timestamp, tracking)

    @process_event.register
    def _withdrawn(self, domain_event: Source.Withdrawn, tracking: Tracking) -> None:
        self.view.source_withdrawn(domain_event.originator_id, tracking)

    @process_event.register
    def _source_erased(self, domain_event: Source.Erased, tracking: Tracking) -> None:
        self.view.source_withdrawn(domain_event.originator_id, tracking)  # no longer counted

    @process_event.register
    def _created(self, domain_event: Artifact.Created, tracking: Tracking) -> None:
        if domain_event.family != ArtifactFamily.MEMORY:
            self.view.insert_tracking(tracking)
            return
        self.view.memory_created(domain_event.originator_id, domain_event.scope_id,
                                 domain_event.artifact_id, tracking)

    @process_event.register
    def _entry_added(self, domain_event: Artifact.EntryAdded, tracking: Tracking) -> None:
        self.view.entry_written(domain_event, tracking)  # EntryRevised too (a subclass)

    @process_event.register
    def _deactivated(self, domain_event: Artifact.EntryDeactivated, tracking: Tracking) -> None:
        self.view.entry_status(domain_event.originator_id, domain_event.entry_id, False, tracking)

    @process_event.register
    def _entry_erased(self, domain_event: Artifact.EntryErased, tracking: Tracking) -> None:
        self.view.entry_status(domain_event.originator_id, domain_event.entry_id, False, tracking)

    @process_event.register
    def _reactivated(self, domain_event: Artifact.EntryReactivated, tracking: Tracking) -> None:
        self.view.entry_status(domain_event.originator_id, domain_event.entry_id, True, tracking)

    @process_event.register
    def _scope_created(self, domain_event: Scope.Created, tracking: Tracking) -> None:
        self.view.scope_created(domain_event.originator_id, domain_event.scope_id,
                                domain_event.settings, tracking)

    @process_event.register
    def _settings_changed(self, domain_event: Scope.SettingsChanged, tracking: Tracking) -> None:
        self.view.scope_settings(domain_event.originator_id, domain_event.settings, tracking)

    @process_event.register
    def _auto_started(self, domain_event: AutoDream.Started, tracking: Tracking) -> None:
        self.view.auto_started(domain_event.originator_id, domain_event.scope_id, tracking)

    @process_event.register
    def _window_opened(self, domain_event: AutoDream.WindowOpened, tracking: Tracking) -> None:
        self.view.window_opened(domain_event.originator_id, tracking)

    @process_event.register
    def _window_succeeded(self, domain_event: AutoDream.WindowSucceeded,
                          tracking: Tracking) -> None:
        self.view.window_succeeded(domain_event.originator_id, domain_event.cursor,
                                   domain_event.completed_at, tracking)

    @process_event.register
    def _window_released(self, domain_event: AutoDream.WindowReleased,
                         tracking: Tracking) -> None:
        self.view.window_released(domain_event.originator_id, domain_event.completed_at,
                                  tracking)

AUTO_RECORDS = ProjectionSpec(AutoRecordsProjection, sqlite_view=SQLiteAutoRecordsView,
                              postgres_view=PostgresAutoRecordsView,
                              announced=True)  # schedulers in other processes wake on it
