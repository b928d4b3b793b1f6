"""Candidate review: propose, revise, approve, reject, read, and inspect evidence.

Every step re-validates the Candidate's evidence with the *current* caller's rights and the
current state of Sources and Memory entries (docs/contract.md#review), and commits with every
aggregate it
validated in the read set: a deactivation, withdrawal or target revision that lands between
validation and commit fails the save, the command re-runs on fresh state and reports what
changed. The scope is in every read set too, so a role or grant withdrawn meanwhile is seen.
Approval writes the Candidate and the new or revised Artifact in one save.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from application.access import ScopeGate
from application.credentials import Who
from application.evidence_reader import StoreEvidenceReader
from application.records import Records
from application.retry import retry_on_write_conflict
from application.store import Written
from domain.access import Action
from domain.artifact import Artifact
from domain.candidate import Candidate, CandidateStatus
from domain.content import skill_package, validate_content
from domain.errors import (
    AccessRevokedError,
    ArtifactConflictError,
    CandidateExistsError,
    CandidateNotFoundError,
    DomainError,
    EvidenceUnavailableError,
    ForbiddenError,
    InvalidMemoryCitationError,
    MemoryEntryInactiveError,
    ReferenceNotFoundError,
    SourceNotEligibleError,
)
from domain.evidence.selection import ReviewedEvidence, validate_for_review
from domain.ids import approved_artifact_id, candidate_aggregate_id
from domain.policy import Caller, Permissions
from domain.refs import ArtifactFamily, ArtifactRef, Lineage, MemoryCitation, SourceRef
from domain.scope import Scope

REVIEW_PROVENANCE = "review"
# Why evidence can be unavailable to a reader; anything else is a bug, not an answer.
UNAVAILABLE_BECAUSE = (AccessRevokedError, EvidenceUnavailableError, InvalidMemoryCitationError,
                       MemoryEntryInactiveError, ReferenceNotFoundError, SourceNotEligibleError)


@dataclass(frozen=True)
class Reviewed:
    """A Candidate as the caller sees it, and the Artifact revision it produced if approved."""

    candidate: Candidate
    permissions: Permissions
    result: Artifact | None = None


@dataclass(frozen=True)
class EvidenceView:
    """A Candidate's current evidence re-resolved for the reader: resolved, or why not."""

    candidate_id: str
    version: int
    status: str  # "resolved" | "unavailable"
    evidence: ReviewedEvidence | None = None
    code: str | None = None
    message: str | None = None
    details: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Revision:
    """A reviser's changes; ``None`` keeps the current version's value (docs/contract.md#review)."""

    proposal: Mapping[str, Any] | None = None
    sources: tuple[SourceRef, ...] | None = None
    artifacts: tuple[ArtifactRef, ...] | None = None
    memory_citations: tuple[MemoryCitation, ...] | None = None
    reason: str | None = None
    target: ArtifactRef | None = None

    def lineage_over(self, current: Lineage) -> Lineage:
        return Lineage(
            sources=current.sources if self.sources is None else self.sources,
            artifacts=current.artifacts if self.artifacts is None else self.artifacts,
            memory_citations=(current.memory_citations if self.memory_citations is None
                              else self.memory_citations),
        )


class Reviews:
    """Candidates: proposed by people or runs, revised, approved into Artifacts, rejected."""

    def __init__(self, gate: ScopeGate, records: Records) -> None:
        self.gate = gate
        self.store = gate.store
        self.policy = gate.policy
        self.records = records

    # -- commands ------------------------------------------------------------------------------

    @retry_on_write_conflict
    def propose_candidate(self, who: Who, scope_id: str, candidate_id: str, family: str,
                          proposal: Mapping[str, Any], lineage: Lineage, reason: str,
                          target: ArtifactRef | None = None) -> Written[Reviewed]:
        """A new pending Candidate; proposing the identical one again changes nothing."""
        caller = self.gate.authenticate(who)
        scope = self.gate.load(scope_id)
        self.policy.check_any(caller, scope, Action.CONTRIBUTE, Action.REVIEW)
        reader = StoreEvidenceReader(self.store, self.policy, scope, caller)
        evidence = validate_for_review(reader, lineage)
        full = evidence.with_citation_roots(lineage)
        candidate = Candidate.propose(scope.scope_id, candidate_id, family, target, proposal,
                                      full, reason, proposer=caller.name)
        existing: Candidate | None = self.store.find(candidate.id, Candidate)
        if existing is not None:
            replayed = self._same_proposal(existing, candidate)
            return Written(self._reviewed(caller, scope, replayed), None)
        reader.check_target_head(target)
        position = self.store.commit(candidate, read=[scope, *reader.read_set], acted_by=caller)
        return Written(self._reviewed(caller, scope, candidate), position)

    @retry_on_write_conflict
    def revise_candidate(self, who: Who, scope_id: str, candidate_id: str,
                         expected_version: int, revision: Revision) -> Written[Reviewed]:
        caller, scope, candidate = self._entered(who, scope_id, Action.READ, candidate_id)
        if not self.policy.may_revise(caller, scope, candidate.proposer):
            raise ForbiddenError("only its proposer or a reviewer may revise a candidate",
                                 action="revise", principal=caller.name)
        candidate.check_pending_at(expected_version)
        current = candidate.current
        target = candidate.target if revision.target is None else revision.target
        lineage = revision.lineage_over(current.lineage)
        reader = StoreEvidenceReader(self.store, self.policy, scope, caller)
        evidence = validate_for_review(reader, lineage)
        candidate.revise(expected_version,
                         current.proposal if revision.proposal is None else revision.proposal,
                         evidence.with_citation_roots(lineage),
                         current.reason if revision.reason is None else revision.reason,
                         caller.name, target)
        reader.check_target_head(candidate.target)
        position = self.store.commit(candidate, read=[scope, *reader.read_set], acted_by=caller)
        return Written(self._reviewed(caller, scope, candidate), position)

    @retry_on_write_conflict
    def approve_candidate(self, who: Who, scope_id: str, candidate_id: str,
                          expected_version: int) -> Written[Reviewed]:
        """Approve in one save: the Candidate and its new or revised Artifact.

        Approving again at the approved version answers the same result; a moved target
        records ``Candidate.Conflicted`` and raises ``artifact_conflict``.
        """
        caller, scope, candidate = self._entered(who, scope_id, Action.REVIEW, candidate_id)
        approved = candidate.status == CandidateStatus.APPROVED
        if approved and candidate.approved_version == expected_version:
            return Written(self._reviewed(caller, scope, candidate), None)
        candidate.check_approval_version(expected_version)
        candidate.check_approvable()
        reader = StoreEvidenceReader(self.store, self.policy, scope, caller)
        validate_for_review(reader, candidate.current.lineage)
        artifact = self._approved_artifact(caller, scope, candidate, reader)
        candidate.approve(expected_version, artifact.head_ref, caller.name)
        position = self.store.commit(candidate, artifact, read=[scope, *reader.read_set],
                                     acted_by=caller)
        return Written(self._reviewed(caller, scope, candidate, artifact), position)

    @retry_on_write_conflict
    def reject_candidate(self, who: Who, scope_id: str, candidate_id: str,
                         expected_version: int, reason: str) -> Written[Reviewed]:
        caller, scope, candidate = self._entered(who, scope_id, Action.REVIEW, candidate_id)
        changed = candidate.reject(expected_version, reason, caller.name)
        position = self.store.commit(candidate, acted_by=caller) if changed else None
        return Written(self._reviewed(caller, scope, candidate), position)

    # -- reads ---------------------------------------------------------------------------------

    def get_candidate(self, who: Who, scope_id: str, candidate_id: str) -> Reviewed:
        caller, scope, candidate = self._entered(who, scope_id, Action.READ, candidate_id)
        return self._reviewed(caller, scope, candidate)

    def candidate_evidence(self, who: Who, scope_id: str, candidate_id: str) -> EvidenceView:
        """The current version's evidence as the reader may see it now (docs/contract.md#review)."""
        caller, scope, candidate = self._entered(who, scope_id, Action.READ, candidate_id)
        reader = StoreEvidenceReader(self.store, self.policy, scope, caller)
        version = candidate.candidate_version
        try:
            evidence = validate_for_review(reader, candidate.current.lineage)
        except UNAVAILABLE_BECAUSE as error:
            return EvidenceView(candidate.candidate_id, version, "unavailable", code=error.code,
                                message=error.message, details=error.details)
        return EvidenceView(candidate.candidate_id, version, "resolved", evidence=evidence)

    def skill_package(self, who: Who, scope_id: str, ref: ArtifactRef) -> dict[str, str]:
        """The instruction-only package of one Skill revision: SKILL.md text and its digest."""
        revision = self.records.read_revision(who, scope_id, ref)
        if ref.family != ArtifactFamily.SKILL:
            raise ReferenceNotFoundError("only Skills have packages", reference=ref.to_dict())
        return skill_package(revision.content)

    # -- helpers -------------------------------------------------------------------------------

    def _entered(self, who: Who, scope_id: str, action: Action, candidate_id: str
                 ) -> tuple[Caller, Scope, Candidate]:
        """``who`` authenticated, the scope it may ``action`` in and the Candidate, read in
        one round trip."""
        key = candidate_aggregate_id(scope_id, candidate_id)
        acting = self.gate.acting_in(who, scope_id, action, {key: Candidate})
        candidate: Candidate | None = acting.found[key]
        if candidate is None:
            raise _candidate_not_found(candidate_id)
        return acting.caller, acting.scope, candidate

    def candidate_in(self, scope: Scope, candidate_id: str) -> Candidate:
        """The Candidate as stored, for a caller already let into ``scope``."""
        candidate: Candidate = self.store.load(
            candidate_aggregate_id(scope.scope_id, candidate_id),
            lambda: _candidate_not_found(candidate_id), kind=Candidate)
        return candidate

    def _approved_artifact(self, caller: Caller, scope: Scope, candidate: Candidate,
                           reader: StoreEvidenceReader) -> Artifact:
        """The target revised, or a new Artifact, carrying the Candidate's exact lineage."""
        version = candidate.current
        provenance: dict[str, Any] = {
            "kind": REVIEW_PROVENANCE, "candidate_id": candidate.candidate_id,
            "candidate_version": version.version, "proposer": candidate.proposer,
            "approver": caller.name, "run_id": candidate.run_id,
        }
        content = validate_content(candidate.family, version.proposal)
        if candidate.family == ArtifactFamily.SKILL:
            provenance["package_digest"] = skill_package(content)["digest"]
        target = candidate.target
        if target is None:
            return Artifact.create(scope.scope_id, candidate.family,
                                   approved_artifact_id(scope.scope_id, candidate.family,
                                                        candidate.candidate_id),
                                   content, version.lineage, provenance)
        artifact = reader.artifact(target.family, target.artifact_id)
        assert artifact is not None  # the evidence check read the target revision
        try:
            artifact.revise(content, version.lineage, provenance, target.revision)
        except ArtifactConflictError as moved:
            self._record_conflict(caller, candidate, moved)
            raise
        return artifact

    def _record_conflict(self, caller: Caller, candidate: Candidate, moved: DomainError) -> None:
        """Show the failed approval on the Candidate, which stays pending."""
        candidate.record_conflict(candidate.candidate_version, moved.code, moved.details)
        self.store.commit(candidate, acted_by=caller)

    @staticmethod
    def _same_proposal(existing: Candidate, proposed: Candidate) -> Candidate:
        """A repeated identical proposal is a replay; anything else reuses a taken id."""
        first = existing.versions[0]
        if (existing.family, existing.target, existing.proposer, first.proposal,
                first.lineage, first.reason) != (
                proposed.family, proposed.target, proposed.proposer, proposed.current.proposal,
                proposed.current.lineage, proposed.current.reason):
            raise CandidateExistsError(
                f"candidate {existing.candidate_id!r} already exists with other content",
                candidate_id=existing.candidate_id)
        return existing

    def _reviewed(self, caller: Caller, scope: Scope, candidate: Candidate,
                  result: Artifact | None = None) -> Reviewed:
        if result is None and candidate.result is not None:
            # The Artifact as the approval left it (an Experience or Skill's aggregate version
            # is its revision), not a head that has moved on since.
            result = self.store.repository.get(
                Artifact.create_id(scope.scope_id, candidate.result.family,
                                   candidate.result.artifact_id),
                version=candidate.result.revision)
        permissions = self.policy.candidate_permissions(caller, scope, candidate.proposer,
                                                        candidate.status == CandidateStatus.PENDING)
        return Reviewed(candidate, permissions, result)


def _candidate_not_found(candidate_id: str) -> CandidateNotFoundError:
    return CandidateNotFoundError(f"no candidate {candidate_id!r} in this scope",
                                  candidate_id=candidate_id)
