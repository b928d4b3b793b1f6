"""Counters a fast batch adds up in memory and writes once, at its end.

A day's counter row is bumped by many events of one batch (every run admitted to a scope that
day, every Candidate decided); one ``UPDATE`` per row and batch replaces one per event. Counter
rows are only ever added to, never read while events are applied, and a batch's transaction is
invisible until it commits, so what the batch commits is the same either way. A careful batch
(a savepoint per event) and a live event outside a batch write each addition at once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from projections.base import ProjectionView
from projections.batches import BatchAbortedError
from projections.dialect import ViewCursor

Shape = tuple[Any, ...]  # which table and columns: what the statement depends on
Key = tuple[object, ...]  # the counter row's key values, in the shape's order
Sums = dict[tuple[Shape, Key], dict[str, int]]

_SUMS: ContextVar[tuple[ProjectionView, Sums] | None] = ContextVar("batch_sums", default=None)


class SummedCounters(ProjectionView, ABC):
    """A view whose counters a fast batch adds up (:meth:`_add_counts`) and writes at its end
    (:meth:`_write_counts`)."""

    @contextmanager
    def batch(self, *, careful: bool = False) -> Iterator[ViewCursor]:
        if careful:
            with super().batch(careful=True) as cursor:
                yield cursor
            return
        sums: Sums = {}
        with super().batch() as cursor:
            token = _SUMS.set((self, sums))
            try:
                yield cursor
            finally:
                _SUMS.reset(token)
            try:
                for (shape, key), counts in sums.items():
                    self._write_counts(cursor, shape, key, counts)
            except Exception as error:  # redone carefully, an addition per event
                raise BatchAbortedError(None) from error

    def _add_counts(self, cursor: ViewCursor, shape: Shape, key: Key,
                    counts: Mapping[str, int]) -> None:
        """Add ``counts`` to the counter row ``key``: at the end of this thread's fast batch,
        or now if there is none."""
        pending = _SUMS.get()
        if pending is None or pending[0] is not self:
            self._write_counts(cursor, shape, key, counts)
            return
        total = pending[1].get((shape, key))
        if total is None:
            pending[1][(shape, key)] = dict(counts)
        else:
            for name, count in counts.items():
                total[name] += count

    @abstractmethod
    def _write_counts(self, cursor: ViewCursor, shape: Shape, key: Key,
                      counts: Mapping[str, int]) -> None:
        """Add ``counts`` to the row ``key`` of ``shape``'s table (creating it if needed)."""
