"""Turning a resolved graph into the ``ModelEvidence``: the bodies a model may read, each tagged
with the root groups (independent origins) it rests on."""

from __future__ import annotations

from collections.abc import Mapping

from domain.evidence.graph import EvidenceGraph, reachable, upstream_index
from domain.evidence.manifest import (
    MEMORY_NODE,
    EvidenceNode,
    ModelEvidence,
    ProjectedItem,
    RootGroup,
)


def build_model_evidence(nodes: Mapping[str, EvidenceNode], graph: EvidenceGraph,
                         root_groups: tuple[RootGroup, ...], include_memory_text: bool,
                         incomplete: bool) -> ModelEvidence:
    upstream = upstream_index(graph.edges)
    group_of = {node_id: key.group_id for node_id, key in graph.origins.items()}
    items = []
    for node_id in sorted(nodes):
        node = nodes[node_id]
        # derive_skill: Memory is provenance only, its text never reaches the model.
        if not node.projectable or (node.kind == MEMORY_NODE and not include_memory_text):
            continue
        groups = sorted({group_of[n] for n in reachable(node_id, upstream) if n in group_of})
        items.append(ProjectedItem(node_id, node.kind, graph.bodies[node_id], node.historical,
                                   tuple(groups)))
    return ModelEvidence(tuple(items), root_groups, incomplete)
