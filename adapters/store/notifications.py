"""PostgreSQL LISTEN/NOTIFY between the processes of a store: hints, never the source of truth.

The write model NOTIFYs its channel on every commit (the library does). A read model's
channels are named after the store's: ``<store>_<view>_wake`` (a reader in another process asks
the view's host to apply at once) and ``<store>_<view>_applied`` (the host has committed a
batch). Losing a notification costs a poll, nothing more: everyone still polls, just rarely.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Sequence
from contextlib import suppress
from functools import partial
from threading import Event, Lock, Thread
from typing import Any, ClassVar, Protocol

import psycopg
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
    """Calls ``on_notify(channel)`` for each notification on ``channels`` and ``on_connect()``
    once LISTEN has taken effect, and again after each reconnect (notifications sent before
    are lost, so look around then). Every listener of a process on one database shares that
    process's :class:`ListenHub`: one connection and one thread, however many listen."""

    def __init__(self, recorder: PostgresApplicationRecorder, channels: Sequence[str],
                 on_notify: Callable[[str], None], on_connect: Callable[[], None],
                 name: str) -> None:
        self.name = name
        self.channels = frozenset(channels)
        self.on_notify = on_notify
        self.on_connect = on_connect
        self._hub = ListenHub.join(recorder, self)

    def stop(self, timeout: float = NOTIFY_POLL_SECONDS * 2) -> None:
        self._hub.leave(self, timeout)


class ListenHub:
    """A process's one LISTEN connection to a database, read on one thread, for every
    :class:`Listener` of that database (each read model's runner, the workers' and the
    scheduler's hints): a process holds one connection for its hints instead of one per
    listener. Started by the first listener to join, stopped when the last one leaves."""

    _hubs: ClassVar[dict[tuple[Any, ...], ListenHub]] = {}
    _hubs_guard: ClassVar[Lock] = Lock()

    def __init__(self, key: tuple[Any, ...], recorder: PostgresApplicationRecorder) -> None:
        self._key = key
        pool = recorder.datastore.pool
        # Its own connection, not a pooled one: it outlives whichever application joined first.
        self._connect_kwargs = {**{k: v for k, v in _pool_kwargs(recorder).items()
                                   if k != "row_factory"},
                                "autocommit": True,
                                "connect_timeout": max(2, math.ceil(pool.timeout))}
        self._conninfo = pool.conninfo if isinstance(pool.conninfo, str) else pool.conninfo()
        # Joining wakes the thread through this channel, so a new LISTEN takes effect at once.
        self._control = f"{recorder.channel_name}_hub_{os.getpid()}_{id(self)}"[:63]
        self._listeners: list[Listener] = []
        self._joined: list[Listener] = []  # not yet LISTENed for
        self._lock = Lock()
        self._stopping = Event()
        self.thread = Thread(target=self._run, daemon=True, name="dream-listen")
        self.thread.start()

    @classmethod
    def join(cls, recorder: PostgresApplicationRecorder, listener: Listener) -> ListenHub:
        kwargs = _pool_kwargs(recorder)
        key = tuple(kwargs.get(name) for name in ("host", "port", "dbname", "user"))
        with cls._hubs_guard:
            hub = cls._hubs.get(key)
            if hub is None:
                hub = cls._hubs[key] = ListenHub(key, recorder)
            with hub._lock:
                hub._listeners.append(listener)
                hub._joined.append(listener)
        notify(recorder, hub._control)
        return hub

    def leave(self, listener: Listener, timeout: float) -> None:
        with self._hubs_guard:
            with self._lock:
                self._listeners = [other for other in self._listeners if other is not listener]
                self._joined = [other for other in self._joined if other is not listener]
                last = not self._listeners
            if last:
                del self._hubs[self._key]
                self._stopping.set()
        if last:
            self.thread.join(timeout)

    def _run(self) -> None:
        backoff = Backoff(FIRST_RETRY_SECONDS)
        while not self._stopping.is_set():
            try:
                with psycopg.connect(self._conninfo, **self._connect_kwargs) as connection:
                    with self._lock:  # a new connection listens afresh for everyone
                        self._joined = list(self._listeners)
                    listening = {self._control}
                    connection.execute(SQL("LISTEN {0}").format(Identifier(self._control)))
                    backoff.reset()
                    while not self._stopping.is_set():
                        self._listen_for_the_joined(connection, listening)
                        for hint in connection.notifies(timeout=NOTIFY_POLL_SECONDS,
                                                        stop_after=1):
                            self._deliver(hint.channel)
            except Exception:  # whoever relies on the hints reports store trouble itself
                logger.debug("LISTEN connection lost", exc_info=True)
                self._stopping.wait(backoff.next())

    def _listen_for_the_joined(self, connection: psycopg.Connection[Any],
                               listening: set[str]) -> None:
        with self._lock:
            joined, self._joined = self._joined, []
        new = sorted({channel for listener in joined for channel in listener.channels}
                     - listening)
        if new:
            connection.execute(SQL("; ").join(SQL("LISTEN {0}").format(Identifier(channel))
                                              for channel in new))
            listening.update(new)
        for listener in joined:
            _call(listener, "on_connect", listener.on_connect)

    def _deliver(self, channel: str) -> None:
        with self._lock:
            listeners = [listener for listener in self._listeners if channel in listener.channels]
        for listener in listeners:
            _call(listener, f"on_notify({channel})", partial(listener.on_notify, channel))


def _call(listener: Listener, what: str, callback: Callable[[], None]) -> None:
    """A listener's callback, alone: one that raises is logged by the listener's name, and
    neither the others nor the shared connection (which would listen again for everyone)
    suffer from it."""
    try:
        callback()
    except Exception:
        logger.exception("listener %s failed in %s", listener.name, what)


def _pool_kwargs(recorder: PostgresApplicationRecorder) -> dict[str, Any]:
    """How the library's pool connects (host, port, database, user, password)."""
    kwargs = recorder.datastore.pool.kwargs
    return kwargs() if callable(kwargs) else dict(kwargs or {})


class Stoppable(Protocol):
    def stop(self, timeout: float = ...) -> None: ...


# Starts listening, waking with the callable given (see ``adapters.workers.pool.view_hints``).
Hints = Callable[[Callable[[], None]], Stoppable]
