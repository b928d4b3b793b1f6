"""Event store configuration for the embedded (SQLite) and scaled (PostgreSQL) modes.

Both recorders add the *read-set check*: inside the insert transaction, after the store's write
lock is held, they compare the current version of every aggregate the command only read with
the version it read, and abort the whole transaction if any moved.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from threading import Event, Thread
from typing import Any, ClassVar
from urllib.parse import unquote, urlsplit
from uuid import UUID

from eventsourcing.persistence import (
    ApplicationRecorder,
    ListenNotifySubscription,
    StoredEvent,
    Subscription,
)
from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteCursor
from psycopg import Cursor
from psycopg.rows import DictRow
from psycopg.sql import SQL, Identifier

from adapters.settings import Settings
from application.dreaming import Dreaming
from application.ports import ReadSetChangedError
from application.write_model import WriteModel

ReadSet = Mapping[UUID, int]


def _moved(read_set: ReadSet, current: Mapping[UUID, int]) -> dict[UUID, tuple[int, int]]:
    return {
        aggregate_id: (expected, current.get(aggregate_id, 0))
        for aggregate_id, expected in read_set.items()
        if current.get(aggregate_id, 0) != expected
    }


class PollingSubscription(ListenNotifySubscription[SQLiteApplicationRecorder]):
    """The library's pull loop, woken by a timer because SQLite has no LISTEN/NOTIFY.

    ``ListenNotifySubscription`` already selects ``> last id`` in batches and feeds a bounded
    queue; its PostgreSQL subclass only sets ``_has_been_notified`` when a NOTIFY arrives. Here
    a thread sets it every ``interval`` seconds, so writes by any process on this host (WAL)
    are seen within one interval. ``_has_been_notified`` is private library API, pinned by
    ``tests/test_sqlite_subscription.py``.
    """

    def __init__(self, recorder: SQLiteApplicationRecorder, gt: int | None = None,
                 topics: Sequence[str] = (), interval: float = 0.05) -> None:
        self._polling_stopped = Event()  # before super(): stop() may run from __del__
        super().__init__(recorder=recorder, gt=gt, topics=topics)
        self._poll_thread = Thread(target=self._poll, args=(interval,), daemon=True,
                                   name="sqlite-subscription-poll")
        self._poll_thread.start()

    def _poll(self, interval: float) -> None:
        while not self._polling_stopped.wait(interval):
            self._has_been_notified.set()

    def stop(self) -> None:
        self._polling_stopped.set()
        super().stop()

    def __exit__(self, *args: object, **kwargs: Any) -> None:
        try:
            super().__exit__(*args, **kwargs)
        finally:
            self._poll_thread.join()


class ReadSetSQLiteApplicationRecorder(SQLiteApplicationRecorder):
    supports_read_set = True
    store_kind = "sqlite"
    poll_interval: ClassVar[float] = 0.05  # seconds between a subscription's polls

    def subscribe(self, gt: int | None = None,
                  topics: Sequence[str] = ()) -> Subscription[ApplicationRecorder]:
        return PollingSubscription(self, gt=gt, topics=topics, interval=self.poll_interval)

    def _insert_events(self, c: SQLiteCursor, stored_events: Sequence[StoredEvent],
                       *, read_set: ReadSet | None = None, **kwargs: Any) -> Sequence[int] | None:
        # Insert first: that takes SQLite's write lock, so the versions read below are final.
        notification_ids = super()._insert_events(c, stored_events, **kwargs)
        if read_set:
            marks = ",".join("?" * len(read_set))
            c.execute(
                f"SELECT originator_id, MAX(originator_version) FROM {self.events_table_name} "
                f"WHERE originator_id IN ({marks}) GROUP BY originator_id",
                [aggregate_id.hex for aggregate_id in read_set],
            )
            current = {UUID(row[0]): row[1] for row in c.fetchall()}
            moved = _moved(read_set, current)
            if moved:
                raise ReadSetChangedError(moved)
        return notification_ids


class ReadSetPostgresApplicationRecorder(PostgresApplicationRecorder):
    supports_read_set = True
    store_kind = "postgres"

    def _insert_events(self, curs: Cursor[DictRow], stored_events: Sequence[StoredEvent],
                       *, read_set: ReadSet | None = None, **kwargs: Any) -> None:
        super()._insert_events(curs, stored_events, **kwargs)
        if not read_set:
            return
        # Take the table's insert lock now (the insert takes it again, harmlessly), so no
        # other writer can commit between this check and our commit.
        self._lock_table(curs)
        curs.execute(
            SQL("SELECT originator_id, MAX(originator_version) AS version FROM {0}.{1} "
                "WHERE originator_id = ANY(%s) GROUP BY originator_id").format(
                Identifier(self.datastore.schema), Identifier(self.events_table_name)),
            (list(read_set),),
        )
        current = {row["originator_id"]: row["version"] for row in curs.fetchall()}
        moved = _moved(read_set, current)
        if moved:
            raise ReadSetChangedError(moved)


def _topic(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def postgres_env(database_url: str, settings: Settings | None = None) -> dict[str, str]:
    settings = settings or Settings()
    url = urlsplit(database_url)
    if url.scheme not in ("postgresql", "postgres") or not url.path.strip("/"):
        msg = "DREAM_DATABASE_URL must look like postgresql://user:password@host:port/dbname"
        raise ValueError(msg)
    return {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "APPLICATION_RECORDER_TOPIC": _topic(ReadSetPostgresApplicationRecorder),
        "POSTGRES_DBNAME": unquote(url.path.strip("/")),
        "POSTGRES_HOST": url.hostname or "127.0.0.1",
        "POSTGRES_PORT": str(url.port or 5432),
        "POSTGRES_USER": unquote(url.username or ""),
        "POSTGRES_PASSWORD": unquote(url.password or ""),
        "POSTGRES_POOL_SIZE": str(settings.postgres_pool_size),
        "POSTGRES_LOCK_TIMEOUT": str(settings.postgres_lock_timeout),
    }


def sqlite_env(settings: Settings) -> dict[str, str]:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    return {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "APPLICATION_RECORDER_TOPIC": _topic(ReadSetSQLiteApplicationRecorder),
        "SQLITE_DBNAME": str(settings.data_dir / "events.sqlite3"),
        "SQLITE_LOCK_TIMEOUT": str(settings.sqlite_lock_timeout),
    }


def application_env(settings: Settings) -> dict[str, str]:
    if settings.database_url:
        return postgres_env(settings.database_url, settings)
    return sqlite_env(settings)


def view_env(settings: Settings, name: str) -> dict[str, str]:
    """The store of projection ``name``'s view, as ``<NAME>_*`` keys the library reads first.

    SQLite: one file per projection, ``<data_dir>/views/<name>.sqlite3``, because the library's
    SQLite tracking table is always called ``tracking``. PostgreSQL: the write model's database
    (the unprefixed ``POSTGRES_*`` keys apply), where the library names the tracking table
    ``<name>_tracking``.
    """
    if settings.database_url:
        keys = {"PERSISTENCE_MODULE": "eventsourcing.postgres"}
    else:
        views = settings.data_dir / "views"
        views.mkdir(parents=True, exist_ok=True)
        keys = {
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": str(views / f"{name}.sqlite3"),
            "SQLITE_LOCK_TIMEOUT": str(settings.sqlite_lock_timeout),
        }
    return prefixed_env(name, keys)


def prefixed_env(name: str, keys: dict[str, str]) -> dict[str, str]:
    """``keys`` as settings of the component ``name`` only (the library reads ``<NAME>_*``
    before the unprefixed keys)."""
    prefix = name.upper() + "_"
    return {prefix + key: value for key, value in keys.items()}


def projection_env(settings: Settings, name: str) -> dict[str, str]:
    """Everything a projection runner needs: the write model's store plus the view's own."""
    return {**application_env(settings), **view_env(settings, name)}


def open_write_model(settings: Settings | None = None,
                     cls: type[WriteModel] = Dreaming) -> Any:
    """The write model configured from settings (default: ``DREAM_*`` environment)."""
    settings = settings or Settings()
    return cls(env=application_env(settings), enforce_access=settings.access == "enforced")


def open_dreaming(settings: Settings | None = None) -> Dreaming:
    app: Dreaming = open_write_model(settings, Dreaming)
    return app
