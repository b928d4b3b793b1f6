"""Sealed fields: the personal free text of events, encrypted under a data key per record
(ADR-0030).

``SealingMapper`` is the application's mapper with one more step each way. Writing, it replaces
each field that ``domain.erasure`` names as personal (a Source's ``text`` and ``payload``, a
Memory entry version's ``text``, in events and in Memory snapshots) by a ``SealedValue``:
AES-256-GCM under the record's data key, with the key's id and the field's name as associated
data, so a sealed value cannot be moved to another record or field. Reading, it opens them;
once a record's key is destroyed, its fields read as erased (empty text, empty payload), which
is what an ``Erased`` event leaves anyway.

``DataKeys`` keeps the keys in a table of the store's own database (``dream_data_keys``), never
in events, so destroying a key commits in the same transaction as the events that record the
erasure (see the recorders in ``adapters.store.persistence``). A key is made the first time its
record is written, or before that by ``tag`` when the caller names a data subject.
"""

from __future__ import annotations

import base64
import json
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any
from uuid import UUID

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from eventsourcing.domain import DomainEventProtocol, Snapshot
from eventsourcing.persistence import Mapper, StoredEvent, Transcoding
from eventsourcing.postgres import PostgresDatastore
from eventsourcing.sqlite import SQLiteDatastore
from eventsourcing.utils import get_topic

from domain.artifact import Artifact, EntryVersion
from domain.canonical import canonical_json
from domain.erasure import ERASED_TEXT, KeyRecord, record_key_id
from domain.errors import SubjectConflictError
from domain.source import Source

KEYS_TABLE = "dream_data_keys"
SCHEMA_LOCK_KEY = int.from_bytes(b"dreamkey", "big")
KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12
KEYS_REMEMBERED = 4096
TEXT, JSON = "text", "json"

SEALED_FIELDS: dict[type, tuple[str, ...]] = {
    Source.Recorded: ("text", "payload"),
    Source.Amended: ("text", "payload"),
    Artifact.EntryAdded: ("text",),
    Artifact.EntryRevised: ("text",),
}
"""The event fields that can hold personal data (docs/erasure.md lists them for users)."""
ARTIFACT_TOPIC = get_topic(Artifact)
FIRST_EVENTS = (Source.Recorded, Artifact.EntryAdded)  # a record's first sealed event
# A sealed value's key id as it appears in a stored event's JSON (``SealedValueAsDict``).
SEALED_KEY_ID = re.compile(rb'\{"k":"([0-9a-f]{32})","n":"')
PREFETCH_CHUNK = 500  # key ids per query
DESTROYED = b""  # remembered for a key an erasure destroyed


@dataclass(frozen=True)
class SealedValue:
    """A field's value as stored: which key, the nonce, the ciphertext (base64)."""

    key_id: str
    nonce: str
    sealed: str
    form: str  # TEXT or JSON: what the plaintext decodes to


class SealedValueAsDict(Transcoding):
    type = SealedValue
    name = "sealed"

    def encode(self, obj: SealedValue) -> dict[str, str]:
        return {"k": obj.key_id, "n": obj.nonce, "c": obj.sealed, "f": obj.form}

    def decode(self, data: dict[str, str]) -> SealedValue:
        return SealedValue(data["k"], data["n"], data["c"], data["f"])


# The keys this process used last, per store: shared by the process's applications on one
# store (the API's, the read models' shared feed), so a key written by one is read by the
# others without a lookup, and forgotten by all when one of them erases.
_REMEMBERED: OrderedDict[tuple[str, str], bytes] = OrderedDict()  # by (store, key id hex)
_LOCK = threading.Lock()


def _store_id(datastore: SQLiteDatastore | PostgresDatastore) -> str:
    if isinstance(datastore, PostgresDatastore):
        kwargs = datastore.pool.kwargs
        where = kwargs() if callable(kwargs) else kwargs or {}
        return (f"postgresql://{where.get('host')}:{where.get('port')}/{where.get('dbname')}/"
                f"{datastore.schema}")
    return f"sqlite:{datastore.pool.db_name}"


class DataKeys:
    """The data keys in the store's database; the last ones used are remembered.

    A new key is made when its record's first event is mapped and is inserted by the recorder
    in the transaction that stores that event (``take_new``): a key never exists without its
    record, nor a record without its key. A key is destroyed by the recorder too, in the
    transaction that stores the erasure.

    A remembered key is never a way around an erasure: every record whose key is destroyed
    gets an ``Erased`` event in the same transaction, and that event blanks the record's text
    in every aggregate and view rebuilt afterwards, whatever a process's memory still holds
    (ADR-0030). Erasing in this process forgets the keys at once, for every application of
    the process on the store.
    """

    def __init__(self, datastore: SQLiteDatastore | PostgresDatastore, *,
                 prefetching: bool = True) -> None:
        self.datastore = datastore
        self.prefetching = prefetching  # false where sealed values are never opened
        self.postgres = isinstance(datastore, PostgresDatastore)
        self.mark = "%s" if self.postgres else "?"
        self.table = (f"{datastore.schema}.{KEYS_TABLE}" if isinstance(datastore, PostgresDatastore)
                      else KEYS_TABLE)
        self.insert_statement = (
            f"INSERT INTO {self.table} (key_id, aggregate_id, entry_id, scope_id, subject, key, "
            f"created_at) VALUES ({', '.join([self.mark] * 7)})")
        self.store_id = _store_id(datastore)
        self._local = threading.local()  # this thread's new keys and subject tags
        self._ready = False

    # -- the table ---------------------------------------------------------------------------

    def create_table(self) -> None:
        blob = "bytea" if self.postgres else "BLOB"
        with self.datastore.transaction(commit=True) as c:
            if self.postgres:  # concurrent CREATE IF NOT EXISTS can still collide: take turns
                c.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK_KEY,))
            # One B-tree on SQLite (the rows live in the key's index), and subjects indexed
            # only for records that have one: a recording writes as few pages as it can.
            c.execute(f"CREATE TABLE IF NOT EXISTS {self.table} ("
                      "key_id text PRIMARY KEY, aggregate_id text NOT NULL, entry_id text, "
                      f"scope_id text, subject text, key {blob} NOT NULL, "
                      f"created_at bigint NOT NULL){'' if self.postgres else ' WITHOUT ROWID'}")
            c.execute(f"CREATE INDEX IF NOT EXISTS {KEYS_TABLE}_subject "
                      f"ON {self.table} (scope_id, subject) WHERE subject IS NOT NULL")
        self._ready = True

    def _rows(self, statement: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        if not self._ready:
            self.create_table()
        with self.datastore.transaction(commit=False) as c:
            c.execute(statement, params)
            return [tuple(row.values()) if isinstance(row, dict) else tuple(row)
                    for row in c.fetchall()]

    # -- keys --------------------------------------------------------------------------------

    def key(self, key_id: UUID) -> bytes | None:
        """The key, or None: destroyed by an erasure, or never made."""
        with _LOCK:
            known = _REMEMBERED.get((self.store_id, key_id.hex))
        if known is not None:
            return known or None  # DESTROYED is empty
        new = self._new().get(key_id)
        if new is not None:
            return bytes(new[5])
        rows = self._rows(f"SELECT key FROM {self.table} WHERE key_id = {self.mark}",
                          (key_id.hex,))
        return self._remember(key_id.hex, bytes(rows[0][0])) if rows else None

    def prefetch(self, key_ids: Iterable[str]) -> None:
        """Look up, in one query per few hundred, the keys of ``key_ids`` this process does
        not remember (ids as hex): a read of many sealed values then opens them without a
        query each. A key that a stored value names but the table lacks was destroyed, and is
        remembered as such."""
        store = self.store_id
        with _LOCK:
            unknown = sorted({key_id for key_id in key_ids
                              if (store, key_id) not in _REMEMBERED})
        for start in range(0, len(unknown), PREFETCH_CHUNK):
            chunk = unknown[start:start + PREFETCH_CHUNK]
            rows = self._rows(f"SELECT key_id, key FROM {self.table} WHERE key_id IN "
                              f"({', '.join([self.mark] * len(chunk))})", chunk)
            found = {key_id: bytes(key) for key_id, key in rows}
            for key_id in chunk:  # a key named by a stored sealed value, not found: destroyed
                self._remember(key_id, found.get(key_id, DESTROYED))

    def prefetch_stored(self, states: Iterable[bytes]) -> None:
        """``prefetch`` the keys of every sealed value in these stored events' states."""
        if not self.prefetching:
            return
        named: set[bytes] = set()  # a record's fields share its key: one id each
        for state in states:
            named.update(SEALED_KEY_ID.findall(state))
        if named:
            self.prefetch([key_id.decode() for key_id in named])

    def for_writing(self, record: KeyRecord, scope_id: str | None, *, first: bool) -> bytes:
        """The record's key; a new one (with the subject tagged for it) if it has none.

        ``first``: the record's first event (a Source recorded, an entry added), whose key
        cannot exist yet: keys are stored only with their record's events, so no lookup."""
        new = self._new().get(record.key_id)
        if new is not None:
            return bytes(new[5])
        key = None if first else self.key(record.key_id)
        if key is not None:
            return key
        if not self._ready:  # the recorder inserts it: the table must exist by then
            self.create_table()
        key = os.urandom(KEY_BYTES)
        tagged_scope, subject = self._subjects().pop(record.key_id, (scope_id, None))
        self._new()[record.key_id] = (record.key_id.hex, record.aggregate_id.hex,
                                      record.entry_id, scope_id or tagged_scope, subject, key,
                                      int(time.time() * 1_000_000))
        return key

    def tag(self, record: KeyRecord, scope_id: str, subject: str) -> None:
        """Keep ``subject`` (a digest) with the record's key when its first event is stored;
        a record kept before for another subject, or for none, refuses it."""
        rows = self._rows(f"SELECT subject FROM {self.table} WHERE key_id = {self.mark}",
                          (record.key_id.hex,))
        if rows and rows[0][0] != subject:
            raise SubjectConflictError("this record was first recorded for another subject, "
                                       "or for none", field="subject")
        if not rows:
            self._subjects()[record.key_id] = (scope_id, subject)

    def take_new(self) -> list[tuple[Any, ...]]:
        """This thread's new keys, for the recorder to insert with the events that use them."""
        new = self._new()
        self._local.taken = list(new.items())
        new.clear()
        self._subjects().clear()
        return [row for _, row in self._local.taken]

    def committed(self) -> None:
        """The keys last taken are stored: remember them (never before: a key remembered
        for a transaction that failed would seal the retry under a key no one stored)."""
        for key_id, row in getattr(self._local, "taken", ()):
            self._remember(key_id.hex, row[5])
        self._local.taken = []

    def of_subject(self, scope_id: str, subject: str) -> list[KeyRecord]:
        """The records kept for a subject (a digest) whose keys still exist."""
        rows = self._rows(f"SELECT key_id, aggregate_id, entry_id FROM {self.table} "
                          f"WHERE scope_id = {self.mark} AND subject = {self.mark} "
                          "ORDER BY key_id", (scope_id, subject))
        return [KeyRecord(UUID(row[0]), UUID(row[1]), row[2]) for row in rows]

    def exists(self, key_id: UUID) -> bool:
        return bool(self._rows(f"SELECT 1 FROM {self.table} WHERE key_id = {self.mark}",
                               (key_id.hex,)))

    def destroyed(self, key_id: UUID) -> None:
        """Remember that a key a stored sealed value names is gone: its values read as
        erased without another query."""
        self._remember(key_id.hex, DESTROYED)

    def forget(self, key_ids: Sequence[UUID]) -> None:
        with _LOCK:
            for key_id in key_ids:
                _REMEMBERED.pop((self.store_id, key_id.hex), None)
        _cipher.cache_clear()  # erasures are rare: every cipher goes, the destroyed ones too

    def _remember(self, key_id: str, key: bytes) -> bytes:
        """Remember a key by its id's hex (``DESTROYED`` for one known gone)."""
        with _LOCK:
            _REMEMBERED[(self.store_id, key_id)] = key
            _REMEMBERED.move_to_end((self.store_id, key_id))
            while len(_REMEMBERED) > KEYS_REMEMBERED:
                _REMEMBERED.popitem(last=False)
        return key

    def _new(self) -> dict[UUID, tuple[Any, ...]]:
        new: dict[UUID, tuple[Any, ...]] | None = getattr(self._local, "new", None)
        if new is None:
            new = self._local.new = {}
        return new

    def _subjects(self) -> dict[UUID, tuple[str | None, str | None]]:
        subjects: dict[UUID, tuple[str | None, str | None]] | None = getattr(
            self._local, "subjects", None)
        if subjects is None:
            subjects = self._local.subjects = {}
        return subjects


class SealingMapper(Mapper[UUID]):
    """The library's mapper, sealing personal fields on the way out, opening them on the way
    in (unless ``opens`` is false: the read models', which leave them sealed). Values stored
    before sealing existed are plain and are read as they are."""

    def __init__(self, mapper: Mapper[UUID], keys: DataKeys, *, opens: bool = True) -> None:
        super().__init__(mapper.transcoder, mapper.compressor, mapper.cipher)
        self.keys = keys
        self.opens = opens

    # -- writing -----------------------------------------------------------------------------

    def to_stored_event(self, domain_event: DomainEventProtocol[UUID]) -> StoredEvent:
        fields = SEALED_FIELDS.get(type(domain_event))
        if fields is not None:
            domain_event = self._sealed_event(domain_event, fields)
        elif isinstance(domain_event, Snapshot) and domain_event.topic == ARTIFACT_TOPIC:
            domain_event = self._sealed_snapshot(domain_event)
        return super().to_stored_event(domain_event)

    def _sealed_event(self, domain_event: Any, fields: tuple[str, ...]) -> Any:
        state = vars(domain_event)
        entry_id = state.get("entry_id")
        record = KeyRecord(record_key_id(domain_event.originator_id, entry_id),
                           domain_event.originator_id, entry_id)
        if not any(state[name] for name in fields):
            return domain_event
        key = self.keys.for_writing(record, state.get("scope_id"),
                                    first=type(domain_event) in FIRST_EVENTS)
        sealed = _shallow_copy(domain_event)
        for name in fields:
            if state[name]:
                vars(sealed)[name] = seal(key, record.key_id, name, state[name])
        return sealed

    def _sealed_snapshot(self, snapshot: Any) -> Any:
        versions = snapshot.state.get("entry_versions")
        if not versions:
            return snapshot
        sealed_versions = {
            entry_id: [self._sealed_version(snapshot.originator_id, version) for version in listed]
            for entry_id, listed in versions.items()}
        sealed = _shallow_copy(snapshot)
        vars(sealed)["state"] = {**snapshot.state, "entry_versions": sealed_versions}
        return sealed

    def _sealed_version(self, aggregate_id: UUID, version: EntryVersion) -> EntryVersion:
        if not version.text:  # erased, or empty: nothing to hide
            return version
        key_id = record_key_id(aggregate_id, version.entry_id)
        key = self.keys.key(key_id)  # made with the entry's first event
        if key is None:  # an entry stored before sealing existed: as plain as its events
            return version
        return replace(version, text=seal(key, key_id, "text", version.text))  # type: ignore[arg-type]

    # -- reading -----------------------------------------------------------------------------

    def to_domain_event(self, stored_event: StoredEvent) -> DomainEventProtocol[UUID]:
        domain_event = super().to_domain_event(stored_event)
        if not self.opens:
            return domain_event
        state = vars(domain_event)
        if type(domain_event) in SEALED_FIELDS:
            for name, value in state.items():
                if isinstance(value, SealedValue):
                    state[name] = self.open(value, name)
        elif isinstance(domain_event, Snapshot) and "entry_versions" in domain_event.state:
            versions = domain_event.state["entry_versions"]
            self.keys.prefetch(version.text.key_id for listed in versions.values()
                               for version in listed if isinstance(version.text, SealedValue))
            for entry_id, listed in versions.items():
                versions[entry_id] = [
                    replace(version, text=self.open(version.text, "text"))
                    if isinstance(version.text, SealedValue) else version for version in listed]
        return domain_event

    def open(self, value: SealedValue, field: str) -> Any:
        key_id = UUID(value.key_id)
        key = self.keys.key(key_id)
        if key is None:
            # A stored value names it, so it was stored with that value's event: it is gone
            # for good (never a record written before sealing, whose values are plain).
            self.keys.destroyed(key_id)
            return ERASED_TEXT if value.form == TEXT else {}
        return unseal(key, key_id, field, value)


@lru_cache(maxsize=KEYS_REMEMBERED)
def _cipher(key: bytes) -> AESGCM:
    """The cipher of a key, its key schedule made once (the key itself is the cache key)."""
    return AESGCM(key)


def seal(key: bytes, key_id: UUID, field: str, value: Any) -> SealedValue:
    form = TEXT if isinstance(value, str) else JSON
    plain = (value if form == TEXT else canonical_json(value)).encode()
    nonce = os.urandom(NONCE_BYTES)
    sealed = _cipher(key).encrypt(nonce, plain, key_id.bytes + field.encode())
    return SealedValue(key_id.hex, _b64(nonce), _b64(sealed), form)


def unseal(key: bytes, key_id: UUID, field: str, value: SealedValue) -> Any:
    plain = _cipher(key).decrypt(base64.b64decode(value.nonce), base64.b64decode(value.sealed),
                                 key_id.bytes + field.encode()).decode()
    return plain if value.form == TEXT else json.loads(plain)


def _shallow_copy(event: Any) -> Any:
    """A copy of a (frozen) event sharing its values: ``copy.copy`` without its detours."""
    copied = object.__new__(type(event))
    vars(copied).update(vars(event))
    return copied


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
