"""From evidence back to lineage: what a model used, and what a reviewer re-validates.

``select_evidence`` maps the evidence ids a model says it used to a Candidate's exact references
(docs/contract.md#evidence-selection); ``validate_for_review`` walks a Candidate's lineage again
with the reviewer's current rights (docs/contract.md#evidence-resolution).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from domain.candidate import MAX_CANDIDATE_EVIDENCE
from domain.errors import InvalidGenerationOutputError
from domain.evidence.graph import reachable, upstream_index
from domain.evidence.limits import UNBOUNDED_LIMITS, over_limit
from domain.evidence.manifest import (
    EXPERIENCE_NODE,
    MEMORY_NODE,
    ROOT,
    EvidenceManifest,
    EvidenceNode,
)
from domain.evidence.references import RequestedReferences
from domain.evidence.resolution import EvidenceReader, Traversal
from domain.ids import EvidenceRef, evidence_id
from domain.refs import ArtifactFamily, ArtifactRef, Lineage, SourceRef, normalise

NEEDS_EVIDENCE_REASON = (
    "selected Memory-derived evidence has no usable root Source supporting task actions and results"
)


@dataclass(frozen=True)
class NeedsEvidence:
    """Selection outcome, not an error: the run succeeds ``needs_evidence`` with no Candidate."""

    reason: str = NEEDS_EVIDENCE_REASON
    outcome: ClassVar[str] = "needs_evidence"


# -- selection -----------------------------------------------------------------------------------


def select_evidence(manifest: EvidenceManifest, evidence_ids: Sequence[str], *, family: str,
                    target: ArtifactRef | None = None) -> Lineage | NeedsEvidence:
    """Map the ids a model used to the Candidate's exact references
    (docs/contract.md#evidence-selection).

    Returns the Candidate lineage, or ``NeedsEvidence`` when Memory-derived support has no root
    Source. Raises ``invalid_generation_output`` for an id the model may not use and
    ``evidence_limit_exceeded`` above the Candidate reference limit.
    """
    nodes = {node.evidence_id: node for node in manifest.nodes}
    _check_usable(nodes, evidence_ids, family)
    upstream = upstream_index(manifest.edges)
    chosen = set(evidence_ids)
    # Keep the requested entry or Experience through which a used root was reached.
    origins: tuple[EvidenceRef, ...] = (*manifest.artifacts, *manifest.memory_citations)
    for origin in origins:
        origin_id = evidence_id(origin)
        if origin_id in nodes and reachable(origin_id, upstream) & chosen:
            chosen.add(origin_id)
    dependencies: set[str] = set()
    for node_id in chosen:
        dependencies |= reachable(node_id, upstream)
    lineage = _candidate_lineage([nodes[i] for i in sorted(chosen)],
                                 [nodes[i] for i in sorted(dependencies)], family, target)
    if any(nodes[i].kind == MEMORY_NODE for i in dependencies) and not lineage.sources:
        return NeedsEvidence()
    if family == ArtifactFamily.SKILL and not lineage.artifacts:
        raise InvalidGenerationOutputError("a Skill must rest on at least one Experience",
                                           field="evidence_ids")
    if len(lineage) > MAX_CANDIDATE_EVIDENCE:
        raise over_limit("candidate_references", MAX_CANDIDATE_EVIDENCE, len(lineage),
                         field="evidence_ids")
    return lineage


def _check_usable(nodes: Mapping[str, EvidenceNode], evidence_ids: Sequence[str],
                  family: str) -> None:
    for index, used_id in enumerate(evidence_ids):
        node = nodes.get(used_id)
        if node is None:
            problem = "is not in the evidence"
        elif not node.projectable:
            problem = f"is {node.role} and cannot support a proposal"
        elif family == ArtifactFamily.SKILL and node.kind == MEMORY_NODE:
            problem = "is a Memory entry; a Skill rests on Experiences and Sources"
        else:
            continue
        raise InvalidGenerationOutputError(f"evidence id {used_id!r} {problem}",
                                           field=f"evidence_ids[{index}]", evidence_id=used_id)


def _candidate_lineage(chosen: Sequence[EvidenceNode], dependencies: Sequence[EvidenceNode],
                       family: str, target: ArtifactRef | None) -> Lineage:
    # Root Sources are provenance dependencies of everything chosen, not claims of support.
    sources = [node.source for node in dependencies
               if node.role == ROOT and node.source is not None]
    artifacts = [node.artifact for node in chosen
                 if node.kind == EXPERIENCE_NODE and node.artifact is not None]
    if target is not None:
        artifacts.append(target)  # a replacement keeps its exact target ref
    citations = [] if family == ArtifactFamily.SKILL else [
        citation for node in chosen if node.kind == MEMORY_NODE
        for citation in node.memory_citations
    ]
    return Lineage(sources=tuple(sources), artifacts=tuple(artifacts),
                   memory_citations=tuple(citations))


# -- review --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReviewedEvidence:
    """A Candidate's lineage as re-validated for review: the graph, and the root Sources its
    direct Memory citations rest on (which a Candidate carries as direct Sources)."""

    nodes: tuple[EvidenceNode, ...]
    edges: tuple[tuple[str, str], ...]
    citation_roots: tuple[SourceRef, ...]

    def with_citation_roots(self, lineage: Lineage) -> Lineage:
        return Lineage(sources=(*lineage.sources, *self.citation_roots),
                       artifacts=lineage.artifacts, memory_citations=lineage.memory_citations)

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": [node.to_dict() for node in self.nodes],
                "edges": [list(edge) for edge in self.edges],
                "citation_roots": [ref.to_dict() for ref in self.citation_roots]}


def validate_for_review(reader: EvidenceReader, lineage: Lineage) -> ReviewedEvidence:
    """Walk every reference of ``lineage`` with the current reviewer's rights (review-side
    validation in docs/contract.md#evidence-resolution).

    No Dream budgets apply; Memory citations get the full anchor, hash and active checks
    (direct and transitive), so an entry deactivated anywhere below blocks the review step.
    """
    request = RequestedReferences(lineage.sources, lineage.artifacts, lineage.memory_citations)
    graph = Traversal(reader, UNBOUNDED_LIMITS, review=True).walk(request)
    upstream = upstream_index(graph.edges)
    below_citations: set[str] = set()
    for citation in lineage.memory_citations:
        below_citations |= reachable(evidence_id(citation), upstream)
    roots = [graph.nodes[node_id].source for node_id in below_citations
             if graph.nodes[node_id].role == ROOT]
    return ReviewedEvidence(
        nodes=tuple(graph.nodes[node_id] for node_id in sorted(graph.nodes)),
        edges=tuple(sorted(graph.edges)),
        citation_roots=normalise(ref for ref in roots if ref is not None),
    )
