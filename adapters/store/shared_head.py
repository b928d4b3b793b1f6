"""The store's head read once for the view runners of a process that ask at about the same time.

A runner's round that commit hints alone woke needs a head that covers every commit they
announced; any other round (a poll, a reader's hurry), one that covers every commit made
before it began. A read of the head that began after those moments covers them, whoever
started it. A commit wakes every runner of the process, so the runners it woke share one read
instead of taking one each (ADR-0052).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from threading import Condition, Event, Lock
from time import monotonic


class SharedHead:
    """The last notification id of the store: a caller gets the value of a read that began no
    earlier than it asked, waiting for one in flight if there is such a read, else reading it
    itself (through its own connection: no pool is shared)."""

    def __init__(self) -> None:
        self._changed = Condition()
        self._began = -math.inf  # when the read that gave ``_value`` began
        self._value = 0
        self._reading: float | None = None  # when the latest read in flight began

    def since(self, asked: float, read: Callable[[], int]) -> int:
        """The head, as read at ``asked`` (a ``time.monotonic()``) or later, by ``read`` if no
        read that began since then is done or in flight."""
        with self._changed:
            while self._began < asked:
                if self._reading is None or self._reading < asked:
                    began = self._reading = monotonic()
                    break
                self._changed.wait()  # the read in flight answers this caller too
            else:
                return self._value
        try:
            value = read()
        except BaseException:
            self._ended(began)  # a caller waiting on this read starts its own
            raise
        self._ended(began, value)
        return value

    def _ended(self, began: float, value: int | None = None) -> None:
        with self._changed:
            if self._reading == began:
                self._reading = None
            if value is not None and began > self._began:
                self._began, self._value = began, value
            self._changed.notify_all()


class Wakeup(Event):
    """An ``Event`` that remembers when it was last set. Whoever announces a commit sets it
    once the commit is done, so a head read begun since the last ``set`` covers them all."""

    def __init__(self) -> None:
        super().__init__()
        self.last_set = -math.inf
        self._stamping = Lock()  # two setters at once: the later time is the one kept

    def set(self) -> None:
        with self._stamping:
            self.last_set = monotonic()
        super().set()
