"""Command handlers for the records Dreams work on: scopes, sources, artifacts, Memory entries.

Each handler loads, calls one domain method, and commits; lineage it relies on goes into the
commit's read set so a concurrent withdrawal or revision cannot slip between check and commit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial, wraps
from typing import Any, Concatenate, ParamSpec, TypeVar
from uuid import UUID

from eventsourcing.domain import Aggregate

from application.access import ScopeGate
from application.credentials import Who
from application.evidence_reader import addresses
from application.ports import Clock
from application.retry import retry_on_write_conflict
from application.store import Written
from application.turns import Turns
from domain.access import Action, Resource
from domain.artifact import Artifact, ArtifactRevision, EntryStatus, EntryVersion
from domain.canonical import digest
from domain.content import validate_content
from domain.erasure import KeyRecord, subject_digest
from domain.errors import (
    ArtifactExistsError,
    ArtifactNotFoundError,
    InvalidMemoryCitationError,
    InvalidRequestError,
    MemoryEntryInactiveError,
    ReferenceNotFoundError,
    RevisionNotFoundError,
    ScopeExistsError,
    SourceConflictError,
    SourceNotFoundError,
)
from domain.ids import artifact_aggregate_id, scope_aggregate_id, source_aggregate_id
from domain.policy import Caller
from domain.refs import (
    ArtifactFamily,
    ArtifactRef,
    Lineage,
    MemoryCitation,
    SourceRef,
    check_family,
)
from domain.scope import Scope
from domain.source import Eligibility, Source
from domain.text import check_scope_id

MANAGEMENT_SOURCE_TYPE = "artifact_write"
T = TypeVar("T")
P = ParamSpec("P")


@dataclass(frozen=True)
class EntryWritten:
    memory: ArtifactRef
    entry: EntryVersion

    @property
    def citation(self) -> MemoryCitation:
        return MemoryCitation(memory_ref=self.memory, entry_id=self.entry.entry_id,
                              entry_version_id=self.entry.entry_version_id)


def memory_writers_take_turns(command: Callable[Concatenate[Records, Who, str, str, P], T]
                              ) -> Callable[Concatenate[Records, Who, str, str, P], T]:
    """The writers of one Memory's entries in this process take turns: each loads what the
    one before committed instead of racing it to a write conflict and a retry (eight clients
    adding to one Memory spent most of their time retrying). Other processes, and other
    writers of the Memory (an erasure), still meet them at the version check."""

    @wraps(command)
    def in_turn(records: Records, who: Who, scope_id: str, memory_id: str, /,
                *args: P.args, **kwargs: P.kwargs) -> T:
        with records.memory_writers.of(f"{scope_id}\0{memory_id}"):
            return command(records, who, scope_id, memory_id, *args, **kwargs)

    return in_turn


class Records:
    """Scopes and their roles, Sources, Artifacts and Memory entries."""

    def __init__(self, gate: ScopeGate, clock: Clock) -> None:
        self.gate = gate
        self.store = gate.store
        self.policy = gate.policy
        self.clock = clock
        self.memory_writers = Turns()  # see ``memory_writers_take_turns``

    # -- scopes ------------------------------------------------------------------------------

    def create_scope(self, who: Who, scope_id: str, settings: Mapping[str, Any] | None = None
                     ) -> Written[Scope]:
        caller = self.gate.authenticate(who)
        self.policy.require_admin(caller)
        if self.store.exists(scope_aggregate_id(check_scope_id(scope_id))):
            raise ScopeExistsError(f"scope {scope_id!r} already exists", scope_id=scope_id)
        scope = Scope.create(scope_id, settings)
        return Written(scope, self.store.commit(scope, acted_by=caller))

    def get_scope(self, who: Who, scope_id: str) -> Scope:
        return self.gate.scope_for(who, scope_id, Action.READ)

    @retry_on_write_conflict
    def change_scope_settings(self, who: Who, scope_id: str,
                              changes: Mapping[str, Any]) -> Written[Scope]:
        caller, scope = self.gate.enter(who, scope_id, Action.ADMINISTER)
        scope.change_settings(changes)
        return Written(scope, self.store.commit(scope, acted_by=caller))

    @retry_on_write_conflict
    def grant_role(self, who: Who, scope_id: str, principal: str,
                   role: str) -> Written[Scope]:
        caller, scope = self.gate.enter(who, scope_id, Action.ADMINISTER)
        scope.grant_role(principal, role)
        self.gate.check_principal_known(principal)  # after the rules: nothing is saved until commit
        return Written(scope, self.store.commit(scope, acted_by=caller))

    @retry_on_write_conflict
    def revoke_role(self, who: Who, scope_id: str, principal: str,
                    role: str) -> Written[Scope]:
        caller, scope = self.gate.enter(who, scope_id, Action.ADMINISTER)
        scope.revoke_role(principal, role)
        self.gate.check_principal_known(principal)
        return Written(scope, self.store.commit(scope, acted_by=caller))

    def administered_scope(self, who: Who, scope_id: str) -> Scope:
        """The scope with its roles and grants, for its administrators."""
        return self.gate.scope_for(who, scope_id, Action.ADMINISTER)

    @retry_on_write_conflict
    def grant_read(self, who: Who, scope_id: str, principal: str,
                   resource: Resource) -> Written[Scope]:
        caller, scope = self.gate.enter(who, scope_id, Action.ADMINISTER)
        scope.grant_read(principal, resource.checked())
        self.gate.check_principal_known(principal)
        return Written(scope, self.store.commit(scope, acted_by=caller))

    @retry_on_write_conflict
    def revoke_read(self, who: Who, scope_id: str, principal: str,
                    resource: Resource) -> Written[Scope]:
        caller, scope = self.gate.enter(who, scope_id, Action.ADMINISTER)
        scope.revoke_read(principal, resource.checked())
        self.gate.check_principal_known(principal)
        return Written(scope, self.store.commit(scope, acted_by=caller))

    # -- sources -----------------------------------------------------------------------------

    @retry_on_write_conflict
    def record_source(self, who: Who, scope_id: str, source_type: str, source_id: str, *,
                      text: str | None = None, payload: Mapping[str, Any] | None = None,
                      eligibility: str = Eligibility.ELIGIBLE, attempt_id: str | None = None,
                      occurred_at: datetime | None = None,
                      sub_agent: bool = False, subject: str | None = None) -> Written[Source]:
        """Record a Source; recording the identical Source again is an idempotent no-op.
        A sub-agent's Source is recorded like any other but never counted by automatic
        dreaming. ``subject`` names the data subject it is about, so that erasing the
        subject erases it (domain.erasure)."""
        # One round trip authenticates, reads the scope and the Source as recorded, if it is.
        key = source_aggregate_id(scope_id, source_type, source_id)
        acting = self.gate.acting_in(who, scope_id, Action.CONTRIBUTE, {key: Source})
        caller, scope, existing = acting.caller, acting.scope, acting.found[key]
        source = Source.record(scope.scope_id, source_type, source_id, text=text,
                               payload=payload, eligibility=eligibility, attempt_id=attempt_id,
                               occurred_at=occurred_at, sub_agent=sub_agent)
        if subject is not None:
            self._tag(KeyRecord.of(source.id), scope.scope_id, subject)
        if existing is not None:
            existing.check_not_erased()
            if existing.content_hash != source.content_hash or existing.withdrawn:
                raise SourceConflictError(
                    f"source {source_type}/{source_id} exists with other content",
                    content_hash=existing.content_hash,
                )
            return Written(existing, None)
        return Written(source, self.store.commit(source, acted_by=caller))

    @retry_on_write_conflict
    def amend_source(self, who: Who, scope_id: str, source_type: str, source_id: str, *,
                     text: str | None = None, payload: Mapping[str, Any] | None = None,
                     occurred_at: datetime | None = None) -> Written[Source]:
        caller, source = self._acting_on_source(who, scope_id, source_type, source_id,
                                                Action.CONTRIBUTE)
        source.amend(text, payload, occurred_at)
        return Written(source, self.store.commit(source, acted_by=caller))

    @retry_on_write_conflict
    def withdraw_source(self, who: Who, scope_id: str, source_type: str, source_id: str,
                        reason: str) -> Written[Source]:
        caller, source = self._acting_on_source(who, scope_id, source_type, source_id,
                                                Action.ADMINISTER)
        source.withdraw(reason)
        return Written(source, self.store.commit(source, acted_by=caller))

    def get_source(self, who: Who, scope_id: str, source_type: str, source_id: str) -> Source:
        return self._acting_on_source(who, scope_id, source_type, source_id, Action.READ,
                                      Resource.source(source_type, source_id))[1]

    def _acting_on_source(self, who: Who, scope_id: str, source_type: str, source_id: str,
                          action: Action, resource: Resource | None = None
                          ) -> tuple[Caller, Source]:
        """``who`` authenticated and allowed ``action``, and the Source: one round trip."""
        ref = self.gate.checked(who, lambda: SourceRef(source_type, source_id))
        key = source_aggregate_id(scope_id, ref.source_type, ref.source_id)
        acting = self.gate.acting_in(who, scope_id, action, {key: Source}, resource)
        source: Source | None = acting.found[key]
        if source is None:
            raise _source_not_found(ref)
        return acting.caller, source

    def load_source(self, scope_id: str, ref: SourceRef) -> Source:
        """The Source, with no access check: for a use case that checked its caller already
        (``get_source`` checks, in the same round trip as the read)."""
        source: Source = self.store.load(
            source_aggregate_id(check_scope_id(scope_id), ref.source_type, ref.source_id),
            lambda: _source_not_found(ref), kind=Source)
        return source

    # -- artifacts ---------------------------------------------------------------------------

    @retry_on_write_conflict
    def create_artifact(self, who: Who, scope_id: str, family: str, artifact_id: str,
                        content: Mapping[str, Any], principal: str,
                        lineage: Lineage | None = None) -> Written[Artifact]:
        """Basic management create; records a ``lineage_only`` Source describing the write."""
        caller, scope = self.gate.enter(who, scope_id, Action.CONTRIBUTE)
        ArtifactRef(check_family(family), artifact_id, 1).checked()  # before a Source quotes it
        if self.store.exists(artifact_aggregate_id(scope.scope_id, family, artifact_id)):
            raise ArtifactExistsError(f"{family}/{artifact_id} already exists",
                                      family=family, artifact_id=artifact_id)
        content = validate_content(family, content)  # before the write record digests it
        lineage = lineage or Lineage()
        read = self._check_lineage(caller, scope, lineage)
        write = self._management_source(scope.scope_id, family, artifact_id, 1, "create",
                                        content, principal)
        artifact = Artifact.create(scope.scope_id, family, artifact_id, content,
                                   self._with_source(lineage, write.ref),
                                   {"kind": "management", "principal": principal})
        return Written(artifact, self.store.commit(write, artifact, read=read, acted_by=caller))

    @retry_on_write_conflict
    def replace_artifact(self, who: Who, scope_id: str, family: str, artifact_id: str,
                         content: Mapping[str, Any], principal: str, expected_revision: int,
                         lineage: Lineage | None = None) -> Written[Artifact]:
        """Basic management replace: a new revision, checked against the expected head."""
        lineage = lineage or Lineage()
        caller, scope, artifact, found = self._writable(who, scope_id, family, artifact_id,
                                                        lineage)
        artifact.check_expected_revision(expected_revision)
        content = validate_content(artifact.family, content)
        read = self._check_lineage(caller, scope, lineage, found)
        write = self._management_source(artifact.scope_id, family, artifact_id,
                                        artifact.head_revision + 1, "replace", content, principal)
        artifact.revise(content, self._with_source(lineage, write.ref),
                        {"kind": "management", "principal": principal}, expected_revision)
        return Written(artifact, self.store.commit(write, artifact, read=read, acted_by=caller))

    def create_memory(self, who: Who, scope_id: str, memory_id: str, principal: str,
                      title: str | None = None) -> Written[Artifact]:
        content = {} if title is None else {"title": title}
        return self.create_artifact(who, scope_id, ArtifactFamily.MEMORY, memory_id, content,
                                    principal)

    def get_artifact(self, who: Who, scope_id: str, family: str,
                     artifact_id: str) -> Artifact:
        self.gate.scope_for(who, scope_id, Action.READ, Resource.artifact(family, artifact_id))
        return self.load_artifact(scope_id, family, artifact_id)

    def _tag(self, record: KeyRecord, scope_id: str, subject: str) -> None:
        if self.store.keyring is None:
            raise InvalidRequestError("this store does not seal records, so it keeps no "
                                      "subject", field="subject")
        self.store.keyring.tag(record, scope_id, subject_digest(scope_id, subject))

    def load_artifact(self, scope_id: str, family: str, artifact_id: str) -> Artifact:
        """The Artifact, with no access check: for a use case that checked its caller already
        (``get_artifact`` checks first)."""
        aggregate_id = artifact_aggregate_id(check_scope_id(scope_id), check_family(family),
                                             artifact_id)
        artifact: Artifact = self.store.load(aggregate_id,
                                             lambda: _artifact_not_found(family, artifact_id))
        return artifact

    def read_revision(self, who: Who, scope_id: str, ref: ArtifactRef) -> ArtifactRevision:
        artifact = self.get_artifact(who, scope_id, ref.family, ref.artifact_id)
        return artifact.revision(ref.revision)

    # -- memory entries ----------------------------------------------------------------------

    @retry_on_write_conflict
    @memory_writers_take_turns
    def add_entry(self, who: Who, scope_id: str, memory_id: str, entry_id: str,
                  kind: str, text: str, sources: Sequence[SourceRef] = (),
                  artifacts: Sequence[ArtifactRef] = (),
                  expected_revision: int | None = None,
                  subject: str | None = None) -> Written[EntryWritten]:
        """Add an entry; ``subject`` names the data subject its text is about (every version
        of the entry is erased with the subject)."""
        lineage = Lineage(tuple(sources), tuple(artifacts))
        caller, scope, memory, found = self._contributing_to(who, scope_id, memory_id, lineage)
        read = self._check_lineage(caller, scope, lineage, found)
        entry = memory.add_entry(entry_id, kind, text, sources, artifacts, expected_revision)
        if subject is not None:
            self._tag(KeyRecord.of(memory.id, entry_id), memory.scope_id, subject)
        return Written(EntryWritten(memory.head_ref, entry),
                       self.store.commit(memory, read=read, acted_by=caller))

    @retry_on_write_conflict
    @memory_writers_take_turns
    def revise_entry(self, who: Who, scope_id: str, memory_id: str, entry_id: str,
                     kind: str, text: str, sources: Sequence[SourceRef] = (),
                     artifacts: Sequence[ArtifactRef] = (), expected_revision: int | None = None,
                     expected_entry_version_id: str | None = None) -> Written[EntryWritten]:
        lineage = Lineage(tuple(sources), tuple(artifacts))
        caller, scope, memory, found = self._contributing_to(who, scope_id, memory_id, lineage)
        read = self._check_lineage(caller, scope, lineage, found)
        entry = memory.revise_entry(entry_id, kind, text, sources, artifacts, expected_revision,
                                    expected_entry_version_id)
        return Written(EntryWritten(memory.head_ref, entry),
                       self.store.commit(memory, read=read, acted_by=caller))

    @retry_on_write_conflict
    @memory_writers_take_turns
    def deactivate_entry(self, who: Who, scope_id: str, memory_id: str, entry_id: str,
                         reason: str = "deactivated", expected_revision: int | None = None,
                         ) -> Written[EntryWritten]:
        caller, _, memory, _ = self._contributing_to(who, scope_id, memory_id)
        memory.deactivate_entry(entry_id, reason, expected_revision)
        return Written(EntryWritten(memory.head_ref, memory.current_entry(entry_id)),
                       self.store.commit(memory, acted_by=caller))

    @retry_on_write_conflict
    @memory_writers_take_turns
    def reactivate_entry(self, who: Who, scope_id: str, memory_id: str, entry_id: str,
                         expected_revision: int | None = None) -> Written[EntryWritten]:
        caller, _, memory, _ = self._contributing_to(who, scope_id, memory_id)
        memory.reactivate_entry(entry_id, expected_revision)
        return Written(EntryWritten(memory.head_ref, memory.current_entry(entry_id)),
                       self.store.commit(memory, acted_by=caller))

    def read_entry_version(self, who: Who, scope_id: str,
                           citation: MemoryCitation) -> EntryVersion:
        """The exact entry version a citation names, as listed in the cited revision."""
        memory = self.get_artifact(who, scope_id, ArtifactFamily.MEMORY,
                                   citation.memory_ref.artifact_id)
        return self._cited_version(memory, citation)

    @staticmethod
    def _cited_version(memory: Artifact, citation: MemoryCitation) -> EntryVersion:
        listed = memory.manifest(memory.revision(citation.memory_ref.revision).revision)
        if listed.get(citation.entry_id, None) is None or (
            listed[citation.entry_id].entry_version_id != citation.entry_version_id
        ):
            raise InvalidMemoryCitationError(
                "the cited revision does not list that entry version",
                citation=citation.to_dict(),
            )
        return memory.entry_version(citation.entry_id, citation.entry_version_id)

    # -- helpers -----------------------------------------------------------------------------

    def _contributing_to(self, who: Who, scope_id: str, memory_id: str,
                         lineage: Lineage | None = None
                         ) -> tuple[Caller, Scope, Artifact, dict[UUID, Any]]:
        return self._writable(who, scope_id, ArtifactFamily.MEMORY, memory_id, lineage)

    def _writable(self, who: Who, scope_id: str, family: str, artifact_id: str,
                  lineage: Lineage | None = None
                  ) -> tuple[Caller, Scope, Artifact, dict[UUID, Any]]:
        """Who writes, the scope and the artifact, read in one round trip: writing needs
        contribute, and read of the artifact (a write answers with its state). What
        ``lineage`` cites comes with them, unchecked: for :meth:`_check_lineage`."""
        key = artifact_aggregate_id(scope_id, family, artifact_id)
        cited = {} if lineage is None else lineage_addresses(scope_id, lineage)
        acting = self.gate.acting_in(who, scope_id, Action.CONTRIBUTE, {**cited, key: Artifact})
        self.policy.check(acting.caller, acting.scope, Action.READ,
                          Resource.artifact(family, artifact_id))
        check_family(family)
        artifact: Artifact | None = acting.found[key]
        if artifact is None:
            raise _artifact_not_found(family, artifact_id)
        return acting.caller, acting.scope, artifact, acting.found

    def _check_lineage(self, caller: Caller, scope: Scope, lineage: Lineage,
                       found: Mapping[UUID, Any] | None = None) -> list[Aggregate]:
        """Every referenced aggregate, read in one round trip (or read already: ``found``),
        each exact reference proved to exist, to be readable by the caller and usable, in the
        order of the references."""
        scope_id = scope.scope_id
        if found is None:
            found = self.store.find_many(lineage_addresses(scope_id, lineage))
        read: list[Aggregate] = []
        for source_ref in lineage.sources:
            self.policy.check(caller, scope, Action.READ,
                              Resource.source(source_ref.source_type, source_ref.source_id))
            source: Source | None = found[source_aggregate_id(
                scope_id, source_ref.source_type, source_ref.source_id)]
            if source is None:
                raise ReferenceNotFoundError(
                    f"source {source_ref.source_type}/{source_ref.source_id} does not exist",
                    reference=source_ref.to_dict())
            if source.withdrawn:
                raise ReferenceNotFoundError("a referenced source was withdrawn",
                                             reference=source_ref.to_dict())
            read.append(source)
        for artifact_ref in lineage.artifacts:
            artifact = self._readable(caller, scope, artifact_ref.family,
                                      artifact_ref.artifact_id, found, artifact_ref.to_dict())
            self._referenced(partial(artifact.revision, artifact_ref.revision),
                             artifact_ref.to_dict())
            read.append(artifact)
        for citation in lineage.memory_citations:
            memory = self._readable(caller, scope, ArtifactFamily.MEMORY,
                                    citation.memory_ref.artifact_id, found)
            self._cited_version(memory, citation)
            cited = memory.manifest(citation.memory_ref.revision)[citation.entry_id]
            active = EntryStatus.ACTIVE
            if cited.status != active or memory.entry_status(citation.entry_id) != active:
                raise MemoryEntryInactiveError("a cited memory entry is inactive",
                                               citation=citation.to_dict())
            read.append(memory)
        return read

    def _readable(self, caller: Caller, scope: Scope, family: str, artifact_id: str,
                  found: Mapping[UUID, Any], reference: dict[str, Any] | None = None
                  ) -> Artifact:
        """A referenced artifact from ``found``, once the caller may read it; missing, it is
        ``reference`` not found (without one, as a cited Memory is: the artifact)."""
        self.policy.check(caller, scope, Action.READ, Resource.artifact(family, artifact_id))
        artifact: Artifact | None = found[artifact_aggregate_id(scope.scope_id, family,
                                                                artifact_id)]
        if artifact is None:
            missing = _artifact_not_found(family, artifact_id)
            if reference is None:
                raise missing
            raise ReferenceNotFoundError(missing.message, reference=reference)
        return artifact

    @staticmethod
    def _referenced(load: Callable[[], T], reference: dict[str, Any]) -> T:
        """Missing lineage is reported as the reference that is missing."""
        try:
            return load()
        except (SourceNotFoundError, ArtifactNotFoundError, RevisionNotFoundError) as error:
            raise ReferenceNotFoundError(error.message, reference=reference) from None

    def _management_source(self, scope_id: str, family: str, artifact_id: str, revision: int,
                           operation: str, content: Mapping[str, Any], principal: str) -> Source:
        return Source.record(
            scope_id, MANAGEMENT_SOURCE_TYPE, f"{family}/{artifact_id}/{revision}",
            text=f"{operation} {family}/{artifact_id} revision {revision} by {principal}",
            payload={"operation": operation, "family": family, "artifact_id": artifact_id,
                     "revision": revision, "principal": principal,
                     "content_digest": digest(dict(content))},
            eligibility=Eligibility.LINEAGE_ONLY, occurred_at=self.clock(),
        )

    @staticmethod
    def _with_source(lineage: Lineage, source: SourceRef) -> Lineage:
        return Lineage(sources=(*lineage.sources, source), artifacts=lineage.artifacts,
                       memory_citations=lineage.memory_citations)


def lineage_addresses(scope_id: str, lineage: Lineage) -> dict[UUID, type[Aggregate]]:
    """The aggregates a lineage cites, and their classes."""
    return addresses(scope_id, [*lineage.sources, *lineage.artifacts, *lineage.memory_citations])


def _artifact_not_found(family: str, artifact_id: str) -> ArtifactNotFoundError:
    return ArtifactNotFoundError(f"{family}/{artifact_id} does not exist", family=family,
                                 artifact_id=artifact_id)


def _source_not_found(ref: SourceRef) -> SourceNotFoundError:
    return SourceNotFoundError(f"source {ref.source_type}/{ref.source_id} does not exist",
                               source=ref.to_dict())
