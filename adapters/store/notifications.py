"""PostgreSQL LISTEN/NOTIFY between the processes of a store: hints, never the source of truth.

The write model NOTIFYs its channel on every commit (the library does). A read model's
channels are named after the store's: ``<store>_<view>_wake`` (a reader in another process asks
the view's host to apply at once) and ``<store>_<view>_applied`` (the host has committed a
batch). Losing a notification costs a poll, nothing more: everyone still polls, just rarely.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import suppress
from threading import Event, Thread
from typing import Protocol

from eventsourcing.postgres import PostgresApplicationRecorder
from psycopg.sql import SQL, Identifier

from adapters.store.backoff import Backoff

NOTIFY_POLL_SECONDS = 0.5  # how often a listener looks up from its connection to check stop
FIRST_RETRY_SECONDS = 0.05  # then doubling to adapters.store.backoff's cap (2 s)
logger = logging.getLogger(__name__)


def view_channel(recorder: PostgresApplicationRecorder, view: str, kind: str) -> str:
    """The channel of ``view``'s ``kind`` of hint (``wake`` or ``applied``)."""
    return f"{recorder.channel_name}_{view}_{kind}"


def notify(recorder: PostgresApplicationRecorder, channel: str) -> None:
    """NOTIFY ``channel`` (a hint: a failure is ignored, the receivers poll anyway), as one
    statement on an autocommit connection: no BEGIN and COMMIT round trips around it."""
    with suppress(Exception), recorder.datastore.get_connection() as connection:
        connection.execute("SELECT pg_notify(%s, '')", (channel,))


class Listener:
    """LISTENs on ``channels`` on a pooled connection of its own, on a thread: calls
    ``on_notify(channel)`` for each notification and ``on_connect()`` after each (re)connect
    (notifications sent before LISTEN took effect are lost, so look around then)."""

    def __init__(self, recorder: PostgresApplicationRecorder, channels: Sequence[str],
                 on_notify: Callable[[str], None], on_connect: Callable[[], None],
                 name: str) -> None:
        self._recorder = recorder
        self._listen = SQL("; ").join(SQL("LISTEN {0}").format(Identifier(channel))
                                      for channel in channels)
        self._on_notify = on_notify
        self._on_connect = on_connect
        self._stopping = Event()
        self.thread = Thread(target=self._run, daemon=True, name=name)
        self.thread.start()

    def stop(self, timeout: float = NOTIFY_POLL_SECONDS * 2) -> None:
        self._stopping.set()
        self.thread.join(timeout)

    def _run(self) -> None:
        backoff = Backoff(FIRST_RETRY_SECONDS)
        while not self._stopping.is_set():
            try:
                with self._recorder.datastore.get_connection() as connection:
                    connection.execute(self._listen)
                    self._on_connect()
                    backoff.reset()
                    while not self._stopping.is_set():
                        for hint in connection.notifies(timeout=NOTIFY_POLL_SECONDS,
                                                        stop_after=1):
                            self._on_notify(hint.channel)
            except Exception:  # whoever relies on the hints reports store trouble itself
                logger.debug("%s: LISTEN connection lost", self.thread.name, exc_info=True)
                self._stopping.wait(backoff.next())


class Stoppable(Protocol):
    def stop(self, timeout: float = ...) -> None: ...


# Starts listening, waking with the callable given (see ``adapters.workers.pool.view_hints``).
Hints = Callable[[Callable[[], None]], Stoppable]
