"""The review inbox read model on SQLite (polling) and PostgreSQL (LISTEN/NOTIFY).

Candidates are written to the real event store (``app.store.commit``) and followed by the real
runner: rows that follow every review transition (conflict flag set and cleared, versions,
decisions), exact filters, keyset pages that never overlap or skip while candidates keep
arriving, ``invalid_cursor`` and request bounds, exactly-once tracking, and a rebuilt view
equal to the live one.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from eventsourcing.persistence import IntegrityError, Tracking

from adapters.settings import Settings
from adapters.store.projection_runtime import RunningProjection, start_projection
from adapters.store.view_batches import open_view
from application.bootstrap import Dreaming
from domain.artifact import Artifact
from domain.candidate import Candidate, CandidateStatus
from domain.errors import InvalidCursorError, InvalidRequestError
from domain.policy import LOCAL
from domain.refs import ArtifactRef, Lineage, SourceRef
from projections.review_inbox import (
    CURSORS,
    REVIEW_INBOX,
    CandidateSummary,
    ReviewInboxProjection,
    ReviewInboxView,
)
from projections.runs import encode_cursor as encode_run_cursor
from tests.projection_support import rebuilt_view

APP = "Dreaming"
LINEAGE = Lineage(sources=(SourceRef("task", "t1"),))
TARGET = ArtifactRef("experience", "exp-1", 2)
Running = RunningProjection[ReviewInboxView]


def experience(word: str = "retry") -> dict[str, str]:
    return {"situation": f"the {word} situation", "action": "act", "outcome": "ok",
            "lesson": f"learn {word}"}


def skill(name: str = "do-it") -> dict[str, Any]:
    return {"name": name, "description": "does it", "instructions": "step one",
            "validation": ["it is done"]}


def propose(scope_id: str, candidate_id: str, family: str = "experience", *,
            target: ArtifactRef | None = None, run_id: str | None = None,
            reason: str = "first reason") -> Candidate:
    lineage = LINEAGE if target is None else Lineage(sources=LINEAGE.sources,
                                                     artifacts=(target,))
    proposal = experience() if family == "experience" else skill()
    return Candidate.propose(scope_id, candidate_id, family, target, proposal, lineage, reason,
                             "proposer-1", run_id=run_id)


def expected(candidate: Candidate, position: int,
             decided_by: str | None = None) -> CandidateSummary:
    """What the view must hold for a candidate: its review state, from the aggregate."""
    decided = candidate.status != CandidateStatus.PENDING
    return CandidateSummary(
        scope_id=candidate.scope_id, candidate_id=candidate.candidate_id,
        family=candidate.family, status=candidate.status, version=candidate.candidate_version,
        target=None if candidate.target is None else candidate.target.to_dict(),
        reason=candidate.current.reason, conflict=candidate.conflict is not None,
        conflict_code=None if candidate.conflict is None else candidate.conflict["code"],
        proposer=candidate.proposer, run_id=candidate.run_id,
        proposed_at=candidate.created_on, updated_at=candidate.modified_on,
        decided_at=candidate.modified_on if decided else None,
        result=None if candidate.result is None else candidate.result.to_dict(),
        decided_by=decided_by, decision_reason=candidate.decision_reason, position=position)


def all_pages(view: ReviewInboxView, scope_id: str, limit: int = 100,
              **filters: Any) -> list[CandidateSummary]:
    rows: list[CandidateSummary] = []
    cursor = None
    while True:
        page, cursor = view.list_candidates(scope_id, cursor=cursor, limit=limit, **filters)
        assert len(page) <= limit
        rows += page
        if cursor is None:
            return rows


def ids(summaries: list[CandidateSummary]) -> list[str]:
    return [s.candidate_id for s in summaries]


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.fixture
def running(settings: Settings) -> Iterator[Running]:
    with start_projection(REVIEW_INBOX, settings) as projection:
        yield projection


@pytest.fixture
def view(settings: Settings) -> Iterator[ReviewInboxView]:
    opened = open_view(REVIEW_INBOX, settings)
    yield opened
    opened.close()


# -- following the write model --------------------------------------------------------------


def test_rows_follow_every_review_transition(app: Dreaming, running: Running) -> None:
    candidate = propose("scope-a", "cand-1", target=TARGET, run_id="run-7")
    position = app.store.commit(candidate)
    assert position is not None
    running.wait(position)
    first = running.view.get_candidate_summary("scope-a", "cand-1")
    assert first == expected(candidate, position)
    assert first is not None
    assert (first.status, first.version, first.conflict, first.decided_at, first.run_id,
            first.target) == (CandidateStatus.PENDING, 1, False, None, "run-7", TARGET.to_dict())
    assert first.proposed_at == first.updated_at

    def step(change: Callable[[], object], decided_by: str | None = None) -> CandidateSummary:
        change()
        written = app.store.commit(candidate)
        assert written is not None
        running.wait(written)
        summary = running.view.get_candidate_summary("scope-a", "cand-1")
        assert summary == expected(candidate, written, decided_by)
        assert summary is not None
        return summary

    lineage = Lineage(sources=LINEAGE.sources, artifacts=(TARGET,))
    conflicted = step(lambda: candidate.record_conflict(1, "artifact_moved", {"head": 3}))
    assert (conflicted.conflict, conflicted.conflict_code, conflicted.version) == (
        True, "artifact_moved", 1)
    assert conflicted.updated_at > conflicted.proposed_at
    revised = step(lambda: candidate.revise(1, experience("backoff"), lineage, "second reason",
                                            "reviser-1", TARGET))
    assert (revised.conflict, revised.conflict_code, revised.version, revised.reason) == (
        False, None, 2, "second reason")
    again = step(lambda: candidate.record_conflict(2, "evidence_withdrawn", {}))
    assert (again.conflict, again.conflict_code) == (True, "evidence_withdrawn")
    result = ArtifactRef("experience", "exp-1", 3)
    approved = step(lambda: candidate.approve(2, result, "approver-1"), "approver-1")
    assert (approved.status, approved.version, approved.conflict, approved.conflict_code,
            approved.result, approved.decided_by, approved.decided_at) == (
        "approved", 2, False, None, result.to_dict(), "approver-1", approved.updated_at)
    assert approved.decision_reason is None

    rejected = propose("scope-a", "cand-2", "skill")
    rejected.record_conflict(1, "artifact_moved", {})
    rejected.reject(1, "not useful", "reviewer-1")
    written = app.store.commit(rejected)
    assert written is not None
    running.wait(written)
    summary = running.view.get_candidate_summary("scope-a", "cand-2")
    assert summary == expected(rejected, written, "reviewer-1")
    assert summary is not None
    assert (summary.status, summary.reason, summary.decision_reason, summary.decided_by,
            summary.conflict, summary.result, summary.family) == (
        "rejected", "first reason", "not useful", "reviewer-1", False, None, "skill")
    assert summary.decided_at is not None

    assert running.view.get_candidate_summary("scope-a", "missing") is None
    assert running.view.get_candidate_summary("scope-b", "cand-1") is None


def test_events_of_other_aggregates_still_advance_the_position(app: Dreaming,
                                                               running: Running) -> None:
    written = app.records.create_scope(LOCAL, "scope-x")
    assert written.position is not None
    running.wait(written.position)
    artifact = Artifact.create("scope-x", "experience", "exp-1", experience(), LINEAGE,
                               {"kind": "management", "principal": "alice"})
    position = app.store.commit(artifact)
    running.wait(position)
    assert running.position() == position == running.head()
    assert running.view.count("scope-x", None) == 0


# -- filters and counts ---------------------------------------------------------------------


def test_filters_are_exact_and_scopes_are_isolated(app: Dreaming, running: Running) -> None:
    candidates: dict[str, Candidate] = {}
    for index in range(12):
        family = "skill" if index % 3 == 0 else "experience"
        candidate = propose("scope-s", f"cand-{index:02d}", family)
        if index % 4 == 1:
            candidate.approve(1, ArtifactRef(family, f"a-{index}", 1), "approver-1")
        elif index % 4 == 2:
            candidate.reject(1, "no", "reviewer-1")
        candidates[candidate.candidate_id] = candidate
    others = [propose("scope-t", "cand-00"), propose("scope-t", "cand-99", "skill")]
    running.wait(app.store.commit(*candidates.values(), *others))

    def matching(status: str | None, family: str | None) -> list[str]:
        return sorted(c.candidate_id for c in candidates.values()
                      if status in (None, c.status) and family in (None, c.family))

    for status in (None, "pending", "approved", "rejected"):
        for family in (None, "experience", "skill"):
            rows = all_pages(running.view, "scope-s", limit=2, status=status, family=family)
            assert ids(rows) == matching(status, family), (status, family)
            assert all(row.scope_id == "scope-s" for row in rows)
            assert running.view.count("scope-s", status, family) == len(rows)
    # The default is the inbox: pending only.
    assert ids(running.view.list_candidates("scope-s")[0]) == matching("pending", None)
    assert running.view.count("scope-s") == len(matching("pending", None))
    assert ids(all_pages(running.view, "scope-t", status=None)) == ["cand-00", "cand-99"]
    assert running.view.count("scope-t", None) == 2
    assert running.view.list_candidates("scope-empty") == ([], None)


# -- keyset pages ---------------------------------------------------------------------------

# Byte order on both stores: upper case before lower case, "10" before "9", "~" after "z"
# (a collation that skips punctuation would not).
ORDERED_IDS = ["Cand-c", "cand-10", "cand-9", "cand-B", "cand-a", "cand-z", "cand-~",
               "cand:colon"]


def test_pages_never_overlap_or_skip_while_candidates_arrive(app: Dreaming,
                                                             running: Running) -> None:
    originals = [propose("scope-p", candidate_id) for candidate_id in ORDERED_IDS[::-1]]
    running.wait(app.store.commit(*originals, propose("scope-other", "cand-a")))
    assert ids(all_pages(running.view, "scope-p")) == ORDERED_IDS == sorted(ORDERED_IDS)

    pages: list[list[CandidateSummary]] = []
    cursor: str | None = None
    for arrival in range(100):
        page, cursor = running.view.list_candidates("scope-p", cursor=cursor, limit=3)
        pages.append(page)
        # Newcomers on both sides of the cursor: before it they never shift a later page;
        # after it they show up exactly once, in order.
        running.wait(app.store.commit(propose("scope-p", f"A-{arrival}"),
                                      propose("scope-p", f"cand-zz-{arrival}")))
        if cursor is None:
            break
    seen = ids([row for page in pages for row in page])
    assert len(seen) == len(set(seen))
    assert seen == sorted(seen)
    assert [s for s in seen if not s.startswith(("A-", "cand-zz-"))] == ORDERED_IDS
    assert not any(s.startswith("A-") for s in seen)
    # A newcomer after the cursor shows up iff a later page was fetched after it arrived.
    assert [s for s in seen if s.startswith("cand-zz-")] == [
        f"cand-zz-{i}" for i in range(len(pages) - 1)
        if f"cand-zz-{i}" > pages[i][-1].candidate_id]
    assert "cand-zz-0" in seen  # it sorts before "cand-~", which is on a later page

    everything = all_pages(running.view, "scope-p", limit=4)
    assert len(everything) == len(ORDERED_IDS) + 2 * len(pages)
    assert ids(everything) == sorted(ids(everything))


def test_a_full_last_page_has_no_next_cursor(app: Dreaming, running: Running) -> None:
    candidates = [propose("scope-f", f"cand-{i}") for i in range(4)]
    running.wait(app.store.commit(*candidates))
    first, cursor = running.view.list_candidates("scope-f", limit=2)
    assert cursor == first[-1].cursor
    second, last = running.view.list_candidates("scope-f", cursor=cursor, limit=2)
    assert ids(first + second) == [f"cand-{i}" for i in range(4)]
    assert last is None
    assert running.view.list_candidates("scope-f", limit=4) == (first + second, None)


# -- cursors and request bounds -------------------------------------------------------------

BAD_CURSORS = {
    "empty": "",
    "not base64": "not base64!",
    "impossible length": "abcde",
    "too long": "A" * 2000,
    "no tag": b64(b"cand-1"),
    "other tag": b64(b"runs:cand-1"),
    "a runs cursor": encode_run_cursor(5, "cand-1"),
    "empty id": b64(b"inbox:"),
    "spaced id": b64(b"inbox: cand-1"),
    "control character": b64(b"inbox:cand\n1"),
    "id too long": b64(b"inbox:" + b"c" * 129),
    "not UTF-8": b64(b"inbox:\xff\xfe"),
}


@pytest.mark.parametrize("cursor", BAD_CURSORS.values(), ids=BAD_CURSORS.keys())
def test_a_cursor_this_service_did_not_issue_is_invalid_cursor(cursor: str) -> None:
    with pytest.raises(InvalidCursorError) as caught:
        CURSORS.decode(cursor)
    assert caught.value.code == "invalid_cursor"
    assert caught.value.details["field"] == "cursor"
    assert caught.value.details["reason"]


def test_cursors_round_trip_and_are_url_safe() -> None:
    for candidate_id in ["c", "cand:with:colons", "é" * 128, "x" * 128, "a b/c"]:
        cursor = CURSORS.encode(candidate_id)
        assert not set(cursor) & set("=/+")
        assert CURSORS.decode(cursor) == candidate_id


def test_the_view_checks_every_argument_before_querying(view: ReviewInboxView) -> None:
    with pytest.raises(InvalidCursorError):
        view.list_candidates("scope-a", cursor="garbage")
    for limit in (0, -1, 101, True, 2.5, "5", None):
        with pytest.raises(InvalidRequestError) as caught:
            view.list_candidates("scope-a", limit=limit)  # type: ignore[arg-type]
        assert caught.value.details["field"] == "limit"
    for status in ("PENDING", "", "open", 1):
        with pytest.raises(InvalidRequestError) as caught:
            view.list_candidates("scope-a", status=status)  # type: ignore[arg-type]
        assert caught.value.details["field"] == "status"
        with pytest.raises(InvalidRequestError):
            view.count("scope-a", status)  # type: ignore[arg-type]
    for family in ("memory", "prompt", "Skill", ""):
        with pytest.raises(InvalidRequestError) as caught:
            view.list_candidates("scope-a", family=family)
        assert caught.value.details["field"] == "family"
    assert view.list_candidates("scope-a", limit=1) == ([], None)
    assert view.list_candidates("scope-a", limit=100, status=None) == ([], None)


# -- exactly once ---------------------------------------------------------------------------


def test_reprocessing_an_event_is_refused_and_leaves_rows_unchanged(
        view: ReviewInboxView) -> None:
    projection = ReviewInboxProjection(view)
    candidate = propose("scope-e", "cand-1")
    (proposed,) = candidate.collect_events()
    projection.process_event(proposed, Tracking(APP, 1))
    candidate.record_conflict(1, "artifact_moved", {})
    (conflicted,) = candidate.collect_events()
    projection.process_event(conflicted, Tracking(APP, 2))
    before = view.get_candidate_summary("scope-e", "cand-1")
    assert before == expected(candidate, 2)

    for event, position in [(conflicted, 2), (proposed, 1), (conflicted, 1), (proposed, 2)]:
        with pytest.raises(IntegrityError):
            projection.process_event(event, Tracking(APP, position))
    candidate.reject(1, "no", "reviewer-1")
    (rejected,) = candidate.collect_events()
    missing = propose("scope-e", "cand-2")
    missing.reject(1, "no", "reviewer-1")
    (_, rejected_elsewhere) = missing.collect_events()
    with pytest.raises(LookupError):  # a failed row change takes its tracking back with it
        projection.process_event(rejected_elsewhere, Tracking(APP, 3))
    assert view.get_candidate_summary("scope-e", "cand-1") == before
    assert view.max_tracking_id(APP) == 2
    projection.process_event(rejected, Tracking(APP, 3))
    assert view.get_candidate_summary("scope-e", "cand-1") == expected(
        candidate, 3, "reviewer-1")


# -- rebuild --------------------------------------------------------------------------------


def write_history(app: Dreaming, scopes: list[str], per_scope: int) -> None:
    for scope_index, scope_id in enumerate(scopes):
        for index in range(per_scope):
            family = "skill" if index % 3 == 0 else "experience"
            candidate = propose(scope_id, f"cand-{index}", family, run_id=f"run-{index}")
            app.store.commit(candidate)
            if (index + scope_index) % 2:
                candidate.record_conflict(1, "artifact_moved", {})
                app.store.commit(candidate)
            if index % 4 == 1:
                candidate.approve(1, ArtifactRef(family, f"a-{index}", 1), "approver-1")
            elif index % 4 == 2:
                candidate.reject(1, "no", "reviewer-1")
            app.store.commit(candidate)


def snapshot(view: ReviewInboxView, scopes: list[str]) -> dict[str, list[CandidateSummary]]:
    return {scope_id: all_pages(view, scope_id, status=None) for scope_id in scopes}


def test_a_rebuilt_view_equals_the_live_one(settings: Settings, app: Dreaming,
                                            running: Running) -> None:
    scopes = ["scope-1", "scope-2", "scope-3"]
    write_history(app, scopes, per_scope=7)
    running.catch_up()
    live = snapshot(running.view, scopes)
    assert sum(len(rows) for rows in live.values()) == 21
    assert {row.status for rows in live.values() for row in rows} == {
        "pending", "approved", "rejected"}
    assert any(row.conflict for rows in live.values() for row in rows)

    fresh = REVIEW_INBOX.renamed("review_inbox_rebuilt")
    with rebuilt_view(fresh, settings, app.store.max_position()) as rebuilt:
        assert snapshot(rebuilt, scopes) == live
        assert rebuilt.max_tracking_id(APP) == running.position()


def test_rebuilding_in_place_drops_rows_and_tracking_first(settings: Settings,
                                                           app: Dreaming) -> None:
    scopes = ["scope-1", "scope-2"]
    write_history(app, scopes, per_scope=5)
    with start_projection(REVIEW_INBOX, settings) as running:
        running.catch_up()
        live = snapshot(running.view, scopes)
        bogus = propose("scope-1", "bogus")
        (proposed,) = bogus.collect_events()
        assert isinstance(proposed, Candidate.Proposed)
        running.view.candidate_proposed(proposed, Tracking(APP, app.store.max_position() + 1000))
    with rebuilt_view(REVIEW_INBOX, settings, app.store.max_position()) as view:
        assert snapshot(view, scopes) == live
        assert view.get_candidate_summary("scope-1", "bogus") is None
        assert view.max_tracking_id(APP) == app.store.max_position()
