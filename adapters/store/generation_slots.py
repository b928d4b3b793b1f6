"""Deployment-wide caps: leased slots shared by every process of a store.

A pool (``generation``; ``automatic`` for automatic runs) has ``cap`` slots, rows ``(pool,
slot)`` of one table. Taking a slot writes its holder, a lease expiry and a new fencing token
(the slot's token plus one, so tokens only grow); a holder renews its lease while it works and
frees the slot when done. Every renewal and release names the token it was given: once the slot
was taken again (its lease ran out), the old holder is fenced, and a late release never frees
someone else's slot. A holder that dies stops renewing; its slot is free again when the lease
expires.

PostgreSQL: a table in the store's database; expiries by the server's clock (``now()``), so
machine clocks never matter; concurrent takers skip each other's locked rows
(``FOR UPDATE SKIP LOCKED``) and the update checks the slot is still free. SQLite: the same
table in ``<data_dir>/slots.sqlite3`` (0600), every change in one ``BEGIN IMMEDIATE``
transaction, expiries by this host's clock (an SQLite store is one host's anyway).

Every store error an outage can cause surfaces as one of ``application.store.OUTAGE_ERRORS``,
so the callers' existing backoff handles it.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from eventsourcing.postgres import PostgresDatastore

from adapters.settings import Settings
from adapters.store.persistence import postgres_env
from adapters.store.recorders import DreamPostgresFactory
from adapters.store.side_file import SideFile
from projections.dialect import POSTGRES, SQLITE, Columns, Dialect, ViewCursor

GENERATION = "generation"  # model calls, capped by DREAM_MAX_CONCURRENT_GENERATIONS
AUTOMATIC = "automatic"  # automatic runs' model calls, capped by DREAM_AUTO_MAX_CONCURRENT
TABLE = "dream_leased_slots"
COLUMNS: Columns = (
    ("pool", "key", "NOT NULL"),
    ("slot", "int", "NOT NULL"),  # 0 .. cap - 1
    ("holder", "text", ""),  # NULL: free
    ("token", "int", "NOT NULL DEFAULT 0"),  # fencing token: bumped on every acquisition
    ("expires_at", "int", ""),  # lease expiry, microseconds since the epoch
)
# Processes starting together on a fresh database would race to create the table.
SCHEMA_LOCK_KEY = int.from_bytes(b"dreamslt", "big")
MICROS = 1_000_000
Clock = Callable[[], float]  # seconds since the epoch


@dataclass(frozen=True)
class Slot:
    """One slot of a pool, held by ``holder`` under fencing ``token``."""

    pool: str
    number: int
    holder: str
    token: int


class LeasedSlots(Protocol):
    """Capped pools of leased slots, shared by every process of a store."""

    caps: dict[str, int]  # every pool and its cap

    def acquire(self, pool: str, holder: str, lease_seconds: float) -> Slot | None:
        """A free (or expired) slot of ``pool`` for ``holder``; ``None`` when all are held."""
        ...

    def renew(self, slot: Slot, lease_seconds: float) -> bool:
        """Extend the lease; ``False`` once the slot was taken again or freed (fenced)."""
        ...

    def release(self, slot: Slot) -> bool:
        """Free the slot if it is still this holder's; whether it was."""
        ...

    def held(self, pool: str) -> list[Slot]:
        """The slots of ``pool`` whose lease runs now, by slot number."""
        ...

    def close(self) -> None: ...


def holder_name() -> str:
    """``host:pid:nonce``: who holds a slot, readable by an operator, unique per holder."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def slot_caps(settings: Settings) -> dict[str, int]:
    """Every pool of the deployment and its cap."""
    return {GENERATION: settings.max_concurrent_generations,
            AUTOMATIC: settings.auto_max_concurrent}


@dataclass(frozen=True)
class _Statements:
    """The slot table's SQL in one backend's dialect."""

    dialect: Dialect
    now: str  # the current time in microseconds
    lock_free_row: str  # how a taker locks the row it picked without waiting for others
    lock_schema: str  # serialises table creation across processes ("": the write lock does)

    def param(self, name: str) -> str:
        return self.dialect.param(name)

    @property
    def create(self) -> str:
        return (f"CREATE TABLE IF NOT EXISTS {TABLE} ("
                f"{self.dialect.column_definitions(COLUMNS)}, PRIMARY KEY (pool, slot))")

    @property
    def add_slot(self) -> str:
        return (f"INSERT INTO {TABLE} (pool, slot) VALUES ({self.param('pool')}, "
                f"{self.param('slot')}) ON CONFLICT (pool, slot) DO NOTHING")

    @property
    def acquire(self) -> str:
        free = f"(holder IS NULL OR expires_at <= {self.now})"
        pick = (f"SELECT slot FROM {TABLE} WHERE pool = {self.param('pool')} "
                f"AND slot < {self.param('cap')} AND {free} ORDER BY slot LIMIT 1 "
                f"{self.lock_free_row}")
        return (f"UPDATE {TABLE} SET holder = {self.param('holder')}, token = token + 1, "
                f"expires_at = {self.now} + {self.param('lease')} "
                f"WHERE pool = {self.param('pool')} AND {free} AND slot = ({pick}) "
                "RETURNING slot, token")

    @property
    def renew(self) -> str:
        return (f"UPDATE {TABLE} SET expires_at = {self.now} + {self.param('lease')} "
                f"WHERE {self._this_holders} RETURNING slot")

    @property
    def release(self) -> str:
        return (f"UPDATE {TABLE} SET holder = NULL, expires_at = NULL "
                f"WHERE {self._this_holders} RETURNING slot")

    @property
    def held(self) -> str:
        return (f"SELECT slot, holder, token FROM {TABLE} WHERE pool = {self.param('pool')} "
                f"AND holder IS NOT NULL AND expires_at > {self.now} ORDER BY slot")

    @property
    def _this_holders(self) -> str:
        return (f"pool = {self.param('pool')} AND slot = {self.param('slot')} "
                f"AND token = {self.param('token')} AND holder = {self.param('holder')}")


# BEGIN IMMEDIATE serialises everything on SQLite.
SQLITE_SQL = _Statements(SQLITE, now=":now", lock_free_row="", lock_schema="")
# An injected test clock wins; in production ``now`` is NULL and the server's clock decides.
POSTGRES_SQL = _Statements(
    POSTGRES, now="COALESCE(%(now)s::bigint, (extract(epoch FROM now()) * 1000000)::bigint)",
    lock_free_row="FOR UPDATE SKIP LOCKED",
    lock_schema=f"SELECT pg_advisory_xact_lock({SCHEMA_LOCK_KEY})")


class SlotTable(ABC):
    """The slot operations over one backend; subclasses open its transactions."""

    def __init__(self, caps: Mapping[str, int], sql: _Statements, clock: Clock | None) -> None:
        self.caps = dict(caps)
        self._sql = sql
        self._clock = clock
        self._ready: set[str] = set()  # pools whose rows exist
        self._ready_lock = threading.Lock()

    @abstractmethod
    def _transaction(self) -> AbstractContextManager[ViewCursor]:
        """One transaction on the slot table; store errors as ``OUTAGE_ERRORS``."""

    @abstractmethod
    def close(self) -> None: ...

    def acquire(self, pool: str, holder: str, lease_seconds: float) -> Slot | None:
        cap = self._prepare(pool)
        with self._transaction() as cursor:
            cursor.execute(self._sql.acquire, self._params(
                pool=pool, cap=cap, holder=holder, lease=round(lease_seconds * MICROS)))
            rows = cursor.fetchall()
        return next((Slot(pool, int(row["slot"]), holder, int(row["token"])) for row in rows),
                    None)

    def renew(self, slot: Slot, lease_seconds: float) -> bool:
        return self._change(self._sql.renew, slot, lease=round(lease_seconds * MICROS))

    def release(self, slot: Slot) -> bool:
        return self._change(self._sql.release, slot)

    def held(self, pool: str) -> list[Slot]:
        self._prepare(pool)
        with self._transaction() as cursor:
            cursor.execute(self._sql.held, self._params(pool=pool))
            rows = cursor.fetchall()
        return [Slot(pool, int(row["slot"]), row["holder"], int(row["token"])) for row in rows]

    def _change(self, statement: str, slot: Slot, **values: object) -> bool:
        with self._transaction() as cursor:
            cursor.execute(statement, self._params(pool=slot.pool, slot=slot.number,
                                                   token=slot.token, holder=slot.holder,
                                                   **values))
            return bool(cursor.fetchall())

    def _params(self, **values: object) -> dict[str, object]:
        now = None if self._clock is None else round(self._clock() * MICROS)
        return {"now": now, **values}

    def _prepare(self, pool: str) -> int:
        """The pool's cap, once its table and rows exist (made once per instance,
        idempotently). An unknown pool is a bug, never "no cap": ``KeyError``."""
        cap = self.caps[pool]
        with self._ready_lock:
            if pool in self._ready:
                return cap
            with self._transaction() as cursor:
                if self._sql.lock_schema:
                    cursor.execute(self._sql.lock_schema, {})
                cursor.execute(self._sql.create, {})
                for number in range(cap):
                    cursor.execute(self._sql.add_slot, {"pool": pool, "slot": number})
            self._ready.add(pool)
        return cap


class SqliteSlots(SlotTable):
    """The slot table in its own small SQLite file (``SideFile``)."""

    def __init__(self, path: Path, caps: Mapping[str, int], lock_timeout: float = 10.0,
                 clock: Clock = time.time) -> None:
        super().__init__(caps, SQLITE_SQL, clock)
        self.path = path
        self._file = SideFile(path, lock_timeout)

    def _transaction(self) -> AbstractContextManager[ViewCursor]:
        return self._file.transaction()

    def close(self) -> None:
        self._file.close()


class PostgresSlots(SlotTable):
    """The slot table in the store's PostgreSQL database, on a small pool of its own.

    The library's datastore reports a lost or unreachable server as its ``OperationalError``
    or ``InterfaceError``: outages, by ``OUTAGE_ERRORS``.
    """

    def __init__(self, datastore: PostgresDatastore, caps: Mapping[str, int],
                 clock: Clock | None = None) -> None:
        super().__init__(caps, POSTGRES_SQL, clock)
        self.datastore = datastore

    def _transaction(self) -> AbstractContextManager[ViewCursor]:
        return self.datastore.transaction(commit=True)

    def close(self) -> None:
        self.datastore.close()


def slots_datastore(database_url: str, settings: Settings) -> PostgresDatastore:
    """A pool of one connection (two more at a burst): slot statements are short."""
    env = {**postgres_env(database_url, settings),
           "POSTGRES_POOL_SIZE": "1", "POSTGRES_MAX_OVERFLOW": "2"}
    return DreamPostgresFactory(env).datastore


def leased_slots(settings: Settings, clock: Clock | None = None,
                 caps: Mapping[str, int] | None = None) -> LeasedSlots:
    """The deployment's slot pools on the configured store (nothing is opened until used).

    ``caps`` default to the settings' (:func:`slot_caps`). ``clock`` is for tests; by default
    PostgreSQL uses its server's clock and SQLite this host's.
    """
    caps = slot_caps(settings) if caps is None else caps
    if settings.database_url:
        return PostgresSlots(slots_datastore(settings.database_url, settings), caps, clock)
    path = settings.data_dir / "slots.sqlite3"  # created 0600 on first use
    return SqliteSlots(path, caps, settings.sqlite_lock_timeout, clock or time.time)
