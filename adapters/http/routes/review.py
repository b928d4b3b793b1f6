"""Candidates and their review: propose, the inbox, read, evidence, revise, approve, reject."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from urllib.parse import quote

from fastapi import APIRouter, Request, Response

from adapters.http.dependencies import After, App, Bearing, read_view, reading, shown
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
from adapters.http.schemas.vocabulary import EVERY_STATUS, InboxStatusQuery, ReviewedFamilyName
from application.bootstrap import Dreaming
from application.review import Reviewed
from application.store import Written
from domain.policy import Caller
from projections.review_inbox import REVIEW_INBOX, ReviewInboxView

router = APIRouter()


def _candidate_path(scope_id: str, candidate_id: str) -> str:
    return f"/v1/scopes/{quote(scope_id, safe='')}/candidates/{quote(candidate_id, safe='')}"


def _shown_candidate(app: Dreaming, written: Written[Reviewed]) -> CandidateView:
    return CandidateView.of(written.value, shown(app, written, written.value.candidate))


@router.post("/scopes/{scope_id}/candidates", status_code=201, tags=["review"],
             responses={200: {"model": CandidateView,
                              "description": "The identical Candidate was already proposed"}})
def propose_candidate(scope_id: str, body: ProposeCandidate, app: App, bearer: Bearing,
                      response: Response) -> CandidateView:
    """A new pending Candidate (201 with Location); an identical proposal replays (200)."""
    caller = bearer.caller()
    lineage, target = body.lineage(), body.target_ref()
    written = app.review.propose_candidate(caller, scope_id, body.candidate_id, body.family,
                                           body.proposal, lineage, body.reason, target)
    if written.position is None:
        response.status_code = 200
    candidate = written.value.candidate
    response.headers["Location"] = _candidate_path(candidate.scope_id, candidate.candidate_id)
    return _shown_candidate(app, written)


@router.get("/scopes/{scope_id}/candidates", tags=["review"],
            dependencies=[reading(REVIEW_INBOX)])
def list_candidates(scope_id: str, request: Request, response: Response, app: App,
                    bearer: Bearing, status: InboxStatusQuery = "pending",
                    family: ReviewedFamilyName | None = None,
                    cursor: str | None = None, limit: int = 50,
                    after: After = None) -> CandidatePage:
    """The review inbox, in candidate id order (keyset pagination with an opaque cursor);
    ``status=all`` lists every status."""
    caller = bearer.caller()
    return inbox_page(app, caller, scope_id,
                      lambda: read_view(request, response, app, REVIEW_INBOX, after),
                      status, family, cursor, limit)


def inbox_page(app: Dreaming, caller: Caller, scope_id: str,
               view: Callable[[], ReviewInboxView], status: str, family: str | None,
               cursor: str | None, limit: int) -> CandidatePage:
    """One page of the inbox, once the caller may read the scope (``view`` may wait)."""
    app.records.get_scope(caller, scope_id)
    summaries, next_cursor = view().list_candidates(
        scope_id, status=None if status == EVERY_STATUS else status, family=family,
        cursor=cursor, limit=limit)
    now = datetime.now(UTC)
    return CandidatePage(candidates=[CandidateSummaryView.of(s, now) for s in summaries],
                         next_cursor=next_cursor)


@router.get("/scopes/{scope_id}/candidates/{candidate_id}", tags=["review"])
def get_candidate(scope_id: str, candidate_id: str, app: App, bearer: Bearing) -> CandidateView:
    caller = bearer.caller()
    reviewed = app.review.get_candidate(caller, scope_id, candidate_id)
    return CandidateView.of(reviewed, app.store.position_of(reviewed.candidate))


@router.get("/scopes/{scope_id}/candidates/{candidate_id}/evidence", tags=["review"])
def candidate_evidence(scope_id: str, candidate_id: str, app: App,
                       bearer: Bearing) -> CandidateEvidenceView:
    """The current version's evidence re-resolved with the caller's rights now: ``resolved``,
    or ``unavailable`` with the code a review step would fail with."""
    caller = bearer.caller()
    return CandidateEvidenceView.of(app.review.candidate_evidence(caller, scope_id,
                                                                  candidate_id))


@router.post("/scopes/{scope_id}/candidates/{candidate_id}/revise", tags=["review"])
def revise_candidate(scope_id: str, candidate_id: str, body: ReviseCandidate, app: App,
                     bearer: Bearing) -> CandidateView:
    """A new version; every field but ``expected_version`` may be omitted (or null) to keep
    it, and a list sent as ``[]`` clears it."""
    caller = bearer.caller()
    revision = body.to_domain()
    return _shown_candidate(app, app.review.revise_candidate(caller, scope_id, candidate_id,
                                                     body.expected_version, revision))


@router.post("/scopes/{scope_id}/candidates/{candidate_id}/approve", tags=["review"])
def approve_candidate(scope_id: str, candidate_id: str, body: ApproveCandidate, app: App,
                      bearer: Bearing) -> CandidateView:
    """Approve ``expected_version``: writes the new or revised Artifact (``result``). Approving
    the approved version again answers the same result."""
    caller = bearer.caller()
    return _shown_candidate(app, app.review.approve_candidate(caller, scope_id, candidate_id,
                                                      body.expected_version))


@router.post("/scopes/{scope_id}/candidates/{candidate_id}/reject", tags=["review"])
def reject_candidate(scope_id: str, candidate_id: str, body: RejectCandidate, app: App,
                     bearer: Bearing) -> CandidateView:
    caller = bearer.caller()
    return _shown_candidate(app, app.review.reject_candidate(caller, scope_id, candidate_id,
                                                     body.expected_version, body.reason))
