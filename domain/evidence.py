"""Evidence resolution: the lineage graph behind a Dream request, and what the model may see.

``resolve`` walks the exact references of a request (Sources, Experience revisions, Memory entry
versions) through their stored lineage, within the run's budget, and returns

* a content-free **manifest** (node ids, digests, roles, edges, root groups) that the run pins,
  so a retry or the commit can prove it is looking at the same evidence, and
* the **projection**: the bounded, model-visible bodies, each tagged with the root groups
  (independent origins) it rests on.

``select_evidence`` maps the evidence ids a model says it used back to a Candidate's lineage.

Both are pure: every read goes through the ``EvidenceReader`` port, nothing touches a clock, a
store or the network, and the same world always gives the same answer.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Protocol

from domain.access import Resource
from domain.artifact import ACTIVE, Artifact, ArtifactRevision, EntryVersion, ManifestEntry
from domain.budget import effective_budget
from domain.candidate import MAX_CANDIDATE_EVIDENCE
from domain.content import entry_content_hash
from domain.errors import (
    AccessRevokedError,
    DomainError,
    EvidenceLimitExceededError,
    EvidenceUnavailableError,
    InvalidGenerationOutputError,
    InvalidMemoryCitationError,
    MemoryEntryInactiveError,
    MemoryEntryNotFoundError,
    ReferenceNotFoundError,
    SourceNotEligibleError,
)
from domain.identity import canonical_json, digest, sha256_hex
from domain.refs import (
    EXPERIENCE,
    MEMORY,
    PROMPT,
    SKILL,
    ArtifactRef,
    Lineage,
    MemoryCitation,
    SourceRef,
    normalise,
)
from domain.source import ELIGIBLE, Source

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

NEEDS_EVIDENCE_REASON = (
    "selected Memory-derived evidence has no usable root Source supporting task actions and results"
)

EvidenceRef = SourceRef | ArtifactRef | MemoryCitation


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


# -- value types ---------------------------------------------------------------------------------


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
class Projection:
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


@dataclass(frozen=True)
class Resolution:
    manifest: EvidenceManifest
    projection: Projection


@dataclass(frozen=True)
class NeedsEvidence:
    """Selection outcome, not an error: the run succeeds ``needs_evidence`` with no Candidate."""

    reason: str = NEEDS_EVIDENCE_REASON
    outcome: ClassVar[str] = "needs_evidence"


# -- identity ------------------------------------------------------------------------------------


def evidence_id(ref: EvidenceRef) -> str:
    """Stable node id. A Memory entry version is one node whichever Memory revision cites it."""
    if isinstance(ref, MemoryCitation):
        # One entry version cited through several Memory revisions is one node; a JSON array
        # keeps the identity injective even though ids may contain ':'.
        identity = canonical_json(["memory", ref.memory_ref.artifact_id, ref.entry_id,
                                   ref.entry_version_id])
    else:
        identity = canonical_json(ref.to_dict())
    return "e_" + sha256_hex(identity)[:32]


@dataclass(frozen=True)
class _GroupKey:
    """What makes root Sources one origin: a trusted attempt, or else the Source itself."""

    key: str
    attested: bool

    @classmethod
    def of(cls, ref: SourceRef, attempt_id: str | None) -> _GroupKey:
        if attempt_id is not None:
            return cls("attempt:" + attempt_id, attested=True)
        return cls(canonical_json(ref.to_dict()), attested=False)

    @property
    def group_id(self) -> str:
        return "root_" + sha256_hex(self.key)[:24]


# -- traversal bookkeeping -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Limits:
    max_items: int
    max_bytes: int
    max_nodes: int
    max_edges: int
    max_depth: int

    @classmethod
    def from_budget(cls, budget: Mapping[str, int]) -> _Limits:
        # Missing limits take their defaults; one above its ceiling is refused, not clamped.
        checked = effective_budget(budget)
        return cls(checked["max_items"], checked["max_bytes"], checked["max_nodes"],
                   checked["max_edges"], checked["max_depth"])


@dataclass(frozen=True)
class _Request:
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
class _Step:
    """Where a visit happens: the request field it descends from, and how deep."""

    field: str
    depth: int = 0

    @property
    def direct(self) -> bool:
        return self.depth == 0

    def child(self) -> _Step:
        return _Step(self.field, self.depth + 1)


@dataclass(frozen=True)
class _Read:
    """One node as read, with what the walk needs next and what the projection shows."""

    node: EvidenceNode
    children: tuple[EvidenceRef, ...] = ()
    body: str | None = None
    group: _GroupKey | None = None


@dataclass(frozen=True)
class _Visit:
    """A reference to visit, and the node whose lineage named it (None: requested)."""

    ref: EvidenceRef
    step: _Step
    derived_id: str | None = None


@dataclass
class _Graph:
    nodes: dict[str, EvidenceNode] = field(default_factory=dict)
    edges: set[tuple[str, str]] = field(default_factory=set)
    bodies: dict[str, str] = field(default_factory=dict)
    groups: dict[str, _GroupKey] = field(default_factory=dict)


def _details(ref: EvidenceRef, step: _Step, **extra: Any) -> dict[str, Any]:
    where: dict[str, Any] = (
        {"field": step.field} if step.direct else {"reached_from": step.field, "depth": step.depth}
    )
    return {**where, "reference": ref.to_dict(), **extra}


def _describe(ref: EvidenceRef) -> str:
    if isinstance(ref, SourceRef):
        return f"source {ref.source_type}/{ref.source_id}"
    if isinstance(ref, MemoryCitation):
        return (f"memory {ref.memory_ref.artifact_id} revision {ref.memory_ref.revision} "
                f"entry {ref.entry_id} version {ref.entry_version_id}")
    return f"{ref.family} {ref.artifact_id} revision {ref.revision}"


def _missing(ref: EvidenceRef, step: _Step) -> DomainError:
    """A requested reference that is absent is the caller's mistake; one in lineage is a gap."""
    if step.direct:
        return ReferenceNotFoundError(f"{_describe(ref)} does not exist", **_details(ref, step))
    return EvidenceUnavailableError(f"{_describe(ref)}, found in lineage, is not available",
                                    **_details(ref, step))


def _resource(ref: EvidenceRef) -> Resource:
    if isinstance(ref, SourceRef):
        return Resource.source(ref.source_type, ref.source_id)
    if isinstance(ref, MemoryCitation):
        return Resource.artifact(MEMORY, ref.memory_ref.artifact_id)
    return Resource.artifact(ref.family, ref.artifact_id)


# -- per-kind readers ----------------------------------------------------------------------------


def _read_source(reader: EvidenceReader, ref: SourceRef, step: _Step) -> _Read:
    source = reader.source(ref)
    # A withdrawn Source was erased: as evidence it is simply gone.
    if source is None or source.withdrawn or source.text is None or source.payload is None:
        raise _missing(ref, step)
    # The stored Source value; its digest is the same formula as Source.content_hash.
    value = {"source_type": source.source_type, "source_id": source.source_id,
             "text": source.text, "payload": source.payload,
             "eligibility": source.eligibility, "attempt_id": source.attempt_id}
    node = EvidenceNode(evidence_id(ref), SOURCE_NODE, digest(value), source=ref, role=ROOT)
    if source.eligibility != ELIGIBLE:
        if step.direct:
            raise _not_eligible(ref, step)
        # A management-write record: provenance only, never expanded, grouped or shown.
        return _Read(replace(node, role=LINEAGE_ONLY))
    return _Read(node, body=canonical_json(value), group=_GroupKey.of(ref, source.attempt_id))


def _not_eligible(ref: SourceRef, step: _Step) -> SourceNotEligibleError:
    return SourceNotEligibleError(f"{_describe(ref)} is lineage-only and cannot be evidence",
                                  **_details(ref, step))


def _read_artifact(reader: EvidenceReader, ref: ArtifactRef, step: _Step) -> _Read:
    revision, head = _exact_revision(reader, ref, step)
    node = EvidenceNode(evidence_id(ref), UNRESOLVED_NODE, _revision_digest(ref, revision),
                        artifact=ref, role=UNRESOLVED)
    if ref.family == PROMPT:
        # Generation configuration: provenance, never evidence, and not an evidence gap.
        return _Read(replace(node, role=LINEAGE_ONLY))
    if ref.family != EXPERIENCE:
        # A Skill, or a whole Memory (never authority to read all its entries): a gap.
        return _Read(node)
    lineage = revision.lineage
    return _Read(
        replace(node, kind=EXPERIENCE_NODE, role=DERIVED, historical=ref.revision != head),
        children=(*lineage.sources, *lineage.artifacts, *lineage.memory_citations),
        body=canonical_json(revision.content),
    )


def _read_reviewed_artifact(reader: EvidenceReader, ref: ArtifactRef, step: _Step) -> _Read:
    """Review follows the stored lineage of every family but Prompts, so a Skill's historical
    revisions, the Experiences behind them and their Memory entries are all re-checked."""
    revision, head = _exact_revision(reader, ref, step)
    kind = EXPERIENCE_NODE if ref.family == EXPERIENCE else f"{ref.family}_revision"
    node = EvidenceNode(evidence_id(ref), kind, _revision_digest(ref, revision), artifact=ref,
                        role=DERIVED, historical=ref.revision != head)
    if ref.family == PROMPT:
        return _Read(replace(node, role=LINEAGE_ONLY))
    lineage = revision.lineage
    return _Read(node, children=(*lineage.sources, *lineage.artifacts, *lineage.memory_citations))


def _exact_revision(reader: EvidenceReader, ref: ArtifactRef,
                    step: _Step) -> tuple[ArtifactRevision, int]:
    artifact = reader.artifact(ref.family, ref.artifact_id)
    if artifact is None or artifact.family != ref.family or not (
        1 <= ref.revision <= artifact.head_revision
    ):
        raise _missing(ref, step)
    return artifact.revision(ref.revision), artifact.head_revision


def _revision_digest(ref: ArtifactRef, revision: ArtifactRevision) -> str:
    return digest({**ref.to_dict(), "content": revision.content,
                   "lineage": revision.lineage.to_dict(), "provenance": revision.provenance})


def _read_citation(reader: EvidenceReader, citation: MemoryCitation, step: _Step) -> _Read:
    memory = reader.artifact(MEMORY, citation.memory_ref.artifact_id)
    if memory is None or memory.family != MEMORY:
        raise _missing(citation, step)
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
    return _Read(node, children=(*version.sources, *version.artifacts),
                 body=canonical_json(_entry_body(memory.artifact_id, version)))


def _invalid_citation(citation: MemoryCitation, step: _Step,
                      reason: str) -> InvalidMemoryCitationError:
    return InvalidMemoryCitationError(f"{_describe(citation)}: {reason}",
                                      **_details(citation, step, reason=reason))


def _cited_manifest_entry(memory: Artifact, citation: MemoryCitation,
                          step: _Step) -> ManifestEntry:
    if not 1 <= citation.memory_ref.revision <= memory.head_revision:
        raise _invalid_citation(citation, step, "the cited Memory revision does not exist")
    entry = memory.manifest(citation.memory_ref.revision).get(citation.entry_id)
    if entry is None or entry.entry_version_id != citation.entry_version_id:
        raise _invalid_citation(citation, step,
                                "the cited revision does not hold this entry version")
    return entry


def _check_active(cited: ManifestEntry, head: ManifestEntry | None,
                  citation: MemoryCitation, step: _Step) -> None:
    """Active when cited and still active now: an old snapshot cannot bypass deactivation."""
    if cited.status != ACTIVE or head is None or head.status != ACTIVE:
        raise MemoryEntryInactiveError(
            f"{_describe(citation)} is not active",
            **_details(citation, step, cited_status=cited.status,
                       current_status=None if head is None else head.status),
        )


def _verified_entry_version(memory: Artifact, citation: MemoryCitation, cited: ManifestEntry,
                            step: _Step) -> EntryVersion:
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


def _merge_citation(known: EvidenceNode, fresh: EvidenceNode) -> EvidenceNode:
    """One entry version cited through several Memory revisions stays one node.

    It is current (not historical) if any citation pins the head, so the flag does not depend
    on which path the walk happened to take first.
    """
    return replace(known,
                   memory_citations=normalise((*known.memory_citations,
                                               *fresh.memory_citations)),
                   historical=known.historical and fresh.historical,
                   current_entry_version_id=fresh.current_entry_version_id)


# -- the walk ------------------------------------------------------------------------------------


class _Traversal:
    """Breadth-first walk of the lineage graph, bounded by the budget and safe against cycles.

    Level by level, so every requested reference is read first as a direct one (its errors
    are the caller's, with its field), and a node's depth is its shortest distance from the
    request: the answer never depends on which path happens to be walked first.
    """

    def __init__(self, reader: EvidenceReader, limits: _Limits, *, review: bool = False) -> None:
        self.reader = reader
        self.limits = limits
        self.review = review  # review follows every family's lineage (anchor §4.8)
        self.graph = _Graph()

    def walk(self, request: _Request) -> _Graph:
        level = [_Visit(ref, _Step(f"{name}[{index}]"))
                 for name, refs in request.fields() for index, ref in enumerate(refs)]
        while level:
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
            fresh = _read_citation(self.reader, ref, step)
            self.graph.nodes[node_id] = _merge_citation(known, fresh.node)
        if visit.derived_id is not None:
            self._add_edge(visit.derived_id, node_id, ref, step)
        return children

    def _read(self, ref: EvidenceRef, step: _Step) -> _Read:
        if isinstance(ref, SourceRef):
            return _read_source(self.reader, ref, step)
        if isinstance(ref, MemoryCitation):
            return _read_citation(self.reader, ref, step)
        if self.review:
            return _read_reviewed_artifact(self.reader, ref, step)
        return _read_artifact(self.reader, ref, step)

    def _authorise(self, ref: EvidenceRef, step: _Step) -> None:
        try:
            self.reader.check_read(_resource(ref))
        except AccessRevokedError as error:
            raise AccessRevokedError(f"the requester may not read {_describe(ref)}",
                                     **_details(ref, step)) from error

    def _check_depth(self, ref: EvidenceRef, step: _Step) -> None:
        if step.depth > self.limits.max_depth:
            raise _over_limit("max_depth", self.limits.max_depth, step.depth,
                              **_details(ref, step))

    def _add_node(self, read: _Read, ref: EvidenceRef, step: _Step) -> None:
        node_id = read.node.evidence_id
        self.graph.nodes[node_id] = read.node
        if read.body is not None:
            self.graph.bodies[node_id] = read.body
        if read.group is not None:
            self.graph.groups[node_id] = read.group
        if len(self.graph.nodes) > self.limits.max_nodes:
            raise _over_limit("max_nodes", self.limits.max_nodes, len(self.graph.nodes),
                              **_details(ref, step))

    def _add_edge(self, derived_id: str, upstream_id: str, ref: EvidenceRef,
                  step: _Step) -> None:
        self.graph.edges.add((derived_id, upstream_id))
        if len(self.graph.edges) > self.limits.max_edges:
            raise _over_limit("max_edges", self.limits.max_edges, len(self.graph.edges),
                              **_details(ref, step))


def _over_limit(limit: str, maximum: int, actual: int,
                **details: Any) -> EvidenceLimitExceededError:
    return EvidenceLimitExceededError(f"evidence exceeds {limit} = {maximum}", limit=limit,
                                      maximum=maximum, actual=actual, **details)


# -- root groups and projection ------------------------------------------------------------------


def _root_groups(graph: _Graph) -> tuple[RootGroup, ...]:
    members: dict[_GroupKey, list[SourceRef]] = {}
    for node_id, key in graph.groups.items():
        source = graph.nodes[node_id].source
        assert source is not None  # only Source nodes are grouped
        members.setdefault(key, []).append(source)
    groups = (RootGroup(key.group_id, normalise(refs), ATTESTED if key.attested else UNKNOWN)
              for key, refs in members.items())
    return tuple(sorted(groups, key=lambda group: group.group_id))


def _reachable(start: str, upstream: Mapping[str, Sequence[str]]) -> set[str]:
    """``start`` and everything it derives from (cycle-safe)."""
    seen = {start}
    pending = [start]
    while pending:
        for next_id in upstream.get(pending.pop(), ()):
            if next_id not in seen:
                seen.add(next_id)
                pending.append(next_id)
    return seen


def _upstream_index(edges: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    index: dict[str, list[str]] = {}
    for derived, upstream in edges:
        index.setdefault(derived, []).append(upstream)
    return index


def _project(nodes: Mapping[str, EvidenceNode], graph: _Graph, root_groups: tuple[RootGroup, ...],
             include_memory_text: bool, incomplete: bool) -> Projection:
    upstream = _upstream_index(graph.edges)
    group_of = {node_id: key.group_id for node_id, key in graph.groups.items()}
    items = []
    for node_id in sorted(nodes):
        node = nodes[node_id]
        # derive_skill: Memory is provenance only, its text never reaches the model.
        if not node.projectable or (node.kind == MEMORY_NODE and not include_memory_text):
            continue
        groups = sorted({group_of[n] for n in _reachable(node_id, upstream) if n in group_of})
        items.append(ProjectedItem(node_id, node.kind, graph.bodies[node_id], node.historical,
                                   tuple(groups)))
    return Projection(tuple(items), root_groups, incomplete)


def _check_projection(projection: Projection, limits: _Limits) -> None:
    if len(projection.items) > limits.max_items:
        raise _over_limit("max_items", limits.max_items, len(projection.items))
    if projection.size > limits.max_bytes:
        raise _over_limit("max_bytes", limits.max_bytes, projection.size)


# -- pinning -------------------------------------------------------------------------------------


def _drift(what: str, **details: Any) -> EvidenceUnavailableError:
    return EvidenceUnavailableError(f"the evidence no longer matches the pinned manifest: {what}",
                                    drift=what, **details)


def _unfrozen(node: EvidenceNode) -> EvidenceNode:
    """A node without the flags a pin freezes (they may legitimately move after pinning)."""
    return replace(node, historical=False, current_entry_version_id=None)


def _check_pinned(pinned: EvidenceManifest, request: _Request, graph: _Graph) -> None:
    if pinned.transform_version != TRANSFORM_VERSION:
        raise _drift("transform_version", pinned=pinned.transform_version,
                     current=TRANSFORM_VERSION)
    if not request.matches(pinned):
        raise _drift("requested references")
    pinned_nodes = {node.evidence_id: node for node in pinned.nodes}
    if set(pinned_nodes) != set(graph.nodes):
        raise _drift("nodes", added=sorted(set(graph.nodes) - set(pinned_nodes)),
                     removed=sorted(set(pinned_nodes) - set(graph.nodes)))
    if set(pinned.edges) != graph.edges:
        raise _drift("edges", added=sorted(graph.edges - set(pinned.edges)),
                     removed=sorted(set(pinned.edges) - graph.edges))
    for node_id, node in graph.nodes.items():
        # Digest and citations are what the contract names; kind, role and refs follow
        # from them, and comparing them too keeps a tampered pin from changing the projection.
        if _unfrozen(pinned_nodes[node_id]) != _unfrozen(node):
            raise _drift("node", evidence_id=node_id, pinned_digest=pinned_nodes[node_id].digest,
                         current_digest=node.digest)


# -- resolve -------------------------------------------------------------------------------------


def resolve(reader: EvidenceReader, *, sources: Sequence[SourceRef],
            artifacts: Sequence[ArtifactRef], memory_citations: Sequence[MemoryCitation],
            budget: Mapping[str, int], include_memory_text: bool = True,
            pinned: EvidenceManifest | None = None) -> Resolution:
    """Resolve and project the evidence of a request (already normalised, in request order).

    With ``pinned``, the current world must reproduce the pinned graph exactly, else
    ``evidence_unavailable``; the pinned flags (``historical``...) are kept, so a retry or the
    commit sees what the first attempt saw and never switches to "latest".
    """
    limits = _Limits.from_budget(budget)
    request = _Request(tuple(sources), tuple(artifacts), tuple(memory_citations))
    graph = _walk(reader, limits, request, pinned)
    nodes = graph.nodes
    if pinned is not None:
        _check_pinned(pinned, request, graph)
        nodes = {node.evidence_id: node for node in pinned.nodes}
    incomplete = any(node.role == UNRESOLVED for node in nodes.values())
    root_groups = _root_groups(graph)
    projection = _project(nodes, graph, root_groups, include_memory_text, incomplete)
    if pinned is not None and projection.digest != pinned.projection_digest:
        raise _drift("projection", pinned=pinned.projection_digest, current=projection.digest)
    _check_projection(projection, limits)
    manifest = EvidenceManifest(
        transform_version=TRANSFORM_VERSION, artifacts=request.artifacts,
        memory_citations=request.memory_citations, sources=request.sources,
        nodes=tuple(nodes[node_id] for node_id in sorted(nodes)),
        edges=tuple(sorted(graph.edges)), root_groups=root_groups,
        projection_digest=projection.digest, projection_bytes=projection.size,
        incomplete=incomplete,
    )
    return Resolution(manifest, projection)


def _walk(reader: EvidenceReader, limits: _Limits, request: _Request,
          pinned: EvidenceManifest | None) -> _Graph:
    try:
        return _Traversal(reader, limits).walk(request)
    except (ReferenceNotFoundError, InvalidMemoryCitationError) as error:
        if pinned is None:
            raise
        # After pinning, a reference that vanished or no longer anchors is drift.
        raise _drift("reference", cause=error.code, **error.details) from error


# -- review -------------------------------------------------------------------------------------

_UNBOUNDED = _Limits(max_items=sys.maxsize, max_bytes=sys.maxsize, max_nodes=sys.maxsize,
                     max_edges=sys.maxsize, max_depth=sys.maxsize)


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
    """Anchor §4.8: walk every reference of ``lineage`` with the current reviewer's rights.

    No Dream budgets apply; Memory citations get the full anchor, hash and active checks
    (direct and transitive), so an entry deactivated anywhere below blocks the review step.
    """
    request = _Request(lineage.sources, lineage.artifacts, lineage.memory_citations)
    graph = _Traversal(reader, _UNBOUNDED, review=True).walk(request)
    upstream = _upstream_index(graph.edges)
    below_citations: set[str] = set()
    for citation in lineage.memory_citations:
        below_citations |= _reachable(evidence_id(citation), upstream)
    roots = [graph.nodes[node_id].source for node_id in below_citations
             if graph.nodes[node_id].role == ROOT]
    return ReviewedEvidence(
        nodes=tuple(graph.nodes[node_id] for node_id in sorted(graph.nodes)),
        edges=tuple(sorted(graph.edges)),
        citation_roots=normalise(ref for ref in roots if ref is not None),
    )


# -- selection -----------------------------------------------------------------------------------


def select_evidence(manifest: EvidenceManifest, evidence_ids: Sequence[str], *, family: str,
                    target: ArtifactRef | None = None) -> Lineage | NeedsEvidence:
    """Map the ids a model used to the Candidate's exact references (anchor §4.7).

    Returns the Candidate lineage, or ``NeedsEvidence`` when Memory-derived support has no root
    Source. Raises ``invalid_generation_output`` for an id the model may not use and
    ``evidence_limit_exceeded`` above the Candidate reference limit.
    """
    nodes = {node.evidence_id: node for node in manifest.nodes}
    _check_usable(nodes, evidence_ids, family)
    upstream = _upstream_index(manifest.edges)
    chosen = set(evidence_ids)
    # Keep the requested entry or Experience through which a used root was reached.
    origins: tuple[EvidenceRef, ...] = (*manifest.artifacts, *manifest.memory_citations)
    for origin in origins:
        origin_id = evidence_id(origin)
        if origin_id in nodes and _reachable(origin_id, upstream) & chosen:
            chosen.add(origin_id)
    dependencies: set[str] = set()
    for node_id in chosen:
        dependencies |= _reachable(node_id, upstream)
    lineage = _candidate_lineage([nodes[i] for i in sorted(chosen)],
                                 [nodes[i] for i in sorted(dependencies)], family, target)
    if any(nodes[i].kind == MEMORY_NODE for i in dependencies) and not lineage.sources:
        return NeedsEvidence()
    if family == SKILL and not lineage.artifacts:
        raise InvalidGenerationOutputError("a Skill must rest on at least one Experience",
                                           field="evidence_ids")
    if len(lineage) > MAX_CANDIDATE_EVIDENCE:
        raise _over_limit("candidate_references", MAX_CANDIDATE_EVIDENCE, len(lineage),
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
        elif family == SKILL and node.kind == MEMORY_NODE:
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
    citations = [] if family == SKILL else [
        citation for node in chosen if node.kind == MEMORY_NODE
        for citation in node.memory_citations
    ]
    return Lineage(sources=tuple(sources), artifacts=tuple(artifacts),
                   memory_citations=tuple(citations))
