"""The evidence read port, served from the event store on behalf of the current caller."""

from __future__ import annotations

from typing import TYPE_CHECKING
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError

from domain.access import READ, Resource
from domain.artifact import Artifact
from domain.errors import AccessRevokedError
from domain.identity import artifact_aggregate_id, source_aggregate_id
from domain.refs import SourceRef
from domain.source import Source

if TYPE_CHECKING:
    from eventsourcing.domain import Aggregate

    from application.access import Access, Caller
    from domain.scope import Scope


class StoreEvidenceReader:
    """Loads each aggregate once per resolution and remembers what it read (the read set)."""

    def __init__(self, app: Access, scope: Scope, caller: Caller) -> None:
        self.app = app
        self.scope = scope
        self.caller = caller
        self._loaded: dict[UUID, Aggregate | None] = {}

    @property
    def read_set(self) -> list[Aggregate]:
        return [aggregate for aggregate in self._loaded.values() if aggregate is not None]

    def source(self, ref: SourceRef) -> Source | None:
        aggregate_id = source_aggregate_id(self.scope.scope_id, ref.source_type, ref.source_id)
        found = self._load(aggregate_id)
        return found if isinstance(found, Source) and not found.withdrawn else None

    def artifact(self, family: str, artifact_id: str) -> Artifact | None:
        found = self._load(artifact_aggregate_id(self.scope.scope_id, family, artifact_id))
        return found if isinstance(found, Artifact) else None

    def check_read(self, resource: Resource) -> None:
        """Re-checked on every visit with the requester's current rights."""
        if self.caller.admin or not self.app.enforce_access:
            return
        if not self.scope.permits(self.caller.name, READ, resource):
            raise AccessRevokedError("the requester may not read this evidence now",
                                     resource=resource.to_dict())

    def _load(self, aggregate_id: UUID) -> Aggregate | None:
        if aggregate_id not in self._loaded:
            try:
                self._loaded[aggregate_id] = self.app.repository.get(aggregate_id)
            except AggregateNotFoundError:
                self._loaded[aggregate_id] = None
        return self._loaded[aggregate_id]
