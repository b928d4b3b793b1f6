"""Candidates and their review: propose, the inbox, read, evidence, revise, approve, reject."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import Response

from adapters.api import review
from adapters.api.schemas import (
    ApproveCandidate,
    CandidateEvidenceView,
    CandidatePage,
    CandidateView,
    ProposeCandidate,
    RejectCandidate,
    ReviseCandidate,
)
from adapters.api.schemas.vocabulary import InboxStatusQuery, ReviewedFamilyName
from adapters.http.dependencies import After, Calling, read_first, reading, rendered, v1_router
from projections.review_inbox import REVIEW_INBOX

router = v1_router()


def _candidate_path(scope_id: str, candidate_id: str) -> str:
    return f"/v1/scopes/{quote(scope_id, safe='')}/candidates/{quote(candidate_id, safe='')}"


@router.post("/scopes/{scope_id}/candidates", status_code=201, tags=["review"],
             responses={200: {"model": CandidateView,
                              "description": "The identical Candidate was already proposed"}})
def propose_candidate(scope_id: str, body: ProposeCandidate, acting: Calling,
                      response: Response) -> CandidateView:
    """A new pending Candidate (201 with Location); an identical proposal replays (200)."""
    proposed = review.propose(acting, scope_id, body)
    if not proposed.new:
        response.status_code = 200
    candidate = proposed.answer
    response.headers["Location"] = _candidate_path(candidate.scope_id, candidate.candidate_id)
    return candidate


@router.get("/scopes/{scope_id}/candidates", tags=["review"],
            dependencies=[reading(REVIEW_INBOX)], response_model=CandidatePage)
async def list_candidates(scope_id: str, acting: Calling, response: Response,
                          status: InboxStatusQuery = "pending",
                          family: ReviewedFamilyName | None = None,
                          cursor: str | None = None, limit: int = 50,
                          after: After = None) -> Response:
    """The review inbox, in candidate id order (keyset pagination with an opaque cursor);
    ``status=all`` lists every status."""
    return rendered(await read_first(review.inbox_body, acting.including(after), scope_id,
                                     status, family, cursor, limit), response)


@router.get("/scopes/{scope_id}/candidates/{candidate_id}", tags=["review"])
async def get_candidate(scope_id: str, candidate_id: str, acting: Calling) -> CandidateView:
    return await read_first(review.get_candidate, acting, scope_id, candidate_id)


@router.get("/scopes/{scope_id}/candidates/{candidate_id}/evidence", tags=["review"])
def candidate_evidence(scope_id: str, candidate_id: str, acting: Calling) -> CandidateEvidenceView:
    """The current version's evidence re-resolved with the caller's rights now: ``resolved``,
    or ``unavailable`` with the code a review step would fail with."""
    return review.evidence(acting, scope_id, candidate_id)


@router.post("/scopes/{scope_id}/candidates/{candidate_id}/revise", tags=["review"])
def revise_candidate(scope_id: str, candidate_id: str, body: ReviseCandidate,
                     acting: Calling) -> CandidateView:
    """A new version; every field but ``expected_version`` may be omitted (or null) to keep
    it, and a list sent as ``[]`` clears it."""
    return review.revise(acting, scope_id, candidate_id, body)


@router.post("/scopes/{scope_id}/candidates/{candidate_id}/approve", tags=["review"])
def approve_candidate(scope_id: str, candidate_id: str, body: ApproveCandidate,
                      acting: Calling) -> CandidateView:
    """Approve ``expected_version``: writes the new or revised Artifact (``result``). Approving
    the approved version again answers the same result."""
    return review.approve(acting, scope_id, candidate_id, body)


@router.post("/scopes/{scope_id}/candidates/{candidate_id}/reject", tags=["review"])
def reject_candidate(scope_id: str, candidate_id: str, body: RejectCandidate,
                     acting: Calling) -> CandidateView:
    return review.reject(acting, scope_id, candidate_id, body)
