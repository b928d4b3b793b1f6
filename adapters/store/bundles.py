"""Export and import bundles: a scope's (or a deployment's) events, verifiable anywhere.

A bundle is a header, the events in store order (position, aggregate, version, topic, stored
state) and a trailer with their count and the hash chain over them (see
:class:`~adapters.store.migration.EventChain`). It is encoded with msgspec: JSON Lines by
default (one object a line, readable with any tool), MessagePack as an option (length-prefixed
frames). A bundle is read and checked whole — every line, the count, the chain — before
anything is written, so one cut or edited anywhere is refused and leaves the target untouched.
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
from adapters.store.migration import EventChain, batches, events_of, stored_event
from adapters.store.persistence import open_store
from application.store import EventStore
from domain.errors import DomainError, ScopeNotFoundError
from domain.scope import Scope

FORMAT = "artifact-dreaming.bundle"
SCHEMA_VERSION = 1
BATCH = 500
EVENTS_FILE = "events.sqlite3"  # the embedded store, which an export never creates
Encoding = Literal["jsonl", "msgpack"]
FRAME = struct.Struct(">I")  # a MessagePack frame's length


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


class Trailer(msgspec.Struct, tag="trailer", frozen=True):
    events: int
    chain: str


Record = Header | Event | Trailer


class _Scoped(msgspec.Struct):
    """The one field of an aggregate's first event that says which scope it belongs to."""

    scope_id: str | None = None


@dataclass(frozen=True)
class Bundle:
    header: Header
    events: list[Event]
    trailer: Trailer


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
        for notification in _selected(store, None if scopes is None else set(scopes)):
            chain.add(notification)
            writer.write(Event(notification.id, UUID(str(notification.originator_id)),
                               notification.originator_version, notification.topic,
                               notification.state))
    trailer = Trailer(chain.events, chain.digest)
    writer.write(trailer)
    return trailer


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
    if header.format != FORMAT or header.schema_version != SCHEMA_VERSION:
        raise BundleInvalidError(f"unsupported bundle {header.format} v{header.schema_version}",
                                 bundle=str(path))
    events = [record for record in records[1:-1] if isinstance(record, Event)]
    if len(events) != len(records) - 2:
        raise BundleInvalidError("a header or trailer in the middle of the bundle",
                                 bundle=str(path))
    _check_chain(events, trailer, path)
    return Bundle(header, events, trailer)


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


# -- import --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Imported:
    events: int
    appended: int
    skipped: int
    scopes: list[str]
    source_deployment: str | None  # the id of the deployment the bundle came from
    source_store: str  # sqlite or postgresql


def import_bundle(path: Path, settings: Settings, *, merge: bool = False) -> Imported:
    """Append the bundle's events to the store of ``settings``.

    Without ``merge``, a scope the target already has is refused. With it, an event the target
    already holds identically is skipped, and an aggregate whose stored events differ from the
    bundle's is refused. Everything is checked before the first write."""
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
        missing = _not_yet_stored(store, bundle.events)
        for batch in batches(missing):
            store.recorder.insert_events([stored_event(event) for event in batch])
    return Imported(len(bundle.events), len(missing), len(bundle.events) - len(missing),
                    sorted(scopes), bundle.header.deployment, bundle.header.source)


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


def _not_yet_stored(store: EventStore, events: Sequence[Event]) -> list[Event]:
    """The bundle's events the target lacks; an aggregate stored differently is refused."""
    ids = list(dict.fromkeys(event.originator_id for event in events))
    stored: dict[tuple[UUID, int], tuple[str, bytes]] = {}
    for start in range(0, len(ids), BATCH):
        found = store.read_set_recorder.select_events_of_many(ids[start:start + BATCH])
        for aggregate, (events_of_one, _) in found.items():
            for kept in events_of_one:
                stored[aggregate, kept.originator_version] = (kept.topic, kept.state)
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
