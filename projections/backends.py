"""The two stores a view can live in: its own SQLite file, or the write model's PostgreSQL
database. A concrete view is ``class SQLiteX(SQLiteProjectionView, XView)`` (with a
``table_prefix``) and ``class PostgresX(PostgresProjectionView, XView)``; the SQL of ``XView``
is the same for both.
"""

from __future__ import annotations

import sqlite3
from abc import ABC
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from eventsourcing.persistence import (
    ConnectionUnavailableError,
    InterfaceError,
    OperationalError,
    PersistenceError,
    Tracking,
)
from eventsourcing.postgres import PostgresDatastore, PostgresRecorder, PostgresTrackingRecorder
from eventsourcing.sqlite import (
    SQLITE3_DEFAULT_LOCK_TIMEOUT,
    SQLiteConnection,
    SQLiteConnectionPool,
    SQLiteDatastore,
    SQLiteTrackingRecorder,
)
from psycopg.sql import SQL, Identifier

from projections.base import Datastore, ProjectionView
from projections.batches import BatchAbortedError
from projections.dialect import POSTGRES, SQLITE, ViewCursor
from projections.rendered_sql import RenderedStatements
from projections.without_waiting import WouldWaitError, waiting_refused

TRACKING_SUFFIX = "_tracking"


class SynchronousPool(SQLiteConnectionPool):
    """Connections that open with ``PRAGMA synchronous`` set to :attr:`level`, and keep the
    statements they prepared (``STATEMENT_CACHE``).

    The library opens its connections with ``cached_statements=True``, which Python reads as
    a cache of one statement: every statement but the last one run on a connection was
    prepared again, and a command or a batch runs several in turn. These connections are
    opened here instead, as the library opens them but for the cache.

    Inside ``reads_without_waiting`` the pool waits for nothing: a read gets a connection
    that is free now, and a write none (ADR-0040)."""

    level: ClassVar[str] = "FULL"
    STATEMENT_CACHE: ClassVar[int] = 256  # per connection; a view's shapes number dozens

    def _create_connection(self) -> SQLiteConnection:
        try:
            connection = sqlite3.connect(
                self.db_name, uri=True, check_same_thread=False, isolation_level=None,
                cached_statements=self.STATEMENT_CACHE,
                timeout=self.lock_timeout or SQLITE3_DEFAULT_LOCK_TIMEOUT)
        except (sqlite3.Error, TypeError) as error:
            raise InterfaceError(error) from error
        if not self.is_sqlite_memory_mode and not self.is_journal_mode_wal:
            connection.execute("PRAGMA journal_mode=WAL")  # a no-op on a file already in WAL
            self.is_journal_mode_wal = True
        connection.row_factory = sqlite3.Row
        connection.execute(f"PRAGMA synchronous={self.level}")
        return SQLiteConnection(sqlite_conn=connection, max_age=self.max_age)

    def get_connection(self, timeout: float | None = None, *,
                       is_writer: bool | None = None) -> SQLiteConnection:
        if not waiting_refused():
            return super().get_connection(timeout, is_writer=is_writer)
        if is_writer:
            msg = "a write takes turns for SQLite's write lock"
            raise WouldWaitError(msg)
        try:
            return super().get_connection(0, is_writer=is_writer)
        except ConnectionUnavailableError as error:
            msg = "no SQLite connection is free"
            raise WouldWaitError(msg) from error


class _ViewConnectionPool(SynchronousPool):
    """Connections of a view file commit without an fsync each (WAL + ``synchronous=NORMAL``).

    A view is derived data with its position in the same transactions: a power loss can only
    roll it back to an earlier consistent position, from which the runner re-applies the
    events. A process crash loses nothing. Measured: catching up is several times faster.

    The write-ahead log is copied back into the file every ``CHECKPOINT_PAGES`` pages (about
    40 MB) rather than SQLite's 1,000: a batch dirties index pages all over a large view, and
    pages dirtied again by later batches are then copied once (rebuilds of 1,000,000 events
    12 % faster; performance notes).
    """

    level = "NORMAL"
    CHECKPOINT_PAGES = 10_000

    def _create_connection(self) -> SQLiteConnection:
        connection = super()._create_connection()
        connection.cursor().execute(f"PRAGMA wal_autocheckpoint={self.CHECKPOINT_PAGES}")
        return connection


class ScratchConnectionPool(_ViewConnectionPool):
    """Connections of a scratch copy of a view, deleted once used (a replay verification's):
    the rollback journal kept in memory, and no sync at all.

    Each page is written once, to the file, instead of to the write-ahead log and again to
    the file. A crash loses only the copy, which nothing reads after its process; a failed
    event's savepoint still rolls back (the journal is in memory, not off). Measured: a replay
    in one process (the default) 4-6 % faster; with two, no faster.
    """

    level = "OFF"

    def _create_connection(self) -> SQLiteConnection:
        self.is_journal_mode_wal = True  # the library would switch the file to WAL first
        connection = super()._create_connection()
        connection.cursor().execute("PRAGMA journal_mode=MEMORY")
        return connection


class SQLiteProjectionView(SQLiteTrackingRecorder, ProjectionView, ABC):
    """A view in its own SQLite file; its tables are named after ``table_prefix``."""

    dialect = SQLITE
    table_prefix: str = ""
    pool_class: ClassVar[type[SynchronousPool]] = _ViewConnectionPool

    def __init__(self, datastore: SQLiteDatastore, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)
        # The factory built the pool; the subclass only adds the pragma to new connections,
        # and none exists yet (they are opened lazily, after the recorder is constructed).
        datastore.pool.__class__ = self.pool_class

    def construct_create_table_statements(self) -> list[str]:
        return [*super().construct_create_table_statements(), *self.all_statements()]

    def _create_table(self, c: Any) -> None:
        # SQLite has no ``ADD COLUMN IF NOT EXISTS``: a main table made by an earlier release
        # gains its missing columns here, before the statements that may read them.
        if self.added_columns:
            c.execute(f"PRAGMA table_info({self.table()})")
            present = {row[1] for row in c.fetchall()}
            for column in self.added_columns:
                if present and column[0] not in present:
                    c.execute(f"ALTER TABLE {self.table()} ADD COLUMN "
                              f"{self.dialect.column_definitions((column,))}")
        super()._create_table(c)
        self._upgrade(c)

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


class PostgresProjectionView(RenderedStatements, SerialisedSchema, PostgresTrackingRecorder,
                             ProjectionView, ABC):
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

    def _create_table(self, curs: Any) -> None:
        super()._create_table(curs)  # under the schema lock, which the upgrade runs under too
        self._upgrade(curs)

    def column_additions(self) -> list[str]:
        return [f"ALTER TABLE {self.table()} ADD COLUMN IF NOT EXISTS "
                f"{self.dialect.column_definitions((column,))}" for column in self.added_columns]

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

    @contextmanager
    def _batch_transaction(self, *, careful: bool) -> Iterator[ViewCursor]:
        """A fast batch sends its statements in one pipeline, its BEGIN and COMMIT too: the
        server's answers are waited for where a handler reads one, and at the commit, not
        after every statement (psycopg's ``transaction()`` would sync as it begins and ends
        inside a pipeline: two round trips more a batch). A statement refused then aborts the
        batch as a failing event does, rolled back as its connection returns to the pool, to
        be redone carefully; a careful batch (a savepoint per event) waits for every answer,
        so a failure belongs to the event that sent it. A lost connection is the store's
        trouble, as anywhere."""
        if careful:
            with super()._batch_transaction(careful=True) as cursor:
                yield cursor
            return
        try:
            with (self.datastore.get_connection() as connection, connection.pipeline(),
                  connection.cursor() as cursor):
                cursor.execute(b"BEGIN")
                yield cursor
                cursor.execute(b"COMMIT")  # answered as the pipeline ends
        except (OperationalError, InterfaceError):
            raise  # the library's names for a lost connection or an unreachable server
        except PersistenceError as refused:
            raise BatchAbortedError(None) from refused

    @contextmanager
    def reading(self) -> Iterator[ViewCursor]:
        """A cursor on an autocommit connection: each read is one statement, and under READ
        COMMITTED a transaction around it would add its BEGIN and ROLLBACK round trips and no
        snapshot."""
        with self.datastore.get_connection() as connection, connection.cursor() as cursor:
            yield cursor

    @contextmanager
    def snapshot(self, *, held: bool = False) -> Iterator[ViewCursor]:
        """One REPEATABLE READ transaction: every read sees the same moment of the view.
        ``held``: it may sit idle for as long as its caller works (an audit replay), so the
        store's idle-in-transaction timeout is off for this transaction alone."""
        with (self.datastore.get_connection() as connection, connection.transaction(),
              connection.cursor() as cursor):
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            if held:
                cursor.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
            yield cursor

    def _store(self) -> Datastore:
        return self.datastore


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'
