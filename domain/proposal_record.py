"""ProposalRecord: which Candidate a principal's Dream over exact inputs last proposed.

A new run by the same principal over the same evidence (same fingerprint) reuses that Candidate
while it is pending and unedited, or answers ``no_change`` if it was rejected unedited, without
calling the model again (docs/contract.md#proposal-reuse). Another principal's Candidate is
never reused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from domain.canonical import digest
from domain.ids import aggregate_id


def proposal_fingerprint(operation: str, target: Mapping[str, Any] | None,
                         manifest: Mapping[str, Any], prompt_version: str) -> str:
    """Same operation, target, prompt and exact evidence (node ids and digests): same value."""
    nodes = sorted((node["evidence_id"], node["digest"]) for node in manifest["nodes"])
    return digest({"operation": operation, "target": target, "nodes": nodes,
                   "prompt_version": prompt_version})


class ProposalRecord(Aggregate):
    class Recorded(Aggregate.Created):
        scope_id: str
        principal_key: str
        fingerprint: str
        candidate_id: str

    class Replaced(Aggregate.Event):
        candidate_id: str

    @staticmethod
    def create_id(scope_id: str, principal_key: str, fingerprint: str) -> UUID:
        return aggregate_id("proposal_record", scope_id, principal_key, fingerprint)

    @event(Recorded)
    def __init__(self, scope_id: str, principal_key: str, fingerprint: str,
                 candidate_id: str) -> None:
        self.scope_id = scope_id
        self.principal_key = principal_key
        self.fingerprint = fingerprint
        self.candidate_id = candidate_id

    def replace(self, candidate_id: str) -> None:
        if candidate_id != self.candidate_id:
            self._replaced(candidate_id=candidate_id)

    @event(Replaced)
    def _replaced(self, candidate_id: str) -> None:
        self.candidate_id = candidate_id
