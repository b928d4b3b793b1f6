"""Creating a store's tables when other processes may be creating them at the same moment."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable
from time import sleep
from typing import TypeVar

from eventsourcing.persistence import IntegrityError, OperationalError

T = TypeVar("T")
SCHEMA_ATTEMPTS = 5
SCHEMA_RETRY_SECONDS = 0.05
# What losing a race looks like (on PostgreSQL, a collision; on SQLite, a locked file).
LOST_RACES: tuple[type[Exception], ...] = (IntegrityError, OperationalError,
                                           sqlite3.OperationalError)


def created_at_once(create: Callable[[], T], lost: tuple[type[Exception], ...] = LOST_RACES) -> T:
    """``create()``, which creates a store's missing tables, tried again when it loses a race
    to another process starting at the same moment on the same new store (``docker compose
    up``). Trying again finds what the winner made.

    The races: on PostgreSQL the library creates each of the event store's composite types in
    a transaction of its own, outside any lock (two at once: a unique violation), and checks
    for a view's tracking table before its create transaction (the loser's first tracking row
    then collides with the winner's). On SQLite a new connection's ``PRAGMA journal_mode=WAL``
    can find the file locked by another process's schema transaction for longer than the busy
    timeout. A caller that may meet an outage here narrows ``lost`` to the collision, so an
    unreachable store is reported at once rather than after every attempt's wait."""
    for attempt in range(1, SCHEMA_ATTEMPTS + 1):
        try:
            return create()
        except lost:
            if attempt == SCHEMA_ATTEMPTS:
                raise
            sleep(random.uniform(0, SCHEMA_RETRY_SECONDS * attempt))
    raise AssertionError  # unreachable: the last attempt returns or raises
