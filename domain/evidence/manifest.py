"""The evidence value types: what a run pins (content-free) and what the model sees."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from domain.canonical import canonical_json, digest
from domain.refs import ArtifactRef, MemoryCitation, SourceRef

TRANSFORM_VERSION = "artifact-dreaming.evidence.v1"

# Node kinds.
SOURCE_NODE = "source"
EXPERIENCE_NODE = "experience"
MEMORY_NODE = "memory"
UNRESOLVED_NODE = "unresolved"
# Node roles.
ROOT = "root"
DERIVED = "derived"
LINEAGE_ONLY = "lineage_only"
UNRESOLVED = "unresolved"
# Root group independence.
ATTESTED = "attested"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class EvidenceNode:
    evidence_id: str
    kind: str
    digest: str
    source: SourceRef | None = None
    artifact: ArtifactRef | None = None
    memory_citations: tuple[MemoryCitation, ...] = ()
    role: str = DERIVED
    historical: bool = False
    current_entry_version_id: str | None = None

    @property
    def projectable(self) -> bool:
        """Whether the node has a body the model may see (before the Memory-text switch)."""
        return self.kind != UNRESOLVED_NODE and self.role not in (UNRESOLVED, LINEAGE_ONLY)

    def to_dict(self) -> dict[str, Any]:
        return {
            "evidence_id": self.evidence_id,
            "kind": self.kind,
            "digest": self.digest,
            "source": None if self.source is None else self.source.to_dict(),
            "artifact": None if self.artifact is None else self.artifact.to_dict(),
            "memory_citations": [citation.to_dict() for citation in self.memory_citations],
            "role": self.role,
            "historical": self.historical,
            "current_entry_version_id": self.current_entry_version_id,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvidenceNode:
        return cls(
            evidence_id=data["evidence_id"],
            kind=data["kind"],
            digest=data["digest"],
            source=None if data["source"] is None else SourceRef.from_dict(data["source"]),
            artifact=None if data["artifact"] is None else ArtifactRef.from_dict(data["artifact"]),
            memory_citations=tuple(MemoryCitation.from_dict(c) for c in data["memory_citations"]),
            role=data["role"],
            historical=data["historical"],
            current_entry_version_id=data["current_entry_version_id"],
        )


@dataclass(frozen=True)
class RootGroup:
    """Root Sources that are one origin: the model must not count them as independent support."""

    group_id: str
    sources: tuple[SourceRef, ...]
    independence: str

    def to_dict(self) -> dict[str, Any]:
        return {"group_id": self.group_id, "sources": [ref.to_dict() for ref in self.sources],
                "independence": self.independence}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RootGroup:
        return cls(group_id=data["group_id"],
                   sources=tuple(SourceRef.from_dict(ref) for ref in data["sources"]),
                   independence=data["independence"])


@dataclass(frozen=True)
class ProjectedItem:
    evidence_id: str
    kind: str
    text: str
    historical: bool
    root_group_ids: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"evidence_id": self.evidence_id, "kind": self.kind, "text": self.text,
                "historical": self.historical, "root_group_ids": list(self.root_group_ids)}


@dataclass(frozen=True)
class ModelEvidence:
    """The model-visible evidence. Limits are enforced on it whole: it is never truncated."""

    items: tuple[ProjectedItem, ...]
    root_groups: tuple[RootGroup, ...]
    incomplete: bool

    def to_dict(self) -> dict[str, Any]:
        return {"evidence": [item.to_dict() for item in self.items],
                "root_groups": [group.to_dict() for group in self.root_groups],
                "incomplete": self.incomplete}

    @property
    def payload(self) -> str:
        return canonical_json(self.to_dict())

    @property
    def size(self) -> int:
        """UTF-8 bytes of the payload: what ``max_bytes`` bounds."""
        return len(self.payload.encode("utf-8"))

    @property
    def digest(self) -> str:
        return digest(self.to_dict())


@dataclass(frozen=True)
class EvidenceManifest:
    """Content-free record of the evidence a run saw; bodies are never stored in it."""

    transform_version: str
    artifacts: tuple[ArtifactRef, ...]
    memory_citations: tuple[MemoryCitation, ...]
    sources: tuple[SourceRef, ...]
    nodes: tuple[EvidenceNode, ...]
    edges: tuple[tuple[str, str], ...]
    root_groups: tuple[RootGroup, ...]
    projection_digest: str
    projection_bytes: int
    incomplete: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "transform_version": self.transform_version,
            "artifacts": [ref.to_dict() for ref in self.artifacts],
            "memory_citations": [ref.to_dict() for ref in self.memory_citations],
            "sources": [ref.to_dict() for ref in self.sources],
            "nodes": [node.to_dict() for node in self.nodes],
            "edges": [{"derived_id": derived, "upstream_id": upstream}
                      for derived, upstream in self.edges],
            "root_groups": [group.to_dict() for group in self.root_groups],
            "projection_digest": self.projection_digest,
            "projection_bytes": self.projection_bytes,
            "incomplete": self.incomplete,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvidenceManifest:
        return cls(
            transform_version=data["transform_version"],
            artifacts=tuple(ArtifactRef.from_dict(ref) for ref in data["artifacts"]),
            memory_citations=tuple(MemoryCitation.from_dict(c) for c in data["memory_citations"]),
            sources=tuple(SourceRef.from_dict(ref) for ref in data["sources"]),
            nodes=tuple(EvidenceNode.from_dict(node) for node in data["nodes"]),
            edges=tuple((edge["derived_id"], edge["upstream_id"]) for edge in data["edges"]),
            root_groups=tuple(RootGroup.from_dict(group) for group in data["root_groups"]),
            projection_digest=data["projection_digest"],
            projection_bytes=data["projection_bytes"],
            incomplete=data["incomplete"],
        )

    @property
    def digest(self) -> str:
        return digest(self.to_dict())
