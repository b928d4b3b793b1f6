"""Every commit of a process's writers joins a group: one transaction for all that wait.

The writers of a process (the API's command threads, its workers, its scheduler) each used to
take the store's write lock in turn for a transaction of their own, with a sync of the log at
each commit: under load they queued for the lock, and every commit woke each read model for a
batch of its own. Here a writer hands its events to the recorder's group
(:mod:`adapters.store.group_commit`); whichever writer holds the turn inserts every waiting
writer's events in one transaction, each under a savepoint of its own, and commits once.

Each insert is decided exactly as alone, in the order they joined: its events, its data keys
and its erasure's deletions, then its read-set check, which sees the inserts before it in the
batch as it would have seen their commits. An insert refused (a version already taken, a read
set that moved, a key another erasure destroyed first) is rolled back to its savepoint and
told so; the others are committed. A transaction that fails as a whole fails every insert not
refused already: none of them was stored. An insert is acknowledged only after the commit.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import psycopg
from eventsourcing.persistence import IntegrityError, StoredEvent
from eventsourcing.sqlite import SQLiteCursor

from adapters.observability.store_metrics import counted_commit
from adapters.store.group_commit import GroupCommit
from adapters.store.sealing import DataKeys
from application.pending import Pending
from application.ports import ReadSetChangedError
from projections.without_waiting import WouldWaitError, waiting_refused

MAX_BATCH = 64  # inserts per transaction; those beyond wait for the next turn


@dataclass(eq=False)
class Insert(Pending[Sequence[int] | None]):
    """One writer's insert: settled with its events' notification ids once committed."""

    events: Sequence[StoredEvent]
    read_set: Mapping[UUID, int]
    erase_keys: Sequence[UUID]
    new_keys: list[tuple[Any, ...]]  # the data keys made for these events
    options: dict[str, Any] = field(default_factory=dict)  # the library's own keywords


class GroupedInserts:
    """A recorder's ``insert_events``, through its process's group (a mixin for the
    recorders: ``_insert_batch`` inserts a batch in one transaction)."""

    store_kind: str
    data_keys: DataKeys | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.inserts: GroupCommit[Insert] = GroupCommit(self._insert_batch, MAX_BATCH)

    def insert_events(self, stored_events: Sequence[StoredEvent], *,
                      read_set: Mapping[UUID, int] | None = None,
                      erase_keys: Sequence[UUID] = (), **options: Any) -> Sequence[int] | None:
        """Insert in the group's next transaction, failing if anything in ``read_set`` moved
        (``erase_keys``: data keys destroyed with these events)."""
        if waiting_refused():  # a read on the event loop never waits for a turn (ADR-0040)
            raise WouldWaitError("a write takes turns for the store's write lock")
        new_keys = self.data_keys.take_new() if self.data_keys is not None else []
        insert = Insert(stored_events, read_set or {}, erase_keys, new_keys, options)
        with counted_commit(self.store_kind):
            self.inserts.join(insert)
            ids = insert.outcome()
        if self.data_keys is not None:
            self.data_keys.committed()
        return ids

    def _insert_batch(self, batch: list[Insert]) -> None:
        raise NotImplementedError


class GroupedSQLiteInserts(GroupedInserts):
    """SQLite: one transaction, a savepoint per insert, one sync of the log at the commit."""

    datastore: Any

    def _insert_batch(self, batch: list[Insert]) -> None:
        inserted: list[tuple[Insert, Sequence[int] | None]] = []
        with self.datastore.transaction(commit=True) as c:
            for insert in batch:
                c.execute("SAVEPOINT each_insert")
                try:
                    ids = self._insert_one(c, insert)
                except (sqlite3.IntegrityError, ReadSetChangedError) as refused:
                    c.execute("ROLLBACK TO each_insert")
                    insert.fail(IntegrityError(refused)
                                if isinstance(refused, sqlite3.IntegrityError) else refused)
                else:
                    inserted.append((insert, ids))
                c.execute("RELEASE each_insert")
        for insert, ids in inserted:
            insert.settle(ids)

    def _insert_one(self, c: SQLiteCursor, insert: Insert) -> Sequence[int] | None:
        raise NotImplementedError


class GroupedPostgresInserts(GroupedInserts):
    """PostgreSQL: one transaction, a savepoint per insert, one commit (one flush of the log)."""

    datastore: Any

    def _insert_batch(self, batch: list[Insert]) -> None:
        inserted: list[tuple[Insert, Sequence[int] | None]] = []
        with (self.datastore.get_connection() as conn, conn.pipeline() as pipeline,
              conn.transaction()):
            for insert in batch:
                try:
                    with conn.transaction():  # a savepoint: a refused insert leaves nothing
                        ids = self._insert_one(conn, pipeline, insert)
                except (psycopg.IntegrityError, ReadSetChangedError) as refused:
                    insert.fail(IntegrityError(str(refused))
                                if isinstance(refused, psycopg.IntegrityError) else refused)
                else:
                    inserted.append((insert, ids))
        for insert, ids in inserted:
            insert.settle(ids)

    def _insert_one(self, conn: psycopg.Connection[Any], pipeline: psycopg.Pipeline,
                    insert: Insert) -> Sequence[int] | None:
        raise NotImplementedError
