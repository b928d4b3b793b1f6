"""Candidates and their review: propose, the inbox, read, evidence, revise, approve, reject."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import UTC, datetime
from typing import Any

from adapters.api import rendered_pages
from adapters.api.acting import Acting, Recorded
from adapters.api.schemas import (
    ApproveCandidate,
    CandidateEvidenceView,
    CandidatePage,
    CandidateSummaryView,
    CandidateView,
    ProposeCandidate,
    RejectCandidate,
    ReviseCandidate,
)
from adapters.api.schemas.vocabulary import EVERY_STATUS
from adapters.observability.metrics import REVIEW_DECISIONS
from adapters.observability.sharing import metrics_recorded
from adapters.observability.tracing import continued, tracing_on
from application.review import Reviewed
from application.store import Written
from domain.errors import DomainError
from projections.review_inbox import REVIEW_INBOX
from projections.times import to_micros


def _shown(acting: Acting, written: Written[Reviewed]) -> CandidateView:
    return CandidateView.of(written.value, acting.shown(written, written.value.candidate))


def propose(acting: Acting, scope_id: str, body: ProposeCandidate) -> Recorded[CandidateView]:
    """A new pending Candidate; an identical proposal replays."""
    lineage, target = body.lineage(), body.target_ref()
    written = acting.app.review.propose_candidate(
        acting.who(), scope_id, body.candidate_id, body.family, body.proposal, lineage,
        body.reason, target)
    return Recorded(_shown(acting, written), new=written.position is not None)


def inbox(acting: Acting, scope_id: str, status: str, family: str | None, cursor: str | None,
          limit: int) -> CandidatePage:
    """One page of the inbox in candidate id order, once the caller may read the scope;
    ``status=all`` lists every status."""
    acting.app.records.get_scope(acting.who(), scope_id)
    summaries, next_cursor = acting.view(REVIEW_INBOX)().list_candidates(
        scope_id, status=_listed_status(status), family=family,
        cursor=cursor, limit=limit)
    now = datetime.now(UTC)
    return CandidatePage(candidates=[CandidateSummaryView.of(s, now) for s in summaries],
                         next_cursor=next_cursor)


def inbox_body(acting: Acting, scope_id: str, status: str, family: str | None,
               cursor: str | None, limit: int) -> bytes:
    """The page ``inbox`` answers, as the JSON body of the items the view keeps rendered
    (ADR-0041, ADR-0042)."""
    acting.app.records.get_scope(acting.who(), scope_id)
    view = acting.view(REVIEW_INBOX)()
    documents, next_cursor = view.list_documents(
        scope_id, to_micros(datetime.now(UTC)), status=_listed_status(status), family=family,
        cursor=cursor, limit=limit)
    return rendered_pages.page_body("candidates", documents, next_cursor)


def _listed_status(status: str) -> str | None:
    """The view's status filter for a query's ``status`` (``all``: none)."""
    return None if status == EVERY_STATUS else status


def get_candidate(acting: Acting, scope_id: str, candidate_id: str) -> CandidateView:
    reviewed = acting.app.review.get_candidate(acting.who(), scope_id, candidate_id)
    return CandidateView.of(reviewed, acting.app.store.position_of(reviewed.candidate))


def evidence(acting: Acting, scope_id: str, candidate_id: str) -> CandidateEvidenceView:
    return CandidateEvidenceView.of(acting.app.review.candidate_evidence(
        acting.who(), scope_id, candidate_id))


def revise(acting: Acting, scope_id: str, candidate_id: str,
           body: ReviseCandidate) -> CandidateView:
    who, revision = acting.who(), body.to_domain()
    return _shown(acting, acting.app.review.revise_candidate(
        who, scope_id, candidate_id, body.expected_version, revision))


def approve(acting: Acting, scope_id: str, candidate_id: str,
            body: ApproveCandidate) -> CandidateView:
    who = acting.who()
    with _in_the_runs_trace(acting, scope_id, candidate_id, "dream.approve"), \
            _counted("approve"):
        return _shown(acting, acting.app.review.approve_candidate(
            who, scope_id, candidate_id, body.expected_version))


def reject(acting: Acting, scope_id: str, candidate_id: str,
           body: RejectCandidate) -> CandidateView:
    who = acting.who()
    with _in_the_runs_trace(acting, scope_id, candidate_id, "dream.reject"), \
            _counted("reject"):
        return _shown(acting, acting.app.review.reject_candidate(
            who, scope_id, candidate_id, body.expected_version, body.reason))


@contextmanager
def _counted(decision: str) -> Iterator[None]:
    """A decision counted by its outcome: ``ok``, or the code it was refused with."""
    try:
        yield
    except DomainError as refusal:
        if metrics_recorded():
            REVIEW_DECISIONS.labels(decision, refusal.code).inc()
        raise
    if metrics_recorded():
        REVIEW_DECISIONS.labels(decision, "ok").inc()


def _in_the_runs_trace(acting: Acting, scope_id: str, candidate_id: str,
                       name: str) -> AbstractContextManager[Any]:
    """With tracing on, a decision on a Candidate a Dream run proposed is a span of that
    run's trace (linked to the request's own), so one trace reads admission, claim, evidence,
    model call, Candidate and decision. Off, nothing is read."""
    if not tracing_on():
        return nullcontext()
    try:
        reviewed = acting.app.review.get_candidate(acting.who(), scope_id, candidate_id)
        run_id = reviewed.candidate.run_id
        run = None if run_id is None else acting.app.runs.get_dream(acting.who(), scope_id,
                                                                     run_id)
    except DomainError:  # the decision itself refuses, with its own code
        return nullcontext()
    if run is None:
        return nullcontext()
    return continued(name, run.trace_parent, {"dream.run_id": run.run_id,
                                              "dream.candidate_id": candidate_id},
                     linked=True)
