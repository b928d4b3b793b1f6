"""Who hosts a read model: one process per view holds its lock and applies events; the others
follow what it wrote (ADR-0012).

PostgreSQL: a session-level advisory lock on a connection of its own, held while hosting; the
server releases it when that session ends, so a host that dies (process or connection) hands
the view over. SQLite: an exclusive ``flock`` on ``<data_dir>/views/<name>.lock``, released by
the kernel when the holding process exits, however it exits.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from contextlib import suppress
from typing import Protocol

import psycopg

from adapters.settings import Settings
from adapters.store.persistence import PRIVATE_FILE_MODE, private_dir

LOCK_NAMESPACE = "dream-view:"  # keeps our keys apart from other advisory-lock users


class ViewLease(Protocol):
    """The right to host one view; at most one holder across all processes of a store."""

    def try_acquire(self) -> bool:
        """Take the lease if nobody holds it (never blocks); whether this holder has it."""
        ...

    def still_held(self) -> bool:
        """Whether the lease taken is still ours (a lost PostgreSQL session loses it)."""
        ...

    def release(self) -> None:
        """Give the lease up (idempotent)."""
        ...


def advisory_key(name: str) -> int:
    """A stable signed 64-bit advisory-lock key for view ``name``, the same in every process
    (Python's ``hash`` is salted per process)."""
    digest = hashlib.sha256((LOCK_NAMESPACE + name).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PostgresViewLease:
    """``pg_try_advisory_lock`` held on a dedicated connection while hosting."""

    def __init__(self, database_url: str, name: str, connect_timeout: int = 2) -> None:
        self.key = advisory_key(name)
        self._url = database_url
        self._connect_timeout = connect_timeout
        self._connection: psycopg.Connection[tuple[object, ...]] | None = None

    def try_acquire(self) -> bool:
        if self._connection is not None and self.still_held():
            return True
        connection = psycopg.connect(self._url, autocommit=True,
                                     connect_timeout=self._connect_timeout)
        try:
            row = connection.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()
        except BaseException:
            connection.close()
            raise
        if row is None or not row[0]:
            connection.close()
            return False
        self._connection = connection
        return True

    def still_held(self) -> bool:
        if self._connection is None:
            return False
        try:  # the session holds the lock for as long as it lives
            self._connection.execute("SELECT 1")
        except psycopg.Error:
            self._drop()
            return False
        return True

    def release(self) -> None:
        if self._connection is None:
            return
        with suppress(psycopg.Error):  # closing the session releases the lock anyway
            self._connection.execute("SELECT pg_advisory_unlock(%s)", (self.key,))
        self._drop()

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with suppress(psycopg.Error):
                connection.close()


class SqliteViewLease:
    """An exclusive, non-blocking ``flock`` on the view's lock file (mode 0600)."""

    def __init__(self, settings: Settings, name: str) -> None:
        self.path = private_dir(private_dir(settings.data_dir) / "views") / f"{name}.lock"
        self._descriptor: int | None = None

    def try_acquire(self) -> bool:
        if self._descriptor is not None:
            return True
        descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE_MODE)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            return False
        except BaseException:
            os.close(descriptor)
            raise
        self._descriptor = descriptor
        return True

    def still_held(self) -> bool:
        return self._descriptor is not None

    def release(self) -> None:
        descriptor, self._descriptor = self._descriptor, None
        if descriptor is not None:
            os.close(descriptor)  # closing the only descriptor releases the flock


class FollowOnly:
    """Never hosts: an API process that leaves the views to others (``DREAM_HOST_VIEWS``)."""

    def try_acquire(self) -> bool:
        return False

    def still_held(self) -> bool:
        return False

    def release(self) -> None:
        return None


def view_lease(settings: Settings, name: str) -> ViewLease:
    """The lease this process competes for to host view ``name`` on the configured store."""
    if not settings.host_views:
        return FollowOnly()
    if settings.database_url:
        return PostgresViewLease(settings.database_url, name, settings.store_timeout_seconds)
    return SqliteViewLease(settings, name)
