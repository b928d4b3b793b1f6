"""Candidates and their review: propose, the inbox, read, evidence, revise, approve, reject."""

from __future__ import annotations

from datetime import UTC, datetime

from adapters.api.acting import Acting, Recorded
from adapters.http.schemas import (
    ApproveCandidate,
    CandidateEvidenceView,
    CandidatePage,
    CandidateSummaryView,
    CandidateView,
    ProposeCandidate,
    RejectCandidate,
    ReviseCandidate,
)
from adapters.http.schemas.vocabulary import EVERY_STATUS
from application.review import Reviewed
from application.store import Written
from projections.review_inbox import REVIEW_INBOX


def _shown(acting: Acting, written: Written[Reviewed]) -> CandidateView:
    return CandidateView.of(written.value, acting.shown(written, written.value.candidate))


def propose(acting: Acting, scope_id: str, body: ProposeCandidate) -> Recorded[CandidateView]:
    """A new pending Candidate; an identical proposal replays."""
    lineage, target = body.lineage(), body.target_ref()
    written = acting.app.review.propose_candidate(
        acting.caller(), scope_id, body.candidate_id, body.family, body.proposal, lineage,
        body.reason, target)
    return Recorded(_shown(acting, written), new=written.position is not None)


def inbox(acting: Acting, scope_id: str, status: str, family: str | None, cursor: str | None,
          limit: int) -> CandidatePage:
    """One page of the inbox in candidate id order, once the caller may read the scope;
    ``status=all`` lists every status."""
    acting.app.records.get_scope(acting.caller(), scope_id)
    summaries, next_cursor = acting.view(REVIEW_INBOX)().list_candidates(
        scope_id, status=None if status == EVERY_STATUS else status, family=family,
        cursor=cursor, limit=limit)
    now = datetime.now(UTC)
    return CandidatePage(candidates=[CandidateSummaryView.of(s, now) for s in summaries],
                         next_cursor=next_cursor)


def pending_count(acting: Acting, scope_id: str) -> int:
    """How many Candidates of the scope await review (the caller may read the scope)."""
    acting.app.records.get_scope(acting.caller(), scope_id)
    return acting.view(REVIEW_INBOX)().count(scope_id)


def get_candidate(acting: Acting, scope_id: str, candidate_id: str) -> CandidateView:
    reviewed = acting.app.review.get_candidate(acting.caller(), scope_id, candidate_id)
    return CandidateView.of(reviewed, acting.app.store.position_of(reviewed.candidate))


def evidence(acting: Acting, scope_id: str, candidate_id: str) -> CandidateEvidenceView:
    return CandidateEvidenceView.of(acting.app.review.candidate_evidence(
        acting.caller(), scope_id, candidate_id))


def revise(acting: Acting, scope_id: str, candidate_id: str,
           body: ReviseCandidate) -> CandidateView:
    caller, revision = acting.caller(), body.to_domain()
    return _shown(acting, acting.app.review.revise_candidate(
        caller, scope_id, candidate_id, body.expected_version, revision))


def approve(acting: Acting, scope_id: str, candidate_id: str,
            body: ApproveCandidate) -> CandidateView:
    return _shown(acting, acting.app.review.approve_candidate(
        acting.caller(), scope_id, candidate_id, body.expected_version))


def reject(acting: Acting, scope_id: str, candidate_id: str,
           body: RejectCandidate) -> CandidateView:
    return _shown(acting, acting.app.review.reject_candidate(
        acting.caller(), scope_id, candidate_id, body.expected_version, body.reason))
