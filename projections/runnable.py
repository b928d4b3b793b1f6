"""The projection as runners use it: an event its code fails on becomes a dead letter, and a
batch whose events would only record their positions can be told apart (ADR-0045)."""

from __future__ import annotations

import functools
import logging
import sqlite3
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

import psycopg
from eventsourcing.persistence import PersistenceError, Tracking
from eventsourcing.projection import Projection

from projections.batches import BatchAbortedError
from projections.dead_letters import DeadLetter

STORE_ERRORS = (PersistenceError, sqlite3.Error, psycopg.Error)  # a view's database failing
P = TypeVar("P", bound=Projection[Any])
logger = logging.getLogger(__name__)


def runnable(projection: type[P], name: str) -> type[P]:
    """``projection`` as runners use it, under ``name``: a class of its own, so the handlers
    it looks up once are its own (see :class:`_DeadLettering`)."""
    return cast(type[P], type(projection.__name__, (_DeadLettering, projection),
                              {"name": name, "_handlers": {}, "_ignored": {}}))


F = TypeVar("F", bound=Callable[..., None])


def changes_no_row(handler: F) -> F:
    """Marks a projection's default ``process_event`` (a ``singledispatchmethod``'s): it only
    records the event's position. A live runner may then leave a batch of events that reach
    no other handler unapplied and record its position later (ADR-0045)."""
    handler.changes_no_row = True  # type: ignore[attr-defined]
    return handler


class _DeadLettering(Projection[Any]):
    """Applies events as the projection does; an event its own code fails on is recorded as a
    dead letter (and logged) instead of stopping every read model behind it.

    Store errors are not the event's fault: they propagate, and the runner retries them.
    """

    _handlers: dict[type, Callable[..., None]]  # per runnable class: see runnable()
    _ignored: dict[type, bool]  # likewise: whether events of a type change no row

    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        try:  # mixed in ahead of a concrete projection, whose handler of the event this calls
            handler = self._handlers.get(type(domain_event))
            if handler is None:
                handler = self._handlers[type(domain_event)] = self._handler(type(domain_event))
            handler(self, domain_event, tracking)
        except (*STORE_ERRORS, BatchAbortedError):
            raise
        except Exception as error:
            logger.exception("projection %r: event at position %s is a dead letter", self.name,
                             tracking.notification_id)
            self.view.record_dead_letter(tracking, DeadLetter.of(domain_event, tracking, error))

    def changes_nothing(self, events: Iterable[tuple[Any, Tracking]]) -> bool:
        """Whether every one of ``events`` reaches only a default handler marked
        :func:`changes_no_row`: applying them would only record their positions."""
        for domain_event, _ in events:
            ignored = self._ignored.get(type(domain_event))
            if ignored is None:
                handler = self._handler(type(domain_event))
                ignored = self._ignored[type(domain_event)] = getattr(
                    handler, "changes_no_row", False)
            if not ignored:
                return False
        return True

    def _handler(self, event_type: type) -> Callable[..., None]:
        """The concrete projection's function for events of ``event_type``, looked up once:
        Python 3.11's ``singledispatchmethod`` builds a bound wrapper (``update_wrapper``) at
        every attribute access, a few microseconds of every event applied to every view."""
        mro = type(self).__mro__
        for klass in mro[mro.index(_DeadLettering) + 1:]:
            method = vars(klass).get("process_event")
            if isinstance(method, functools.singledispatchmethod):
                method.__get__(self, type(self))  # registers what was deferred
                handler: Callable[..., None] = method.dispatcher.dispatch(event_type)
                return handler
            if method is not None:
                return cast(Callable[..., None], method)
        msg = f"{type(self).__name__} has no process_event"
        raise TypeError(msg)


def changes_nothing(projection: Projection[Any], events: Iterable[tuple[Any, Tracking]]) -> bool:
    """Whether applying ``events`` would only record their positions (a runnable projection,
    see :meth:`ProjectionSpec.runnable`; any other is assumed to change rows)."""
    return isinstance(projection, _DeadLettering) and projection.changes_nothing(events)
