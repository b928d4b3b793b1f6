"""The limits a resolution runs under, and the errors for going over them.

Evidence is refused whole above a limit, never truncated: a model must not reason over a silently
shortened view of the lineage.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from domain.budget import Budget
from domain.errors import EvidenceLimitExceededError
from domain.evidence.manifest import ModelEvidence


@dataclass(frozen=True)
class EvidenceLimits:
    max_items: int
    max_bytes: int
    max_nodes: int
    max_edges: int
    max_depth: int

    @classmethod
    def from_budget(cls, budget: Budget) -> EvidenceLimits:
        return cls(budget.max_items, budget.max_bytes, budget.max_nodes, budget.max_edges,
                   budget.max_depth)


# Review re-validates a whole lineage: no Dream budget applies to it.
UNBOUNDED_LIMITS = EvidenceLimits(max_items=sys.maxsize, max_bytes=sys.maxsize,
                                  max_nodes=sys.maxsize, max_edges=sys.maxsize,
                                  max_depth=sys.maxsize)


def over_limit(limit: str, maximum: int, actual: int,
               **details: Any) -> EvidenceLimitExceededError:
    return EvidenceLimitExceededError(f"evidence exceeds {limit} = {maximum}", limit=limit,
                                      maximum=maximum, actual=actual, **details)


def check_model_evidence(evidence: ModelEvidence, limits: EvidenceLimits) -> None:
    if len(evidence.items) > limits.max_items:
        raise over_limit("max_items", limits.max_items, len(evidence.items))
    if evidence.size > limits.max_bytes:
        raise over_limit("max_bytes", limits.max_bytes, evidence.size)
