"""The data keys' rows (ADR-0030) as they move between stores with the events they open.

A sealed field is readable only with its record's key, and the keys live in a table beside
the events (``dream_data_keys``), never in them: a copy of the events without the keys reads
every sealed text as erased, silently. ``dream migrate`` and bundles therefore carry the rows
too, through these helpers. A row is copied whole (its subject digest and creation time
included), so the target can erase by subject and tell a key's age as the source could.

A key id the target already holds with the same bytes is left as it is (a copy run again is
harmless); with other bytes it is a conflict the caller refuses, before anything is written:
both keys cannot be right, and replacing one would make its records unreadable.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any
from uuid import UUID

from adapters.store.sealing import DataKeys
from application.store import EventStore
from domain.errors import DomainError

KeyRow = tuple[str, str, str | None, str | None, str | None, bytes, int]
"""key_id, aggregate_id, entry_id, scope_id, subject, key, created_at (the table's columns)."""
COLUMNS = "key_id, aggregate_id, entry_id, scope_id, subject, key, created_at"
Refusal = Callable[[str], DomainError]  # the caller's error for a key id held with other bytes


def data_keys(store: EventStore) -> DataKeys:
    """The store's key table; every store ``open_store`` opens seals, so it has one."""
    keys = store.keyring
    if not isinstance(keys, DataKeys):
        raise TypeError("this store does not seal: it keeps no data keys")
    keys.create_table()  # a store that never sealed anything has no table yet
    return keys


def key_rows(store: EventStore, aggregates: Collection[UUID] | None = None) -> list[KeyRow]:
    """The store's key rows in key id order: every one, or those of ``aggregates``' records."""
    keys = data_keys(store)
    with keys.datastore.transaction(commit=False) as cursor:
        cursor.execute(f"SELECT {COLUMNS} FROM {keys.table} ORDER BY key_id")
        rows = [_row(found) for found in cursor.fetchall()]
    if aggregates is None:
        return rows
    wanted = {aggregate.hex for aggregate in aggregates}
    return [row for row in rows if row[1] in wanted]


def adopt_key_rows(store: EventStore, rows: Iterable[KeyRow], refuse: Refusal, *,
                   withheld: Collection[str] = (), mirror: bool = False) -> int:
    """Insert the ``rows`` the store lacks, in one transaction, after checking that none it
    holds differs; how many were inserted. ``withheld``: key ids checked but never inserted
    (an import's keys of records the target erased). ``mirror``: also destroy the store's keys
    that ``rows`` lack (a migration's target, whose keys are the source's: one missing there
    was destroyed by an erasure since it was copied, and must not outlive it here)."""
    keys = data_keys(store)
    wanted = {row[0]: row for row in rows}
    with keys.datastore.transaction(commit=True) as cursor:
        if not keys.postgres:  # take SQLite's write lock first (waiting for it as writers do):
            # a read transaction turned writer after another's commit fails at once, locked
            cursor.execute(f"DELETE FROM {keys.table} WHERE 0")
        cursor.execute(f"SELECT key_id, key FROM {keys.table}")
        held = {str(key_id): bytes(key) for key_id, key in map(_pair, cursor.fetchall())}
        refuse_different(wanted, held, refuse)
        missing = [row for key_id, row in wanted.items()
                   if key_id not in held and key_id not in withheld]
        if missing:
            cursor.executemany(keys.insert_statement, missing)
        gone = [(key_id,) for key_id in held if key_id not in wanted] if mirror else []
        if gone:
            cursor.executemany(f"DELETE FROM {keys.table} WHERE key_id = {keys.mark}", gone)
    if gone:
        keys.forget([UUID(key_id) for (key_id,) in gone])
    return len(missing)


def refuse_different(rows: Mapping[str, KeyRow], held: Mapping[str, bytes],
                     refuse: Refusal) -> None:
    """Raise the caller's error for the first key id held with bytes other than its row's."""
    for key_id, row in rows.items():
        if key_id in held and held[key_id] != row[5]:
            raise refuse(key_id)


def holds_keys(store: EventStore, rows: Iterable[KeyRow]) -> bool:
    """Whether the store holds every one of ``rows``' keys, byte for byte."""
    held = {row[0]: row[5] for row in key_rows(store)}
    return all(held.get(row[0]) == row[5] for row in rows)


def _row(found: Any) -> KeyRow:
    values = tuple(found.values()) if isinstance(found, dict) else tuple(found)
    key_id, aggregate_id, entry_id, scope_id, subject, key, created_at = values
    return (key_id, aggregate_id, entry_id, scope_id, subject, bytes(key), int(created_at))


def _pair(found: Any) -> tuple[str, bytes]:
    values = tuple(found.values()) if isinstance(found, dict) else tuple(found)
    return values[0], values[1]
