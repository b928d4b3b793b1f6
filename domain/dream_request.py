"""A Dream request: validation, normalisation and the digest idempotency compares.

Duplicates and order carry no meaning, so references are de-duplicated and sorted before the
digest is taken; any semantic change (operation, target, a reference) changes the digest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from domain.errors import (
    EvidenceLimitExceededError,
    InvalidArtifactFamilyError,
    InvalidDreamOperationError,
    InvalidIdempotencyKeyError,
    InvalidTargetError,
)
from domain.identity import digest
from domain.refs import EXPERIENCE, ArtifactRef, MemoryCitation, SourceRef, normalise

REFINE_EXPERIENCE = "refine_experience"
DERIVE_SKILL = "derive_skill"
OPERATIONS = (REFINE_EXPERIENCE, DERIVE_SKILL)
MAX_SELECTED = 20
MAX_REFERENCES = 32
IDEMPOTENCY_KEY_MAX = 128


@dataclass(frozen=True)
class DreamRequest:
    operation: str
    idempotency_key: str
    artifacts: tuple[ArtifactRef, ...] = ()
    memory_citations: tuple[MemoryCitation, ...] = ()
    sources: tuple[SourceRef, ...] = ()
    target: ArtifactRef | None = None

    @classmethod
    def create(cls, operation: str, idempotency_key: str,
               artifacts: Iterable[ArtifactRef] = (),
               memory_citations: Iterable[MemoryCitation] = (),
               sources: Iterable[SourceRef] = (), target: ArtifactRef | None = None,
               ) -> DreamRequest:
        """Normalise, then check every rule; each violation names its field."""
        request = cls(operation, idempotency_key, normalise(artifacts),
                      normalise(memory_citations), normalise(sources), target)
        request.check()
        return request

    def check(self) -> None:
        _check_key(self.idempotency_key)
        if self.operation not in OPERATIONS:
            raise InvalidDreamOperationError(
                f"operation must be one of {', '.join(OPERATIONS)}", field="operation")
        for index, ref in enumerate(self.artifacts):
            if ref.family != EXPERIENCE:
                raise InvalidArtifactFamilyError("Dream artifacts must be experiences",
                                                 field=f"artifacts[{index}].family")
        if self.target is not None and self.target not in self.artifacts:
            raise InvalidTargetError("the target must be one of the artifacts", field="target")
        selected = len(self.artifacts) + len(self.memory_citations)
        if not 1 <= selected <= MAX_SELECTED:
            raise EvidenceLimitExceededError(
                f"select 1-{MAX_SELECTED} experiences and memory citations",
                field="artifacts", selected=selected, limit=MAX_SELECTED)
        if selected + len(self.sources) > MAX_REFERENCES:
            raise EvidenceLimitExceededError(
                f"at most {MAX_REFERENCES} references in all", field="sources",
                total=selected + len(self.sources), limit=MAX_REFERENCES)
        if self.operation == DERIVE_SKILL:
            _check_derive_skill(self)

    def to_dict(self) -> dict[str, Any]:
        """The normalised request without its idempotency key: what the digest covers."""
        return {
            "operation": self.operation,
            "artifacts": [ref.to_dict() for ref in self.artifacts],
            "memory_citations": [ref.to_dict() for ref in self.memory_citations],
            "sources": [ref.to_dict() for ref in self.sources],
            "target": None if self.target is None else self.target.to_dict(),
        }

    @property
    def digest(self) -> str:
        return digest(self.to_dict())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], idempotency_key: str) -> DreamRequest:
        return cls.create(
            data["operation"], idempotency_key,
            [ArtifactRef.from_dict(a) for a in data.get("artifacts", ())],
            [MemoryCitation.from_dict(c) for c in data.get("memory_citations", ())],
            [SourceRef.from_dict(s) for s in data.get("sources", ())],
            None if data.get("target") is None else ArtifactRef.from_dict(data["target"]))


def _check_key(key: object) -> None:
    if (not isinstance(key, str) or not 1 <= len(key) <= IDEMPOTENCY_KEY_MAX
            or key != key.strip()):
        raise InvalidIdempotencyKeyError(
            f"idempotency_key must be 1-{IDEMPOTENCY_KEY_MAX} characters without surrounding "
            "whitespace", field="idempotency_key")


def _check_derive_skill(request: DreamRequest) -> None:
    problems: Sequence[tuple[bool, str]] = (
        (bool(request.memory_citations), "memory_citations"),
        (request.target is not None, "target"),
        (not request.artifacts, "artifacts"),
    )
    for failed, field in problems:
        if failed:
            raise InvalidDreamOperationError(
                "derive_skill takes experiences only, with no target and no memory citations",
                field=field)

