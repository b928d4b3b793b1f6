"""Materialised views and projection specs: one transaction for rows plus tracking, per backend.

A view is a library ``TrackingRecorder``. Its rows and its tracking position change in the same
database transaction (:meth:`ProjectionView.tracked`), so each upstream event's effect is
committed exactly once: the library's tracking upsert refuses a position that is not newer,
which rolls the row changes back with it.

The SQL of a concrete view is written once, against :class:`Dialect` (placeholders, column
types, quoting), and runs on both SQLite and PostgreSQL.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from threading import Event
from time import monotonic, sleep
from typing import Any, Generic, Protocol, TypeVar, cast

from eventsourcing.application import Application
from eventsourcing.persistence import Tracking, TrackingRecorder, WaitInterruptedError
from eventsourcing.postgres import PostgresDatastore, PostgresTrackingRecorder
from eventsourcing.projection import Projection
from eventsourcing.sqlite import SQLiteTrackingRecorder
from psycopg.sql import SQL, Identifier

from application.write_model import WriteModel

MIGRATION_ROW = "__migration__"  # the library's own tracking row; never delete it
TRACKING_SUFFIX = "_tracking"
FIRST_POLL_SECONDS = 0.005
LAST_POLL_SECONDS = 0.1
_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")


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

    @contextmanager
    def tracked(self, tracking: Tracking) -> Iterator[ViewCursor]:
        """A write transaction that has already recorded ``tracking`` (refused if not newer)."""
        with self._store().transaction(commit=True) as cursor:
            self._insert_tracking(cursor, tracking)
            yield cursor

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
            for table in self.view_tables():
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

    def _select(self, statement: str, params: Mapping[str, Any]) -> list[Row]:
        with self.reading() as cursor:
            cursor.execute(statement, params)
            rows: list[Row] = cursor.fetchall()
            return rows


class SQLiteProjectionView(SQLiteTrackingRecorder, ProjectionView, ABC):
    """A view in its own SQLite file; its tables are named after ``table_prefix``."""

    dialect = SQLITE
    table_prefix: str = ""

    def construct_create_table_statements(self) -> list[str]:
        return [*super().construct_create_table_statements(), *self.view_statements()]

    def table(self, suffix: str = "") -> str:
        return _quote(self.table_prefix + suffix)

    def index(self, suffix: str) -> str:
        return _quote(f"{self.table_prefix}_{suffix}")

    def _tracking_table(self) -> str:
        return "tracking"

    def _store(self) -> Datastore:
        return self.datastore


class PostgresProjectionView(PostgresTrackingRecorder, ProjectionView, ABC):
    """A view in the write model's database; its tables share the projection's name prefix.

    The library names the tracking table ``<projection name>_tracking``; this view's tables are
    ``<projection name><suffix>``, so two projections (or a rebuild under a new name) never
    collide.
    """

    dialect = POSTGRES

    def __init__(self, datastore: PostgresDatastore, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)
        self.table_prefix = self.tracking_table_name.removesuffix(TRACKING_SUFFIX)
        for statement in self.view_statements():
            self.sql_create_statements.append(SQL(statement).format())

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
    """A projection, its view class per store, and the application it follows."""

    projection: type[Projection[TView]]
    sqlite_view: type[TView]
    postgres_view: type[TView]
    application: type[Application[Any]] = WriteModel

    def __post_init__(self) -> None:
        _check_name(self.name)

    @property
    def name(self) -> str:
        return self.projection.name

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
