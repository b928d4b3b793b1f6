"""Requests first: background work of a serving process gives way to the requests in flight.

A serving process shares one interpreter between its requests and its background threads.
While a view that no reader waits for applies a batch, a request in flight waits for the
interpreter, and on two cores that was most of a list's latency right after a write. So the
HTTP layer counts the requests it is serving, and a view runner with nothing urgent to do
waits for a quiet moment first, for a bounded time: under sustained load it still applies its
events every ``DEFER_SECONDS``, in larger batches. A reader waiting for a view wakes it at
once (:meth:`Foreground.nudge`), so no read waits on this.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from threading import Condition

DEFER_SECONDS = 0.1  # the longest background work waits for the requests in flight


class Foreground:
    """The number of requests a process is serving; background work waits for it to be 0."""

    def __init__(self, defer_seconds: float = DEFER_SECONDS) -> None:
        self.defer_seconds = defer_seconds
        self._serving = 0
        self._changed = Condition()

    @property
    def serving(self) -> int:
        return self._serving

    @contextmanager
    def request(self) -> Iterator[None]:
        """Count one request in flight while the block runs."""
        with self._changed:
            self._serving += 1
        try:
            yield
        finally:
            with self._changed:
                self._serving -= 1
                if not self._serving:
                    self._changed.notify_all()

    def nudge(self) -> None:
        """Re-check every waiter's ``interrupted`` now (a reader needs one of them)."""
        with self._changed:
            self._changed.notify_all()

    def wait_quiet(self, interrupted: Callable[[], bool]) -> None:
        """Return when no request is in flight, ``interrupted()`` holds, or after
        ``defer_seconds``."""
        with self._changed:
            self._changed.wait_for(lambda: not self._serving or interrupted(),
                                   self.defer_seconds)
