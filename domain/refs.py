"""Reference value objects: exact pointers to Sources, Artifact revisions and entry versions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Self, TypeVar

from domain.canonical import canonical_json
from domain.errors import (
    InvalidArtifactFamilyError,
    InvalidIdentifierError,
    InvalidMemoryCitationError,
)
from domain.text import check_identifier, check_recorded_identifier


class ArtifactFamily(StrEnum):
    MEMORY = "memory"
    EXPERIENCE = "experience"
    SKILL = "skill"
    PROMPT = "prompt"


FAMILIES = tuple(ArtifactFamily)

ARTIFACT_ID_MAX = 128
SOURCE_TYPE_MAX = 128
SOURCE_ID_MAX = 256
ENTRY_ID_MAX = 128


def check_family(family: object, field_name: str = "family") -> ArtifactFamily:
    if family not in FAMILIES:
        raise InvalidArtifactFamilyError(
            f"{field_name} must be one of {', '.join(FAMILIES)}", field=field_name, value=family
        )
    return ArtifactFamily(str(family))


def check_revision(revision: object, field_name: str = "revision") -> int:
    if type(revision) is not int or revision < 1:
        raise InvalidIdentifierError(f"{field_name} must be an integer >= 1", field=field_name)
    return revision


# Construction keeps the rules ids were recorded under, for references read from imports and
# look-ups; ``checked`` applies the identifier alphabet (ADR-0009) to references a command is
# given. The store decodes references without constructing them (ADR-0038).


@dataclass(frozen=True)
class SourceRef:
    source_type: str
    source_id: str

    def __post_init__(self) -> None:
        check_recorded_identifier("source_type", self.source_type, SOURCE_TYPE_MAX)
        check_recorded_identifier("source_id", self.source_id, SOURCE_ID_MAX)

    def checked(self) -> Self:
        """Source ids may have ``/``-separated segments; types are one path segment."""
        check_identifier("source_type", self.source_type, SOURCE_TYPE_MAX)
        check_identifier("source_id", self.source_id, SOURCE_ID_MAX, path_segment=False)
        return self

    def to_dict(self) -> dict[str, Any]:
        return {"source_type": self.source_type, "source_id": self.source_id}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SourceRef:
        return cls(source_type=data["source_type"], source_id=data["source_id"])


@dataclass(frozen=True)
class ArtifactRef:
    family: ArtifactFamily
    artifact_id: str
    revision: int

    def __post_init__(self) -> None:
        # A stored ref decodes its family as a plain string: give it back its type.
        object.__setattr__(self, "family", check_family(self.family))
        check_recorded_identifier("artifact_id", self.artifact_id, ARTIFACT_ID_MAX,
                                  path_segment=True)
        check_revision(self.revision)

    def checked(self) -> Self:
        check_identifier("artifact_id", self.artifact_id, ARTIFACT_ID_MAX)
        return self

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family.value, "artifact_id": self.artifact_id,
                "revision": self.revision}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ArtifactRef:
        return cls(family=data["family"], artifact_id=data["artifact_id"],
                   revision=data["revision"])


@dataclass(frozen=True)
class MemoryCitation:
    """An exact entry version, cited through one revision of its Memory.

    Any fault in a citation's ids is ``invalid_memory_citation`` (the contract's code).
    """

    memory_ref: ArtifactRef
    entry_id: str
    entry_version_id: str

    def __post_init__(self) -> None:
        if self.memory_ref.family != ArtifactFamily.MEMORY:
            raise InvalidMemoryCitationError(
                "memory_ref.family must be memory", field="memory_ref.family"
            )
        for field_name, value in (("entry_id", self.entry_id),
                                  ("entry_version_id", self.entry_version_id)):
            check_recorded_identifier(field_name, value, ENTRY_ID_MAX, path_segment=True,
                                      error=InvalidMemoryCitationError)

    def checked(self) -> Self:
        for field_name, value, limit in (
                ("memory_ref.artifact_id", self.memory_ref.artifact_id, ARTIFACT_ID_MAX),
                ("entry_id", self.entry_id, ENTRY_ID_MAX),
                ("entry_version_id", self.entry_version_id, ENTRY_ID_MAX)):
            check_identifier(field_name, value, limit, error=InvalidMemoryCitationError)
        return self

    def to_dict(self) -> dict[str, Any]:
        return {"memory_ref": self.memory_ref.to_dict(), "entry_id": self.entry_id,
                "entry_version_id": self.entry_version_id}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemoryCitation:
        return cls(memory_ref=ArtifactRef.from_dict(data["memory_ref"]),
                   entry_id=data["entry_id"], entry_version_id=data["entry_version_id"])


Ref = TypeVar("Ref", SourceRef, ArtifactRef, MemoryCitation)


def normalise(refs: Iterable[Ref]) -> tuple[Ref, ...]:
    """De-duplicate by value and sort by canonical JSON: order and repeats carry no meaning."""
    unique = {canonical_json(ref.to_dict()): ref for ref in refs}
    return tuple(unique[key] for key in sorted(unique))


@dataclass(frozen=True)
class Lineage:
    """What an Artifact revision, Candidate version or Memory entry was derived from."""

    sources: tuple[SourceRef, ...] = ()
    artifacts: tuple[ArtifactRef, ...] = ()
    memory_citations: tuple[MemoryCitation, ...] = field(default=())

    def __post_init__(self) -> None:
        # Stored events decode sequences as lists; normalising here keeps replay equal.
        object.__setattr__(self, "sources", normalise(self.sources))
        object.__setattr__(self, "artifacts", normalise(self.artifacts))
        object.__setattr__(self, "memory_citations", normalise(self.memory_citations))

    def __len__(self) -> int:
        return len(self.sources) + len(self.artifacts) + len(self.memory_citations)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sources": [ref.to_dict() for ref in self.sources],
            "artifacts": [ref.to_dict() for ref in self.artifacts],
            "memory_citations": [ref.to_dict() for ref in self.memory_citations],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Lineage:
        return cls(
            sources=tuple(SourceRef.from_dict(s) for s in data.get("sources", ())),
            artifacts=tuple(ArtifactRef.from_dict(a) for a in data.get("artifacts", ())),
            memory_citations=tuple(
                MemoryCitation.from_dict(c) for c in data.get("memory_citations", ())
            ),
        )
