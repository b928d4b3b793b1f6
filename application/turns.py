"""Turns: commands of one process that write the same aggregate take turns instead of racing.

Optimistic concurrency keeps writes exact across processes, but within one process racing
threads only lose: every admission to a scope writes the scope's Dream queue, so with eight
clients on one scope most of them loaded the queue, lost the write and retried with backoff
(409 ``write_conflict`` once the retries ran out). A turn per key makes them queue up in the
process instead, for the few milliseconds of a load and a commit. Other processes meet them
at the store's version check, unless the store offers a turn of its own (the processes of one
host sharing a data directory do: ``adapters.store.held_queues``). The writers of a Memory's
entries take turns the same way (``application.records``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from threading import Lock


class Turns:
    """One thread at a time per key; a key's lock exists only while someone holds or waits."""

    def __init__(self) -> None:
        self._guard = Lock()
        self._locks: dict[str, tuple[Lock, int]] = {}  # key -> (lock, holders and waiters)

    @contextmanager
    def of(self, key: str) -> Iterator[None]:
        lock = self._enter(key)
        try:
            with lock:
                yield
        finally:
            self._leave(key)

    def _enter(self, key: str) -> Lock:
        with self._guard:
            lock, users = self._locks.get(key, (None, 0))
            lock = lock or Lock()
            self._locks[key] = (lock, users + 1)
            return lock

    def _leave(self, key: str) -> None:
        with self._guard:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        """Keys someone holds or waits for (0 when idle: nothing accumulates)."""
        return len(self._locks)
