"""Read hints: what reading some aggregates led to reading next, remembered by a process so
that the next read of the same ones asks for the rest in the same round trip (ADR-0049).

A run's evidence is read in two steps: the aggregates its request names, with the caller's
token and the scope; then what their lineage names, found only once the first are read. The
lineage of a revision never changes, so the second step is nearly always what it was the time
before. A hint only widens a read: what it fetched counts as read (and enters the commit's
read set) only when the walk asks for it, and whatever the walk asks for that the hint missed
is read as before. A wrong hint costs a few aggregates decoded for nothing, never a stale answer.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from threading import Lock
from uuid import UUID

from eventsourcing.domain import Aggregate

READ_HINTS = 4096  # sets of first reads remembered, the least recently used forgotten first

Addresses = Mapping[UUID, type[Aggregate]]


class ReadHints:
    """For each set of aggregates read first, the aggregates read after them last time."""

    def __init__(self, capacity: int = READ_HINTS) -> None:
        self._capacity = capacity
        self._guard = Lock()
        self._after: OrderedDict[frozenset[UUID], dict[UUID, type[Aggregate]]] = OrderedDict()

    def after(self, first: Iterable[UUID]) -> dict[UUID, type[Aggregate]]:
        """What was read after ``first`` last time (none of ``first`` itself), or nothing."""
        key = frozenset(first)
        with self._guard:
            then = self._after.get(key)
            if then is None:
                return {}
            self._after.move_to_end(key)
            return dict(then)

    def learn(self, first: Iterable[UUID], then: Addresses) -> None:
        """Remember that reading ``first`` led to reading ``then``."""
        key = frozenset(first)
        with self._guard:
            self._after[key] = {aggregate_id: kind for aggregate_id, kind in then.items()
                                if aggregate_id not in key}
            self._after.move_to_end(key)
            if len(self._after) > self._capacity:
                self._after.popitem(last=False)

    def __len__(self) -> int:
        return len(self._after)
