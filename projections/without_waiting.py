"""Reads that must not wait: an HTTP read tried on the event loop itself (ADR-0040).

Inside :func:`reads_without_waiting`, a SQLite pool (the event store's or a view's) hands
out a free connection at once or raises :class:`WouldWaitError`, and refuses any write
transaction the same way; a read model that has not yet applied what the read must include
raises it too. The caller then runs the whole call again in a worker thread, where waiting
is harmless. Such a call has read only, so running it again changes nothing. A read on
SQLite in WAL mode does not wait for writers, so on a free connection it answers at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_WITHOUT_WAITING: ContextVar[bool] = ContextVar("reads_without_waiting", default=False)


class WouldWaitError(Exception):
    """The call would have waited (for a connection, or for the write lock): run it where
    waiting is allowed."""


@contextmanager
def reads_without_waiting() -> Iterator[None]:
    """Within: a store connection that is not free at once, or any write, raises
    :class:`WouldWaitError`."""
    token = _WITHOUT_WAITING.set(True)
    try:
        yield
    finally:
        _WITHOUT_WAITING.reset(token)


def waiting_refused() -> bool:
    """Whether the caller is inside :func:`reads_without_waiting`."""
    return _WITHOUT_WAITING.get()
