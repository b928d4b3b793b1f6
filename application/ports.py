"""Ports the write model needs, and the contract its event store must honour."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable
from uuid import UUID

from eventsourcing.persistence import IntegrityError, StoredEvent

from domain.erasure import KeyRecord

Clock = Callable[[], datetime]
# The caller's trace context as a W3C ``traceparent``, or None (tracing off): stored with an
# admitted run, so the process that executes it continues the trace.
TraceContext = Callable[[], str | None]


def no_trace_context() -> str | None:
    return None
# Each aggregate's stored events and the position of its last one (None: it has no events).
EventsOfMany = Mapping[UUID, tuple[Sequence[StoredEvent], int | None]]


def system_clock() -> datetime:
    return datetime.now(tz=UTC)


class ReadSetChangedError(IntegrityError):
    """Raised by a recorder inside the write transaction when a read aggregate has moved."""

    def __init__(self, moved: Mapping[UUID, tuple[int, int]]) -> None:
        super().__init__(f"{len(moved)} aggregate(s) read by this command changed")
        self.moved = dict(moved)


@runtime_checkable
class ReadSetRecorder(Protocol):
    """An application recorder that accepts ``read_set={aggregate_id: version}`` on insert.

    Within the same transaction as the insert, it compares each listed aggregate's current
    version (0 when it has no events) with the expected one and raises
    :class:`ReadSetChangedError` if any differs, so nothing of the save is stored.
    """

    supports_read_set: bool
    store_kind: str

    def position_of(self, originator_id: UUID, version: int) -> int | None:
        """The notification id of that event (None: not recorded)."""

    def select_events_and_position(self, originator_id: UUID, lte: int | None = None
                                   ) -> tuple[Sequence[StoredEvent], int | None]:
        """An aggregate's events (up to version ``lte``) and the position of the last one
        returned, in one query."""

    def select_events_of_many(self, originator_ids: Sequence[UUID]) -> EventsOfMany:
        """The events and last position of each of several aggregates (an empty list and
        ``None`` for one without events), in one query."""

    def writers_turn(self, *keys: str) -> AbstractContextManager[object]:
        """Wait for the turn of this store's writers of ``keys``, in every process the store
        can reach cheaply (or none): an efficiency, never what keeps a write exact."""


class ExecutionObserver(Protocol):
    """What an operator sees of a Dream run's execution: each phase timed, each attempt's end
    counted. The executor reports to it; an adapter turns the reports into metrics."""

    def phase(self, name: str, operation: str, trigger: str) -> AbstractContextManager[None]:
        """Time one phase (queue_wait is reported through ``waited``)."""
        ...

    def waited(self, seconds: float, operation: str, trigger: str) -> None:
        """An attempt was claimed ``seconds`` after its run was accepted or last requeued."""
        ...

    def ended(self, operation: str, trigger: str, status: str, outcome: str) -> None:
        """An attempt ended: succeeded with an outcome, requeued or failed with a code."""
        ...


class _Unobserved:
    def phase(self, name: str, operation: str, trigger: str) -> AbstractContextManager[None]:
        return nullcontext()

    def waited(self, seconds: float, operation: str, trigger: str) -> None:
        pass

    def ended(self, operation: str, trigger: str, status: str, outcome: str) -> None:
        pass


UNOBSERVED: ExecutionObserver = _Unobserved()


class Keyring(Protocol):
    """The store's data keys, one per record whose free text is sealed (ADR-0030)."""

    def tag(self, record: KeyRecord, scope_id: str, subject: str) -> None:
        """Keep a data subject (its digest) with the record's key when the key is made."""

    def of_subject(self, scope_id: str, subject: str) -> list[KeyRecord]:
        """The records kept for a subject (a digest) whose keys still exist."""

    def exists(self, key_id: UUID) -> bool: ...

    def prefetch_stored(self, states: Iterable[bytes]) -> None:
        """Fetch at once the keys of the sealed values in these stored events, so that
        opening them costs no query each (a no-op where nothing is opened)."""

    def forget(self, key_ids: Sequence[UUID]) -> None:
        """Drop keys an erasure destroyed from this process's memory."""


class Scrubber(Protocol):
    def scrub(self) -> dict[str, object]:
        """Leave no destroyed key's bytes in the store's files, as far as the store allows."""
