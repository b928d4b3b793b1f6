"""Candidate review: propose, revise, approve, reject, read, and inspect evidence.

Every step re-validates the Candidate's evidence with the *current* caller's rights and the
current state of Sources and Memory entries (anchor §4.8), and commits with every aggregate it
validated in the read set: a deactivation, withdrawal or target revision that lands between
validation and commit fails the save, the command re-runs on fresh state and reports what
changed. The scope is in every read set too, so a role or grant withdrawn meanwhile is seen.
Approval writes the Candidate and the new or revised Artifact in one save.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from application.access import Caller
from application.dream_runs import DreamRuns
from application.evidence_reader import StoreEvidenceReader
from application.write_model import Written, retry_on_write_conflict
from domain.access import CONTRIBUTE, READ, REVIEW, Resource
from domain.artifact import Artifact
from domain.candidate import APPROVED, PENDING, Candidate
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
from domain.evidence import ReviewedEvidence, validate_for_review
from domain.identity import candidate_aggregate_id, canonical_json, sha256_hex
from domain.refs import SKILL, ArtifactRef, Lineage, MemoryCitation, SourceRef
from domain.scope import Scope

REVIEW_PROVENANCE = "review"
# Why evidence can be unavailable to a reader; anything else is a bug, not an answer.
UNAVAILABLE_BECAUSE = (AccessRevokedError, EvidenceUnavailableError, InvalidMemoryCitationError,
                       MemoryEntryInactiveError, ReferenceNotFoundError, SourceNotEligibleError)


@dataclass(frozen=True)
class Permissions:
    """What the caller may do with a Candidate now (hints for clients; commands re-check)."""

    can_revise: bool
    can_approve: bool
    can_reject: bool


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
    """A reviser's changes; ``None`` keeps the current version's value (anchor §5.3)."""

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


def approved_artifact_id(scope_id: str, family: str, candidate_id: str) -> str:
    """Deterministic, so concurrent or repeated approvals of a Candidate name one Artifact."""
    prefix = "exp" if family != SKILL else "skill"
    return f"{prefix}_" + sha256_hex(canonical_json([scope_id, candidate_id]))[:24]


class Reviews(DreamRuns):
    # -- commands ------------------------------------------------------------------------------

    @retry_on_write_conflict
    def propose_candidate(self, scope_id: str, candidate_id: str, family: str,
                          proposal: Mapping[str, Any], lineage: Lineage, reason: str,
                          target: ArtifactRef | None = None) -> Written[Reviewed]:
        """A new pending Candidate; proposing the identical one again changes nothing."""
        scope = self._load_scope(scope_id)
        self._check_any(scope, CONTRIBUTE, REVIEW)
        caller = self.caller()
        reader = StoreEvidenceReader(self, scope, caller)
        evidence = validate_for_review(reader, lineage)
        full = evidence.with_citation_roots(lineage)
        candidate = Candidate.propose(scope.scope_id, candidate_id, family, target, proposal,
                                      full, reason, proposer=caller.name)
        existing: Candidate | None = self.find(candidate.id)
        if existing is not None:
            return Written(self._reviewed(scope, self._same_proposal(existing, candidate)), None)
        self._check_target_head(reader, target)
        position = self.commit(candidate, read=[scope, *reader.read_set])
        return Written(self._reviewed(scope, candidate), position)

    @retry_on_write_conflict
    def revise_candidate(self, scope_id: str, candidate_id: str, expected_version: int,
                         revision: Revision) -> Written[Reviewed]:
        scope = self.scope_for(scope_id, READ)
        candidate = self._candidate(scope, candidate_id)
        if not self._may_revise(scope, candidate):
            raise ForbiddenError("only its proposer or a reviewer may revise a candidate",
                                 action="revise", principal=self.caller().name)
        candidate.check_pending_at(expected_version)
        current = candidate.current
        target = candidate.target if revision.target is None else revision.target
        lineage = revision.lineage_over(current.lineage)
        reader = StoreEvidenceReader(self, scope, self.caller())
        evidence = validate_for_review(reader, lineage)
        candidate.revise(expected_version,
                         current.proposal if revision.proposal is None else revision.proposal,
                         evidence.with_citation_roots(lineage),
                         current.reason if revision.reason is None else revision.reason,
                         self.caller().name, target)
        self._check_target_head(reader, candidate.target)
        position = self.commit(candidate, read=[scope, *reader.read_set])
        return Written(self._reviewed(scope, candidate), position)

    @retry_on_write_conflict
    def approve_candidate(self, scope_id: str, candidate_id: str,
                          expected_version: int) -> Written[Reviewed]:
        """Approve in one save: the Candidate and its new or revised Artifact.

        Approving again at the approved version answers the same result; a moved target
        records ``Candidate.Conflicted`` and raises ``artifact_conflict``.
        """
        scope = self.scope_for(scope_id, REVIEW)
        candidate = self._candidate(scope, candidate_id)
        if candidate.status == APPROVED and candidate.approved_version == expected_version:
            return Written(self._reviewed(scope, candidate), None)
        candidate.check_approval_version(expected_version)
        candidate.check_approvable()
        reader = StoreEvidenceReader(self, scope, self.caller())
        validate_for_review(reader, candidate.current.lineage)
        artifact = self._approved_artifact(scope, candidate, reader)
        candidate.approve(expected_version, artifact.head_ref, self.caller().name)
        position = self.commit(candidate, artifact, read=[scope, *reader.read_set])
        return Written(self._reviewed(scope, candidate, artifact), position)

    @retry_on_write_conflict
    def reject_candidate(self, scope_id: str, candidate_id: str, expected_version: int,
                         reason: str) -> Written[Reviewed]:
        scope = self.scope_for(scope_id, REVIEW)
        candidate = self._candidate(scope, candidate_id)
        changed = candidate.reject(expected_version, reason, self.caller().name)
        position = self.commit(candidate) if changed else None
        return Written(self._reviewed(scope, candidate), position)

    # -- reads ---------------------------------------------------------------------------------

    def get_candidate(self, scope_id: str, candidate_id: str) -> Reviewed:
        scope = self.scope_for(scope_id, READ)
        return self._reviewed(scope, self._candidate(scope, candidate_id))

    def candidate_evidence(self, scope_id: str, candidate_id: str) -> EvidenceView:
        """The current version's evidence as the reader may see it now (anchor §5.3)."""
        scope = self.scope_for(scope_id, READ)
        candidate = self._candidate(scope, candidate_id)
        reader = StoreEvidenceReader(self, scope, self.caller())
        version = candidate.candidate_version
        try:
            evidence = validate_for_review(reader, candidate.current.lineage)
        except UNAVAILABLE_BECAUSE as error:
            return EvidenceView(candidate.candidate_id, version, "unavailable", code=error.code,
                                message=error.message, details=error.details)
        return EvidenceView(candidate.candidate_id, version, "resolved", evidence=evidence)

    def skill_package(self, scope_id: str, ref: ArtifactRef) -> dict[str, str]:
        """The instruction-only package of one Skill revision: SKILL.md text and its digest."""
        revision = self.read_revision(scope_id, ref)
        if ref.family != SKILL:
            raise ReferenceNotFoundError("only Skills have packages", reference=ref.to_dict())
        return skill_package(revision.content)

    def readable_artifacts(self, scope_id: str,
                           artifacts: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which ``(family, artifact_id)`` pairs the caller may read now: read models are
        shared by the whole scope, so their rows are filtered per caller."""
        scope = self.scope_for(scope_id, READ)
        caller = self.caller()
        return {(family, artifact_id) for family, artifact_id in artifacts
                if caller.admin or not self.enforce_access
                or scope.permits(caller.name, READ, Resource.artifact(family, artifact_id))}

    # -- helpers -------------------------------------------------------------------------------

    def _candidate(self, scope: Scope, candidate_id: str) -> Candidate:
        candidate: Candidate = self.load(
            candidate_aggregate_id(scope.scope_id, candidate_id),
            lambda: CandidateNotFoundError(f"no candidate {candidate_id!r} in this scope",
                                           candidate_id=candidate_id))
        return candidate

    def _approved_artifact(self, scope: Scope, candidate: Candidate,
                           reader: StoreEvidenceReader) -> Artifact:
        """The target revised, or a new Artifact, carrying the Candidate's exact lineage."""
        version = candidate.current
        provenance: dict[str, Any] = {
            "kind": REVIEW_PROVENANCE, "candidate_id": candidate.candidate_id,
            "candidate_version": version.version, "proposer": candidate.proposer,
            "approver": self.caller().name, "run_id": candidate.run_id,
        }
        content = validate_content(candidate.family, version.proposal)
        if candidate.family == SKILL:
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
            self._record_conflict(candidate, moved)
            raise
        return artifact

    def _record_conflict(self, candidate: Candidate, moved: DomainError) -> None:
        """Show the failed approval on the Candidate, which stays pending."""
        candidate.record_conflict(candidate.candidate_version, moved.code, moved.details)
        self.commit(candidate)

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

    def _check_any(self, scope: Scope, *actions: str) -> None:
        """Permitted if any of ``actions`` is; otherwise the first refusal is reported."""
        refusal: DomainError | None = None
        for action in actions:
            try:
                self.check_permitted(scope, action)
                return
            except ForbiddenError as error:
                refusal = refusal or error
        assert refusal is not None
        raise refusal

    def _permits(self, scope: Scope, caller: Caller, action: str) -> bool:
        return (caller.admin or not self.enforce_access
                or scope.permits(caller.name, action, None))

    def _may_revise(self, scope: Scope, candidate: Candidate) -> bool:
        """Whoever may revise it while pending (a decided one answers candidate_terminal)."""
        caller = self.caller()
        return self._permits(scope, caller, REVIEW) or (
            candidate.proposer == caller.name and self._permits(scope, caller, CONTRIBUTE))

    def _permissions(self, scope: Scope, candidate: Candidate) -> Permissions:
        pending = candidate.status == PENDING
        reviewer = self._permits(scope, self.caller(), REVIEW)
        return Permissions(can_revise=pending and self._may_revise(scope, candidate),
                           can_approve=pending and reviewer, can_reject=pending and reviewer)

    def _reviewed(self, scope: Scope, candidate: Candidate,
                  result: Artifact | None = None) -> Reviewed:
        if result is None and candidate.result is not None:
            # The Artifact as the approval left it (an Experience or Skill's aggregate version
            # is its revision), not a head that has moved on since.
            result = self.repository.get(
                Artifact.create_id(scope.scope_id, candidate.result.family,
                                   candidate.result.artifact_id),
                version=candidate.result.revision)
        return Reviewed(candidate, self._permissions(scope, candidate), result)
