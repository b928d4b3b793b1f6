"""Bodies of Candidates and their review: proposal, revision, decisions, evidence, inbox."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from adapters.api.schemas.common import (
    ArtifactRefBody,
    ErrorBody,
    MemoryCitationBody,
    SourceRefBody,
    Strict,
    Written,
    ref_body,
    to_domain_items,
)
from adapters.api.schemas.vocabulary import CandidateStatusName
from application.review import EvidenceView, Reviewed, Revision
from domain.refs import ArtifactRef, Lineage
from projections.review_inbox import CandidateSummary


class ProposeCandidate(Strict):
    candidate_id: str
    family: str = Field(description="experience or skill")
    proposal: dict[str, Any] = Field(description="The content of the proposed revision.")
    reason: str
    sources: list[SourceRefBody] = Field(default_factory=list)
    artifacts: list[ArtifactRefBody] = Field(default_factory=list)
    memory_citations: list[MemoryCitationBody] = Field(default_factory=list)
    target: ArtifactRefBody | None = Field(
        default=None, description="The head revision to replace on approval; null: new.")

    def lineage(self) -> Lineage:
        return Lineage(to_domain_items(self.sources, "sources"),
                       to_domain_items(self.artifacts, "artifacts"),
                       to_domain_items(self.memory_citations, "memory_citations"))

    def target_ref(self) -> ArtifactRef | None:
        return None if self.target is None else to_domain_items([self.target], "target")[0]


_KEEPS = "Omitted or null keeps the current version's value; [] clears it."


class ReviseCandidate(Strict):
    expected_version: int = Field(description="The candidate's current version.")
    proposal: dict[str, Any] | None = Field(default=None, description="Omitted or null keeps.")
    sources: list[SourceRefBody] | None = Field(default=None, description=_KEEPS)
    artifacts: list[ArtifactRefBody] | None = Field(default=None, description=_KEEPS)
    memory_citations: list[MemoryCitationBody] | None = Field(default=None, description=_KEEPS)
    reason: str | None = Field(default=None, description="Omitted or null keeps.")
    target: ArtifactRefBody | None = Field(
        default=None, description="Omitted or null keeps; the target cannot change.")

    def to_domain(self) -> Revision:
        def items(values: list[Any] | None, name: str) -> tuple[Any, ...] | None:
            return None if values is None else to_domain_items(values, name)

        return Revision(
            proposal=self.proposal, sources=items(self.sources, "sources"),
            artifacts=items(self.artifacts, "artifacts"),
            memory_citations=items(self.memory_citations, "memory_citations"),
            reason=self.reason,
            target=None if self.target is None else to_domain_items([self.target], "target")[0])


class ApproveCandidate(Strict):
    expected_version: int = Field(description="The version being approved.")


class RejectCandidate(Strict):
    expected_version: int = Field(description="The version being rejected.")
    reason: str


class CandidatePermissions(BaseModel):
    """What the caller may do now (hints for clients; every command re-checks)."""

    can_revise: bool
    can_approve: bool
    can_reject: bool


class CandidateConflictView(BaseModel):
    version: int
    code: str
    details: dict[str, Any]


class CandidateView(Written):
    scope_id: str
    candidate_id: str
    family: str
    status: CandidateStatusName
    version: int = Field(description="The current version (revisions add one).")
    target: ArtifactRefBody | None
    proposal: dict[str, Any]
    sources: list[SourceRefBody] = Field(
        description="Including the root Sources of the cited Memory entries.")
    artifacts: list[ArtifactRefBody]
    memory_citations: list[MemoryCitationBody]
    reason: str
    author: str = Field(description="Who wrote the current version.")
    proposer: str
    run_id: str | None = Field(description="The Dream run that proposed it, if any.")
    conflict: CandidateConflictView | None = Field(
        description="The last approval that failed on moved state, until the next change.")
    result: ArtifactRefBody | None = Field(description="Approved: the revision it produced.")
    decided_version: int | None
    decision_reason: str | None
    decided_by: str | None
    permissions: CandidatePermissions

    @classmethod
    def of(cls, reviewed: Reviewed, position: int | None = None) -> CandidateView:
        candidate = reviewed.candidate
        current = candidate.current
        lineage = current.lineage
        conflict = candidate.conflict
        return cls(
            scope_id=candidate.scope_id, candidate_id=candidate.candidate_id,
            family=candidate.family, status=candidate.status,  # type: ignore[arg-type]
            version=current.version,
            target=ref_body(candidate.target), proposal=current.proposal,
            sources=[SourceRefBody(**s.to_dict()) for s in lineage.sources],
            artifacts=[ArtifactRefBody(**a.to_dict()) for a in lineage.artifacts],
            memory_citations=[MemoryCitationBody.model_validate(c.to_dict())
                              for c in lineage.memory_citations],
            reason=current.reason, author=current.author, proposer=candidate.proposer,
            run_id=candidate.run_id,
            conflict=None if conflict is None else CandidateConflictView(**conflict),
            result=ref_body(candidate.result), decided_version=candidate.decided_version,
            decision_reason=candidate.decision_reason, decided_by=candidate.decided_by,
            permissions=CandidatePermissions(**vars(reviewed.permissions)), position=position)


class EvidenceNodeView(BaseModel):
    evidence_id: str
    kind: str
    digest: str
    source: SourceRefBody | None
    artifact: ArtifactRefBody | None
    memory_citations: list[MemoryCitationBody]
    role: str
    historical: bool
    current_entry_version_id: str | None


class ReviewedEvidenceView(BaseModel):
    nodes: list[EvidenceNodeView]
    edges: list[list[str]] = Field(description="[from, to] evidence id pairs.")
    citation_roots: list[SourceRefBody] = Field(
        description="Root Sources the direct Memory citations rest on.")


class CandidateEvidenceView(BaseModel):
    """The current version's evidence, re-resolved with the reader's rights now."""

    candidate_id: str
    version: int
    status: Literal["resolved", "unavailable"]
    evidence: ReviewedEvidenceView | None = Field(description="Set when resolved.")
    error: ErrorBody | None = Field(description="Set when unavailable: why, with its code.")

    @classmethod
    def of(cls, view: EvidenceView) -> CandidateEvidenceView:
        evidence = error = None
        if view.evidence is not None:
            evidence = ReviewedEvidenceView.model_validate(view.evidence.to_dict())
        if view.code is not None:
            error = ErrorBody(code=view.code, message=view.message or "",
                              details=dict(view.details or {}))
        return cls(candidate_id=view.candidate_id, version=view.version,
                   status=view.status, evidence=evidence, error=error)  # type: ignore[arg-type]


class CandidateSummaryView(BaseModel):
    scope_id: str
    candidate_id: str
    family: str
    status: CandidateStatusName
    version: int
    target: ArtifactRefBody | None
    reason: str
    conflict: bool
    conflict_code: str | None
    proposer: str
    run_id: str | None
    proposed_at: datetime
    updated_at: datetime
    decided_at: datetime | None
    result: ArtifactRefBody | None
    decided_by: str | None
    decision_reason: str | None
    age_seconds: float = Field(description="Seconds since it was proposed.")
    evidence_erased: bool = Field(
        default=False, description="Evidence of one of its versions was erased (ids and hashes "
                                   "remain): review it with that in mind (docs/erasure.md).")

    @classmethod
    def of(cls, summary: CandidateSummary, now: datetime) -> CandidateSummaryView:
        return cls(
            scope_id=summary.scope_id, candidate_id=summary.candidate_id,
            family=summary.family, status=summary.status,  # type: ignore[arg-type]
            version=summary.version, target=ref_body(summary.target), reason=summary.reason,
            conflict=summary.conflict, conflict_code=summary.conflict_code,
            proposer=summary.proposer, run_id=summary.run_id, proposed_at=summary.proposed_at,
            updated_at=summary.updated_at, decided_at=summary.decided_at,
            age_seconds=max(0.0, (now - summary.proposed_at).total_seconds()),
            result=ref_body(summary.result), decided_by=summary.decided_by,
            decision_reason=summary.decision_reason, evidence_erased=summary.evidence_erased)


class CandidatePage(BaseModel):
    candidates: list[CandidateSummaryView]
    next_cursor: str | None
