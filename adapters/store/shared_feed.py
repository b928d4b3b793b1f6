"""Notifications read from the write model and decoded once per process, for its view runners."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from threading import Lock
from typing import Any

from eventsourcing.application import Application
from eventsourcing.persistence import Tracking

from adapters.settings import Settings
from adapters.store.persistence import open_store
from adapters.store.shared_head import SharedHead

Decoded = tuple[Any, Tracking]  # a domain event and its position
Fetch = Callable[[int, int, int], list[Decoded]]  # after, up to (inclusive), at most

BATCH_EVENTS = 1_000
FEED_KEEP_EVENTS = 5_000  # decoded events a SharedFeed holds for the views behind the first
CLOSE_WAIT_SECONDS = 5.0


def store_fetch(app: Application[Any]) -> Fetch:
    """Read and decode notifications straight from the application's store."""

    def fetch(after: int, stop: int, limit: int) -> list[Decoded]:
        notifications = app.recorder.select_notifications(start=after + 1, limit=limit,
                                                          stop=stop)
        return [(app.mapper.to_domain_event(n), Tracking(app.name, n.id))
                for n in notifications]

    return fetch


class SharedFeed:
    """Notifications read and decoded once for every view of a process: the first runner to
    ask fetches them, the others (usually a moment behind) take them from here. A runner far
    behind what is held reads the store itself, so it never evicts what the others need.
    The store's head is read once for the runners that ask at about the same time (``head``)."""

    def __init__(self, settings: Settings, keep: int = FEED_KEEP_EVENTS) -> None:
        # One reader at a time; Source and entry text left sealed (no view reads it).
        self.app: Application[Any] = open_store(settings, warm=1, for_views=True)
        self._fetch = store_fetch(self.app)
        self.head = SharedHead()
        self._keep = keep
        self._lock = Lock()
        self._ids: list[int] = []
        self._events: list[Decoded] = []
        self._low = self._high = -1  # every notification in (low, high] is held

    def __call__(self, after: int, stop: int, limit: int) -> list[Decoded]:
        with self._lock:
            if after < self._low:
                return self._fetch(after, stop, limit)
            if after > self._high:
                self._ids, self._events, self._low, self._high = [], [], after, after
            if stop > self._high:
                self._extend(stop)
            first = bisect_right(self._ids, after)
            last = bisect_right(self._ids, stop, lo=first)
            answer = self._events[first:min(last, first + limit)]
            self._trim()  # after answering: what this caller asked for may be among the oldest
            return answer

    def _extend(self, stop: int) -> None:
        fetched = self._fetch(self._high, stop, BATCH_EVENTS)
        self._ids += [tracking.notification_id for _, tracking in fetched]
        self._events += fetched
        self._high = stop if len(fetched) < BATCH_EVENTS else self._ids[-1]

    def _trim(self) -> None:
        if len(self._ids) > self._keep:
            dropped = len(self._ids) - self._keep
            self._low = self._ids[dropped - 1]
            del self._ids[:dropped], self._events[:dropped]

    def close(self) -> None:
        # Not under a fetch in progress (a runner that outlived its stop, stuck in a store
        # call): closing a connection in use can crash the process. Such a runner is a
        # daemon; its connection then goes with the process.
        if self._lock.acquire(timeout=CLOSE_WAIT_SECONDS):
            try:
                self.app.close()
            finally:
                self._lock.release()
