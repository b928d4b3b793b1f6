"""Export and import bundles: a scope's (or a deployment's) events, verifiable anywhere.

A bundle is a header, the events in store order (position, aggregate, version, topic, stored
state), the data keys of their records, and a trailer with the events' count and the hash
chain over them (see :class:`~adapters.store.migration.EventChain`) and the keys' count and a
hash chain over them. It is encoded with msgspec: JSON Lines by
default (one object a line, readable with any tool), MessagePack as an option (length-prefixed
frames). A bundle is read and checked whole — every line, the count, the chain — before
anything is written, so one cut or edited anywhere is refused and leaves the target untouched.

A bundle holds the keys of what it exports (ADR-0030): a scope's bundle the keys of its
records, an ``--all`` bundle every key. Without them its sealed texts would arrive unreadable.
So the file is the data itself, personal free text included: keep and hand it over as such.
An erased record has no key any more, so no bundle carries one: it stays erased wherever the
bundle goes. Import never brings back a key the target does not hold for a record it already
holds (the target erased it), and refuses a key for a record the bundle does not hold.
Version-1 bundles (before keys travelled) are still read; they carry no keys.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import IO, Literal
from uuid import UUID

import msgspec
from eventsourcing.domain import DomainEvent
from eventsourcing.persistence import Notification
from eventsourcing.utils import TopicError, resolve_topic

from adapters.settings import Settings
from adapters.store.deployment import deployment_id
from adapters.store.key_rows import KeyRow, adopt_key_rows, key_rows
from adapters.store.migration import EventChain, HashChain, batches, events_of, stored_event
from adapters.store.persistence import open_store
from application.store import EventStore
from domain.errors import DomainError, ScopeNotFoundError
from domain.scope import Scope

FORMAT = "artifact-dreaming.bundle"
SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)  # 1: before data keys travelled with the events
BATCH = 500
EVENTS_FILE = "events.sqlite3"  # the embedded store, which an export never creates
Encoding = Literal["jsonl", "msgpack"]
FRAME = struct.Struct(">I")  # a MessagePack frame's length
Stored = dict[tuple[UUID, int], tuple[str, bytes]]  # (aggregate, version): (topic, state)


class BundleInvalidError(DomainError):
    code = "bundle_invalid"


class ImportConflictError(DomainError):
    code = "import_conflict"


class ExportRefusedError(DomainError):
    """An export from a data directory that holds no store (none is created)."""

    code = "export_refused"


class Header(msgspec.Struct, tag="header", frozen=True):
    format: str
    schema_version: int
    exported_at: str
    source: str  # the store kind it came from
    scopes: list[str] | None  # None: the whole deployment
    # The source deployment's stable id (adapters.store.deployment); None in a bundle written
    # before it was recorded.
    deployment: str | None = None


class Event(msgspec.Struct, tag="event", frozen=True):
    position: int
    originator_id: UUID
    originator_version: int
    topic: str
    state: bytes


class Key(msgspec.Struct, tag="key", frozen=True):
    """A data key's row (``adapters.store.key_rows.KeyRow``), after the events."""

    key_id: str
    aggregate_id: str
    entry_id: str | None
    scope_id: str | None
    subject: str | None
    key: bytes
    created_at: int

    def row(self) -> KeyRow:
        return (self.key_id, self.aggregate_id, self.entry_id, self.scope_id, self.subject,
                self.key, self.created_at)


class Trailer(msgspec.Struct, tag="trailer", frozen=True):
    events: int
    chain: str
    keys: int | None = None  # None: a version-1 bundle, which carries no keys
    keys_chain: str | None = None


Record = Header | Event | Key | Trailer


class KeyChain(HashChain):
    """sha256 over every key line of a bundle, in order."""

    SEED = b"artifact-dreaming.keys.v1"

    def add(self, key: Key) -> None:
        self.link((msgspec.json.encode(key),))


class _Scoped(msgspec.Struct):
    """The field of an aggregate's first event that says which scope it belongs to, and of a
    Memory entry's events that says which entry (whose data key it is)."""

    scope_id: str | None = None
    entry_id: str | None = None


@dataclass(frozen=True)
class Bundle:
    header: Header
    events: list[Event]
    trailer: Trailer
    keys: list[Key]


# -- export --------------------------------------------------------------------------------------

def export(settings: Settings, out: IO[bytes], scopes: Sequence[str] | None = None,
           encoding: Encoding = "jsonl") -> Trailer:
    """Write the events of ``scopes`` (every event when None) to ``out``."""
    writer = _Writer(out, encoding)
    chain = EventChain()
    if not settings.uses_postgres and not (settings.data_dir / EVENTS_FILE).is_file():
        raise ExportRefusedError(f"no store to export at {settings.data_dir / EVENTS_FILE}",
                                 data_dir=str(settings.data_dir))
    with closing(open_store(settings)) as store:
        for scope in sorted(scopes or ()):
            if not store.exists(Scope.create_id(scope)):
                raise ScopeNotFoundError(f"no scope {scope!r} to export", scope_id=scope)
        writer.write(Header(FORMAT, SCHEMA_VERSION, datetime.now(tz=UTC).isoformat(),
                            "postgresql" if settings.uses_postgres else "sqlite",
                            None if scopes is None else sorted(scopes), deployment_id(store)))
        aggregates: set[UUID] = set()
        for notification in _selected(store, None if scopes is None else set(scopes)):
            chain.add(notification)
            aggregates.add(UUID(str(notification.originator_id)))
            writer.write(Event(notification.id, UUID(str(notification.originator_id)),
                               notification.originator_version, notification.topic,
                               notification.state))
        keys = _write_keys(writer, key_rows(store, aggregates))
    trailer = Trailer(chain.events, chain.digest, keys.links, keys.digest)
    writer.write(trailer)
    return trailer


def _write_keys(writer: _Writer, rows: Sequence[KeyRow]) -> KeyChain:
    """Write a key line for each row, after the events: the keys of the exported events'
    records (read after the events, so a key made for one of them meanwhile is there too, and
    one made for an event that came too late for the bundle is not); their chain."""
    chain = KeyChain()
    for row in rows:
        key = Key(*row)
        chain.add(key)
        writer.write(key)
    return chain


def _selected(store: EventStore, scopes: set[str] | None) -> Iterator[Notification]:
    """The store's events, in order, of aggregates first recorded in one of ``scopes``."""
    owner: dict[UUID, str | None] = {}
    for event in events_of(store):
        if scopes is None:
            yield event
            continue
        aggregate = UUID(str(event.originator_id))
        if aggregate not in owner:
            owner[aggregate] = msgspec.json.decode(event.state, type=_Scoped).scope_id
        if owner[aggregate] in scopes:
            yield event


class _Writer:
    def __init__(self, out: IO[bytes], encoding: Encoding) -> None:
        self.out = out
        self.encoding = encoding
        self.encoder = (msgspec.json.Encoder() if encoding == "jsonl"
                        else msgspec.msgpack.Encoder())

    def write(self, record: Record) -> None:
        data = self.encoder.encode(record)
        if self.encoding == "jsonl":
            self.out.write(data + b"\n")
        else:
            self.out.write(FRAME.pack(len(data)) + data)


# -- reading and verifying -----------------------------------------------------------------------

def read_bundle(path: Path) -> Bundle:
    """The bundle in ``path``, checked whole: its shape, every record, the count, the chain."""
    data = path.read_bytes()
    records = list(_records(data))
    if len(records) < 2 or not isinstance(records[0], Header) or not isinstance(
            records[-1], Trailer):
        raise BundleInvalidError("a bundle starts with a header and ends with a trailer; this "
                                 "one is cut or not a bundle", bundle=str(path))
    header, trailer = records[0], records[-1]
    if header.format != FORMAT or header.schema_version not in READABLE_VERSIONS:
        raise BundleInvalidError(f"unsupported bundle {header.format} v{header.schema_version}",
                                 bundle=str(path))
    events = [record for record in records[1:-1] if isinstance(record, Event)]
    keys = [record for record in records[1 + len(events):-1] if isinstance(record, Key)]
    if len(events) + len(keys) != len(records) - 2:
        raise BundleInvalidError("the bundle's records are out of place: a header or trailer "
                                 "in the middle, or an event after a key", bundle=str(path))
    _check_chain(events, trailer, path)
    _check_keys(header, keys, trailer, path)
    return Bundle(header, events, trailer, keys)


def _records(data: bytes) -> Iterator[Record]:
    try:
        if data[:1] == b"{":  # JSON Lines start with an object
            decoder = msgspec.json.Decoder(Record)
            for line in data.splitlines():
                if line.strip():
                    yield decoder.decode(line)
            return
        decoder_mp = msgspec.msgpack.Decoder(Record)
        at = 0
        while at < len(data):
            (size,) = FRAME.unpack_from(data, at)
            frame = data[at + FRAME.size: at + FRAME.size + size]
            if len(frame) != size:
                raise BundleInvalidError("the bundle's last frame is cut")
            yield decoder_mp.decode(frame)
            at += FRAME.size + size
    except (msgspec.DecodeError, msgspec.ValidationError, struct.error) as error:
        raise BundleInvalidError(f"not a readable bundle: {error}") from None


def _check_chain(events: Sequence[Event], trailer: Trailer, path: Path) -> None:
    chain, last = EventChain(), 0
    for event in events:
        if event.position <= last:
            raise BundleInvalidError("the bundle's events are out of order", bundle=str(path),
                                     position=event.position)
        last = event.position
        chain.add(event)
    if chain.events != trailer.events or chain.digest != trailer.chain:
        raise BundleInvalidError("the bundle's events do not match its trailer: it was cut or "
                                 "edited", bundle=str(path), events=chain.events,
                                 expected_events=trailer.events)


def _check_keys(header: Header, keys: Sequence[Key], trailer: Trailer, path: Path) -> None:
    """The key lines match the trailer's count and chain (a version-1 bundle has none)."""
    if header.schema_version == 1:
        if keys or trailer.keys is not None:
            raise BundleInvalidError("a version-1 bundle carries no keys", bundle=str(path))
        return
    chain = KeyChain()
    for key in keys:
        chain.add(key)
    if (chain.links, chain.digest) != (trailer.keys, trailer.keys_chain):
        raise BundleInvalidError("the bundle's keys do not match its trailer: they were cut or "
                                 "edited", bundle=str(path), keys=chain.links,
                                 expected_keys=trailer.keys)


# -- import --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Imported:
    events: int
    appended: int
    skipped: int
    scopes: list[str]
    source_deployment: str | None  # the id of the deployment the bundle came from
    source_store: str  # sqlite or postgresql
    keys: int = 0  # the data keys the target lacked, inserted


def import_bundle(path: Path, settings: Settings, *, merge: bool = False) -> Imported:
    """Append the bundle's events to the store of ``settings``.

    Without ``merge``, a scope the target already has is refused. With it, an event the target
    already holds identically is skipped, and an aggregate whose stored events differ from the
    bundle's is refused. Everything is checked before the first write. The bundle's keys go
    in before its events, in one transaction that first refuses a key id the target holds with
    other bytes: a copy cut short by a failure never leaves a text unreadable."""
    bundle = read_bundle(path)
    scopes = _scopes_of(bundle, path)
    with closing(open_store(settings)) as store:
        if bundle.header.scopes is None and store.max_position() and not merge:
            raise ImportConflictError("a whole deployment's bundle imports into an empty store",
                                      bundle=str(path))
        if not merge:
            present = [s for s in scopes if store.exists(Scope.create_id(s))]
            if present:
                raise ImportConflictError(f"the target already has scope {present[0]!r}",
                                          scopes=present)
        held = _stored(store, bundle.events)
        missing = _not_yet_stored(held, bundle.events)
        keys = adopt_key_rows(store, [key.row() for key in bundle.keys],
                              lambda key_id: _different_key(key_id, path),
                              withheld=_keys_withheld(bundle, held, path))
        for batch in batches(missing):
            store.recorder.insert_events([stored_event(event) for event in batch])
    return Imported(len(bundle.events), len(missing), len(bundle.events) - len(missing),
                    sorted(scopes), bundle.header.deployment, bundle.header.source, keys)


def _keys_withheld(bundle: Bundle, held: Stored, path: Path) -> set[str]:
    """The bundle's keys of records the target already holds: a record there without its key
    was erased there, and stays erased (one there with its key keeps it, and
    ``adopt_key_rows`` refuses other bytes). Every key must be of a record the bundle holds."""
    aggregates = {event.originator_id.hex for event in bundle.events}
    records = {(aggregate.hex, msgspec.json.decode(state, type=_Scoped).entry_id)
               for (aggregate, _), (_, state) in held.items()}
    withheld: set[str] = set()
    for key in bundle.keys:
        if key.aggregate_id not in aggregates:
            raise BundleInvalidError(f"the bundle holds key {key.key_id} of a record it does "
                                     "not hold", bundle=str(path), key_id=key.key_id)
        if (key.aggregate_id, key.entry_id) in records:
            withheld.add(key.key_id)
    return withheld


def _different_key(key_id: str, path: Path) -> BundleInvalidError:
    return BundleInvalidError(f"the target holds data key {key_id} with other bytes than the "
                              "bundle's: nothing was imported", bundle=str(path), key_id=key_id)


def _scopes_of(bundle: Bundle, path: Path) -> set[str]:
    """The scopes the bundle's aggregates were first recorded in; every event's state must be
    a JSON object (a bundle re-chained after an edit may hold anything)."""
    scopes: set[str] = set()
    for event in bundle.events:
        try:
            scope = msgspec.json.decode(event.state, type=_Scoped).scope_id
        except (msgspec.DecodeError, msgspec.ValidationError) as error:
            raise BundleInvalidError(f"the event at position {event.position} is not a stored "
                                     f"event: {error}", bundle=str(path),
                                     position=event.position) from None
        if not _known_topic(event.topic):
            raise BundleInvalidError(f"the event at position {event.position} names a topic no "
                                     f"domain event has: {event.topic!r}", bundle=str(path),
                                     position=event.position)
        if event.originator_version == 1 and scope is not None:
            scopes.add(scope)
    return scopes


@cache
def _known_topic(topic: str) -> bool:
    """Whether ``topic`` names an event class of the domain (only the ``domain`` package is
    ever imported to find out: a bundle does not choose what this process imports)."""
    module = topic.partition(":")[0]
    if module != "domain" and not module.startswith("domain."):
        return False
    try:
        found = resolve_topic(topic)
    except (TopicError, ImportError, AttributeError):
        return False
    return isinstance(found, type) and issubclass(found, DomainEvent)


def _stored(store: EventStore, events: Sequence[Event]) -> Stored:
    """What the target holds of the bundle's aggregates: each event's topic and state."""
    ids = list(dict.fromkeys(event.originator_id for event in events))
    stored: Stored = {}
    for start in range(0, len(ids), BATCH):
        found = store.read_set_recorder.select_events_of_many(ids[start:start + BATCH])
        for aggregate, (events_of_one, _) in found.items():
            for kept in events_of_one:
                stored[aggregate, kept.originator_version] = (kept.topic, kept.state)
    return stored


def _not_yet_stored(stored: Stored, events: Sequence[Event]) -> list[Event]:
    """The bundle's events the target lacks; an aggregate stored differently is refused."""
    missing: list[Event] = []
    for event in events:
        same = stored.get((event.originator_id, event.originator_version))
        if same is None:
            missing.append(event)
        elif same != (event.topic, event.state):
            raise ImportConflictError(
                f"aggregate {event.originator_id} version {event.originator_version} differs "
                "in the target: the two deployments' histories diverged",
                aggregate=str(event.originator_id), version=event.originator_version)
    return missing
