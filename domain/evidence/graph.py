"""The lineage graph a walk builds, reachability over its edges, and root groups (origins)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from domain.canonical import canonical_json, sha256_hex
from domain.evidence.manifest import ATTESTED, UNKNOWN, EvidenceNode, RootGroup
from domain.refs import SourceRef, normalise


@dataclass(frozen=True)
class OriginKey:
    """What makes root Sources one origin: a trusted attempt, or else the Source itself."""

    key: str
    attested: bool

    @classmethod
    def of(cls, ref: SourceRef, attempt_id: str | None) -> OriginKey:
        if attempt_id is not None:
            return cls("attempt:" + attempt_id, attested=True)
        return cls(canonical_json(ref.to_dict()), attested=False)

    @property
    def group_id(self) -> str:
        return "root_" + sha256_hex(self.key)[:24]


@dataclass
class EvidenceGraph:
    """Nodes by evidence id, ``(derived_id, upstream_id)`` edges, model-visible bodies, and the
    origin of each root Source node."""

    nodes: dict[str, EvidenceNode] = field(default_factory=dict)
    edges: set[tuple[str, str]] = field(default_factory=set)
    bodies: dict[str, str] = field(default_factory=dict)
    origins: dict[str, OriginKey] = field(default_factory=dict)


def root_groups(graph: EvidenceGraph) -> tuple[RootGroup, ...]:
    members: dict[OriginKey, list[SourceRef]] = {}
    for node_id, key in graph.origins.items():
        source = graph.nodes[node_id].source
        assert source is not None  # only Source nodes are grouped
        members.setdefault(key, []).append(source)
    groups = (RootGroup(key.group_id, normalise(refs), ATTESTED if key.attested else UNKNOWN)
              for key, refs in members.items())
    return tuple(sorted(groups, key=lambda group: group.group_id))


def reachable(start: str, upstream: Mapping[str, Sequence[str]]) -> set[str]:
    """``start`` and everything it derives from (cycle-safe)."""
    seen = {start}
    pending = [start]
    while pending:
        for next_id in upstream.get(pending.pop(), ()):
            if next_id not in seen:
                seen.add(next_id)
                pending.append(next_id)
    return seen


def upstream_index(edges: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    index: dict[str, list[str]] = {}
    for derived, upstream in edges:
        index.setdefault(derived, []).append(upstream)
    return index
