"""The nodes of the provenance graph: exact versions named by stable keys, and the checks a
query's node passes (see ``projections.provenance`` for the graph itself).

- ``artifact_revision`` ``"<family>/<artifact_id>@<revision>"``
- ``candidate_version`` ``"<candidate_id>@<version>"``
- ``entry_version`` ``"<memory_id>/<entry_id>@<entry_version_id>"``
- ``source`` ``"<source_type>/<source_id>"`` (``%`` and ``/`` in the source type are
  percent-encoded, so the first ``/`` always separates the two parts)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from domain.access import Resource
from domain.errors import DomainError, InvalidRequestError
from domain.refs import (
    ArtifactFamily,
    ArtifactRef,
    Lineage,
    MemoryCitation,
    SourceRef,
    check_family,
)
from domain.text import has_control_characters
from projections.checks import check_bounded_int, check_choice

ARTIFACT_REVISION = "artifact_revision"
CANDIDATE_VERSION = "candidate_version"
ENTRY_VERSION = "entry_version"
SOURCE = "source"
NODE_KINDS = (ARTIFACT_REVISION, CANDIDATE_VERSION, ENTRY_VERSION, SOURCE)
DEFAULT_MAX_DEPTH = 50
MAX_DEPTH = 1000
MAX_KEY_CHARS = 1024


# -- nodes ------------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Node:
    """One exact thing in the lineage graph: a ``kind`` from :data:`NODE_KINDS` and its key."""

    kind: str
    key: str


@dataclass(frozen=True)
class Dependent:
    """A node that depends on the queried one, ``depth`` edges away at the least (1: direct)."""

    kind: str
    key: str
    depth: int

    @property
    def node(self) -> Node:
        return Node(self.kind, self.key)


@dataclass(frozen=True, order=True)
class Edge:
    """``dependent`` depends on ``dependency``; ``position`` is the event that said so first."""

    dependent: Node
    dependency: Node
    position: int


def _escape_source_type(source_type: str) -> str:
    return source_type.replace("%", "%25").replace("/", "%2F")


def source_key(ref: SourceRef) -> str:
    return f"{_escape_source_type(ref.source_type)}/{ref.source_id}"


def artifact_key(ref: ArtifactRef) -> str:
    return f"{ref.family}/{ref.artifact_id}@{ref.revision}"


def entry_key(memory_id: str, entry_id: str, entry_version_id: str) -> str:
    return f"{memory_id}/{entry_id}@{entry_version_id}"


def candidate_key(candidate_id: str, version: int) -> str:
    return f"{candidate_id}@{version}"


def guarding_resource(kind: str, key: str) -> Resource | None:
    """What a reader needs read access to in order to see a node (``None``: the scope only).

    Sources are guarded by themselves; Artifact revisions by their Artifact; entry versions by
    their Memory. A malformed key is ``invalid_request``.
    """
    check_node_kind(kind)
    try:
        if kind == SOURCE:
            escaped, _, source_id = key.partition("/")
            source_type = escaped.replace("%2F", "/").replace("%25", "%")
            return Resource.source(source_type, source_id)
        if kind == ARTIFACT_REVISION:
            family, _, rest = key.partition("/")
            return Resource.artifact(family, rest.rpartition("@")[0])
        if kind == ENTRY_VERSION:
            return Resource.artifact(ArtifactFamily.MEMORY, key.partition("/")[0])
    except DomainError as error:
        raise InvalidRequestError(f"{key!r} is not a {kind} key", field="key",
                                  kind=kind) from error
    return None


def node(ref: SourceRef | ArtifactRef | MemoryCitation) -> Node:
    """The node a lineage reference points at (a citation: its exact entry version)."""
    if isinstance(ref, SourceRef):
        return Node(SOURCE, source_key(ref))
    if isinstance(ref, ArtifactRef):
        return Node(ARTIFACT_REVISION, artifact_key(ref))
    return entry_node(ref.memory_ref.artifact_id, ref.entry_id, ref.entry_version_id)


def node_key(ref: SourceRef | ArtifactRef | MemoryCitation) -> str:
    """The key of the node a reference points at, as stored in ``provenance_edges``."""
    return node(ref).key


def artifact_node(family: str, artifact_id: str, revision: int) -> Node:
    """An Artifact revision's node, from the parts a view keeps as text."""
    return node(ArtifactRef(check_family(family), artifact_id, revision))


def entry_node(memory_id: str, entry_id: str, entry_version_id: str) -> Node:
    return Node(ENTRY_VERSION, entry_key(memory_id, entry_id, entry_version_id))


def candidate_node(candidate_id: str, version: int) -> Node:
    return Node(CANDIDATE_VERSION, candidate_key(candidate_id, version))


def lineage_nodes(lineage: Lineage) -> list[Node]:
    """Everything a lineage names: its Sources, Artifact revisions and cited entry versions."""
    refs: list[SourceRef | ArtifactRef | MemoryCitation] = [
        *lineage.sources, *lineage.artifacts, *lineage.memory_citations]
    return [node(ref) for ref in refs]


def check_node_kind(kind: object) -> str:
    return check_choice("kind", kind, NODE_KINDS)


def check_node_key(key: object) -> str:
    """A key to look up: text without control characters (no node has one, and PostgreSQL
    text cannot even hold NUL)."""
    if (not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY_CHARS
            or has_control_characters(key)):
        raise InvalidRequestError(
            f"key must be 1-{MAX_KEY_CHARS} characters without control characters",
            field="key", limit_chars=MAX_KEY_CHARS)
    return key


def check_max_depth(max_depth: object) -> int:
    return check_bounded_int("max_depth", max_depth, MAX_DEPTH)


def erased_nodes(records: Iterable[Mapping[str, Any]]) -> list[Node]:
    """The provenance nodes of erased records (as an ``Erasure`` names them): a Source, or
    every version of a Memory entry."""
    nodes = []
    for record in records:
        if record["kind"] == "source":
            ref = SourceRef(source_type=record["source_type"], source_id=record["source_id"])
            nodes.append(Node(SOURCE, source_key(ref)))
        else:
            nodes.extend(Node(ENTRY_VERSION, entry_key(record["memory_id"], record["entry_id"],
                                                       version["entry_version_id"]))
                         for version in record["versions"])
    return nodes
