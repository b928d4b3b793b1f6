"""The webhook outbox: each subscription's delivered position, its lease, its secret and the
record of every delivery attempt, durable in the store (ADR-0029).

Like a projection's tracking row, a subscription's row holds the feed position delivered up to;
the delivery process moves it only after the receiver answered 2xx (or the event went to the
dead letters), so a restart resumes after the last event delivered: at-least-once. A process
delivers for a subscription only while it holds the row's lease (holder and expiry); every
move of the position names the holder, so a process whose lease ran out is fenced.

PostgreSQL: tables in the store's database, on a small pool of their own. SQLite: the same
tables in ``<data_dir>/webhooks.sqlite3`` (0600), every change in one ``BEGIN IMMEDIATE``
transaction. Times are this host's clock, in microseconds since the epoch.

The secrets are kept here, outside the event log (events, bundles and logs carry only their
fingerprint); the file and the tables are as private as the store itself.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

from eventsourcing.postgres import PostgresDatastore

from adapters.settings import Settings
from adapters.store.generation_slots import slots_datastore
from adapters.store.side_file import SideFile
from projections.dialect import POSTGRES, SQLITE, Columns, Dialect, ViewCursor

SECRETS = "dream_webhook_secrets"
OUTBOX = "dream_webhook_outbox"
ATTEMPTS = "dream_webhook_attempts"
SECRET_COLUMNS: Columns = (
    ("webhook_key", "key", "NOT NULL"),
    ("fingerprint", "key", "NOT NULL"),
    ("secret", "text", "NOT NULL"),
)
OUTBOX_COLUMNS: Columns = (
    ("webhook_key", "key", "PRIMARY KEY"),
    ("position", "int", "NOT NULL DEFAULT 0"),  # the feed position delivered up to
    ("failures", "int", "NOT NULL DEFAULT 0"),  # failed attempts of the next event
    ("next_attempt_at", "int", ""),  # no attempt before (the backoff); NULL: now
    ("holder", "text", ""),  # who delivers (NULL: nobody)
    ("expires_at", "int", ""),  # the holder's lease expiry
)
ATTEMPT_COLUMNS: Columns = (
    ("webhook_key", "key", "NOT NULL"),
    ("position", "int", "NOT NULL"),
    ("attempt", "int", "NOT NULL"),
    ("event", "text", "NOT NULL"),
    ("attempted_at", "int", "NOT NULL"),
    ("status_code", "int", ""),  # NULL: no answer (refused, timed out)
    ("error", "text", ""),
    ("duration_ms", "int", "NOT NULL"),
    ("outcome", "text", "NOT NULL"),  # delivered, failed, dead_letter
)
SQLITE_FILE = "webhooks.sqlite3"
SCHEMA_LOCK_KEY = int.from_bytes(b"dreamwhk", "big")
MICROS = 1_000_000
Clock = Callable[[], float]

DELIVERED = "delivered"
FAILED = "failed"
DEAD_LETTER = "dead_letter"


@dataclass(frozen=True)
class OutboxRow:
    """A subscription's delivery state, as its lease holder sees it."""

    position: int
    failures: int
    next_attempt_at: float | None  # seconds since the epoch


@dataclass(frozen=True)
class Attempt:
    """One POST of one event to a subscription's URL, and how it ended."""

    position: int
    attempt: int
    event: str
    attempted_at: float
    status_code: int | None
    error: str | None
    duration_ms: int
    outcome: str


@dataclass(frozen=True)
class OutboxSnapshot:
    """Everything an outbox holds, as rows of its three tables (for ``dream migrate``), the
    leases left out: a lease belongs to a process of the old store."""

    secrets: list[dict[str, Any]]
    subscriptions: list[dict[str, Any]]  # webhook_key, position, failures, next_attempt_at
    attempts: list[dict[str, Any]]

    def positions(self) -> set[int]:
        """Every event position it names."""
        return ({int(row["position"]) for row in self.subscriptions}
                | {int(row["position"]) for row in self.attempts})


class WebhookOutbox(ABC):
    """The outbox operations over one backend; subclasses open its transactions."""

    def __init__(self, dialect: Dialect, lock_schema: str, clock: Clock) -> None:
        self._dialect = dialect
        self._lock_schema = lock_schema
        self._clock = clock
        self._ready = False
        self._ready_lock = threading.Lock()

    @abstractmethod
    def _transaction(self) -> AbstractContextManager[ViewCursor]:
        """One transaction; store errors as ``application.store.OUTAGE_ERRORS``."""

    @abstractmethod
    def close(self) -> None: ...

    def _p(self, name: str) -> str:
        return self._dialect.param(name)

    @contextmanager
    def _ready_transaction(self) -> Iterator[ViewCursor]:
        self._prepare()
        with self._transaction() as cursor:
            yield cursor

    def _prepare(self) -> None:
        with self._ready_lock:
            if self._ready:
                return
            d = self._dialect
            with self._transaction() as cursor:
                if self._lock_schema:
                    cursor.execute(self._lock_schema, {})
                cursor.execute(f"CREATE TABLE IF NOT EXISTS {SECRETS} ("
                               f"{d.column_definitions(SECRET_COLUMNS)}, "
                               "PRIMARY KEY (webhook_key, fingerprint))", {})
                cursor.execute(f"CREATE TABLE IF NOT EXISTS {OUTBOX} ("
                               f"{d.column_definitions(OUTBOX_COLUMNS)})", {})
                cursor.execute(f"CREATE TABLE IF NOT EXISTS {ATTEMPTS} ("
                               f"{d.column_definitions(ATTEMPT_COLUMNS)}, "
                               "PRIMARY KEY (webhook_key, position, attempt))", {})
            self._ready = True

    # -- secrets ----------------------------------------------------------------------------------

    def keep_secret(self, webhook_key: UUID, fingerprint: str, secret: str) -> None:
        p = self._p
        with self._ready_transaction() as cursor:
            cursor.execute(
                f"INSERT INTO {SECRETS} (webhook_key, fingerprint, secret) VALUES "
                f"({p('key')}, {p('fingerprint')}, {p('secret')}) "
                "ON CONFLICT (webhook_key, fingerprint) DO NOTHING",
                {"key": str(webhook_key), "fingerprint": fingerprint, "secret": secret})

    def secret(self, webhook_key: UUID, fingerprint: str) -> str | None:
        p = self._p
        with self._ready_transaction() as cursor:
            cursor.execute(f"SELECT secret FROM {SECRETS} WHERE webhook_key = {p('key')} "
                           f"AND fingerprint = {p('fingerprint')}",
                           {"key": str(webhook_key), "fingerprint": fingerprint})
            row = cursor.fetchone()
        return None if row is None else str(row["secret"])

    # -- positions and leases ---------------------------------------------------------------------

    def claim(self, webhook_key: UUID, holder: str, lease_seconds: float) -> OutboxRow | None:
        """Take (or renew) the subscription's lease; ``None`` while another holder has it."""
        p = self._p
        now = self._now()
        with self._ready_transaction() as cursor:
            cursor.execute(f"INSERT INTO {OUTBOX} (webhook_key) VALUES ({p('key')}) "
                           "ON CONFLICT (webhook_key) DO NOTHING", {"key": str(webhook_key)})
            cursor.execute(
                f"UPDATE {OUTBOX} SET holder = {p('holder')}, expires_at = {p('expires')} "
                f"WHERE webhook_key = {p('key')} AND (holder IS NULL OR holder = {p('holder')} "
                f"OR expires_at <= {p('now')}) RETURNING position, failures, next_attempt_at",
                {"key": str(webhook_key), "holder": holder, "now": now,
                 "expires": now + round(lease_seconds * MICROS)})
            row = cursor.fetchone()
        if row is None:
            return None
        due = row["next_attempt_at"]
        return OutboxRow(int(row["position"]), int(row["failures"]),
                         None if due is None else due / MICROS)

    def release(self, webhook_key: UUID, holder: str) -> None:
        p = self._p
        with self._ready_transaction() as cursor:
            cursor.execute(f"UPDATE {OUTBOX} SET holder = NULL, expires_at = NULL "
                           f"WHERE webhook_key = {p('key')} AND holder = {p('holder')}",
                           {"key": str(webhook_key), "holder": holder})

    def skip_to(self, webhook_key: UUID, holder: str, position: int) -> bool:
        """Move past events the subscription does not take; whether the lease still held."""
        return self._move(None, webhook_key, holder, position, 0, None)

    def record(self, webhook_key: UUID, holder: str, attempt: Attempt, *, position: int,
               failures: int, next_attempt_at: float | None) -> bool:
        """Record an attempt and, in the same transaction, the position and backoff it leads
        to; whether the lease still held (the attempt is recorded either way)."""
        return self._move(attempt, webhook_key, holder, position, failures, next_attempt_at)

    def _move(self, attempt: Attempt | None, webhook_key: UUID, holder: str, position: int,
              failures: int, next_attempt_at: float | None) -> bool:
        p = self._p
        key = str(webhook_key)
        with self._ready_transaction() as cursor:
            if attempt is not None:
                cursor.execute(
                    f"INSERT INTO {ATTEMPTS} (webhook_key, position, attempt, event, "
                    "attempted_at, status_code, error, duration_ms, outcome) VALUES "
                    f"({p('key')}, {p('position')}, {p('attempt')}, {p('event')}, "
                    f"{p('at')}, {p('status')}, {p('error')}, {p('duration')}, {p('outcome')}) "
                    "ON CONFLICT (webhook_key, position, attempt) DO NOTHING",
                    {"key": key, "position": attempt.position, "attempt": attempt.attempt,
                     "event": attempt.event, "at": round(attempt.attempted_at * MICROS),
                     "status": attempt.status_code, "error": attempt.error,
                     "duration": attempt.duration_ms, "outcome": attempt.outcome})
            cursor.execute(
                f"UPDATE {OUTBOX} SET position = {p('position')}, failures = {p('failures')}, "
                f"next_attempt_at = {p('due')} WHERE webhook_key = {p('key')} "
                f"AND holder = {p('holder')} AND position <= {p('position')} "
                "RETURNING position",
                {"key": key, "holder": holder, "position": position, "failures": failures,
                 "due": None if next_attempt_at is None else round(next_attempt_at * MICROS)})
            return cursor.fetchone() is not None

    # -- moving to another store ------------------------------------------------------------------

    def snapshot(self) -> OutboxSnapshot:
        """The whole outbox, read in one transaction (leases left out)."""
        with self._ready_transaction() as cursor:
            cursor.execute(f"SELECT webhook_key, fingerprint, secret FROM {SECRETS} "
                           "ORDER BY webhook_key, fingerprint", {})
            secrets = [dict(row) for row in cursor.fetchall()]
            cursor.execute(f"SELECT webhook_key, position, failures, next_attempt_at "
                           f"FROM {OUTBOX} ORDER BY webhook_key", {})
            subscriptions = [dict(row) for row in cursor.fetchall()]
            cursor.execute(f"SELECT * FROM {ATTEMPTS} ORDER BY webhook_key, position, attempt",
                           {})
            attempts = [dict(row) for row in cursor.fetchall()]
        return OutboxSnapshot(secrets, subscriptions, attempts)

    def adopt(self, snapshot: OutboxSnapshot, translate: Callable[[int], int]) -> None:
        """Write another store's outbox into this one, in one transaction, its positions
        translated to this store's (``translate``). Idempotent, so a migration run again
        resumes: secrets and attempts already here are kept, and a subscription's position
        only moves forward (a target that delivered further is not sent back)."""
        p = self._p
        with self._ready_transaction() as cursor:
            for row in snapshot.secrets:
                cursor.execute(
                    f"INSERT INTO {SECRETS} (webhook_key, fingerprint, secret) VALUES "
                    f"({p('webhook_key')}, {p('fingerprint')}, {p('secret')}) "
                    "ON CONFLICT (webhook_key, fingerprint) DO NOTHING", row)
            for row in snapshot.subscriptions:
                cursor.execute(
                    f"INSERT INTO {OUTBOX} (webhook_key, position, failures, next_attempt_at) "
                    f"VALUES ({p('webhook_key')}, {p('position')}, {p('failures')}, "
                    f"{p('next_attempt_at')}) ON CONFLICT (webhook_key) DO UPDATE SET "
                    "position = excluded.position, failures = excluded.failures, "
                    f"next_attempt_at = excluded.next_attempt_at WHERE {OUTBOX}.position < "
                    "excluded.position",
                    {**row, "position": translate(int(row["position"]))})
            for row in snapshot.attempts:
                columns = [name for name, _, _ in ATTEMPT_COLUMNS]
                cursor.execute(
                    f"INSERT INTO {ATTEMPTS} ({', '.join(columns)}) VALUES "
                    f"({', '.join(p(name) for name in columns)}) "
                    "ON CONFLICT (webhook_key, position, attempt) DO NOTHING",
                    {**row, "position": translate(int(row["position"]))})

    # -- reads ------------------------------------------------------------------------------------

    def position(self, webhook_key: UUID) -> int:
        p = self._p
        with self._ready_transaction() as cursor:
            cursor.execute(f"SELECT position FROM {OUTBOX} WHERE webhook_key = {p('key')}",
                           {"key": str(webhook_key)})
            row = cursor.fetchone()
        return 0 if row is None else int(row["position"])

    def attempts(self, webhook_key: UUID, limit: int = 50, before: int | None = None,
                 outcome: str | None = None) -> list[Attempt]:
        """The latest attempts first (``before``: of events before that position)."""
        p = self._p
        where = [f"webhook_key = {p('key')}"]
        params: dict[str, Any] = {"key": str(webhook_key), "limit": limit}
        if before is not None:
            where.append(f"position < {p('before')}")
            params["before"] = before
        if outcome is not None:
            where.append(f"outcome = {p('outcome')}")
            params["outcome"] = outcome
        with self._ready_transaction() as cursor:
            cursor.execute(f"SELECT * FROM {ATTEMPTS} WHERE {' AND '.join(where)} "
                           f"ORDER BY position DESC, attempt DESC LIMIT {p('limit')}", params)
            rows = cursor.fetchall()
        return [Attempt(int(r["position"]), int(r["attempt"]), r["event"],
                        r["attempted_at"] / MICROS, r["status_code"], r["error"],
                        int(r["duration_ms"]), r["outcome"]) for r in rows]

    def _now(self) -> int:
        return round(self._clock() * MICROS)


class SqliteOutbox(WebhookOutbox):
    """The outbox in its own small SQLite file (``SideFile``)."""

    def __init__(self, path: Path, lock_timeout: float = 10.0, clock: Clock = time.time) -> None:
        super().__init__(SQLITE, "", clock)
        self.path = path
        self._file = SideFile(path, lock_timeout)

    def _transaction(self) -> AbstractContextManager[ViewCursor]:
        return self._file.transaction()

    def close(self) -> None:
        self._file.close()


class PostgresOutbox(WebhookOutbox):
    """The outbox tables in the store's PostgreSQL database."""

    def __init__(self, datastore: PostgresDatastore, clock: Clock = time.time) -> None:
        super().__init__(POSTGRES, f"SELECT pg_advisory_xact_lock({SCHEMA_LOCK_KEY})", clock)
        self.datastore = datastore

    def _transaction(self) -> AbstractContextManager[ViewCursor]:
        return self.datastore.transaction(commit=True)

    def close(self) -> None:
        self.datastore.close()


def has_outbox(settings: Settings) -> bool:
    """Whether the store may hold an outbox (an embedded store without its file has none, and
    opening one would create it)."""
    return bool(settings.database_url) or (settings.data_dir / SQLITE_FILE).is_file()


def webhook_outbox(settings: Settings, clock: Clock = time.time) -> WebhookOutbox:
    """The deployment's outbox on the configured store (nothing is opened until used)."""
    if settings.database_url:
        return PostgresOutbox(slots_datastore(settings.database_url, settings), clock)
    return SqliteOutbox(settings.data_dir / SQLITE_FILE, settings.sqlite_lock_timeout,
                        clock)
