"""The evidence read port, served from the event store on behalf of one caller."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING
from uuid import UUID

from eventsourcing.domain import Aggregate

from domain.access import Action, Resource
from domain.artifact import Artifact
from domain.errors import AccessRevokedError, ArtifactConflictError
from domain.ids import EvidenceRef, artifact_aggregate_id, source_aggregate_id
from domain.refs import ArtifactFamily, ArtifactRef, MemoryCitation, SourceRef
from domain.source import Source

if TYPE_CHECKING:
    from application.store import EventStore
    from domain.policy import AccessPolicy, Caller
    from domain.scope import Scope


def address(scope_id: str, ref: EvidenceRef) -> tuple[UUID, type[Aggregate]]:
    """The aggregate a reference reads, and its class."""
    if isinstance(ref, SourceRef):
        return source_aggregate_id(scope_id, ref.source_type, ref.source_id), Source
    if isinstance(ref, MemoryCitation):
        return artifact_aggregate_id(
            scope_id, ArtifactFamily.MEMORY, ref.memory_ref.artifact_id
        ), Artifact
    return artifact_aggregate_id(scope_id, ref.family, ref.artifact_id), Artifact


def addresses(scope_id: str, refs: Iterable[EvidenceRef | None]) -> dict[UUID, type[Aggregate]]:
    return dict(address(scope_id, ref) for ref in refs if ref is not None)


class StoreEvidenceReader:
    """Loads each aggregate once per resolution and remembers what it read (the read set)."""

    def __init__(self, store: EventStore, policy: AccessPolicy, scope: Scope, caller: Caller,
                 read: Mapping[UUID, Aggregate | None] | None = None,
                 hinted: Mapping[UUID, Aggregate | None] | None = None,
                 named: Iterable[UUID] | None = None) -> None:
        self.store = store
        self.policy = policy
        self.scope = scope
        self.caller = caller
        self._loaded: dict[UUID, Aggregate | None] = dict(read or {})  # read along the scope
        # Read along the scope on a hint (ADR-0049): loaded, and so read, only when asked for.
        self._hinted: dict[UUID, Aggregate | None] = dict(hinted or {})
        self.named = None if named is None else frozenset(named)  # what the request names

    @property
    def read_set(self) -> list[Aggregate]:
        return [aggregate for aggregate in self._loaded.values() if aggregate is not None]

    def read_besides_named(self) -> dict[UUID, type[Aggregate]]:
        """The aggregates read besides those the request names, and their classes: what a
        resolution starting from the same ones will read next time (ADR-0049)."""
        besides = self._loaded.keys() - (self.named or frozenset())
        return {aggregate_id: type(aggregate) for aggregate_id in besides
                if (aggregate := self._loaded[aggregate_id]) is not None}

    def source(self, ref: SourceRef) -> Source | None:
        found = self._load(*address(self.scope.scope_id, ref))
        return found if isinstance(found, Source) and not found.withdrawn else None

    def artifact(self, family: str, artifact_id: str) -> Artifact | None:
        found = self._load(artifact_aggregate_id(self.scope.scope_id, family, artifact_id),
                           Artifact)
        return found if isinstance(found, Artifact) else None

    def read_ahead(self, refs: Iterable[EvidenceRef | None]) -> None:
        """Read the aggregates of ``refs`` not read yet, together (one round trip where the
        store can)."""
        wanted = addresses(self.scope.scope_id, refs)
        for aggregate_id in (self._loaded.keys() | self._hinted.keys()) & wanted.keys():
            del wanted[aggregate_id]
        if len(wanted) > 1:
            self._loaded.update(self.store.find_many(wanted))

    def check_read(self, resource: Resource) -> None:
        """Re-checked on every visit with the requester's current rights."""
        if not self.policy.permits(self.caller, self.scope, Action.READ, resource):
            raise AccessRevokedError("the requester may not read this evidence now",
                                     resource=resource.to_dict())

    def check_target_head(self, target: ArtifactRef | None) -> None:
        """A replacement names the head revision of its target, else ``artifact_conflict``."""
        if target is None:
            return
        artifact = self.artifact(target.family, target.artifact_id)
        if artifact is not None and artifact.head_ref != target:
            raise ArtifactConflictError(
                "the target is no longer the head revision", field="target",
                expected=target.to_dict(), current=artifact.head_ref.to_dict())

    def _load(self, aggregate_id: UUID, kind: type[Aggregate]) -> Aggregate | None:
        if aggregate_id not in self._loaded:
            self._loaded[aggregate_id] = (self._hinted.pop(aggregate_id)
                                          if aggregate_id in self._hinted
                                          else self.store.find(aggregate_id, kind))
        return self._loaded[aggregate_id]
