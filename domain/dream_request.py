"""A Dream request: validation, normalisation and the digest idempotency compares.

Duplicates and order carry no meaning, so references are de-duplicated and sorted before the
digest is taken; any semantic change (operation, target, a reference) changes the digest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from domain.canonical import digest
from domain.errors import (
    DomainError,
    EvidenceLimitExceededError,
    InvalidArtifactFamilyError,
    InvalidDreamOperationError,
    InvalidIdempotencyKeyError,
    InvalidTargetError,
    raise_violations,
)
from domain.refs import ArtifactFamily, ArtifactRef, MemoryCitation, SourceRef, normalise
from domain.text import check_identifier


class DreamOperation(StrEnum):
    REFINE_EXPERIENCE = "refine_experience"
    DERIVE_SKILL = "derive_skill"


OPERATIONS = tuple(DreamOperation)

MAX_SELECTED = 20
MAX_REFERENCES = 32
IDEMPOTENCY_KEY_MAX = 128


@dataclass(frozen=True)
class DreamRequest:
    operation: DreamOperation
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
        """Check every rule, then normalise.

        A request that breaks several rules is refused with the first violation's code and
        field, and ``details.violations`` names every violated field. Reference fields are
        indexed in the order given.
        """
        given = _Given(tuple(artifacts), tuple(memory_citations), tuple(sources))
        chosen = _Given(normalise(given.artifacts), normalise(given.memory_citations),
                        normalise(given.sources))
        raise_violations([*given.violations(operation, idempotency_key, target),
                          *chosen.selection_violations(operation, target)])
        return cls(DreamOperation(operation), idempotency_key, chosen.artifacts,
                   chosen.memory_citations, chosen.sources, target)

    def to_dict(self) -> dict[str, Any]:
        """The normalised request without its idempotency key: what the digest covers."""
        return {
            "operation": self.operation.value,
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
        """A stored request, rebuilt as admitted: it passed the rules of its day, and a later
        rule (the identifier alphabet, say) must not make a recorded run unreadable."""
        return cls(
            DreamOperation(data["operation"]), idempotency_key,
            normalise(ArtifactRef.from_dict(a) for a in data.get("artifacts", ())),
            normalise(MemoryCitation.from_dict(c) for c in data.get("memory_citations", ())),
            normalise(SourceRef.from_dict(s) for s in data.get("sources", ())),
            None if data.get("target") is None else ArtifactRef.from_dict(data["target"]))


@dataclass(frozen=True)
class _Given:
    """A request's references: as the caller gave them, so a violation names the caller's
    index, or normalised, to count what is selected."""

    artifacts: tuple[ArtifactRef, ...]
    memory_citations: tuple[MemoryCitation, ...]
    sources: tuple[SourceRef, ...]

    def violations(self, operation: str, key: str, target: ArtifactRef | None,
                   ) -> Iterator[DomainError]:
        yield from _refused(lambda: _check_key(key))
        if operation not in OPERATIONS:
            yield InvalidDreamOperationError(
                f"operation must be one of {', '.join(OPERATIONS)}", field="operation")
        for index, ref in enumerate(self.artifacts):
            if ref.family != ArtifactFamily.EXPERIENCE:
                yield InvalidArtifactFamilyError("Dream artifacts must be experiences",
                                                 field=f"artifacts[{index}].family")
            yield from _refused(ref.checked, f"artifacts[{index}]")
        for index, citation in enumerate(self.memory_citations):
            yield from _refused(citation.checked, f"memory_citations[{index}]")
        for index, source in enumerate(self.sources):
            yield from _refused(source.checked, f"sources[{index}]")
        if target is not None and target not in self.artifacts:
            yield InvalidTargetError("the target must be one of the artifacts", field="target")

    def selection_violations(self, operation: str, target: ArtifactRef | None,
                             ) -> Iterator[DomainError]:
        selected = len(self.artifacts) + len(self.memory_citations)
        if not 1 <= selected <= MAX_SELECTED:
            yield EvidenceLimitExceededError(
                f"select 1-{MAX_SELECTED} experiences and memory citations",
                field="artifacts", selected=selected, limit=MAX_SELECTED)
        if selected + len(self.sources) > MAX_REFERENCES:
            yield EvidenceLimitExceededError(
                f"at most {MAX_REFERENCES} references in all", field="sources",
                total=selected + len(self.sources), limit=MAX_REFERENCES)
        if operation == DreamOperation.DERIVE_SKILL:
            yield from _derive_skill_violations(self, target)


def _refused(check: Callable[[], object], prefix: str = "") -> Iterator[DomainError]:
    """The violation ``check`` raises, if any, its field under ``prefix``."""
    try:
        check()
    except DomainError as error:
        if prefix:
            error.details["field"] = f"{prefix}.{error.details['field']}"
        yield error


def _check_key(key: object) -> None:
    check_identifier("idempotency_key", key, IDEMPOTENCY_KEY_MAX,
                     error=InvalidIdempotencyKeyError)


def _derive_skill_violations(chosen: _Given, target: ArtifactRef | None,
                             ) -> Iterator[DomainError]:
    problems = (
        (bool(chosen.memory_citations), "memory_citations"),
        (target is not None, "target"),
        (not chosen.artifacts, "artifacts"),
    )
    for failed, field in problems:
        if failed:
            yield InvalidDreamOperationError(
                "derive_skill takes experiences only, with no target and no memory citations",
                field=field)
