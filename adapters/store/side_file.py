"""A small SQLite database of the service's own beside the event store (the generation slots,
the webhook outbox), on the embedded store.

One connection per instance, one transaction at a time on it, each taking the write lock
first (``BEGIN IMMEDIATE``: no upgrade deadlock between processes). The file is created by
SQLite itself, private to its owner (ADR-0026); a locked or unreachable file is a store
outage, like the event store's.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from adapters.store.persistence import private_sqlite_file
from application.store import StoreUnavailableError
from projections.dialect import ViewCursor


class SideFile:
    def __init__(self, path: Path, lock_timeout: float = 10.0) -> None:
        self.path = path
        self._lock_timeout = lock_timeout
        self._connection: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    @contextmanager
    def transaction(self) -> Iterator[ViewCursor]:
        with self._lock, _outage():
            connection = self._connect()
            connection.execute("BEGIN IMMEDIATE")
            try:
                yield connection.cursor()
                connection.execute("COMMIT")
            except BaseException:
                connection.rollback()  # also after a failed COMMIT, which leaves it open
                raise

    def _connect(self) -> sqlite3.Connection:
        if self._connection is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(private_sqlite_file(self.path), isolation_level=None,
                                         timeout=self._lock_timeout, check_same_thread=False)
            connection.row_factory = sqlite3.Row
            connection.execute("PRAGMA journal_mode=WAL")
            self._connection = connection
        return self._connection

    def close(self) -> None:
        with self._lock:
            connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


@contextmanager
def _outage() -> Iterator[None]:
    try:
        yield
    except sqlite3.OperationalError as error:
        raise StoreUnavailableError(str(error)) from error
