"""Erasing a Source, a Memory entry or a data subject (ADR-0030).

One erasure is one transaction: an ``Erasure`` event (who, when, why, what: ids and hashes),
an ``Erased`` event on every record it names, and the destruction of those records' data keys.
Before it, the knowledge derived from the records is found through the provenance view (the
caller passes that search in: use cases know no read model), and recorded with the erasure so
reviewers can work through it. After it, the store is scrubbed of the destroyed keys' bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate

from application.access import ScopeGate
from application.credentials import Who
from application.records import Records
from application.retry import retry_on_write_conflict
from application.store import Written
from domain.artifact import Artifact, EntryStatus
from domain.erasure import (
    Erasure,
    ErasureKind,
    KeyRecord,
    check_reason,
    check_subject,
    new_erasure_id,
    subject_digest,
)
from domain.errors import (
    AlreadyErasedError,
    ErasureNotFoundError,
    RecordNotSealedError,
    SubjectNotFoundError,
)
from domain.refs import ArtifactFamily, SourceRef
from domain.source import Source

DerivedSearch = Callable[[str, Sequence[dict[str, Any]]], list[dict[str, Any]]]
"""``(scope_id, erased records) -> what was derived from them``: each a provenance node
(``kind``, ``key``), found transitively."""


@dataclass(frozen=True)
class ErasureTarget:
    """What to erase: exactly one of a Source, a Memory entry, a subject."""

    kind: ErasureKind
    source: SourceRef | None = None
    memory_id: str | None = None
    entry_id: str | None = None
    subject: str | None = None

    @classmethod
    def of_source(cls, source_type: str, source_id: str) -> ErasureTarget:
        return cls(ErasureKind.SOURCE,
                   source=SourceRef(source_type=source_type, source_id=source_id).checked())

    @classmethod
    def of_entry(cls, memory_id: str, entry_id: str) -> ErasureTarget:
        return cls(ErasureKind.MEMORY_ENTRY, memory_id=memory_id, entry_id=entry_id)

    @classmethod
    def of_subject(cls, subject: str) -> ErasureTarget:
        return cls(ErasureKind.SUBJECT, subject=check_subject(subject))

    def shown(self, scope_id: str) -> dict[str, Any]:
        """The target as the history keeps it: a subject only as its digest."""
        if self.kind == ErasureKind.SOURCE:
            assert self.source is not None
            return {"source": self.source.to_dict()}
        if self.kind == ErasureKind.MEMORY_ENTRY:
            return {"memory_id": self.memory_id, "entry_id": self.entry_id}
        assert self.subject is not None
        return {"subject_digest": subject_digest(scope_id, self.subject)}


@dataclass
class _Plan:
    """The records an erasure names, the aggregates it changes, the keys it destroys."""

    records: list[dict[str, Any]] = field(default_factory=list)
    changed: dict[UUID, Aggregate] = field(default_factory=dict)
    erase: list[tuple[Aggregate, str | None]] = field(default_factory=list)
    keys: list[UUID] = field(default_factory=list)


@dataclass(frozen=True)
class Erased:
    erasure: Erasure
    scrubbed: dict[str, object]


class Erasures:
    """Erasing records and reading erasures: a deployment administrator's, in any scope."""

    def __init__(self, gate: ScopeGate, records: Records) -> None:
        self.gate = gate
        self.store = gate.store
        self.policy = gate.policy
        self.records = records

    @retry_on_write_conflict
    def erase(self, who: Who, scope_id: str, target: ErasureTarget, reason: str,
              derived_from: DerivedSearch) -> Written[Erased]:
        """Erase the target's records (deployment administrators only)."""
        caller = self.gate.authenticate(who)
        self.policy.require_admin(caller)
        reason = check_reason(reason)
        scope = self.gate.load(scope_id)
        keyring = self.store.keyring
        if keyring is None:
            raise RecordNotSealedError("this store does not seal records")
        plan = self._plan(scope.scope_id, target)
        if target.kind != ErasureKind.SUBJECT and not keyring.exists(plan.keys[0]):
            raise RecordNotSealedError(
                "a record stored before sealing existed cannot be erased provably",
                records=plan.records)
        erasure_id = new_erasure_id()
        erasure = Erasure.record(scope.scope_id, erasure_id, target.kind,
                                 target.shown(scope.scope_id), reason, plan.records,
                                 derived_from(scope.scope_id, plan.records))
        for aggregate, entry_id in plan.erase:
            if entry_id is None:
                assert isinstance(aggregate, Source)
                aggregate.erase(erasure_id)
            else:
                assert isinstance(aggregate, Artifact)
                aggregate.erase_entry(entry_id, erasure_id)
        position = self.store.commit(erasure, *plan.changed.values(), read=[scope],
                                     acted_by=caller, erase_keys=plan.keys)
        keyring.forget(plan.keys)
        return Written(Erased(erasure, self.store.scrub()), position)

    def check_may_list(self, who: Who, scope_id: str) -> None:
        """Erasures are a deployment administrator's to make and to read."""
        self.policy.require_admin(self.gate.authenticate(who))
        self.gate.load(scope_id)

    def get(self, who: Who, scope_id: str, erasure_id: str) -> Erasure:
        self.check_may_list(who, scope_id)
        erasure: Erasure = self.store.load(
            Erasure.create_id(erasure_id),
            lambda: ErasureNotFoundError(f"erasure {erasure_id!r} does not exist",
                                         erasure_id=erasure_id), kind=Erasure)
        if erasure.scope_id != scope_id:
            raise ErasureNotFoundError(f"erasure {erasure_id!r} does not exist",
                                       erasure_id=erasure_id)
        return erasure

    # -- what an erasure names ---------------------------------------------------------------

    def _plan(self, scope_id: str, target: ErasureTarget) -> _Plan:
        plan = _Plan()
        if target.kind == ErasureKind.SOURCE:
            assert target.source is not None
            source = self.records.load_source(scope_id, target.source)
            if source.erased:
                raise AlreadyErasedError("the Source was erased already",
                                         source=target.source.to_dict())
            self._add_source(plan, source)
        elif target.kind == ErasureKind.MEMORY_ENTRY:
            assert target.memory_id is not None
            assert target.entry_id is not None
            memory = self.records.load_artifact(scope_id, ArtifactFamily.MEMORY, target.memory_id)
            memory.check_family(ArtifactFamily.MEMORY)
            if memory.entry_status(target.entry_id) == EntryStatus.ERASED:
                raise AlreadyErasedError("the Memory entry was erased already",
                                         memory_id=target.memory_id, entry_id=target.entry_id)
            self._add_entry(plan, memory, target.entry_id)
        else:
            assert target.subject is not None
            self._add_subject(plan, scope_id, target.subject)
        return plan

    def _add_subject(self, plan: _Plan, scope_id: str, subject: str) -> None:
        keyring = self.store.keyring
        assert keyring is not None
        kept = keyring.of_subject(scope_id, subject_digest(scope_id, subject))
        if not kept:
            raise SubjectNotFoundError("no record of this subject is left to erase",
                                       field="subject")
        found = self.store.find_many({record.aggregate_id: Source if record.entry_id is None
                                      else Artifact for record in kept})
        for record in kept:
            aggregate = plan.changed.get(record.aggregate_id) or found[record.aggregate_id]
            if isinstance(aggregate, Source) and not aggregate.erased:
                self._add_source(plan, aggregate)
            elif isinstance(aggregate, Artifact) and record.entry_id is not None:
                self._add_entry(plan, aggregate, record.entry_id)

    @staticmethod
    def _add_source(plan: _Plan, source: Source) -> None:
        plan.records.append({"kind": ErasureKind.SOURCE.value, **source.ref.to_dict(),
                             "content_hash": source.content_hash})
        plan.changed[source.id] = source
        plan.erase.append((source, None))
        plan.keys.append(KeyRecord.of(source.id).key_id)

    @staticmethod
    def _add_entry(plan: _Plan, memory: Artifact, entry_id: str) -> None:
        memory.check_entry_exists(entry_id)
        versions = memory.entry_versions[entry_id]
        plan.records.append({
            "kind": ErasureKind.MEMORY_ENTRY.value, "memory_id": memory.artifact_id,
            "entry_id": entry_id,
            "versions": [{"entry_version_id": v.entry_version_id, "content_hash": v.content_hash}
                         for v in versions]})
        plan.changed[memory.id] = memory
        plan.erase.append((memory, entry_id))
        plan.keys.append(KeyRecord.of(memory.id, entry_id).key_id)
