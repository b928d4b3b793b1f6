"""Reading one reference: validate it against its stored aggregate and make its graph node.

The walk looks the aggregate up (through the ``EvidenceReader`` port) and hands it here, so these
rules are plain functions of stored values. A requested reference that fails is the caller's
mistake, reported with its request field; one reached through lineage is an evidence gap,
reported with the field it was reached from and its depth.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from domain.access import Resource
from domain.artifact import (
    Artifact,
    ArtifactRevision,
    EntryStatus,
    EntryVersion,
    ManifestEntry,
)
from domain.canonical import canonical_json, digest
from domain.content import entry_content_hash
from domain.errors import (
    DomainError,
    EvidenceErasedError,
    EvidenceUnavailableError,
    InvalidMemoryCitationError,
    MemoryEntryInactiveError,
    MemoryEntryNotFoundError,
    ReferenceNotFoundError,
    SourceNotEligibleError,
)
from domain.evidence.graph import OriginKey
from domain.evidence.manifest import (
    DERIVED,
    EXPERIENCE_NODE,
    LINEAGE_ONLY,
    MEMORY_NODE,
    ROOT,
    SOURCE_NODE,
    UNRESOLVED,
    UNRESOLVED_NODE,
    EvidenceManifest,
    EvidenceNode,
)
from domain.ids import EvidenceRef, evidence_id
from domain.refs import ArtifactFamily, ArtifactRef, MemoryCitation, SourceRef, normalise
from domain.source import Eligibility, Source


@dataclass(frozen=True)
class RequestedReferences:
    """The requested references, exactly as given (already normalised by the request)."""

    sources: tuple[SourceRef, ...]
    artifacts: tuple[ArtifactRef, ...]
    memory_citations: tuple[MemoryCitation, ...]

    def fields(self) -> tuple[tuple[str, Sequence[EvidenceRef]], ...]:
        """Field names and refs, in visiting order (which only decides the first error)."""
        return (("artifacts", self.artifacts), ("memory_citations", self.memory_citations),
                ("sources", self.sources))

    def matches(self, manifest: EvidenceManifest) -> bool:
        return (manifest.sources, manifest.artifacts, manifest.memory_citations) == (
            self.sources, self.artifacts, self.memory_citations)


@dataclass(frozen=True)
class WalkStep:
    """Where a visit happens: the request field it descends from, and how deep."""

    field: str
    depth: int = 0

    @property
    def direct(self) -> bool:
        return self.depth == 0

    def child(self) -> WalkStep:
        return WalkStep(self.field, self.depth + 1)


@dataclass(frozen=True)
class NodeRead:
    """One node as read, with what the walk needs next and what the model may be shown."""

    node: EvidenceNode
    children: tuple[EvidenceRef, ...] = ()
    body: str | None = None
    origin: OriginKey | None = None


# -- describing references in errors -------------------------------------------------------------


def error_details(ref: EvidenceRef, step: WalkStep, **extra: Any) -> dict[str, Any]:
    where: dict[str, Any] = (
        {"field": step.field} if step.direct else {"reached_from": step.field, "depth": step.depth}
    )
    return {**where, "reference": ref.to_dict(), **extra}


def describe(ref: EvidenceRef) -> str:
    if isinstance(ref, SourceRef):
        return f"source {ref.source_type}/{ref.source_id}"
    if isinstance(ref, MemoryCitation):
        return (f"memory {ref.memory_ref.artifact_id} revision {ref.memory_ref.revision} "
                f"entry {ref.entry_id} version {ref.entry_version_id}")
    return f"{ref.family} {ref.artifact_id} revision {ref.revision}"


def missing_reference(ref: EvidenceRef, step: WalkStep) -> DomainError:
    """A requested reference that is absent is the caller's mistake; one in lineage is a gap."""
    if step.direct:
        return ReferenceNotFoundError(f"{describe(ref)} does not exist",
                                      **error_details(ref, step))
    return EvidenceUnavailableError(f"{describe(ref)}, found in lineage, is not available",
                                    **error_details(ref, step))


def resource_of(ref: EvidenceRef) -> Resource:
    """What the requester must be allowed to read to see ``ref``."""
    if isinstance(ref, SourceRef):
        return Resource.source(ref.source_type, ref.source_id)
    if isinstance(ref, MemoryCitation):
        return Resource.artifact(ArtifactFamily.MEMORY, ref.memory_ref.artifact_id)
    return Resource.artifact(ref.family, ref.artifact_id)


# -- Sources -------------------------------------------------------------------------------------


def read_source(source: Source | None, ref: SourceRef, step: WalkStep) -> NodeRead:
    if source is not None and source.erased:  # its text is gone with its key
        raise EvidenceErasedError(f"{describe(ref)} was erased", **error_details(ref, step))
    # A withdrawn Source: as evidence it is simply gone.
    if source is None or source.withdrawn or source.text is None or source.payload is None:
        raise missing_reference(ref, step)
    # The stored Source value; its digest is the same formula as Source.content_hash.
    value = {"source_type": source.source_type, "source_id": source.source_id,
             "text": source.text, "payload": source.payload,
             "eligibility": source.eligibility, "attempt_id": source.attempt_id}
    node = EvidenceNode(evidence_id(ref), SOURCE_NODE, digest(value), source=ref, role=ROOT)
    if source.eligibility != Eligibility.ELIGIBLE:
        if step.direct:
            raise SourceNotEligibleError(f"{describe(ref)} is lineage-only and cannot be evidence",
                                         **error_details(ref, step))
        # A management-write record: provenance only, never expanded, grouped or shown.
        return NodeRead(replace(node, role=LINEAGE_ONLY))
    return NodeRead(node, body=canonical_json(value),
                    origin=OriginKey.of(ref, source.attempt_id))


# -- Artifact revisions --------------------------------------------------------------------------


def read_artifact(artifact: Artifact | None, ref: ArtifactRef, step: WalkStep) -> NodeRead:
    """A Dream reads Experiences; any other family is provenance or a gap, never expanded."""
    revision, head = _exact_revision(artifact, ref, step)
    node = EvidenceNode(evidence_id(ref), UNRESOLVED_NODE, _revision_digest(ref, revision),
                        artifact=ref, role=UNRESOLVED)
    if ref.family == ArtifactFamily.PROMPT:
        # Generation configuration: provenance, never evidence, and not an evidence gap.
        return NodeRead(replace(node, role=LINEAGE_ONLY))
    if ref.family != ArtifactFamily.EXPERIENCE:
        # A Skill, or a whole Memory (never authority to read all its entries): a gap.
        return NodeRead(node)
    lineage = revision.lineage
    return NodeRead(
        replace(node, kind=EXPERIENCE_NODE, role=DERIVED, historical=ref.revision != head),
        children=(*lineage.sources, *lineage.artifacts, *lineage.memory_citations),
        body=canonical_json(revision.content),
    )


def read_artifact_for_review(artifact: Artifact | None, ref: ArtifactRef,
                             step: WalkStep) -> NodeRead:
    """Review follows the stored lineage of every family but Prompts, so a Skill's historical
    revisions, the Experiences behind them and their Memory entries are all re-checked."""
    revision, head = _exact_revision(artifact, ref, step)
    kind = EXPERIENCE_NODE if ref.family == ArtifactFamily.EXPERIENCE else f"{ref.family}_revision"
    node = EvidenceNode(evidence_id(ref), kind, _revision_digest(ref, revision), artifact=ref,
                        role=DERIVED, historical=ref.revision != head)
    if ref.family == ArtifactFamily.PROMPT:
        return NodeRead(replace(node, role=LINEAGE_ONLY))
    lineage = revision.lineage
    return NodeRead(node,
                    children=(*lineage.sources, *lineage.artifacts, *lineage.memory_citations))


def _exact_revision(artifact: Artifact | None, ref: ArtifactRef,
                    step: WalkStep) -> tuple[ArtifactRevision, int]:
    if artifact is None or artifact.family != ref.family or not (
        1 <= ref.revision <= artifact.head_revision
    ):
        raise missing_reference(ref, step)
    return artifact.revision(ref.revision), artifact.head_revision


def _revision_digest(ref: ArtifactRef, revision: ArtifactRevision) -> str:
    return digest({**ref.to_dict(), "content": revision.content,
                   "lineage": revision.lineage.to_dict(), "provenance": revision.provenance})


# -- Memory citations ----------------------------------------------------------------------------


def read_citation(memory: Artifact | None, citation: MemoryCitation, step: WalkStep) -> NodeRead:
    if memory is None or memory.family != ArtifactFamily.MEMORY:
        raise missing_reference(citation, step)
    cited = _cited_manifest_entry(memory, citation, step)
    head = memory.manifest().get(citation.entry_id)
    _check_active(cited, head, citation, step)
    assert head is not None  # _check_active refuses an entry absent from the head
    version = _verified_entry_version(memory, citation, cited, step)
    historical = (citation.memory_ref.revision != memory.head_revision
                  or head.entry_version_id != citation.entry_version_id)
    node = EvidenceNode(evidence_id(citation), MEMORY_NODE, version.content_hash,
                        memory_citations=(citation,), role=DERIVED, historical=historical,
                        current_entry_version_id=head.entry_version_id)
    # Only this entry version is read: sibling entries never reach the walk or the model.
    return NodeRead(node, children=(*version.sources, *version.artifacts),
                    body=canonical_json(_entry_body(memory.artifact_id, version)))


def merge_citation(known: EvidenceNode, fresh: EvidenceNode) -> EvidenceNode:
    """One entry version cited through several Memory revisions stays one node.

    It is current (not historical) if any citation pins the head, so the flag does not depend
    on which path the walk happened to take first.
    """
    return replace(known,
                   memory_citations=normalise((*known.memory_citations,
                                               *fresh.memory_citations)),
                   historical=known.historical and fresh.historical,
                   current_entry_version_id=fresh.current_entry_version_id)


def _invalid_citation(citation: MemoryCitation, step: WalkStep,
                      reason: str) -> InvalidMemoryCitationError:
    return InvalidMemoryCitationError(f"{describe(citation)}: {reason}",
                                      **error_details(citation, step, reason=reason))


def _cited_manifest_entry(memory: Artifact, citation: MemoryCitation,
                          step: WalkStep) -> ManifestEntry:
    if not 1 <= citation.memory_ref.revision <= memory.head_revision:
        raise _invalid_citation(citation, step, "the cited Memory revision does not exist")
    entry = memory.manifest(citation.memory_ref.revision).get(citation.entry_id)
    if entry is None or entry.entry_version_id != citation.entry_version_id:
        raise _invalid_citation(citation, step,
                                "the cited revision does not hold this entry version")
    return entry


def _check_active(cited: ManifestEntry, head: ManifestEntry | None,
                  citation: MemoryCitation, step: WalkStep) -> None:
    """Active when cited and still active now: an old snapshot cannot bypass deactivation."""
    if head is not None and head.status == EntryStatus.ERASED:
        raise EvidenceErasedError(f"{describe(citation)} was erased",
                                  **error_details(citation, step))
    if cited.status != EntryStatus.ACTIVE or head is None or head.status != EntryStatus.ACTIVE:
        raise MemoryEntryInactiveError(
            f"{describe(citation)} is not active",
            **error_details(citation, step, cited_status=cited.status,
                            current_status=None if head is None else head.status),
        )


def _verified_entry_version(memory: Artifact, citation: MemoryCitation, cited: ManifestEntry,
                            step: WalkStep) -> EntryVersion:
    try:
        version = memory.entry_version(citation.entry_id, citation.entry_version_id)
    except MemoryEntryNotFoundError as error:
        raise _invalid_citation(citation, step, "the entry version is not stored") from error
    recomputed = entry_content_hash(version.kind, version.text, version.sources,
                                    version.artifacts)
    if not recomputed == version.content_hash == cited.content_hash:
        raise _invalid_citation(citation, step, "the entry content hash does not match")
    return version


def _entry_body(memory_id: str, version: EntryVersion) -> dict[str, Any]:
    return {"memory_id": memory_id, "entry_id": version.entry_id,
            "entry_version_id": version.entry_version_id, "version": version.version,
            "kind": version.kind, "text": version.text,
            "sources": [ref.to_dict() for ref in version.sources],
            "artifacts": [ref.to_dict() for ref in version.artifacts],
            "content_hash": version.content_hash}
