"""The write model: one ``eventsourcing`` Application holding every aggregate.

One application means one event store, so a single ``save()`` commits several aggregates
atomically; a *read set* extends that save's optimistic check to aggregates it only read.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar, cast
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.domain import Aggregate, AggregateEvent
from eventsourcing.persistence import (
    IntegrityError,
    InterfaceError,
    JSONTranscoder,
    OperationalError,
)
from eventsourcing.utils import EnvType

from application.ports import Clock, ReadSetChangedError, ReadSetRecorder, system_clock
from application.transcodings import register_reference_transcodings
from domain.artifact import Artifact
from domain.dream_queue import DreamQueue
from domain.errors import DomainError, WriteConflictError

T = TypeVar("T")
A = TypeVar("A", bound=Aggregate)
P = ParamSpec("P")
MAX_WRITE_ATTEMPTS = 10
RETRY_BACKOFF_SECONDS = 0.005
RETRY_BACKOFF_CAP_SECONDS = 0.25


class StoreUnavailableError(OperationalError):
    """The event store did not answer in time: it is down, the connection was lost, or its
    write lock was held too long. A save is one transaction, so the command stored everything
    or nothing; retrying it is safe (commands are idempotent or version-checked)."""


# What the store library raises when the store cannot be reached or locked, as opposed to
# bugs (ProgrammingError) and bad data (DataError). StoreUnavailableError is one of them.
# (projections.base.STORE_ERRORS is wider: every error from a view's database.)
OUTAGE_ERRORS: tuple[type[Exception], ...] = (OperationalError, InterfaceError)


@contextmanager
def store_call() -> Iterator[None]:
    """Report a store outage inside the block as :class:`StoreUnavailableError`."""
    try:
        yield
    except StoreUnavailableError:
        raise
    except OUTAGE_ERRORS as error:
        raise StoreUnavailableError(str(error)) from error


@dataclass(frozen=True)
class Written(Generic[T]):
    """What a command produced, and the event position to wait for (None: nothing changed)."""

    value: T
    position: int | None


def retry_on_write_conflict(command: Callable[P, T]) -> Callable[P, T]:
    """Re-run a command against fresh state after losing a race.

    Commands re-check every guard on each run, so one with an expected version reports its own
    domain conflict on the second run, while commutative ones (adding an entry) just succeed.
    """

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        for attempt in range(1, MAX_WRITE_ATTEMPTS):
            try:
                return command(*args, **kwargs)
            except WriteConflictError:
                # Jitter spreads writers that collided so they do not collide again.
                ceiling = min(RETRY_BACKOFF_CAP_SECONDS, RETRY_BACKOFF_SECONDS * 2**attempt)
                time.sleep(random.uniform(0, ceiling))
        return command(*args, **kwargs)

    return wrapper


class WriteModel(Application[UUID]):
    """Event store access shared by the command handlers: load, save with a read set, history."""

    name = "Dreaming"
    # Memories and queues live as long as their scope: snapshots keep loading them cheap.
    snapshotting_intervals = {Artifact: 50, DreamQueue: 20}

    def __init__(self, env: EnvType | None = None, clock: Clock = system_clock,
                 enforce_access: bool = True) -> None:
        super().__init__(env)
        self.clock = clock
        self.enforce_access = enforce_access
        if not isinstance(self.recorder, ReadSetRecorder):
            msg = (f"{type(self.recorder).__name__} cannot check read sets; configure the "
                   "application through adapters.persistence")
            raise TypeError(msg)

    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        super().register_transcodings(transcoder)
        register_reference_transcodings(transcoder)

    def load(self, aggregate_id: UUID, missing: Callable[[], DomainError],
             version: int | None = None) -> Any:
        try:
            with store_call():
                return self.repository.get(aggregate_id, version=version)
        except AggregateNotFoundError:
            raise missing() from None

    def exists(self, aggregate_id: UUID) -> bool:
        """One indexed read of at most one event (``in repository`` would rebuild the aggregate)."""
        with store_call():
            return bool(self.recorder.select_events(aggregate_id, limit=1))

    def find(self, aggregate_id: UUID) -> Any:
        """The aggregate, or ``None`` when it has no events: one load, no separate check."""
        try:
            with store_call():
                return self.repository.get(aggregate_id)
        except AggregateNotFoundError:
            return None

    def commit(self, *changed: Aggregate, read: Iterable[Aggregate] = ()) -> int | None:
        """Save ``changed`` in one transaction, failing if any aggregate in ``read`` moved."""
        changed_ids = {aggregate.id for aggregate in changed}
        read_set = {a.id: a.version for a in read if a.id not in changed_ids}
        try:
            with store_call():
                recordings = self.save(*changed, read_set=read_set)
        except ReadSetChangedError as error:
            raise WriteConflictError(
                "an aggregate this command read changed before it committed",
                moved=[{"aggregate_id": str(k), "expected": v[0], "actual": v[1]}
                       for k, v in error.moved.items()],
            ) from None
        except IntegrityError:
            raise WriteConflictError(
                "another writer changed the same aggregate first; nothing was stored"
            ) from None
        return recordings[-1].notification.id if recordings else None

    def history(self, aggregate_id: UUID) -> Sequence[AggregateEvent]:
        with store_call():
            return [cast(AggregateEvent, e) for e in self.events.get(aggregate_id)]

    @property
    def store_kind(self) -> str:
        kind: str = getattr(self.recorder, "store_kind", "unknown")
        return kind

    def max_position(self) -> int:
        with store_call():
            return self.recorder.max_notification_id() or 0

    def position_of(self, aggregate: Aggregate) -> int | None:
        """The event position of ``aggregate``'s last event, as loaded (a reader waits for it
        in a read model to see this state or later)."""
        recorder = cast(ReadSetRecorder, self.recorder)
        with store_call():
            return recorder.position_of(aggregate.id, aggregate.version)
