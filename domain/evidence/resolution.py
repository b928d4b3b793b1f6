"""Resolving a request: the read port, the bounded walk of the lineage graph, and ``resolve``.

``resolve`` returns a content-free ``EvidenceManifest`` the run pins, so a retry or the commit can
prove it is looking at the same evidence, and the ``ModelEvidence`` shown to the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from domain.access import Resource
from domain.artifact import Artifact
from domain.budget import Budget
from domain.errors import AccessRevokedError, InvalidMemoryCitationError, ReferenceNotFoundError
from domain.evidence.graph import EvidenceGraph, root_groups
from domain.evidence.limits import EvidenceLimits, check_model_evidence, over_limit
from domain.evidence.manifest import (
    TRANSFORM_VERSION,
    UNRESOLVED,
    EvidenceManifest,
    ModelEvidence,
)
from domain.evidence.pinning import check_pinned, drift
from domain.evidence.presentation import build_model_evidence
from domain.evidence.references import (
    NodeRead,
    RequestedReferences,
    WalkStep,
    describe,
    error_details,
    merge_citation,
    read_artifact,
    read_artifact_for_review,
    read_citation,
    read_source,
    resource_of,
)
from domain.ids import EvidenceRef, evidence_id
from domain.refs import ArtifactFamily, ArtifactRef, MemoryCitation, SourceRef
from domain.source import Source


class EvidenceReader(Protocol):
    """The read port: current state of Sources and Artifacts, and the requester's read access."""

    def source(self, ref: SourceRef) -> Source | None:
        """The Source, or None when it does not exist."""
        ...

    def artifact(self, family: str, artifact_id: str) -> Artifact | None:
        """The whole aggregate (all revisions), or None when it does not exist."""
        ...

    def check_read(self, resource: Resource) -> None:
        """Raise ``AccessRevokedError`` when the requester may not read ``resource`` now."""
        ...

    def read_ahead(self, refs: Sequence[EvidenceRef]) -> None:
        """A hint that ``refs`` are about to be read: a reader may fetch them together."""
        ...


@dataclass(frozen=True)
class Resolution:
    manifest: EvidenceManifest
    projection: ModelEvidence


@dataclass(frozen=True)
class _Visit:
    """A reference to visit, and the node whose lineage named it (None: requested)."""

    ref: EvidenceRef
    step: WalkStep
    derived_id: str | None = None


class Traversal:
    """Breadth-first walk of the lineage graph, bounded by the budget and safe against cycles.

    Level by level, so every requested reference is read first as a direct one (its errors
    are the caller's, with its field), and a node's depth is its shortest distance from the
    request: the answer never depends on which path happens to be walked first.
    """

    def __init__(self, reader: EvidenceReader, limits: EvidenceLimits, *,
                 review: bool = False) -> None:
        self.reader = reader
        self.limits = limits
        self.review = review  # review follows every family's lineage (contract.md#review)
        self.graph = EvidenceGraph()

    def walk(self, request: RequestedReferences) -> EvidenceGraph:
        level = [_Visit(ref, WalkStep(f"{name}[{index}]"))
                 for name, refs in request.fields() for index, ref in enumerate(refs)]
        while level:
            self.reader.read_ahead([visit.ref for visit in level])
            level = [child for visit in level for child in self._visit(visit)]
        return self.graph

    def _visit(self, visit: _Visit) -> list[_Visit]:
        """One visit along one edge (or of one requested ref); returns the children to visit."""
        ref, step = visit.ref, visit.step
        self._authorise(ref, step)  # on every visit, revisits included
        node_id = evidence_id(ref)
        known = self.graph.nodes.get(node_id)
        children: list[_Visit] = []
        if known is None:
            self._check_depth(ref, step)
            read = self._read(ref, step)
            self._add_node(read, ref, step)
            children = [_Visit(child, step.child(), node_id) for child in read.children]
        elif isinstance(ref, MemoryCitation):
            # Another citation of the same entry version: re-check it, never re-expand it.
            fresh = self._read(ref, step)
            self.graph.nodes[node_id] = merge_citation(known, fresh.node)
        if visit.derived_id is not None:
            self._add_edge(visit.derived_id, node_id, ref, step)
        return children

    def _read(self, ref: EvidenceRef, step: WalkStep) -> NodeRead:
        if isinstance(ref, SourceRef):
            return read_source(self.reader.source(ref), ref, step)
        if isinstance(ref, MemoryCitation):
            memory = self.reader.artifact(ArtifactFamily.MEMORY, ref.memory_ref.artifact_id)
            return read_citation(memory, ref, step)
        artifact = self.reader.artifact(ref.family, ref.artifact_id)
        if self.review:
            return read_artifact_for_review(artifact, ref, step)
        return read_artifact(artifact, ref, step)

    def _authorise(self, ref: EvidenceRef, step: WalkStep) -> None:
        try:
            self.reader.check_read(resource_of(ref))
        except AccessRevokedError as error:
            raise AccessRevokedError(f"the requester may not read {describe(ref)}",
                                     **error_details(ref, step)) from error

    def _check_depth(self, ref: EvidenceRef, step: WalkStep) -> None:
        if step.depth > self.limits.max_depth:
            raise over_limit("max_depth", self.limits.max_depth, step.depth,
                             **error_details(ref, step))

    def _add_node(self, read: NodeRead, ref: EvidenceRef, step: WalkStep) -> None:
        node_id = read.node.evidence_id
        self.graph.nodes[node_id] = read.node
        if read.body is not None:
            self.graph.bodies[node_id] = read.body
        if read.origin is not None:
            self.graph.origins[node_id] = read.origin
        if len(self.graph.nodes) > self.limits.max_nodes:
            raise over_limit("max_nodes", self.limits.max_nodes, len(self.graph.nodes),
                             **error_details(ref, step))

    def _add_edge(self, derived_id: str, upstream_id: str, ref: EvidenceRef,
                  step: WalkStep) -> None:
        self.graph.edges.add((derived_id, upstream_id))
        if len(self.graph.edges) > self.limits.max_edges:
            raise over_limit("max_edges", self.limits.max_edges, len(self.graph.edges),
                             **error_details(ref, step))


def resolve(reader: EvidenceReader, *, sources: Sequence[SourceRef],
            artifacts: Sequence[ArtifactRef], memory_citations: Sequence[MemoryCitation],
            budget: Budget, include_memory_text: bool = True,
            pinned: EvidenceManifest | None = None) -> Resolution:
    """Resolve and project the evidence of a request (already normalised, in request order).

    With ``pinned``, the current world must reproduce the pinned graph exactly, else
    ``evidence_unavailable``; the pinned flags (``historical``...) are kept, so a retry or the
    commit sees what the first attempt saw and never switches to "latest".
    """
    limits = EvidenceLimits.from_budget(budget)
    request = RequestedReferences(tuple(sources), tuple(artifacts), tuple(memory_citations))
    graph = _walk(reader, limits, request, pinned)
    nodes = graph.nodes
    if pinned is not None:
        check_pinned(pinned, request, graph)
        nodes = {node.evidence_id: node for node in pinned.nodes}
    incomplete = any(node.role == UNRESOLVED for node in nodes.values())
    groups = root_groups(graph)
    evidence = build_model_evidence(nodes, graph, groups, include_memory_text, incomplete)
    if pinned is not None and evidence.digest != pinned.projection_digest:
        raise drift("projection", pinned=pinned.projection_digest, current=evidence.digest)
    check_model_evidence(evidence, limits)
    manifest = EvidenceManifest(
        transform_version=TRANSFORM_VERSION, artifacts=request.artifacts,
        memory_citations=request.memory_citations, sources=request.sources,
        nodes=tuple(nodes[node_id] for node_id in sorted(nodes)),
        edges=tuple(sorted(graph.edges)), root_groups=groups,
        projection_digest=evidence.digest, projection_bytes=evidence.size,
        incomplete=incomplete,
    )
    return Resolution(manifest, evidence)


def _walk(reader: EvidenceReader, limits: EvidenceLimits, request: RequestedReferences,
          pinned: EvidenceManifest | None) -> EvidenceGraph:
    try:
        return Traversal(reader, limits).walk(request)
    except (ReferenceNotFoundError, InvalidMemoryCitationError) as error:
        if pinned is None:
            raise
        # After pinning, a reference that vanished or no longer anchors is drift.
        raise drift("reference", cause=error.code, **error.details) from error
