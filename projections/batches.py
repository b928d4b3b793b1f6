"""The batch a view applies many events in: one transaction, and what each event does in it.

A fast batch records only its first position (the exactly-once guard: refused unless newer
than the view's) and, at its end, its last: not one upsert of the tracking row per event. The
first event that fails aborts the whole batch (:class:`BatchAbortedError`), for the caller to
redo it carefully, a savepoint per event (:meth:`projections.base.ProjectionView.batch`).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

from eventsourcing.persistence import IntegrityError, Tracking

from projections.dialect import ViewCursor

if TYPE_CHECKING:
    from projections.base import ProjectionView


@dataclass
class Batch:
    view: ProjectionView
    cursor: ViewCursor
    careful: bool
    first: Tracking | None = None
    last: Tracking | None = None

    def last_position(self) -> int:
        return 0 if self.last is None else self.last.notification_id

    def step(self, tracking: Tracking) -> None:
        """A fast batch reaches ``tracking``: recorded if it is the first, else refused
        unless newer than the last (:class:`BatchAbortedError`)."""
        try:
            if self.first is None:
                self.view._insert_tracking(self.cursor, tracking)
                self.first = tracking
            elif tracking.notification_id <= self.last_position():
                msg = f"position {tracking.notification_id} is not newer than the batch's"
                raise IntegrityError(msg)
        except Exception as error:
            raise BatchAbortedError(tracking.notification_id) from error
        self.last = tracking


class BatchAbortedError(Exception):
    """An event failed inside a fast batch; its transaction rolls back, to be redone
    carefully. ``None``: the store refused a statement only when the batch's answers were
    read, at its commit."""

    def __init__(self, notification_id: int | None) -> None:
        where = "an event" if notification_id is None else f"the event at {notification_id}"
        super().__init__(f"{where} failed in a fast batch")
        self.notification_id = notification_id


CURRENT_BATCH: ContextVar[Batch | None] = ContextVar("view_batch", default=None)


class FastEvent:
    """One event's part of a fast batch: its position checked (and recorded, if it is the
    batch's first), the batch's cursor, and any failure turned into :class:`BatchAbortedError`.

    A class rather than a generator context manager: every event of every rebuild and replay
    enters one, for each view.
    """

    __slots__ = ("batch", "tracking")

    def __init__(self, batch: Batch, tracking: Tracking) -> None:
        self.batch = batch
        self.tracking = tracking

    def __enter__(self) -> ViewCursor:
        self.batch.step(self.tracking)
        return self.batch.cursor

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if isinstance(error, Exception) and not isinstance(error, BatchAbortedError):
            raise BatchAbortedError(self.tracking.notification_id) from error
