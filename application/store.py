"""The event store: one ``eventsourcing`` Application that only stores.

One application means one event store, so a single ``save()`` commits several aggregates
atomically; a *read set* extends that save's optimistic check to aggregates it only read. The
use-case services (records, access, runs, review, audit) share this one unit of work.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar, cast
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application, ProcessingEvent
from eventsourcing.domain import Aggregate, AggregateEvent
from eventsourcing.persistence import (
    InfrastructureFactory,
    IntegrityError,
    InterfaceError,
    JSONTranscoder,
    Mapper,
    OperationalError,
    Recording,
    StoredEvent,
)
from eventsourcing.utils import EnvType

from application.held_aggregates import HeldAggregates
from application.noted_head import wrote
from application.ports import Keyring, ReadSetChangedError, ReadSetRecorder
from application.transcodings import register_reference_transcodings
from domain.artifact import Artifact
from domain.dream_queue import DreamQueue
from domain.errors import DomainError, WriteConflictError
from domain.policy import Caller

T = TypeVar("T")
A = TypeVar("A", bound=Aggregate)
ACTED_BY = "acted_by"


class StoreUnavailableError(OperationalError):
    """The event store did not answer in time: it is down, the connection was lost, or its
    write lock was held too long. A save is one transaction, so the command stored everything
    or nothing; retrying it is safe (commands are idempotent or version-checked)."""


# What the store library raises when the store cannot be reached or locked, as opposed to
# bugs (ProgrammingError) and bad data (DataError). StoreUnavailableError is one of them.
# (projections.runnable.STORE_ERRORS is wider: every error from a view's database.)
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


MAX_REMEMBERED_IDS = 200_000  # of aggregates known to have no snapshot (about 20 MB at most)


def replay(aggregate: Any, events: Iterable[Any]) -> Any:
    """The library's projector without its per-event ``isinstance`` against a runtime
    Protocol, which cost a seventh of an admission's interpreter time (Python 3.11): every
    event of this store is one of the aggregates' own, with a ``mutate``."""
    for domain_event in events:
        aggregate = domain_event.mutate(aggregate)
    return aggregate


class LoadedPositions:
    """Where the last event of each recently loaded aggregate is, so that showing an
    aggregate's position right after loading it costs no second query. An entry answers only
    for the very object it was learned from, at the version it was loaded at."""

    def __init__(self, capacity: int = 10_000) -> None:
        self._capacity = capacity
        self._known: dict[int, tuple[weakref.ref[Aggregate], int, int]] = {}

    def remember(self, aggregate: Aggregate, position: int | None) -> None:
        if position is None:
            return
        if len(self._known) >= self._capacity:
            self._known.clear()  # bounded: entries of dead objects go too
        self._known[id(aggregate)] = (weakref.ref(aggregate), aggregate.version, position)

    def of(self, aggregate: Aggregate) -> int | None:
        known = self._known.get(id(aggregate))
        if known is None:
            return None
        learned_from, version, position = known
        return position if learned_from() is aggregate and version == aggregate.version else None


class EventStore(Application[UUID]):
    """Load, save with a read set, history, positions: nothing else."""

    name = "Dreaming"  # the stored application name: table names derive from it
    # Memories and queues live as long as their scope: snapshots keep loading them cheap.
    # ``commit`` takes them from the aggregates it saved (``_snapshot_saved``); the library's
    # own ``snapshotting_intervals`` stay empty, so it takes none itself.
    is_snapshotting_enabled = True
    snapshot_intervals: ClassVar[dict[type[Aggregate], int]] = {Artifact: 50, DreamQueue: 20}
    # An Artifact's snapshot holds its whole history, so its cost grows with it: snapshots are
    # spaced out as it grows (``snapshot_due``), keeping their cost per event about constant.
    growing_snapshots: tuple[type[Aggregate], ...] = (Artifact,)
    SPACING_STEP = 16  # intervals, after which a growing snapshot's interval doubles
    # Rebuilding a grown Memory decodes every entry it ever had: the latest is held once it
    # may have a snapshot (ADR-0034); a smaller one loads from its events in one query.
    held_kinds: tuple[type[Artifact], ...] = (Artifact,)
    keyring: Keyring | None = None  # the data keys, where the store seals (ADR-0030)

    def __init__(self, env: EnvType | None = None,
                 mapper_of: Callable[[Mapper[UUID], InfrastructureFactory[Any]], Mapper[UUID]]
                 | None = None) -> None:
        # The store adapter's mapper (it seals personal fields: ADR-0030), made from the
        # library's before the recorder exists.
        self._mapper_of = mapper_of
        super().__init__(env)
        if not isinstance(self.recorder, ReadSetRecorder):
            msg = (f"{type(self.recorder).__name__} cannot check read sets; configure the "
                   "store through adapters.store.persistence")
            raise TypeError(msg)
        self.read_set_recorder: ReadSetRecorder = self.recorder
        # Ids of aggregates that have no snapshot, learned as they are loaded: their class is
        # never snapshotted, or they were last seen short of their first snapshot. Their loads
        # skip the snapshot store's query, a round trip each (see ``_rebuild``).
        self._unsnapshotted: set[UUID] = set()
        self._positions = LoadedPositions()
        self.held = HeldAggregates()

    def save(self, *aggregates: Aggregate | None,  # type: ignore[override]
             **kwargs: Any) -> list[Recording[UUID]]:
        """The library's ``save``, of aggregates only: without its two ``isinstance`` checks
        per object against runtime Protocols, which Python 3.11 makes slow (as ``replay``
        above). Everything this store saves is an aggregate."""
        processing_event = ProcessingEvent[UUID]()
        for aggregate in aggregates:
            if aggregate is not None:
                processing_event.events.extend(aggregate.collect_events())
                processing_event.aggregates[aggregate.id] = aggregate
        processing_event.saved_kwargs.update(kwargs)
        recordings = self._record(processing_event)
        self._take_snapshots(processing_event)
        self._notify(recordings)
        return recordings

    def construct_mapper(self) -> Mapper[UUID]:
        mapper = super().construct_mapper()
        return mapper if self._mapper_of is None else self._mapper_of(mapper, self.factory)

    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        super().register_transcodings(transcoder)
        register_reference_transcodings(transcoder)

    def load(self, aggregate_id: UUID, missing: Callable[[], DomainError],
             version: int | None = None, kind: type[Aggregate] | None = None) -> Any:
        """The aggregate (at ``version``); ``kind``, when the caller knows the class, saves
        the snapshot lookup of a class that is never snapshotted."""
        try:
            with store_call():
                return self._rebuild(aggregate_id, version, kind)
        except AggregateNotFoundError:
            raise missing() from None

    def exists(self, aggregate_id: UUID) -> bool:
        """One indexed read of at most one event (``in repository`` would rebuild the aggregate)."""
        with store_call():
            return bool(self.recorder.select_events(aggregate_id, limit=1))

    def find(self, aggregate_id: UUID, kind: type[Aggregate] | None = None) -> Any:
        """The aggregate, or ``None`` when it has no events: one load, no separate check."""
        try:
            with store_call():
                return self._rebuild(aggregate_id, None, kind)
        except AggregateNotFoundError:
            return None

    def find_many(self, wanted: Mapping[UUID, type[Aggregate]]) -> dict[UUID, Any]:
        """Several aggregates (``None`` for one with no events), those that cannot have a
        snapshot in one query: a use case's independent reads cost one round trip, not one
        each."""
        batched = [aggregate_id for aggregate_id, kind in wanted.items()
                   if not self._may_load_through_snapshot(aggregate_id, kind)]
        found: dict[UUID, Any] = {}
        if len(batched) > 1:
            with store_call():
                stored = self.read_set_recorder.select_events_of_many(batched)
                self._fetch_keys(event for events, _ in stored.values() for event in events)
            for aggregate_id, (events, position) in stored.items():
                found[aggregate_id] = aggregate = self._from_events(aggregate_id, events, position)
                if aggregate is not None:
                    self._learn_snapshotting(aggregate, at_head=True)
        for aggregate_id, kind in wanted.items():
            if aggregate_id not in found:
                found[aggregate_id] = self.find(aggregate_id, kind)
        return found

    def refresh(self, aggregate: A) -> A:
        """``aggregate`` with the events stored after its version applied to it, in place:
        one indexed read, usually of nothing. Only for an aggregate no other thread uses."""
        with store_call():
            refreshed: A = replay(aggregate, self.events.get(aggregate.id, gt=aggregate.version))
            return refreshed

    def _rebuild(self, aggregate_id: UUID, version: int | None,
                 kind: type[Aggregate] | None) -> Any:
        """The aggregate from its events, through its latest snapshot only when it may have
        one: its class is snapshotted (known from ``kind`` or an earlier load of the id) and it
        was not last seen short of its first snapshot. Otherwise the library would ask the
        snapshot store for every aggregate. Reading every event of an aggregate that has grown
        a snapshot meanwhile is still right, only slower once: it is then loaded through it."""
        if version is None:
            held = self.held.load(aggregate_id, self._events_after)
            if held is not None:
                return held
        if self._may_load_through_snapshot(aggregate_id, kind):
            aggregate = self.repository.get(aggregate_id, version=version, projector_func=replay)
        else:
            stored, position = self.read_set_recorder.select_events_and_position(
                aggregate_id, lte=version)
            self._fetch_keys(stored)
            aggregate = self._from_events(aggregate_id, stored, position)
            if aggregate is None:
                raise AggregateNotFoundError(aggregate_id)
        self._learn_snapshotting(aggregate, at_head=version is None)
        if (version is None and isinstance(aggregate, self.held_kinds)
                and self._may_have_snapshot(aggregate)):
            self.held.keep(aggregate)
        return aggregate

    def _events_after(self, aggregate_id: UUID, version: int) -> Iterable[Any]:
        return self.events.get(aggregate_id, gt=version)

    def _fetch_keys(self, stored: Iterable[StoredEvent]) -> None:
        """The keys of the sealed values about to be opened, in one query (ADR-0030)."""
        if self.keyring is not None:
            self.keyring.prefetch_stored(event.state for event in stored)

    def _may_load_through_snapshot(self, aggregate_id: UUID,
                                   kind: type[Aggregate] | None) -> bool:
        snapshotted = kind is None or kind in self.snapshot_intervals
        return snapshotted and aggregate_id not in self._unsnapshotted

    def _from_events(self, aggregate_id: UUID, stored: Iterable[StoredEvent],
                     position: int | None) -> Any:
        """The aggregate its stored events make (``None``: none), its position remembered."""
        aggregate = replay(None, map(self.mapper.to_domain_event, stored))
        if aggregate is not None:
            self._positions.remember(aggregate, position)
        return aggregate

    def _learn_snapshotting(self, aggregate: Aggregate, at_head: bool) -> None:
        if self._may_have_snapshot(aggregate):
            self._unsnapshotted.discard(aggregate.id)
        elif at_head:
            self._remember_unsnapshotted(aggregate.id)

    @classmethod
    def snapshot_due(cls, kind: type[Any], version: int) -> bool:
        """Is version ``version`` of a ``kind`` snapshotted? Every ``interval`` events; for a
        growing kind, 50 up to version 799, then 100 up to 1,599, 200 up to 3,199, and so on
        (the interval doubles each time the version doubles past ``SPACING_STEP`` of them)."""
        interval = cls.snapshot_intervals.get(kind)
        if interval is None:
            return False
        if kind in cls.growing_snapshots:
            interval <<= (version // (interval * cls.SPACING_STEP)).bit_length()
        return version % interval == 0

    def _snapshot_saved(self, saved: Sequence[Aggregate],
                        recordings: Sequence[Recording[UUID]]) -> None:
        """Snapshot what was just saved when due, from the aggregate in hand when it is at the
        snapshot's version (the library's ``take_snapshot`` first loads it from the store
        again: half of what a snapshot of a 2,000-entry Memory cost)."""
        if self.snapshots is None:
            return
        by_id = {aggregate.id: aggregate for aggregate in saved}
        for recording in recordings:
            event = recording.domain_event
            aggregate = by_id.get(event.originator_id)
            if aggregate is None or not self.snapshot_due(type(aggregate),
                                                          event.originator_version):
                continue
            if aggregate.version == event.originator_version:
                self.snapshots.put([type(aggregate).Snapshot.take(aggregate)])
            else:  # a later event of the same save moved it on
                self.take_snapshot(event.originator_id, version=event.originator_version)

    def _may_have_snapshot(self, aggregate: Aggregate) -> bool:
        interval = self.snapshot_intervals.get(type(aggregate))
        return interval is not None and aggregate.version >= interval

    def _remember_unsnapshotted(self, aggregate_id: UUID) -> None:
        if len(self._unsnapshotted) >= MAX_REMEMBERED_IDS:
            self._unsnapshotted.clear()  # bounded: start learning afresh
        self._unsnapshotted.add(aggregate_id)

    def commit(self, *changed: Aggregate, read: Iterable[Aggregate] = (),
               acted_by: Caller | None = None, erase_keys: Sequence[UUID] = ()) -> int | None:
        """Save ``changed`` in one transaction, failing if any aggregate in ``read`` moved.

        Each new event is stamped with who acted (``acted_by``: audit metadata, never read by
        an event handler; ``None`` is the service itself, a worker finishing a run, say).
        ``erase_keys``: data keys destroyed in the same transaction (an erasure's).
        """
        wrote()  # a read model read later in this call must include these events
        stamp_acted_by(changed, acted_by)
        changed_ids = {aggregate.id for aggregate in changed}
        read_set = {a.id: a.version for a in read if a.id not in changed_ids}
        try:
            with store_call():
                recordings = self.save(*changed, read_set=read_set,
                                       **({"erase_keys": erase_keys} if erase_keys else {}))
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
        with store_call():  # after the commit: a failure here cannot be a write conflict
            self._snapshot_saved(changed, recordings)
        return recordings[-1].notification.id if recordings else None

    def scrub(self) -> dict[str, object]:
        """After an erasure: overwrite what the store's files may still hold of the keys it
        destroyed, as far as the store allows (the recorder says what it did)."""
        scrub = getattr(self.recorder, "scrub", None)
        with store_call():
            return {} if scrub is None else dict(scrub())

    def writers_turn(self, *keys: str) -> AbstractContextManager[object]:
        """Wait for the turn of the store's writers of ``keys`` in other processes (where the
        store offers one: processes on one SQLite file do)."""
        return self.read_set_recorder.writers_turn(*keys)

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
        known = self._positions.of(aggregate)
        if known is not None:
            return known
        with store_call():
            return self.read_set_recorder.position_of(aggregate.id, aggregate.version)


def stamp_acted_by(changed: Iterable[Aggregate], acted_by: Caller | None) -> None:
    """Stamp each new event not stamped yet with who acted (``None``: the service itself)."""
    name = None if acted_by is None else acted_by.name
    for aggregate in changed:
        for pending in aggregate.pending_events:
            if not hasattr(pending, ACTED_BY):
                object.__setattr__(pending, ACTED_BY, name)
