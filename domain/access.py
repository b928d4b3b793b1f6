"""Who may do what in a scope: roles, per-resource read grants and revocations.

Pure rules over a scope's recorded grants; the application supplies the caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from domain.errors import InvalidRequestError
from domain.identity import canonical_json
from domain.refs import (
    ARTIFACT_ID_MAX,
    SOURCE_ID_MAX,
    SOURCE_TYPE_MAX,
    ArtifactRef,
    SourceRef,
    check_family,
)
from domain.text import check_recorded_identifier

READ = "read"
CONTRIBUTE = "contribute"
REVIEW = "review"
ADMINISTER = "administer"
ROLE_PERMISSIONS: dict[str, frozenset[str]] = {
    "reader": frozenset({READ}),
    "contributor": frozenset({READ, CONTRIBUTE}),
    "reviewer": frozenset({READ, REVIEW}),
    "admin": frozenset({READ, CONTRIBUTE, REVIEW, ADMINISTER}),
}
GRANTED = "granted"
REVOKED = "revoked"


@dataclass(frozen=True)
class Resource:
    """A readable thing in a scope: a logical Artifact (all revisions) or a Source.

    Built under the rules ids were recorded under, since reads and replayed grants name older
    records too; a grant or revocation a command records is ``checked`` against the alphabet.
    """

    kind: str
    family: str | None = None
    artifact_id: str | None = None
    source_type: str | None = None
    source_id: str | None = None

    @classmethod
    def artifact(cls, family: str, artifact_id: str) -> Resource:
        return cls("artifact", family=check_family(family),
                   artifact_id=check_recorded_identifier("artifact_id", artifact_id,
                                                         ARTIFACT_ID_MAX))

    @classmethod
    def source(cls, source_type: str, source_id: str) -> Resource:
        return cls("source", source_type=check_recorded_identifier("source_type", source_type,
                                                                   SOURCE_TYPE_MAX),
                   source_id=check_recorded_identifier("source_id", source_id, SOURCE_ID_MAX))

    def checked(self) -> Resource:
        """The resource, its ids in the identifier alphabet (ADR-0009)."""
        if self.kind == "artifact":
            ArtifactRef(str(self.family), str(self.artifact_id), 1).checked()
        else:
            SourceRef(str(self.source_type), str(self.source_id)).checked()
        return self

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Resource:
        if data.get("kind") == "artifact" and set(data) == {"kind", "family", "artifact_id"}:
            return cls.artifact(data["family"], data["artifact_id"])
        if data.get("kind") == "source" and set(data) == {"kind", "source_type", "source_id"}:
            return cls.source(data["source_type"], data["source_id"])
        raise InvalidRequestError(
            "resource must be {kind: artifact, family, artifact_id} or "
            "{kind: source, source_type, source_id}", field="resource")

    def to_dict(self) -> dict[str, str]:
        if self.kind == "artifact":
            return {"kind": "artifact", "family": str(self.family),
                    "artifact_id": str(self.artifact_id)}
        return {"kind": "source", "source_type": str(self.source_type),
                "source_id": str(self.source_id)}

    @property
    def key(self) -> str:
        return canonical_json(self.to_dict())


def permits(roles: frozenset[str], read_grants: Mapping[str, str], action: str,
            resource: Resource | None = None) -> bool:
    """A resource-specific grant or revocation decides reads; otherwise the roles do."""
    if action == READ and resource is not None:
        decision = read_grants.get(resource.key)
        if decision is not None:
            return decision == GRANTED
    return any(action in ROLE_PERMISSIONS[role] for role in roles)


def has_any_access(roles: frozenset[str], read_grants: Mapping[str, str]) -> bool:
    """Whether the scope may be acknowledged to the caller at all (else it looks absent)."""
    return bool(roles) or GRANTED in read_grants.values()
