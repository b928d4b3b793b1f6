"""Candidate: a proposed Experience or Skill awaiting human review.

Versions are immutable; the target is fixed at proposal. Approval is idempotent for the version
that was approved and a conflict for any other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from domain.content import validate_content
from domain.errors import (
    CandidateConflictError,
    CandidateTerminalError,
    EvidenceLimitExceededError,
    InvalidCandidateError,
)
from domain.ids import candidate_aggregate_id
from domain.refs import ArtifactFamily, ArtifactRef, Lineage
from domain.text import check_bounded_chars, check_identifier, check_scope_id


class CandidateStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"



CANDIDATE_FAMILIES = (ArtifactFamily.EXPERIENCE, ArtifactFamily.SKILL)
MAX_CANDIDATE_EVIDENCE = 32
REASON_MAX_CHARS = 2_000
PRINCIPAL_MAX = 256


@dataclass(frozen=True)
class CandidateVersion:
    version: int
    proposal: dict[str, Any]
    lineage: Lineage
    reason: str
    author: str


def check_envelope(family: str, target: ArtifactRef | None, lineage: Lineage) -> None:
    """The envelope rules (docs/contract.md#review), checked for every version."""
    if family not in CANDIDATE_FAMILIES:
        raise InvalidCandidateError(
            f"candidates propose {' or '.join(CANDIDATE_FAMILIES)}, not {family}", field="family"
        )
    if target is not None and target.family != family:
        raise InvalidCandidateError("target family must equal the candidate family",
                                    field="target")
    if not 1 <= len(lineage) <= MAX_CANDIDATE_EVIDENCE:
        raise EvidenceLimitExceededError(
            f"a candidate needs 1-{MAX_CANDIDATE_EVIDENCE} references", count=len(lineage),
            limit=MAX_CANDIDATE_EVIDENCE,
        )
    if all(ref.family == ArtifactFamily.PROMPT for ref in lineage.artifacts) and not (
        lineage.sources or lineage.memory_citations
    ):
        raise InvalidCandidateError("a candidate needs at least one exact non-Prompt reference",
                                    field="artifacts")
    if lineage.memory_citations and family != ArtifactFamily.EXPERIENCE:
        raise InvalidCandidateError("only experience candidates may cite memory entries",
                                    field="memory_citations")


class Candidate(Aggregate):
    class Proposed(Aggregate.Created):
        scope_id: str
        candidate_id: str
        family: str
        target: ArtifactRef | None
        proposal: dict[str, Any]
        lineage: Lineage
        reason: str
        proposer: str
        run_id: str | None

    class Revised(Aggregate.Event):
        version: int
        proposal: dict[str, Any]
        lineage: Lineage
        reason: str
        reviser: str

    class Approved(Aggregate.Event):
        version: int
        result: ArtifactRef
        approver: str

    class Rejected(Aggregate.Event):
        version: int
        reason: str
        reviewer: str

    class Conflicted(Aggregate.Event):
        version: int
        code: str
        details: dict[str, Any]

    @staticmethod
    def create_id(scope_id: str, candidate_id: str) -> UUID:
        return candidate_aggregate_id(scope_id, candidate_id)

    @classmethod
    def propose(cls, scope_id: str, candidate_id: str, family: str, target: ArtifactRef | None,
                proposal: Mapping[str, Any], lineage: Lineage, reason: str, proposer: str,
                run_id: str | None = None) -> Candidate:
        check_envelope(family, target, lineage)
        if target is not None and target not in lineage.artifacts:
            raise InvalidCandidateError("the target must be among the artifacts", field="target")
        return cls(
            scope_id=check_scope_id(scope_id),
            candidate_id=check_identifier("candidate_id", candidate_id, path_segment=True),
            family=family, target=target, proposal=validate_content(family, proposal),
            lineage=lineage, reason=check_bounded_chars("reason", reason, REASON_MAX_CHARS),
            proposer=check_identifier("proposer", proposer, PRINCIPAL_MAX), run_id=run_id,
        )

    @event(Proposed)
    def __init__(self, scope_id: str, candidate_id: str, family: str, target: ArtifactRef | None,
                 proposal: dict[str, Any], lineage: Lineage, reason: str, proposer: str,
                 run_id: str | None) -> None:
        self.scope_id = scope_id
        self.candidate_id = candidate_id
        self.family = ArtifactFamily(family)
        self.target = target
        self.proposer = proposer
        self.run_id = run_id
        self.versions = [CandidateVersion(1, dict(proposal), lineage, reason, proposer)]
        self.status = CandidateStatus.PENDING
        self.approved_version: int | None = None
        self.result: ArtifactRef | None = None
        self.decision_reason: str | None = None
        self.decided_version: int | None = None
        self.decided_by: str | None = None
        self.conflict: dict[str, Any] | None = None

    @property
    def current(self) -> CandidateVersion:
        return self.versions[-1]

    @property
    def candidate_version(self) -> int:
        return self.current.version

    def check_pending_at(self, expected_version: int) -> None:
        if self.status != CandidateStatus.PENDING:
            raise CandidateTerminalError(f"candidate {self.candidate_id} is {self.status}",
                                         status=self.status.value)
        if expected_version != self.candidate_version:
            raise CandidateConflictError(
                f"candidate {self.candidate_id} is at version {self.candidate_version}",
                expected=expected_version, current=self.candidate_version,
            )

    def revise(self, expected_version: int, proposal: Mapping[str, Any], lineage: Lineage,
               reason: str, reviser: str, target: ArtifactRef | None) -> None:
        self.check_pending_at(expected_version)
        if target != self.target:
            raise InvalidCandidateError("the target of a candidate cannot change", field="target")
        check_envelope(self.family, self.target, lineage)
        if self.target is not None and self.target not in lineage.artifacts:
            raise InvalidCandidateError("the target must be among the artifacts", field="target")
        self._revised(version=self.candidate_version + 1,
                      proposal=validate_content(self.family, proposal), lineage=lineage,
                      reason=check_bounded_chars("reason", reason, REASON_MAX_CHARS),
                      reviser=check_identifier("reviser", reviser, PRINCIPAL_MAX))

    @event(Revised)
    def _revised(self, version: int, proposal: dict[str, Any], lineage: Lineage, reason: str,
                 reviser: str) -> None:
        self.versions.append(CandidateVersion(version, dict(proposal), lineage, reason, reviser))
        self.conflict = None

    def check_approval_version(self, expected_version: int) -> None:
        """Pending at ``expected_version``; approved at another version is a conflict."""
        if self.status == CandidateStatus.APPROVED:
            raise CandidateConflictError(
                f"candidate {self.candidate_id} was approved at version {self.approved_version}",
                expected=expected_version, current=self.approved_version,
            )
        self.check_pending_at(expected_version)

    def approve(self, expected_version: int, result: ArtifactRef, approver: str) -> bool:
        """Record approval; ``False`` when this exact version was already approved."""
        if self.status == CandidateStatus.APPROVED and self.approved_version == expected_version:
            return False
        self.check_approval_version(expected_version)
        self._approved(version=expected_version, result=result,
                       approver=check_identifier("approver", approver, PRINCIPAL_MAX))
        return True

    @event(Approved)
    def _approved(self, version: int, result: ArtifactRef, approver: str) -> None:
        self.status = CandidateStatus.APPROVED
        self.approved_version = self.decided_version = version
        self.decided_by = approver
        self.result = result
        self.conflict = None

    def reject(self, expected_version: int, reason: str, reviewer: str) -> bool:
        """Record rejection; ``False`` when this version was already rejected for this reason."""
        if (self.status == CandidateStatus.REJECTED and self.decided_version == expected_version
                and self.decision_reason == reason):
            return False
        self.check_pending_at(expected_version)
        self._rejected(version=expected_version,
                       reason=check_bounded_chars("reason", reason, REASON_MAX_CHARS),
                       reviewer=check_identifier("reviewer", reviewer, PRINCIPAL_MAX))
        return True

    @event(Rejected)
    def _rejected(self, version: int, reason: str, reviewer: str) -> None:
        self.status = CandidateStatus.REJECTED
        self.decision_reason = reason
        self.decided_version = version
        self.decided_by = reviewer
        self.conflict = None

    def check_approvable(self) -> None:
        """The approval lineage rules (docs/contract.md#review), on top of the envelope rules.

        A new Skill rests only on Experiences (and Prompts); a Skill replacement also names its
        target and keeps at least one Source.
        """
        if self.family != ArtifactFamily.SKILL:
            return
        lineage = self.current.lineage
        allowed = {ArtifactFamily.EXPERIENCE, ArtifactFamily.PROMPT}
        others = [ref for ref in lineage.artifacts
                  if ref.family not in allowed and ref != self.target]
        if others:
            raise InvalidCandidateError(
                "a Skill may rest only on Experiences and Prompts (and its own target)",
                field="artifacts", artifacts=[ref.to_dict() for ref in others])
        if self.target is not None and not lineage.sources:
            raise InvalidCandidateError("a Skill replacement needs at least one Source",
                                        field="sources")

    def record_conflict(self, expected_version: int, code: str, details: Mapping[str, Any]) -> None:
        """An approval failed on moved state; the candidate stays pending and shows it."""
        self.check_pending_at(expected_version)
        self._conflicted(version=expected_version, code=code, details=dict(details))

    @event(Conflicted)
    def _conflicted(self, version: int, code: str, details: dict[str, Any]) -> None:
        self.conflict = {"version": version, "code": code, "details": dict(details)}
