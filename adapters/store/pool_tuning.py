"""How the service's PostgreSQL connection pools recover from outages without slowing every call.

The library's pool can ping each connection before lending it (``POSTGRES_PRE_PING``): one
more round trip per store call, a fifth of the time of every request and view batch under load.
A pooled connection is checked here only when it may be dead instead: the server wrote to it
while it sat idle (its shutdown notice, or the socket closed: a restart), or it sat idle for
longer than a network path may keep a silent connection. A connection that dies unseen between
two calls fails that one call with a store error (503 ``store_unavailable``, or a retry by the
view runner or worker); the pool then drops it, and the next call gets a fresh one.
"""

from __future__ import annotations

import math
import select
from time import monotonic
from typing import Any
from weakref import WeakKeyDictionary

from eventsourcing.postgres import PostgresDatastore
from psycopg import Connection
from psycopg_pool import ConnectionPool

IDLE_PING_SECONDS = 10.0  # a connection idle longer than this is pinged before use


class SuspectConnectionCheck:
    """A pool ``check`` that pings only connections that may be dead."""

    def __init__(self, idle_ping_seconds: float = IDLE_PING_SECONDS) -> None:
        self._idle_ping_seconds = idle_ping_seconds
        self._lent_at: WeakKeyDictionary[Connection[Any], float] = WeakKeyDictionary()

    def __call__(self, connection: Connection[Any]) -> None:
        now = monotonic()
        last_lent = self._lent_at.get(connection)
        self._lent_at[connection] = now
        if (last_lent is None or now - last_lent > self._idle_ping_seconds
                or _server_wrote_while_idle(connection)):
            ConnectionPool.check_connection(connection)  # raises if dead: the pool replaces it


def _server_wrote_while_idle(connection: Connection[Any]) -> bool:
    """Whether an idle connection's socket has something to read: a server that is going
    away says so (or closes the socket); a healthy one sends nothing unasked."""
    try:
        readable, _, _ = select.select([connection.fileno()], [], [], 0)
    except (OSError, ValueError):  # already closed
        return True
    return bool(readable)


def tune_pool(datastore: PostgresDatastore) -> None:
    """Check suspect connections only, and bound reconnection attempts by the connect timeout.

    The pool retries a lost connection in the background for five minutes, 1, 2, 4, 8… s
    apart, so after a 10 s outage the store stayed unusable for seconds more. Given up
    quickly, a retry is started afresh by the next request that waits, so the service
    reconnects as soon as the server is back. The server's own connect attempt is bounded too.
    """
    pool = datastore.pool
    # psycopg_pool takes its check at construction only; the library builds the pool.
    pool._check = SuspectConnectionCheck()  # private: pinned by tests/test_pool_tuning.py
    pool.reconnect_timeout = pool.timeout
    if isinstance(pool.kwargs, dict):
        pool.kwargs.setdefault("connect_timeout", max(2, math.ceil(pool.timeout)))
