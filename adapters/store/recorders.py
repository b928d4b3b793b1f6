"""The event store's recorders for the embedded (SQLite) and scaled (PostgreSQL) modes.

Both add the *read-set check*: inside the insert transaction, after the store's write lock is
held, they compare the current version of every aggregate the command only read with the
version it read, and abort the whole transaction if any moved. Both also insert the data keys
made for the events they store, and destroy the keys an erasure names, in that same
transaction (ADR-0030).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, closing, nullcontext
from functools import cached_property
from inspect import unwrap
from pathlib import Path
from threading import Event, Thread
from typing import Any, ClassVar
from uuid import UUID

import psycopg
from eventsourcing.persistence import (
    ApplicationRecorder,
    IntegrityError,
    ListenNotifySubscription,
    StoredEvent,
    Subscription,
)
from eventsourcing.postgres import (
    PostgresAggregateRecorder,
    PostgresApplicationRecorder,
    PostgresFactory,
)
from eventsourcing.sqlite import (
    SQLiteApplicationRecorder,
    SQLiteConnection,
    SQLiteCursor,
    SQLiteDatastore,
)
from eventsourcing.utils import Environment, EnvType
from psycopg.sql import SQL, Composable, Identifier

from adapters.store.file_turns import FileTurns
from adapters.store.grouped_inserts import GroupedPostgresInserts, GroupedSQLiteInserts, Insert
from adapters.store.pool_tuning import tune_pool
from adapters.store.schema_creation import created_at_once
from adapters.store.sealing import KEYS_TABLE, DataKeys
from application.noted_head import note_head, noting
from application.ports import EventsOfMany, ReadSetChangedError
from projections.backends import SerialisedSchema, SynchronousPool
from projections.rendered_sql import RenderedNotifications, RenderedStatements, rendered

ReadSet = Mapping[UUID, int]
TURNS_DIR = "DREAM_TURNS_DIR"
log = logging.getLogger(__name__)


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


SCRUB_ATTEMPTS = 100
SCRUB_PAUSE = 0.05  # seconds between checkpoint attempts


class EventStorePool(SynchronousPool):
    """The event store's connections also ``secure_delete``: a data key an erasure deletes is
    overwritten in the file, not merely unlinked from its page (ADR-0030). Events are never
    deleted, so nothing else pays for it."""

    def _create_connection(self) -> SQLiteConnection:
        connection = super()._create_connection()
        connection.cursor().execute("PRAGMA secure_delete=ON")
        return connection


class ReadSetSQLiteApplicationRecorder(GroupedSQLiteInserts, SQLiteApplicationRecorder):
    supports_read_set = True
    store_kind = "sqlite"
    poll_interval: ClassVar[float] = 0.05  # seconds between a subscription's polls
    _turns: FileTurns | None = None
    data_keys: DataKeys | None = None  # set by open_store: new keys go in with their events

    def __init__(self, datastore: SQLiteDatastore, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)
        # Every commit of an event is on disk when it is acknowledged, power loss included
        # (``synchronous=FULL`` syncs the WAL at each commit), whatever SQLite's build
        # defaults to. Connections are opened lazily, after this.
        datastore.pool.__class__ = EventStorePool

    def writers_turn(self, *keys: str) -> AbstractContextManager[object]:
        """The processes writing this file take turns per key, on lock files beside it."""
        db_name = self.datastore.pool.db_name
        if self.datastore.pool.is_sqlite_memory_mode or db_name.startswith("file:"):
            return nullcontext()  # one process only, or a URI this service never configures
        if self._turns is None:
            self._turns = FileTurns(Path(db_name).with_name(Path(db_name).name + ".turns"))
        return self._turns.of(*keys)

    def subscribe(self, gt: int | None = None,
                  topics: Sequence[str] = ()) -> Subscription[ApplicationRecorder]:
        return PollingSubscription(self, gt=gt, topics=topics, interval=self.poll_interval)

    def scrub(self) -> dict[str, object]:
        """A checkpoint that truncates the write-ahead log: the frames that held destroyed keys
        leave the file, and the pages they were deleted from (zeroed by ``secure_delete``) are
        written back. Readers can hold it off for a moment; it is retried for a while."""
        path = self.datastore.pool.db_name
        for _ in range(SCRUB_ATTEMPTS):
            with closing(sqlite3.connect(path, timeout=10)) as connection:
                busy = connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            if not busy:
                return {"wal_checkpoint": "truncated"}
            time.sleep(SCRUB_PAUSE)
        return {"wal_checkpoint": "busy"}

    def position_of(self, originator_id: UUID, version: int) -> int | None:
        with self.datastore.transaction(commit=False) as c:
            c.execute(f"SELECT rowid FROM {self.events_table_name} "
                      "WHERE originator_id = ? AND originator_version = ?",
                      (originator_id.hex, version))
            row = c.fetchone()
        return None if row is None else int(row[0])

    def select_events_and_position(self, originator_id: UUID, lte: int | None = None
                                   ) -> tuple[list[StoredEvent], int | None]:
        statement = (f"SELECT rowid, originator_version, topic, state "
                     f"FROM {self.events_table_name} WHERE originator_id = ?")
        params: list[Any] = [originator_id.hex]
        if lte is not None:
            statement += " AND originator_version <= ?"
            params.append(lte)
        with self.datastore.transaction(commit=False) as c:
            c.execute(statement + " ORDER BY originator_version", params)
            rows = c.fetchall()
        return _with_position(originator_id, [(r[1], r[2], r[3], r[0]) for r in rows])

    def select_events_of_many(self, originator_ids: Sequence[UUID]) -> EventsOfMany:
        marks = ",".join("?" * len(originator_ids))
        with self.datastore.transaction(commit=False) as c:
            c.execute(f"SELECT originator_id, originator_version, topic, state, rowid "
                      f"FROM {self.events_table_name} WHERE originator_id IN ({marks}) "
                      "ORDER BY originator_id, originator_version",
                      [originator_id.hex for originator_id in originator_ids])
            rows = c.fetchall()
        return _grouped(originator_ids, [(UUID(r[0]), r[1], r[2], r[3], r[4]) for r in rows])

    def _insert_one(self, c: SQLiteCursor, insert: Insert) -> Sequence[int] | None:
        """One insert of a batch (``GroupedSQLiteInserts``): its events, data keys and
        erasure, then its read-set check."""
        # Insert first: that takes SQLite's write lock, so the versions read below are final.
        notification_ids = self._insert_events(c, insert.events, **insert.options)
        if insert.new_keys:
            _insert_keys(c, self.data_keys.insert_statement,  # type: ignore[union-attr]
                         insert.new_keys)
        erase_keys, read_set = insert.erase_keys, insert.read_set
        if erase_keys:
            c.execute(f"DELETE FROM {KEYS_TABLE} WHERE key_id IN "
                      f"({','.join('?' * len(erase_keys))})", [k.hex for k in erase_keys])
            c.execute("SELECT changes()")
            _check_erased(c.fetchone()[0], erase_keys)
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


def _insert_keys(c: SQLiteCursor, statement: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """A recording's one new key takes ``execute``, which costs less than ``executemany``."""
    if len(rows) == 1:
        c.execute(statement, rows[0])
    else:
        c.executemany(statement, rows)


def _check_erased(deleted: int, erase_keys: Sequence[UUID]) -> None:
    """Every key an erasure names is destroyed by it, or the erasure is not stored: another
    erasure that took one first conflicts, as a moved read set does."""
    if deleted != len(erase_keys):
        raise ReadSetChangedError({})


def _with_position(originator_id: UUID, rows: Sequence[tuple[int, str, bytes, int]]
                   ) -> tuple[list[StoredEvent], int | None]:
    """Rows of (version, topic, state, notification id) as stored events, and the last one's
    position (``None``: no events)."""
    events = [StoredEvent(originator_id=originator_id, originator_version=version, topic=topic,
                          state=state) for version, topic, state, _ in rows]
    return events, (int(rows[-1][3]) if rows else None)


def _grouped(originator_ids: Sequence[UUID],
             rows: Sequence[tuple[UUID, int, str, bytes, int]]) -> EventsOfMany:
    """Rows of (originator id, version, topic, state, notification id), ordered by originator
    and version, as each requested aggregate's events and last position."""
    found: dict[UUID, list[tuple[int, str, bytes, int]]] = {i: [] for i in originator_ids}
    for originator_id, version, topic, state, position in rows:
        found[originator_id].append((version, topic, state, position))
    return {originator_id: _with_position(originator_id, of_one)
            for originator_id, of_one in found.items()}


def _once(method: Callable[..., Any]) -> Callable[..., Any]:
    """A library recorder method without its retry decorator.

    The library retries its store calls ten times on a connection error, 0.2 s apart, each
    waiting for the pool: over 20 s per call in an outage. Tried once, a call is bounded by the
    pool's timeout, and the caller decides: the API answers 503, workers back off.
    """
    undecorated: Callable[..., Any] = unwrap(method)
    return undecorated


class OnceSnapshotRecorder(RenderedStatements, SerialisedSchema, PostgresAggregateRecorder):
    """The snapshot store's recorder, its calls tried once like the events'."""

    insert_events = _once(PostgresAggregateRecorder.insert_events)


class ReadSetPostgresApplicationRecorder(GroupedPostgresInserts, RenderedNotifications,
                                         SerialisedSchema, PostgresApplicationRecorder):
    supports_read_set = True
    store_kind = "postgres"

    turns: FileTurns | None = None  # set by the factory: the host's lock files, if any
    data_keys: DataKeys | None = None  # set by open_store: new keys go in with their events

    def scrub(self) -> dict[str, object]:
        """Rewrite the keys table (``VACUUM FULL``: its old file, which held the destroyed
        keys in dead rows, is removed) and ask for a checkpoint (a role without the right to
        one is told so in the answer). The write-ahead log keeps what it logged until its
        segments are recycled: see docs/erasure.md."""
        done: dict[str, object] = {}
        table = SQL("{0}.{1}").format(Identifier(self.datastore.schema), Identifier(KEYS_TABLE))
        with self.datastore.get_connection() as connection:
            connection.autocommit = True  # VACUUM runs outside a transaction
            try:
                connection.execute(SQL("VACUUM FULL {0}").format(table))
                done["vacuum_full"] = True
                try:
                    connection.execute("CHECKPOINT")
                    done["checkpoint"] = True
                except psycopg.errors.InsufficientPrivilege:
                    done["checkpoint"] = False
            finally:
                connection.autocommit = False
        return done

    def writers_turn(self, *keys: str) -> AbstractContextManager[object]:
        """The processes of one host that share a data directory take turns on lock files, as
        on SQLite; processes on other hosts meet at the version check (a turn across hosts
        would hold a connection and cost two round trips per command: ADR-0019, ADR-0020)."""
        return nullcontext() if self.turns is None else self.turns.of(*keys)

    # Tried once (see ``_once``); ``select_events`` and ``select_notifications`` are
    # ``RenderedNotifications``'.
    max_notification_id = _once(PostgresApplicationRecorder.max_notification_id)

    def position_of(self, originator_id: UUID, version: int) -> int | None:
        # One autocommit statement: no BEGIN and ROLLBACK round trips around it.
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self._statements["position"], (originator_id, version))
            row = curs.fetchone()
        return None if row is None else int(row["notification_id"])

    def select_events_and_position(self, originator_id: UUID, lte: int | None = None
                                   ) -> tuple[list[StoredEvent], int | None]:
        params: list[Any] = [originator_id] if lte is None else [originator_id, lte]
        name = "events" if lte is None else "events_through"
        rows = self._select_noting_head(name, params)
        return _with_position(originator_id, [
            (r["originator_version"], r["topic"], bytes(r["state"]), r["notification_id"])
            for r in rows])

    def select_events_of_many(self, originator_ids: Sequence[UUID]) -> EventsOfMany:
        rows = self._select_noting_head("events_of_many", [list(originator_ids)])
        return _grouped(originator_ids, [
            (r["originator_id"], r["originator_version"], r["topic"], bytes(r["state"]),
             r["notification_id"]) for r in rows])

    def _select_noting_head(self, name: str, params: list[Any]) -> list[Any]:
        """The rows of statement ``name``; when the call notes the store's head (ADR-0044),
        read in the same statement, so a read model read after it asks no round trip more."""
        noted = noting()
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self._statements[name + "_noting_head" if noted else name], params,
                         prepare=True)
            rows: list[Any] = curs.fetchall()
        if not noted:
            return rows
        if rows and rows[0]["head"] is not None:
            note_head(int(rows[0]["head"]))
        return [row for row in rows if row["notification_id"] is not None]

    def _insert_one(self, conn: psycopg.Connection[Any], insert: Insert,
                    first: Sequence[bytes] = ()) -> Sequence[int] | None:
        """One insert of a batch (``GroupedPostgresInserts``), with one round trip: ``first``
        (the transaction's ``BEGIN``, before its first insert), the lock, the insert, the data
        keys, the erasure and the read set's versions go in one block of the pipeline, whose
        end waits for every answer, a refusal's too (then raised: a version already taken is
        an ``IntegrityError``), so the pipeline is usable again after it.

        The insert takes the table's lock itself, so the versions are read after it: no other
        writer can commit between this read and our commit, and the lock is asked for once.
        An aggregate this insert writes is left to the version constraint (as
        ``EventStore.commit`` does), so our own events cannot move the read set."""
        stored_events, erase_keys = insert.events, insert.erase_keys
        written = {event.originator_id for event in stored_events}
        read_set = {key: version for key, version in insert.read_set.items()
                    if key not in written}
        with conn.cursor() as versions, conn.cursor() as inserted, conn.cursor() as keys:
            with conn.pipeline():
                for statement in first:
                    keys.execute(statement)
                if stored_events:
                    self._insert_stored_events(inserted, stored_events, **insert.options)
                elif read_set:
                    self._lock_table(versions)
                if read_set:
                    versions.execute(self._statements["versions"], (list(read_set),),
                                     prepare=True)
                if insert.new_keys:  # made for these events: stored with them or not at all
                    keys.executemany(self.data_keys.insert_statement,  # type: ignore[union-attr]
                                     insert.new_keys)
                if erase_keys:
                    keys.execute(
                        SQL("DELETE FROM {0}.{1} WHERE key_id = ANY(%s) RETURNING key_id")
                        .format(Identifier(self.datastore.schema), Identifier(KEYS_TABLE)),
                        ([key_id.hex for key_id in erase_keys],))
            if erase_keys:
                _check_erased(len(keys.fetchall()), erase_keys)
            if read_set:
                current = {row["originator_id"]: row["version"] for row in versions.fetchall()}
                moved = _moved(read_set, current)
                if moved:
                    raise ReadSetChangedError(moved)
            return ([] if not stored_events else
                    self._fetch_ids_after_insert_events(inserted, stored_events,
                                                        **insert.options))

    @cached_property
    def _statements(self) -> dict[str, bytes]:
        """This recorder's own statements, rendered once (see ``RenderedStatements``)."""
        table = SQL("{0}.{1}").format(Identifier(self.datastore.schema),
                                      Identifier(self.events_table_name))
        of_one, of_many = SQL("originator_id = %s"), SQL("originator_id = ANY(%s)")
        through = SQL(" AND originator_version <= %s")
        return {name: rendered(statement) for name, statement in {
            "position": SQL("SELECT notification_id FROM {0} "
                            "WHERE originator_id = %s AND originator_version = %s").format(table),
            **_reads_of_events(table, "events", of_one),
            **_reads_of_events(table, "events_through", of_one + through),
            **_reads_of_events(table, "events_of_many", of_many),
            "versions": SQL("SELECT originator_id, MAX(originator_version) AS version FROM {0} "
                            "WHERE originator_id = ANY(%s) GROUP BY originator_id").format(table),
        }.items()}


def _reads_of_events(table: Composable, name: str, where: Composable) -> dict[str, Composable]:
    """A read of aggregates' events in store order, and the same read with the store's head
    (``MAX(notification_id)``) on every row, kept when no event matches (ADR-0044)."""
    columns = SQL("originator_id, originator_version, topic, state, notification_id")
    order = SQL(" ORDER BY originator_id, originator_version")
    return {
        name: SQL("SELECT {0} FROM {1} WHERE {2}").format(columns, table, where) + order,
        name + "_noting_head": SQL(
            "SELECT {0}, head FROM (SELECT MAX(notification_id) AS head FROM {1}) AS store "
            "LEFT JOIN {1} ON {2}").format(columns, table, where) + order,
    }


class DreamPostgresFactory(PostgresFactory):
    """The library's PostgreSQL factory, failing fast in an outage and reconnecting at once."""

    aggregate_recorder_class = OnceSnapshotRecorder

    def __init__(self, env: Environment | EnvType | None) -> None:
        super().__init__(env)
        tune_pool(self.datastore)

    def application_recorder(self) -> ApplicationRecorder:
        recorder = created_at_once(super().application_recorder, lost=(IntegrityError,))
        turns_dir = self.env.get(TURNS_DIR)
        if turns_dir and isinstance(recorder, ReadSetPostgresApplicationRecorder):
            try:
                recorder.turns = FileTurns(Path(turns_dir))
            except OSError as error:  # a read-only host: the version check alone, as before
                log.warning("no turns across this host's processes (%s): %s", turns_dir, error)
        return recorder
