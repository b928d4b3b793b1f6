"""Who may do what in a scope: roles, per-resource read grants and revocations.

Pure rules over a scope's recorded grants; the application supplies the caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from domain.canonical import canonical_json
from domain.errors import InvalidRequestError
from domain.refs import (
    ARTIFACT_ID_MAX,
    SOURCE_ID_MAX,
    SOURCE_TYPE_MAX,
    ArtifactFamily,
    ArtifactRef,
    SourceRef,
    check_family,
)
from domain.text import check_recorded_identifier


class Action(StrEnum):
    READ = "read"
    CONTRIBUTE = "contribute"
    REVIEW = "review"
    ADMINISTER = "administer"


class Role(StrEnum):
    READER = "reader"
    CONTRIBUTOR = "contributor"
    REVIEWER = "reviewer"
    ADMIN = "admin"


class ReadDecision(StrEnum):
    """A principal's recorded read decision on one resource; it overrides the roles."""

    GRANTED = "granted"
    REVOKED = "revoked"


class ResourceKind(StrEnum):
    ARTIFACT = "artifact"
    SOURCE = "source"


ROLE_PERMISSIONS: dict[Role, frozenset[Action]] = {
    Role.READER: frozenset({Action.READ}),
    Role.CONTRIBUTOR: frozenset({Action.READ, Action.CONTRIBUTE}),
    Role.REVIEWER: frozenset({Action.READ, Action.REVIEW}),
    Role.ADMIN: frozenset({Action.READ, Action.CONTRIBUTE, Action.REVIEW, Action.ADMINISTER}),
}


@dataclass(frozen=True)
class Resource:
    """A readable thing in a scope: a logical Artifact (all revisions) or a Source.

    Built under the rules ids were recorded under, since reads and replayed grants name older
    records too; a grant or revocation a command records is ``checked`` against the alphabet.
    """

    kind: ResourceKind
    family: ArtifactFamily | None = None
    artifact_id: str | None = None
    source_type: str | None = None
    source_id: str | None = None

    @classmethod
    def artifact(cls, family: str, artifact_id: str) -> Resource:
        return cls(ResourceKind.ARTIFACT, family=check_family(family),
                   artifact_id=check_recorded_identifier("artifact_id", artifact_id,
                                                         ARTIFACT_ID_MAX))

    @classmethod
    def source(cls, source_type: str, source_id: str) -> Resource:
        return cls(ResourceKind.SOURCE,
                   source_type=check_recorded_identifier("source_type", source_type,
                                                         SOURCE_TYPE_MAX),
                   source_id=check_recorded_identifier("source_id", source_id, SOURCE_ID_MAX))

    def checked(self) -> Resource:
        """The resource, its ids in the identifier alphabet (ADR-0009)."""
        if self.kind == ResourceKind.ARTIFACT:
            ArtifactRef(check_family(self.family), str(self.artifact_id), 1).checked()
        else:
            SourceRef(str(self.source_type), str(self.source_id)).checked()
        return self

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Resource:
        kind = data.get("kind")
        if kind == ResourceKind.ARTIFACT and set(data) == {"kind", "family", "artifact_id"}:
            return cls.artifact(data["family"], data["artifact_id"])
        if kind == ResourceKind.SOURCE and set(data) == {"kind", "source_type", "source_id"}:
            return cls.source(data["source_type"], data["source_id"])
        raise InvalidRequestError(
            "resource must be {kind: artifact, family, artifact_id} or "
            "{kind: source, source_type, source_id}", field="resource")

    def to_dict(self) -> dict[str, str]:
        if self.kind == ResourceKind.ARTIFACT:
            return {"kind": self.kind.value, "family": str(self.family),
                    "artifact_id": str(self.artifact_id)}
        return {"kind": self.kind.value, "source_type": str(self.source_type),
                "source_id": str(self.source_id)}

    @property
    def key(self) -> str:
        return canonical_json(self.to_dict())


def permits(roles: frozenset[Role], read_grants: Mapping[str, ReadDecision], action: Action,
            resource: Resource | None = None) -> bool:
    """A resource-specific grant or revocation decides reads; otherwise the roles do."""
    if action == Action.READ and resource is not None:
        decision = read_grants.get(resource.key)
        if decision is not None:
            return decision == ReadDecision.GRANTED
    return any(action in ROLE_PERMISSIONS[role] for role in roles)


def has_any_access(roles: frozenset[Role], read_grants: Mapping[str, ReadDecision]) -> bool:
    """Whether the scope may be acknowledged to the caller at all (else it looks absent)."""
    return bool(roles) or ReadDecision.GRANTED in read_grants.values()
