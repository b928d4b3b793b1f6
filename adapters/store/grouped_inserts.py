"""Every commit of a process's writers joins a group: one transaction for all that wait.

The writers of a process (the API's command threads, its workers, its scheduler) each used to
take the store's write lock in turn for a transaction of their own, with a sync of the log at
each commit: under load they queued for the lock, and every commit woke each read model for a
batch of its own. Here a writer hands its events to the recorder's group
(:mod:`adapters.store.group_commit`); whichever writer holds the turn inserts every waiting
writer's events in one transaction and commits once.

Each insert is decided exactly as alone, in the order they joined: its events, its data keys
and its erasure's deletions, then its read-set check, which sees the inserts before it in the
batch as it would have seen their commits. An insert refused (a version already taken, a read
set that moved, a key another erasure destroyed first) is told so and leaves nothing: on
SQLite it is rolled back to its savepoint, on PostgreSQL the transaction is rolled back and
the batch inserted again without it (ADR-0051); the others are committed. A transaction that
fails as a whole fails every insert not refused already: none of them was stored. An insert
is acknowledged only after the commit.
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
    """PostgreSQL: one transaction, one commit (one flush of the log), in one pipeline, its
    ``BEGIN`` and ``COMMIT`` sent in it (ADR-0051): an insert waits for the server's answers
    once, for its read-set check, and the commit once more.

    No savepoints: an insert refused rolls the whole transaction back (psycopg's
    ``rollback()``, which also forgets the statements an aborted pipeline never prepared), and
    the batch is inserted again without it. Each insert is still decided as alone, in the
    order they came, seeing the inserts before it; refusals are rare, and a batch has at most
    ``MAX_BATCH`` inserts."""

    datastore: Any

    def _insert_batch(self, batch: list[Insert]) -> None:
        remaining = list(batch)
        while remaining:
            refused = self._insert_until_refused(remaining)
            if refused is None:
                return
            del remaining[refused]  # those before it were rolled back with it: again

    def _insert_until_refused(self, batch: list[Insert]) -> int | None:
        """Insert ``batch`` in one transaction and commit it (None), or roll it back at the
        first insert refused, failed with its error (its index)."""
        inserted: list[Sequence[int] | None] = []
        with (self.datastore.get_connection() as conn, conn.pipeline(),
              conn.cursor() as transaction):
            for index, insert in enumerate(batch):
                try:
                    inserted.append(
                        self._insert_one(conn, insert, first=[b"BEGIN"] if index == 0 else []))
                except (psycopg.IntegrityError, ReadSetChangedError) as refused:
                    conn.rollback()
                    insert.fail(IntegrityError(str(refused))
                                if isinstance(refused, psycopg.IntegrityError) else refused)
                    return index
            transaction.execute(b"COMMIT")  # answered as the pipeline ends
        for insert, ids in zip(batch, inserted, strict=True):
            insert.settle(ids)
        return None

    def _insert_one(self, conn: psycopg.Connection[Any], insert: Insert,
                    first: Sequence[bytes] = ()) -> Sequence[int] | None:
        raise NotImplementedError

