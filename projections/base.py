"""Materialised views and projection specs: one transaction for rows plus tracking.

A view is a library ``TrackingRecorder``. Its rows and its tracking position change in the same
database transaction (:meth:`ProjectionView.tracked`), so each upstream event's effect is
committed exactly once: the library's tracking upsert refuses a position that is not newer,
which rolls the row changes back with it.

The SQL of a concrete view is written once, against :class:`projections.dialect.Dialect`
(placeholders, column types), and runs on both SQLite and PostgreSQL
(:mod:`projections.backends`).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, replace
from threading import Event
from time import monotonic, sleep
from typing import Any, ClassVar, Generic, Protocol, TypeVar, cast
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import (
    Tracking,
    TrackingRecorder,
    WaitInterruptedError,
)
from eventsourcing.projection import Projection

from application.store import EventStore
from projections.batches import CURRENT_BATCH, Batch, FastEvent
from projections.dead_letters import DEAD_LETTER_COLUMNS, DEAD_LETTERS, DeadLetter
from projections.dialect import Columns, Dialect, Row, ViewCursor, column_names, row_values
from projections.memo import forget_memos
from projections.runnable import runnable

MIGRATION_ROW = "__migration__"  # the library's own tracking row; never delete it
FIRST_POLL_SECONDS = 0.005
LAST_POLL_SECONDS = 0.1
_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")




class Datastore(Protocol):
    """The library's SQLite and PostgreSQL datastores, as views use them."""

    def transaction(self, *, commit: bool) -> AbstractContextManager[Any]: ...

    def close(self) -> None: ...


class ProjectionView(TrackingRecorder, ABC):
    """A view that can be emptied and rebuilt, with storage primitives shared SQL runs on."""

    dialect: Dialect

    @abstractmethod
    def table(self, suffix: str = "") -> str:
        """The quoted (and on PostgreSQL schema-qualified) name of one of this view's tables."""

    @abstractmethod
    def index(self, suffix: str) -> str:
        """The quoted name for one of this view's indexes."""

    @abstractmethod
    def view_tables(self) -> list[str]:
        """Every table holding this view's rows (quoted), for :meth:`reset`."""

    @abstractmethod
    def view_statements(self) -> list[str]:
        """``CREATE TABLE/INDEX IF NOT EXISTS`` statements for this view's own tables."""

    # Columns of the main table that a table made by an earlier release lacks: opening the
    # view adds them (the backends know how), before ``upgrade_statements`` run.
    added_columns: ClassVar[Columns] = ()

    def all_statements(self) -> list[str]:
        """The view's own tables, the columns added since, then its dead-letter table."""
        return [*self.view_statements(), *self.column_additions(),
                self._table_ddl(DEAD_LETTERS, DEAD_LETTER_COLUMNS)]

    def column_additions(self) -> list[str]:
        """Statements adding ``added_columns`` where missing (none where the store cannot say
        ``IF NOT EXISTS``: the backend adds them before any statement runs)."""
        return []

    def upgrade_due(self) -> str | None:
        """A query answering a row when the rows need :meth:`upgrade_statements` (``None``:
        never). Asked as the view opens, once its tables exist: an opening that finds the rows
        current writes nothing, so it takes no write lock."""
        return None

    def upgrade_statements(self) -> list[str]:
        """Statements bringing the rows up to date, run when :meth:`upgrade_due` says so."""
        return []

    def _upgrade(self, cursor: Any) -> None:
        """Run the upgrade statements in the opening's transaction, if they are due."""
        due = self.upgrade_due()
        if due is None:
            return
        cursor.execute(due)
        if cursor.fetchone() is None:
            return
        for statement in self.upgrade_statements():
            cursor.execute(statement)

    def _table_ddl(self, suffix: str, columns: Columns, *constraints: str) -> str:
        """``CREATE TABLE IF NOT EXISTS`` for ``table(suffix)``: the columns, then any table
        constraints (keys spanning several columns)."""
        definitions = ", ".join([self.dialect.column_definitions(columns), *constraints])
        return f"CREATE TABLE IF NOT EXISTS {self.table(suffix)} ({definitions})"

    def _index_ddl(self, name: str, suffix: str, columns: str, *, unique: bool = False) -> str:
        """``CREATE [UNIQUE] INDEX IF NOT EXISTS`` ``index(name)`` on ``table(suffix)``."""
        kind = "UNIQUE INDEX" if unique else "INDEX"
        return (f"CREATE {kind} IF NOT EXISTS {self.index(name)} "
                f"ON {self.table(suffix)} ({columns})")

    # -- poison events ----------------------------------------------------------------------------

    def record_dead_letter(self, tracking: Tracking, poison: DeadLetter) -> None:
        """Record an event this view could not apply, with its position: the view moves on,
        and the failure stays visible (``/healthz``, :meth:`dead_letters`) until rebuilt."""
        with self.tracked(tracking) as cursor:
            self._insert(cursor, DEAD_LETTERS, asdict(poison))

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        rows = self._select(
            f"SELECT * FROM {self.table(DEAD_LETTERS)} ORDER BY notification_id "
            f"LIMIT {self.dialect.param('limit')}", {"limit": limit})
        return [DeadLetter(**row_values(row, column_names(DEAD_LETTER_COLUMNS))) for row in rows]

    def dead_letter_count(self) -> int:
        return self._count(DEAD_LETTERS)

    def tracked(self, tracking: Tracking) -> AbstractContextManager[ViewCursor]:
        """A write transaction that has already recorded ``tracking`` (refused if not newer).

        Inside :meth:`batch`, part of the batch's transaction instead: a careful batch puts
        each event in a savepoint, so one that fails leaves nothing behind while the events
        before it stay applied; a fast batch gives up on the first failure
        (:class:`BatchAbortedError`), for the caller to redo the batch carefully.
        """
        batch = CURRENT_BATCH.get()
        if batch is None or batch.view is not self:
            return self._tracked_alone(tracking)
        if not batch.careful:
            return FastEvent(batch, tracking)
        return self._tracked_carefully(batch.cursor, tracking)

    @contextmanager
    def _tracked_alone(self, tracking: Tracking) -> Iterator[ViewCursor]:
        with self._forgetting_on_failure(), self._store().transaction(commit=True) as cursor:
            self._insert_tracking(cursor, tracking)
            yield cursor

    @contextmanager
    def _tracked_carefully(self, cursor: ViewCursor, tracking: Tracking) -> Iterator[ViewCursor]:
        cursor.execute("SAVEPOINT view_event", {})
        try:
            self._insert_tracking(cursor, tracking)
            yield cursor
        except BaseException:
            cursor.execute("ROLLBACK TO SAVEPOINT view_event", {})
            forget_memos(self)
            raise
        cursor.execute("RELEASE SAVEPOINT view_event", {})

    def _tracked_in_batch(self, tracking: Tracking) -> bool:
        """Record a position with no row change inside this thread's batch, if there is one."""
        batch = CURRENT_BATCH.get()
        if batch is None or batch.view is not self:
            return False
        if batch.careful:
            with self.tracked(tracking):
                return True
        batch.step(tracking)  # most events change nothing in a given view: kept short
        return True

    @contextmanager
    def batch(self, *, careful: bool = False) -> Iterator[ViewCursor]:
        """Apply many events in one transaction (rebuilds and replays): one commit instead of
        one per event. Careful: a savepoint per event (a failing event becomes a dead letter,
        as live); fast: none, and the first failure aborts the whole batch. The batch belongs
        to the calling thread or task only; its cursor is the transaction's."""
        with self._forgetting_on_failure(), self._batch_transaction(careful=careful) as cursor:
            batch = Batch(self, cursor, careful)
            token = CURRENT_BATCH.set(batch)
            try:
                yield cursor
            finally:
                CURRENT_BATCH.reset(token)
            if batch.last is not None and batch.last is not batch.first:
                self._insert_tracking(cursor, batch.last)

    @contextmanager
    def _forgetting_on_failure(self) -> Iterator[None]:
        try:
            yield
        except BaseException:
            forget_memos(self)
            raise

    def _batch_transaction(self, *, careful: bool) -> AbstractContextManager[ViewCursor]:
        """The transaction of a :meth:`batch`."""
        transaction: AbstractContextManager[ViewCursor] = self._store().transaction(commit=True)
        return transaction

    @contextmanager
    def reading(self) -> Iterator[ViewCursor]:
        """A read-only transaction."""
        with self._store().transaction(commit=False) as cursor:
            yield cursor

    @contextmanager
    def snapshot(self, *, held: bool = False) -> Iterator[ViewCursor]:
        """A read-only transaction whose reads all see one moment of the view, its tracking
        position included, however busy its host is (SQLite's WAL gives every read
        transaction a snapshot). ``held``: it may stay open and idle for long."""
        with self.reading() as cursor:
            yield cursor

    def position_in(self, cursor: ViewCursor, application_name: str) -> int:
        """The view's tracking position, as ``cursor``'s transaction sees it (0: none)."""
        position: int | None = self._max_tracking_id(application_name, cursor)  # type: ignore[attr-defined]
        return position or 0

    def close(self) -> None:
        """Release the view's connections."""
        self._store().close()

    def wait(self, application_name: str, notification_id: int | None,
             timeout: float = 1.0, interrupt: Event | None = None) -> None:
        """The library's ``wait``, polling from 5 ms (not 100 ms) up to 100 ms (not 800 ms).

        Read-your-writes waits are usually for a position a few milliseconds away.
        """
        deadline = monotonic() + timeout
        interval = FIRST_POLL_SECONDS
        while not self.has_tracking_id(application_name, notification_id):
            remaining = deadline - monotonic()
            if remaining <= 0:
                msg = (f"Timed out waiting for notification {notification_id} "
                       f"from application '{application_name}' to be processed")
                raise TimeoutError(msg)
            pause = min(interval, remaining)
            if interrupt is None:
                sleep(pause)
            elif interrupt.wait(pause):
                raise WaitInterruptedError
            interval = min(interval * 2, LAST_POLL_SECONDS)

    def reset(self) -> None:
        """Delete every row and every tracking position: the next run starts from scratch."""
        forget_memos(self)
        with self._writing() as cursor:
            for table in [*self.view_tables(), self.table(DEAD_LETTERS)]:
                cursor.execute(f"DELETE FROM {table}", {})
            cursor.execute(
                f"DELETE FROM {self._tracking_table()} "
                f"WHERE application_name <> {self.dialect.param('migration')}",
                {"migration": MIGRATION_ROW},
            )

    @contextmanager
    def _writing(self) -> Iterator[ViewCursor]:
        """A write transaction without tracking (for :meth:`reset` only)."""
        with self._store().transaction(commit=True) as cursor:
            yield cursor

    @abstractmethod
    def _store(self) -> Datastore:
        """The library datastore this view's recorder was built on."""

    @abstractmethod
    def _insert_tracking(self, cursor: Any, tracking: Tracking) -> None:
        """The library's tracking upsert inside an open transaction."""

    @abstractmethod
    def _tracking_table(self) -> str:
        """The library's tracking table, quoted."""

    def _update_row(self, aggregate_id: UUID, tracking: Tracking, what: str,
                    **columns: object) -> None:
        """Change the main table's row of ``aggregate_id`` (and its ``position``) with
        ``tracking``; a missing row raises ``LookupError``, so the event becomes a dead letter."""
        with self.tracked(tracking) as cursor:
            if not self._update(cursor, "", aggregate_id,
                                {**columns, "position": tracking.notification_id}):
                raise self._missing(f"row for {what}", aggregate_id)
            self._row_written(cursor, aggregate_id)

    def _row_written(self, cursor: ViewCursor, aggregate_id: UUID) -> None:
        """A hook: the main table's row of ``aggregate_id`` was just changed in ``cursor``'s
        transaction (a view that keeps something derived from the whole row updates it)."""

    def _missing(self, what: str, aggregate_id: UUID, suffix: str = "") -> LookupError:
        """The error of an event about an aggregate whose earlier events left no row: a dead
        letter, until the view is rebuilt."""
        return LookupError(f"the {self.table(suffix)} view has no {what} {aggregate_id}; "
                           "rebuild the view")

    # -- SQL the concrete views share -------------------------------------------------------------

    def _statement(self, key: tuple[Any, ...], build: Callable[[], str]) -> str:
        """A statement built once per view and shape: the SQL of every applied event."""
        built: dict[tuple[Any, ...], str] = self.__dict__.setdefault("_statements", {})
        statement = built.get(key)
        if statement is None:
            statement = built[key] = build()
        return statement

    def _insert_sql(self, suffix: str, names: Iterable[str], on_conflict: str = "") -> str:
        """An ``INSERT`` of the named columns (parameters named after them) into
        ``table(suffix)``, with an optional ``ON CONFLICT`` clause."""
        columns = tuple(names)
        return self._statement(("insert", suffix, columns, on_conflict),
                               lambda: self._build_insert(suffix, columns, on_conflict))

    def _build_insert(self, suffix: str, columns: tuple[str, ...], on_conflict: str) -> str:
        statement = (f"INSERT INTO {self.table(suffix)} ({', '.join(columns)}) "
                     f"VALUES ({', '.join(self.dialect.param(name) for name in columns)})")
        return f"{statement} {on_conflict}" if on_conflict else statement

    def _insert(self, cursor: ViewCursor, suffix: str, values: Mapping[str, object]) -> None:
        cursor.execute(self._insert_sql(suffix, values), values)

    def _update(self, cursor: ViewCursor, suffix: str, aggregate_id: UUID,
                values: Mapping[str, object]) -> bool:
        """Set columns of the row of ``aggregate_id`` in ``table(suffix)``; ``False``: there is
        no such row."""
        names = tuple(values)
        cursor.execute(self._statement(("update", suffix, names),
                                       lambda: self._build_update(suffix, names)),
                       {**values, "aggregate_id": str(aggregate_id)})
        return cursor.fetchone() is not None

    def _build_update(self, suffix: str, names: tuple[str, ...]) -> str:
        assignments = ", ".join(f"{name} = {self.dialect.param(name)}" for name in names)
        return (f"UPDATE {self.table(suffix)} SET {assignments} "
                f"WHERE aggregate_id = {self.dialect.param('aggregate_id')} "
                "RETURNING aggregate_id")

    def _equal(self, names: Iterable[str], alias: str = "") -> list[str]:
        """One ``column = parameter`` condition per name (parameters named after columns)."""
        return [f"{alias}{name} = {self.dialect.param(name)}" for name in names]

    def _filters(self, values: Mapping[str, object], alias: str = "") -> list[str]:
        """:meth:`_equal` conditions for the columns given a value (``None``: no filter)."""
        return self._equal((name for name, value in values.items() if value is not None), alias)

    def _select_equal_sql(self, names: Iterable[str], params: Mapping[str, Any], suffix: str,
                          order: str = "") -> str:
        """A ``SELECT`` of the named columns of ``table(suffix)``'s rows whose columns equal
        ``params``."""
        columns, equal = tuple(names), tuple(params)
        return self._statement(("select", suffix, columns, equal, order),
                               lambda: self._build_select(suffix, columns, equal, order))

    def _build_select(self, suffix: str, columns: tuple[str, ...], equal: tuple[str, ...],
                      order: str) -> str:
        statement = (f"SELECT {', '.join(columns)} FROM {self.table(suffix)} "
                     f"WHERE {' AND '.join(self._equal(equal))}")
        return f"{statement} ORDER BY {order}" if order else statement

    def _select_equal(self, names: Iterable[str], params: Mapping[str, Any], *,
                      suffix: str = "", order: str = "") -> list[Row]:
        """The named columns of the rows of ``table(suffix)`` whose columns equal ``params``."""
        return self._select(self._select_equal_sql(names, params, suffix, order), params)

    def _fetch_equal(self, cursor: ViewCursor, names: Iterable[str], params: Mapping[str, Any],
                     suffix: str = "") -> Row | None:
        """Inside an open transaction: one row :meth:`_select_equal` would return, or ``None``."""
        cursor.execute(self._select_equal_sql(names, params, suffix), params)
        row: Row | None = cursor.fetchone()
        return row

    def _count(self, suffix: str = "", conditions: Sequence[str] = (),
               params: Mapping[str, Any] | None = None) -> int:
        """Rows of ``table(suffix)`` that meet every condition."""
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        rows = self._select(f"SELECT COUNT(*) AS n FROM {self.table(suffix)}{where}",
                            params or {})
        return int(rows[0]["n"])

    def _count_in_scope(self, scope_id: str | None, suffix: str = "") -> int:
        """Rows of ``table(suffix)`` in one scope, or in the whole table."""
        values = {"scope_id": scope_id}
        return self._count(suffix, self._filters(values), values)

    def _select(self, statement: str, params: Mapping[str, Any]) -> list[Row]:
        with self.reading() as cursor:
            cursor.execute(statement, params)
            rows: list[Row] = cursor.fetchall()
            return rows


TView = TypeVar("TView", bound=ProjectionView)


@dataclass(frozen=True)
class ProjectionSpec(Generic[TView]):
    """A projection, its view class per store, and the application it follows.

    Every projection records the tracking position of *every* event, changing rows or not:
    its ``topics`` stay empty, because a filtered subscription would never see the positions
    of other events, and ``wait(position)`` for them would time out."""

    projection: type[Projection[TView]]
    sqlite_view: type[TView]
    postgres_view: type[TView]
    application: type[Application[Any]] = EventStore
    # Whether the view's host announces every batch it commits to other processes (on
    # PostgreSQL), because they act on its rows: workers claim runs from the runs view.
    announced: bool = False

    def __post_init__(self) -> None:
        _check_name(self.name)

    @property
    def name(self) -> str:
        return self.projection.name

    @property
    def runnable(self) -> type[Projection[TView]]:
        """The projection as runners use it (:func:`projections.runnable.runnable`)."""
        return runnable(self.projection, self.name)

    def view_class(self, *, postgres: bool) -> type[TView]:
        return self.postgres_view if postgres else self.sqlite_view

    def renamed(self, name: str) -> ProjectionSpec[TView]:
        """The same projection under another name, so with its own tables, file and tracking.

        For building a second copy next to the live one (then switching readers over).
        """
        _check_name(name)
        subclass = type(f"{self.projection.__name__}_{name}", (self.projection,), {"name": name})
        return replace(self, projection=cast(type[Projection[TView]], subclass))


def _check_name(name: str) -> None:
    # Lower case: PostgreSQL folds it into table names; short: identifiers stop at 63 bytes.
    if not _NAME.fullmatch(name):
        msg = f"projection name {name!r} must match {_NAME.pattern}"
        raise ValueError(msg)
