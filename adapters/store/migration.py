"""Moving a deployment's events from one store to another (SQLite to PostgreSQL, and back).

The events are copied in store order, byte for byte (each one's aggregate, version, topic and
stored state), in batches of one transaction each. A hash chain over those four fields in order
proves the copy: both stores must end with the same chain. A migration that stopped part way is
resumed by running it again: the target must hold a prefix of the source (checked event by
event), and the rest is appended. The read models are rebuilt on the target and verified
against a replay of its events.

The webhook outbox (ADR-0029) moves with the events: each subscription's secrets, delivered
position, failure count and backoff, and its delivery attempts; not its lease, which belongs to
a process of the old store. Positions are the stores' own numbers and may differ (PostgreSQL's
sequence leaves gaps where a transaction rolled back; SQLite's does not), so each one is
translated: a position names the last event at or before it, and becomes that event's position
in the target (found by walking both stores side by side). Copying the outbox again (a resumed
migration) keeps what is there and only moves a position forward.

The data keys (ADR-0030) move too: without them every sealed text would read as erased on the
target. Every row of the source's key table is copied (``adapters.store.key_rows``) once the
target is known to hold a prefix of the source's events, and again after the events, for the
keys of events recorded meanwhile; then the target must hold each of them, byte for byte. A
key id the target holds with other bytes is refused. The target's keys become exactly the
source's: one the source no longer has was destroyed by an erasure since an earlier run
copied it, and is destroyed on the target too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, closing
from dataclasses import dataclass, field
from typing import Protocol, TypeVar
from uuid import UUID

from eventsourcing.persistence import Notification, StoredEvent

from adapters.settings import Settings
from adapters.store.deployment import adopt_deployment_id, deployment_id
from adapters.store.key_rows import adopt_key_rows, holds_keys, key_rows
from adapters.store.persistence import open_store
from adapters.store.projection_runtime import start_projection
from adapters.store.replay_verification import ProjectionComparison, verify
from adapters.store.view_host import view_lease
from adapters.store.webhook_outbox import has_outbox, webhook_outbox
from application.store import EventStore
from domain.errors import DomainError
from projections.catalog import READ_MODELS

BATCH = 500
CATCH_UP_SECONDS = 600.0  # a large store's read models take a while to build
T = TypeVar("T")
Progress = Callable[[int, int], None]  # events copied so far, events in the source


class MigrationRefusedError(DomainError):
    code = "migration_refused"


class MigrationConflictError(DomainError):
    code = "migration_conflict"


class ChainedEvent(Protocol):
    """What identifies a stored event: a stored event, a notification, a bundle's event."""

    @property
    def originator_id(self) -> UUID | str: ...

    @property
    def originator_version(self) -> int: ...

    @property
    def topic(self) -> str: ...

    @property
    def state(self) -> bytes: ...


class HashChain:
    """sha256 chained over records in order, each record a sequence of byte strings."""

    SEED = b"artifact-dreaming.chain"

    def __init__(self) -> None:
        self.digest = hashlib.sha256(self.SEED).hexdigest()
        self.links = 0

    def link(self, parts: Iterable[bytes]) -> None:
        link = hashlib.sha256()
        for part in (self.digest.encode(), *parts):
            link.update(len(part).to_bytes(8, "big"))  # lengths keep the parts apart
            link.update(part)
        self.digest = link.hexdigest()
        self.links += 1


class EventChain(HashChain):
    """sha256 over every event's identity and stored state, in store order."""

    SEED = b"artifact-dreaming.events.v1"

    @property
    def events(self) -> int:
        return self.links

    def add(self, event: ChainedEvent) -> None:
        self.link((str(event.originator_id).encode(), str(event.originator_version).encode(),
                   event.topic.encode(), event.state))


@dataclass
class MigrationReport:
    events: int = 0
    already_there: int = 0
    copied: int = 0
    source_chain: str = ""
    target_chain: str = ""
    read_models: list[ProjectionComparison] = field(default_factory=list)
    webhooks: int = 0  # subscriptions whose outbox rows were carried
    webhooks_equal: bool = True  # every one found in the target's outbox, translated
    data_keys: int = 0  # the source's data keys, carried
    data_keys_equal: bool = True  # every one found in the target, byte for byte

    @property
    def equal(self) -> bool:
        return (self.source_chain == self.target_chain and self.webhooks_equal
                and self.data_keys_equal
                and all(comparison.equal for comparison in self.read_models))


def events_of(store: EventStore, after: int = 0) -> Iterator[Notification]:
    """Every event after position ``after``, in store order, read a batch at a time."""
    while batch := store.recorder.select_notifications(after + 1, BATCH):
        yield from batch
        after = batch[-1].id


def migrate(source: Settings, target: Settings,
            progress: Progress | None = None) -> MigrationReport:
    """Copy what the target lacks of the source's events, verify both chains, then rebuild
    and verify the target's read models."""
    if source.uses_postgres == target.uses_postgres and (
            source.database_url == target.database_url
            and source.data_dir.resolve() == target.data_dir.resolve()):
        raise MigrationRefusedError("the source and the target are the same store")
    events_file = source.data_dir / "events.sqlite3"
    if not source.uses_postgres and not events_file.is_file():
        raise MigrationRefusedError(f"no store to migrate at {events_file}",
                                    data_dir=str(source.data_dir))
    report = MigrationReport()
    with closing(open_store(source)) as from_store, closing(open_store(target)) as to_store:
        total = from_store.max_position()
        source_chain, target_chain = EventChain(), EventChain()
        pending = _after_common_prefix(events_of(from_store), events_of(to_store),
                                       source_chain, target_chain)
        report.already_there = target_chain.events
        carry_keys(from_store, to_store)  # first: an interrupted copy leaves no text unreadable
        for batch in batches(pending):
            to_store.recorder.insert_events([stored_event(event) for event in batch])
            for event in batch:
                source_chain.add(event)
                target_chain.add(event)
            if progress is not None:
                progress(target_chain.events, total)
        report.events, report.copied = source_chain.events, (target_chain.events
                                                              - report.already_there)
        report.source_chain, report.target_chain = source_chain.digest, target_chain.digest
        # The same deployment, moved: the target answers to the source's id from now on.
        adopt_deployment_id(to_store, deployment_id(from_store))
        report.data_keys, report.data_keys_equal = carry_keys(from_store, to_store)
        if has_outbox(source):
            report.webhooks, report.webhooks_equal = carry_outbox(source, target, from_store,
                                                                  to_store)
    build_read_models(target)
    report.read_models = verify(target, READ_MODELS)  # each one against a replay of the events
    return report


def carry_outbox(source: Settings, target: Settings, from_store: EventStore,
                 to_store: EventStore) -> tuple[int, bool]:
    """Copy the source's webhook outbox into the target's, positions translated; how many
    subscriptions it tracks, and whether the target's outbox now holds each of them (its
    secrets, and a position at least the translated one)."""
    with closing(webhook_outbox(source)) as from_outbox:
        snapshot = from_outbox.snapshot()
    translation = translate_positions(from_store, to_store, snapshot.positions())
    with closing(webhook_outbox(target)) as to_outbox:
        to_outbox.adopt(snapshot, translation.__getitem__)
        there = to_outbox.snapshot()
    secrets = {(r["webhook_key"], r["fingerprint"], r["secret"]) for r in there.secrets}
    positions = {r["webhook_key"]: int(r["position"]) for r in there.subscriptions}
    equal = all((r["webhook_key"], r["fingerprint"], r["secret"]) in secrets
                for r in snapshot.secrets) and all(
        positions.get(r["webhook_key"], -1) >= translation[int(r["position"])]
        for r in snapshot.subscriptions)
    return len(snapshot.subscriptions), equal


def carry_keys(from_store: EventStore, to_store: EventStore) -> tuple[int, bool]:
    """Make the target's data keys the source's; how many the source holds, and whether the
    target now holds each of them, byte for byte."""
    rows = key_rows(from_store)
    adopt_key_rows(to_store, rows, _different_key, mirror=True)
    return len(rows), holds_keys(to_store, rows)


def _different_key(key_id: str) -> MigrationRefusedError:
    return MigrationRefusedError(
        f"the target holds data key {key_id} with other bytes than the source's: the two "
        "stores' keys diverged; migrate into an empty store", key_id=key_id)


def translate_positions(from_store: EventStore, to_store: EventStore,
                        positions: Iterable[int]) -> dict[int, int]:
    """Each source position, as the target's position of the last event at or before it
    (0 stays 0). The target holds the source's events in the same order (the chains agree),
    so walking both side by side pairs each event with its copy."""
    pending = sorted({position for position in positions if position > 0})
    translated = {0: 0}
    last = 0
    if pending:
        for theirs, ours in zip(events_of(from_store), events_of(to_store), strict=False):
            while pending and pending[0] < theirs.id:
                translated[pending.pop(0)] = last
            if not pending:
                break
            last = ours.id
    for position in pending:
        translated[position] = last
    return translated


def build_read_models(settings: Settings) -> None:
    """Bring every read model of the store up to its last event, as their host would (taking
    each view's host lease, so a running service's hosts are followed, not raced)."""
    with ExitStack() as stack:
        running = [stack.enter_context(start_projection(
            spec, settings, lease=view_lease(settings, spec.name))) for spec in READ_MODELS]
        for projection in running:
            projection.catch_up(CATCH_UP_SECONDS)


def _after_common_prefix(source: Iterator[Notification], target: Iterator[Notification],
                         source_chain: EventChain, target_chain: EventChain
                         ) -> Iterator[Notification]:
    """Walk both stores side by side over what the target already holds; each pair must be
    the same event. The source's events after that prefix, still to copy."""
    for held in target:
        wanted = next(source, None)
        if wanted is None or _key(wanted) != _key(held):
            position = target_chain.events + 1
            raise MigrationConflictError(
                f"the target's event {position} is not the source's: the target holds "
                "another deployment's events; migrate into an empty store",
                event=position)
        source_chain.add(wanted)
        target_chain.add(held)
    return source


def _key(event: Notification) -> tuple[object, ...]:
    return event.originator_id, event.originator_version, event.topic, event.state


def batches(events: Iterable[T]) -> Iterator[list[T]]:
    """``events`` in lists of ``BATCH``, one transaction's worth each."""
    batch: list[T] = []
    for event in events:
        batch.append(event)
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def stored_event(event: ChainedEvent) -> StoredEvent:
    """The event as it is inserted: the same aggregate, version, topic and stored bytes."""
    return StoredEvent(originator_id=UUID(str(event.originator_id)),
                       originator_version=event.originator_version, topic=event.topic,
                       state=event.state)
