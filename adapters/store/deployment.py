"""A deployment's stable id: made once, kept with the store, carried by a migration.

A bundle's header names the deployment it came from by this id (``dream export``), so a target
can tell two sources apart and an operator can tell where a bundle was cut. It is not an event:
a bundle never carries it (an ``--all`` bundle imported elsewhere starts another deployment, with
its own id). It lives in one row of a table in the store's own database (``dream_deployment``:
in ``events.sqlite3`` for the embedded store, so ``dream backup`` copies it and a restore keeps
it; in the store's database on PostgreSQL, so ``pg_dump`` does). ``dream migrate`` gives the
target the source's id: a migrated deployment is the same deployment, moved.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from eventsourcing.postgres import PostgresDatastore
from eventsourcing.sqlite import SQLiteDatastore

from application.store import EventStore

TABLE = "dream_deployment"
# Processes asking together on a fresh PostgreSQL database would race to create the table.
SCHEMA_LOCK_KEY = int.from_bytes(b"dreamdep", "big")


def deployment_id(store: EventStore) -> str:
    """The store's deployment id, made (a random UUID) and kept the first time it is asked."""
    with _transaction(store) as (cursor, p, table):
        cursor.execute(f"INSERT INTO {table} (singleton, deployment_id, created_at) "
                       f"VALUES (1, {p}, {p}) ON CONFLICT (singleton) DO NOTHING",
                       (str(uuid.uuid4()), datetime.now(tz=UTC).isoformat()))
        cursor.execute(f"SELECT deployment_id FROM {table} WHERE singleton = 1")
        row = cursor.fetchone()
    return str(row["deployment_id"])


def adopt_deployment_id(store: EventStore, deployment: str) -> None:
    """Make ``deployment`` the store's id (a migration's target becomes the source, moved)."""
    with _transaction(store) as (cursor, p, table):
        cursor.execute(f"INSERT INTO {table} (singleton, deployment_id, created_at) "
                       f"VALUES (1, {p}, {p}) ON CONFLICT (singleton) "
                       "DO UPDATE SET deployment_id = excluded.deployment_id",
                       (deployment, datetime.now(tz=UTC).isoformat()))


@contextmanager
def _transaction(store: EventStore) -> Iterator[tuple[Any, str, str]]:
    """A write transaction on the store's database with the table in place: its cursor, the
    driver's parameter marker and the table's name."""
    datastore = getattr(store.recorder, "datastore", None)
    columns = ("(singleton INTEGER PRIMARY KEY CHECK (singleton = 1), "
               "deployment_id TEXT NOT NULL, created_at TEXT NOT NULL)")
    if isinstance(datastore, PostgresDatastore):
        table = f"{datastore.schema}.{TABLE}"
        with datastore.transaction(commit=True) as cursor:
            cursor.execute(f"SELECT pg_advisory_xact_lock({SCHEMA_LOCK_KEY})")
            cursor.execute(f"CREATE TABLE IF NOT EXISTS {table} {columns}")
            yield cursor, "%s", table
    elif isinstance(datastore, SQLiteDatastore):
        with datastore.transaction(commit=True) as sqlite_cursor:
            sqlite_cursor.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} {columns}")
            yield sqlite_cursor, "?", TABLE
    else:
        msg = f"{type(store.recorder).__name__} keeps no deployment id"
        raise TypeError(msg)
