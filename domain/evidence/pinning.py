"""Proving the current world still reproduces a pinned manifest.

A retry or the commit must see exactly what the first attempt saw; any difference is
``evidence_unavailable`` with the kind of drift, never a silent switch to the latest evidence.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from domain.errors import EvidenceUnavailableError
from domain.evidence.graph import EvidenceGraph
from domain.evidence.manifest import TRANSFORM_VERSION, EvidenceManifest, EvidenceNode
from domain.evidence.references import RequestedReferences


def drift(what: str, **details: Any) -> EvidenceUnavailableError:
    return EvidenceUnavailableError(f"the evidence no longer matches the pinned manifest: {what}",
                                    drift=what, **details)


def check_pinned(pinned: EvidenceManifest, request: RequestedReferences,
                 graph: EvidenceGraph) -> None:
    if pinned.transform_version != TRANSFORM_VERSION:
        raise drift("transform_version", pinned=pinned.transform_version,
                    current=TRANSFORM_VERSION)
    if not request.matches(pinned):
        raise drift("requested references")
    pinned_nodes = {node.evidence_id: node for node in pinned.nodes}
    if set(pinned_nodes) != set(graph.nodes):
        raise drift("nodes", added=sorted(set(graph.nodes) - set(pinned_nodes)),
                    removed=sorted(set(pinned_nodes) - set(graph.nodes)))
    if set(pinned.edges) != graph.edges:
        raise drift("edges", added=sorted(graph.edges - set(pinned.edges)),
                    removed=sorted(set(pinned.edges) - graph.edges))
    for node_id, node in graph.nodes.items():
        # Digest and citations are what the contract names; kind, role and refs follow
        # from them, and comparing them too keeps a tampered pin from changing the model evidence.
        if _unfrozen(pinned_nodes[node_id]) != _unfrozen(node):
            raise drift("node", evidence_id=node_id, pinned_digest=pinned_nodes[node_id].digest,
                        current_digest=node.digest)


def _unfrozen(node: EvidenceNode) -> EvidenceNode:
    """A node without the flags a pin freezes (they may legitimately move after pinning)."""
    return replace(node, historical=False, current_entry_version_id=None)
