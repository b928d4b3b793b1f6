"""Materialised views and projection specs: one transaction for rows plus tracking, per backend.

A view is a library ``TrackingRecorder``. Its rows and its tracking position change in the same
database transaction (:meth:`ProjectionView.tracked`), so each upstream event's effect is
committed exactly once: the library's tracking upsert refuses a position that is not newer,
which rolls the row changes back with it.

The SQL of a concrete view is written once, against :class:`Dialect` (placeholders, column
types, quoting), and runs on both SQLite and PostgreSQL.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, fields, replace
from datetime import UTC, datetime, timedelta
from threading import Event
from time import monotonic, sleep
from typing import Any, Generic, Protocol, TypeVar, cast
from uuid import UUID

import psycopg
from eventsourcing.application import Application
from eventsourcing.persistence import (
    IntegrityError,
    PersistenceError,
    Tracking,
    TrackingRecorder,
    WaitInterruptedError,
)
from eventsourcing.postgres import PostgresDatastore, PostgresRecorder, PostgresTrackingRecorder
from eventsourcing.projection import Projection
from eventsourcing.sqlite import (
    SQLiteConnection,
    SQLiteConnectionPool,
    SQLiteDatastore,
    SQLiteTrackingRecorder,
)
from eventsourcing.utils import get_topic
from psycopg.sql import SQL, Identifier

from application.write_model import WriteModel

MIGRATION_ROW = "__migration__"  # the library's own tracking row; never delete it
TRACKING_SUFFIX = "_tracking"
FIRST_POLL_SECONDS = 0.005
LAST_POLL_SECONDS = 0.1
_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")


@dataclass
class _Batch:
    view: ProjectionView
    cursor: ViewCursor
    careful: bool
    # A fast batch records only its first position (the exactly-once guard: refused unless
    # newer than the view's) and, at its end, its last: not one upsert of the tracking row per
    # event.
    first: Tracking | None = None
    last: Tracking | None = None

    def last_position(self) -> int:
        return 0 if self.last is None else self.last.notification_id


class BatchAbortedError(Exception):
    """An event failed inside a fast batch; its transaction rolls back, to be redone
    carefully (see :meth:`ProjectionView.batch`)."""

    def __init__(self, notification_id: int) -> None:
        super().__init__(f"the event at position {notification_id} failed in a fast batch")
        self.notification_id = notification_id


_BATCH: ContextVar[_Batch | None] = ContextVar("view_batch", default=None)
DEAD_LETTERS = "_dead_letters"
DEAD_LETTER_ERROR_MAX = 2_000  # characters of the error message kept with a dead letter
STORE_ERRORS = (PersistenceError, sqlite3.Error, psycopg.Error)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeadLetter:
    """An event a view failed to apply: where it is, and the error it raised."""

    notification_id: int
    originator_id: str
    originator_version: int
    topic: str
    error_type: str
    error: str
    recorded_at: int  # microseconds since the Unix epoch, UTC


DEAD_LETTER_FIELDS = tuple(field.name for field in fields(DeadLetter))


class ViewCursor(Protocol):
    """What view SQL needs from a DB-API cursor (sqlite3 and psycopg both qualify)."""

    def execute(self, statement: str, params: Mapping[str, Any], /) -> object: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> Any: ...


Row = Mapping[str, Any]


class Datastore(Protocol):
    """The library's SQLite and PostgreSQL datastores, as views use them."""

    def transaction(self, *, commit: bool) -> AbstractContextManager[Any]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Dialect:
    """The differences between the two backends that view SQL must spell out."""

    placeholder: Callable[[str], str]
    text: str
    integer: str
    boolean: str
    sortable_text: str  # byte-order comparison, the same on both stores

    def param(self, name: str) -> str:
        return self.placeholder(name)


SQLITE = Dialect(lambda name: f":{name}", text="TEXT", integer="INTEGER",
                 boolean="INTEGER", sortable_text="TEXT")
POSTGRES = Dialect(lambda name: f"%({name})s", text="text", integer="bigint",
                   boolean="boolean", sortable_text='text COLLATE "C"')


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

    def all_statements(self) -> list[str]:
        """The view's own tables, then its dead-letter table."""
        d = self.dialect
        return [*self.view_statements(),
                f"CREATE TABLE IF NOT EXISTS {self.table(DEAD_LETTERS)} ("
                f"notification_id {d.integer} PRIMARY KEY, originator_id {d.text} NOT NULL, "
                f"originator_version {d.integer} NOT NULL, topic {d.text} NOT NULL, "
                f"error_type {d.text} NOT NULL, error {d.text} NOT NULL, "
                f"recorded_at {d.integer} NOT NULL)"]

    # -- poison events ----------------------------------------------------------------------------

    def record_dead_letter(self, tracking: Tracking, poison: DeadLetter) -> None:
        """Record an event this view could not apply, with its position: the view moves on,
        and the failure stays visible (``/healthz``, :meth:`dead_letters`) until rebuilt."""
        values = asdict(poison)
        p = self.dialect.param
        with self.tracked(tracking) as cursor:
            cursor.execute(
                f"INSERT INTO {self.table(DEAD_LETTERS)} ({', '.join(values)}) "
                f"VALUES ({', '.join(p(name) for name in values)})", values)

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        rows = self._select(
            f"SELECT * FROM {self.table(DEAD_LETTERS)} ORDER BY notification_id "
            f"LIMIT {self.dialect.param('limit')}", {"limit": limit})
        return [DeadLetter(**{name: row[name] for name in DEAD_LETTER_FIELDS}) for row in rows]

    def dead_letter_count(self) -> int:
        rows = self._select(f"SELECT COUNT(*) AS n FROM {self.table(DEAD_LETTERS)}", {})
        return int(rows[0]["n"])

    @contextmanager
    def tracked(self, tracking: Tracking) -> Iterator[ViewCursor]:
        """A write transaction that has already recorded ``tracking`` (refused if not newer).

        Inside :meth:`batch`, part of the batch's transaction instead: a careful batch puts
        each event in a savepoint, so one that fails leaves nothing behind while the events
        before it stay applied; a fast batch gives up on the first failure
        (:class:`BatchAbortedError`), for the caller to redo the batch carefully.
        """
        batch = _BATCH.get()
        if batch is None or batch.view is not self:
            with self._store().transaction(commit=True) as cursor:
                self._insert_tracking(cursor, tracking)
                yield cursor
            return
        cursor = batch.cursor
        if not batch.careful:
            try:
                if batch.first is None:
                    self._insert_tracking(cursor, tracking)
                    batch.first = tracking
                elif tracking.notification_id <= batch.last_position():
                    msg = f"position {tracking.notification_id} is not newer than the batch's"
                    raise IntegrityError(msg)
                batch.last = tracking
                yield cursor
            except Exception as error:
                raise BatchAbortedError(tracking.notification_id) from error
            return
        cursor.execute("SAVEPOINT view_event", {})
        try:
            self._insert_tracking(cursor, tracking)
            yield cursor
        except BaseException:
            cursor.execute("ROLLBACK TO SAVEPOINT view_event", {})
            raise
        cursor.execute("RELEASE SAVEPOINT view_event", {})

    def _tracked_in_batch(self, tracking: Tracking) -> bool:
        """Record a position with no row change inside this thread's batch, if there is one."""
        batch = _BATCH.get()
        if batch is None or batch.view is not self:
            return False
        with self.tracked(tracking):
            return True

    @contextmanager
    def batch(self, *, careful: bool = False) -> Iterator[None]:
        """Apply many events in one transaction (rebuilds and replays): one commit instead of
        one per event. Careful: a savepoint per event (a failing event becomes a dead letter,
        as live); fast: none, and the first failure aborts the whole batch. The batch belongs
        to the calling thread or task only."""
        with self._store().transaction(commit=True) as cursor:
            batch = _Batch(self, cursor, careful)
            token = _BATCH.set(batch)
            try:
                yield
            finally:
                _BATCH.reset(token)
            if batch.last is not None and batch.last is not batch.first:
                self._insert_tracking(cursor, batch.last)

    @contextmanager
    def reading(self) -> Iterator[ViewCursor]:
        """A read-only transaction."""
        with self._store().transaction(commit=False) as cursor:
            yield cursor

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
        values = {**columns, "position": tracking.notification_id}
        assignments = ", ".join(f"{name} = {self.dialect.param(name)}" for name in values)
        where = f"aggregate_id = {self.dialect.param('aggregate_id')}"
        with self.tracked(tracking) as cursor:
            cursor.execute(
                f"UPDATE {self.table()} SET {assignments} WHERE {where} RETURNING aggregate_id",
                {**values, "aggregate_id": str(aggregate_id)},
            )
            if cursor.fetchone() is None:
                msg = (f"the {self.table()} view has no row for {what} {aggregate_id}; "
                       "rebuild the view")
                raise LookupError(msg)

    def _select(self, statement: str, params: Mapping[str, Any]) -> list[Row]:
        with self.reading() as cursor:
            cursor.execute(statement, params)
            rows: list[Row] = cursor.fetchall()
            return rows


class _ViewConnectionPool(SQLiteConnectionPool):
    """Connections of a view file commit without an fsync each (WAL + ``synchronous=NORMAL``).

    A view is derived data with its position in the same transactions: a power loss can only
    roll it back to an earlier consistent position, from which the runner re-applies the
    events. A process crash loses nothing. Measured: catching up is several times faster.
    """

    def _create_connection(self) -> SQLiteConnection:
        connection = super()._create_connection()
        connection.cursor().execute("PRAGMA synchronous=NORMAL")
        return connection


class SQLiteProjectionView(SQLiteTrackingRecorder, ProjectionView, ABC):
    """A view in its own SQLite file; its tables are named after ``table_prefix``."""

    dialect = SQLITE
    table_prefix: str = ""

    def __init__(self, datastore: SQLiteDatastore, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)
        # The factory built the pool; the subclass only adds the pragma to new connections,
        # and none exists yet (they are opened lazily, after the recorder is constructed).
        datastore.pool.__class__ = _ViewConnectionPool

    def construct_create_table_statements(self) -> list[str]:
        return [*super().construct_create_table_statements(), *self.all_statements()]

    def insert_tracking(self, tracking: Tracking) -> None:
        if not self._tracked_in_batch(tracking):
            super().insert_tracking(tracking)

    def table(self, suffix: str = "") -> str:
        return _quote(self.table_prefix + suffix)

    def index(self, suffix: str) -> str:
        return _quote(f"{self.table_prefix}_{suffix}")

    def _tracking_table(self) -> str:
        return "tracking"

    def _store(self) -> Datastore:
        return self.datastore


# One advisory lock key ("dream" in ASCII) for every table this service creates.
SCHEMA_LOCK_KEY = 0x647265616D


class SerialisedSchema(PostgresRecorder):
    """A PostgreSQL recorder whose ``CREATE … IF NOT EXISTS`` statements run under one
    transaction-level advisory lock: processes starting at once otherwise race on the catalog
    and one fails with "tuple concurrently updated". Mix in ahead of the library class."""

    def _create_table(self, curs: Any) -> None:
        curs.execute(SQL("SELECT pg_advisory_xact_lock(%s)"), (SCHEMA_LOCK_KEY,))
        super()._create_table(curs)


class PostgresProjectionView(SerialisedSchema, PostgresTrackingRecorder, ProjectionView, ABC):
    """A view in the write model's database; its tables share the projection's name prefix.

    The library names the tracking table ``<projection name>_tracking``; this view's tables are
    ``<projection name><suffix>``, so two projections (or a rebuild under a new name) never
    collide.
    """

    dialect = POSTGRES

    def __init__(self, datastore: PostgresDatastore, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)
        self.table_prefix = self.tracking_table_name.removesuffix(TRACKING_SUFFIX)
        for statement in self.all_statements():
            self.sql_create_statements.append(SQL(statement).format())

    def insert_tracking(self, tracking: Tracking) -> None:
        if not self._tracked_in_batch(tracking):
            super().insert_tracking(tracking)

    def table(self, suffix: str = "") -> str:
        return Identifier(self.datastore.schema, self.table_prefix + suffix).as_string()

    def index(self, suffix: str) -> str:
        name = f"{self.table_prefix}_{suffix}"
        self.check_identifier_length(name)
        return Identifier(name).as_string()

    def _tracking_table(self) -> str:
        return Identifier(self.datastore.schema, self.tracking_table_name).as_string()

    def _store(self) -> Datastore:
        return self.datastore


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


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
    application: type[Application[Any]] = WriteModel

    def __post_init__(self) -> None:
        _check_name(self.name)

    @property
    def name(self) -> str:
        return self.projection.name

    @property
    def runnable(self) -> type[Projection[TView]]:
        """The projection as runners use it: a poison event becomes a dead letter."""
        return cast(type[Projection[TView]],
                    type(self.projection.__name__, (_DeadLettering, self.projection),
                         {"name": self.name}))

    def view_class(self, *, postgres: bool) -> type[TView]:
        return self.postgres_view if postgres else self.sqlite_view

    def renamed(self, name: str) -> ProjectionSpec[TView]:
        """The same projection under another name, so with its own tables, file and tracking.

        For building a second copy next to the live one (then switching readers over).
        """
        _check_name(name)
        subclass = type(f"{self.projection.__name__}_{name}", (self.projection,), {"name": name})
        return replace(self, projection=cast(type[Projection[TView]], subclass))


class _DeadLettering(Projection[Any]):
    """Applies events as the projection does; an event its own code fails on is recorded as a
    dead letter (and logged) instead of stopping every read model behind it.

    Store errors are not the event's fault: they propagate, and the runner retries them.
    """

    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        try:  # mixed in ahead of a concrete projection, whose process_event this calls
            super().process_event(domain_event, tracking)  # type: ignore[safe-super]
        except (*STORE_ERRORS, BatchAbortedError):
            raise
        except Exception as error:
            logger.exception("projection %r: event at position %s is a dead letter", self.name,
                             tracking.notification_id)
            self.view.record_dead_letter(tracking, DeadLetter(
                notification_id=tracking.notification_id,
                originator_id=str(domain_event.originator_id),
                originator_version=domain_event.originator_version,
                topic=get_topic(type(domain_event)), error_type=type(error).__name__,
                error=str(error)[:DEAD_LETTER_ERROR_MAX] or type(error).__name__,
                recorded_at=(datetime.now(tz=UTC) - EPOCH) // timedelta(microseconds=1)))


def _check_name(name: str) -> None:
    # Lower case: PostgreSQL folds it into table names; short: identifiers stop at 63 bytes.
    if not _NAME.fullmatch(name):
        msg = f"projection name {name!r} must match {_NAME.pattern}"
        raise ValueError(msg)
