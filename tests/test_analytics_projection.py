"""The analytics read model on SQLite and PostgreSQL: per scope and UTC day counters.

A known workload of Dream runs and Candidates is written to the real event store
(``app.store.commit``) and followed by the real runner. Run counters, usage and admissions fall on
days the events name explicitly and are checked against exact numbers; Candidate counters and
review latencies fall on the events' own timestamps, read back from ``app.store.history``. A rebuilt
view equals the live one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from eventsourcing.persistence import IntegrityError, Tracking

from adapters.settings import Settings
from adapters.store.projection_runtime import RunningProjection, start_projection
from adapters.store.view_batches import open_view
from application.bootstrap import Dreaming
from domain.budget import Budget
from domain.candidate import Candidate
from domain.dream_request import DreamRequest
from domain.dream_run import DreamRun
from domain.errors import InvalidRequestError
from domain.refs import ArtifactRef, Lineage, SourceRef
from projections.analytics import ANALYTICS, AnalyticsProjection, AnalyticsView, utc_day
from projections.analytics_queries import AcceptanceRate, ApprovedCost, DailySummary
from projections.times import to_micros
from tests.projection_support import rebuilt_view

APP = "Dreaming"
D1 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
D2 = datetime(2025, 3, 2, 9, 0, tzinfo=UTC)
DAY1, DAY2 = "2025-03-01", "2025-03-02"
REFINE, DERIVE = "refine_experience", "derive_skill"
LINEAGE = Lineage(sources=(SourceRef("task", "t1"),))
LESSON = {"situation": "Retried a payment write", "action": "Sent idempotency key K",
          "outcome": "One charge", "lesson": "Use idempotency keys on retries"}
SKILL = {"name": "retry-safely", "description": "Retry writes safely",
         "instructions": "Send an idempotency key with every retried write.",
         "validation": ["the retried write carries a key"]}
Running = RunningProjection[AnalyticsView]


@pytest.fixture
def running(settings: Settings) -> Iterator[Running]:
    with start_projection(ANALYTICS, settings) as projection:
        yield projection


@pytest.fixture
def view(settings: Settings) -> Iterator[AnalyticsView]:
    opened = open_view(ANALYTICS, settings)
    yield opened
    opened.close()


# -- the workload -------------------------------------------------------------------------------


def accept(scope_id: str, run_id: str, operation: str, accepted_at: datetime) -> DreamRun:
    request = {"operation": operation, "target": None}
    return DreamRun.accept(scope_id, run_id, "alice",
                           DreamRequest.from_dict(request, f"idem-{run_id}"), Budget(),
                           "prompt-v1", accepted_at)


def start(run: DreamRun, at: datetime) -> int:
    assert run.start_attempt(at, "model-a", lease_seconds=60)
    return run.attempt


def call(run: DreamRun, attempt: int, requests: int, input_tokens: int | None,
         output_tokens: int | None) -> None:
    """One model call counted before it is made, then the provider's usage report."""
    run.count_model_call(attempt)
    run.record_usage(attempt, requests, input_tokens, output_tokens)


def propose(scope_id: str, candidate_id: str, family: str, run_id: str | None) -> Candidate:
    return Candidate.propose(scope_id, candidate_id, family, None,
                             LESSON if family == "experience" else SKILL, LINEAGE,
                             "Supported by the task record.", "alice", run_id=run_id)


def succeed_with(app: Dreaming, run: DreamRun, attempt: int, candidate: Candidate,
                 at: datetime) -> None:
    """The run's success and its Candidate in one save, as execution writes them."""
    run.succeed(attempt, "proposed", "a lesson", {"candidate_id": candidate.candidate_id,
                                                  "version": 1}, at)
    app.store.commit(run, candidate)


def approve(app: Dreaming, candidate: Candidate) -> int | None:
    version = candidate.candidate_version
    candidate.approve(version, ArtifactRef(candidate.family, f"a-{candidate.candidate_id}", 1),
                      "carol")
    return app.store.commit(candidate)


def reject(app: Dreaming, candidate: Candidate) -> int | None:
    candidate.reject(candidate.candidate_version, "not supported", "carol")
    return app.store.commit(candidate)


def revise(app: Dreaming, candidate: Candidate) -> None:
    candidate.revise(candidate.candidate_version, candidate.current.proposal, LINEAGE,
                     "Reworded.", "bob", None)
    app.store.commit(candidate)


def workload(app: Dreaming, scope_id: str) -> list[Candidate]:
    """Eight runs over two days, and five Candidates (four decided); see the tests' numbers."""
    runs: dict[str, DreamRun] = {}

    def admitted(run_id: str, operation: str, at: datetime) -> DreamRun:
        runs[run_id] = accept(scope_id, run_id, operation, at)
        app.store.commit(runs[run_id])
        return runs[run_id]

    # Day 1: two refine runs and a derive run admitted just before midnight.
    r1 = admitted("r1", REFINE, D1)
    attempt = start(r1, D1 + timedelta(seconds=1))
    call(r1, attempt, 1, 100, 20)
    c1 = propose(scope_id, "c1", "experience", "r1")
    succeed_with(app, r1, attempt, c1, D1 + timedelta(minutes=1))

    r2 = admitted("r2", REFINE, D1 + timedelta(hours=1))
    attempt = start(r2, D1 + timedelta(hours=1, seconds=1))
    call(r2, attempt, 1, None, None)  # the provider reported no token counts
    r2.succeed(attempt, "no_change", "nothing new", None, D1 + timedelta(hours=1, minutes=1))
    app.store.commit(r2)

    r3 = admitted("r3", DERIVE, datetime(2025, 3, 1, 23, 59, tzinfo=UTC))
    attempt = start(r3, datetime(2025, 3, 1, 23, 59, 30, tzinfo=UTC))
    call(r3, attempt, 2, 300, 50)  # one call that took two provider requests
    c3 = propose(scope_id, "c3", "skill", "r3")
    succeed_with(app, r3, attempt, c3, datetime(2025, 3, 2, 0, 0, 30, tzinfo=UTC))  # day 2

    # Day 2.
    r4 = admitted("r4", DERIVE, D2)
    attempt = start(r4, D2 + timedelta(seconds=1))
    r4.fail(attempt, "provider_error", D2 + timedelta(seconds=2))
    app.store.commit(r4)

    r5 = admitted("r5", REFINE, D2)
    attempt = start(r5, D2 + timedelta(seconds=1))
    r5.count_model_call(attempt)  # a call that never reported
    r5.fail(attempt, "budget_exceeded", D2 + timedelta(seconds=3))
    app.store.commit(r5)

    admitted("r6", REFINE, D2 + timedelta(hours=1))  # still queued

    r7 = admitted("r7", REFINE, D2 + timedelta(hours=2))
    attempt = start(r7, D2 + timedelta(hours=2, seconds=1))
    call(r7, attempt, 1, 10, 5)
    r7.requeue(attempt, "provider_unavailable")
    app.store.commit(r7)
    attempt = start(r7, D2 + timedelta(hours=2, seconds=30))
    call(r7, attempt, 1, 7, 3)
    c7 = propose(scope_id, "c7", "experience", "r7")
    succeed_with(app, r7, attempt, c7, D2 + timedelta(hours=2, minutes=1))

    r8 = admitted("r8", REFINE, D2 + timedelta(hours=3))
    attempt = start(r8, D2 + timedelta(hours=3, seconds=1))
    r8.count_model_call(attempt)
    r8.record_usage(attempt, 1, 40, None)  # half a report: totals unknown
    c8 = propose(scope_id, "c8", "experience", "r8")
    succeed_with(app, r8, attempt, c8, D2 + timedelta(hours=3, minutes=1))

    m1, m2 = propose(scope_id, "m1", "experience", None), propose(scope_id, "m2", "skill", None)
    app.store.commit(m1, m2)

    # Reviews: c1 and c8 approved, c3 revised then rejected, c7 rejected, m1 revised twice
    # then approved, m2 still pending.
    approve(app, c1)
    revise(app, c3)
    reject(app, c3)
    reject(app, c7)
    revise(app, m1)
    revise(app, m1)
    approve(app, m1)
    approve(app, c8)
    return [c1, c3, c7, c8, m1, m2]


def history_counters(app: Dreaming, candidates: list[Candidate]) -> list[dict[str, Any]]:
    """``analytics_candidates`` as the Candidates' own stored events say it must be."""
    counted: Counter[tuple[str, str, str, str]] = Counter()
    names = {Candidate.Proposed: "proposed", Candidate.Revised: "revised",
             Candidate.Approved: "approved", Candidate.Rejected: "rejected"}
    for candidate in candidates:
        origin = "manual" if candidate.run_id is None else "dream"
        for event in app.store.history(candidate.id):
            counted[(utc_day(event.timestamp), candidate.family, origin,
                     names[type(event)])] += 1
    keys = sorted({key[:3] for key in counted})
    return [{"scope_id": candidates[0].scope_id, "day": day, "family": family,
             "origin": origin, **{name: counted[(day, family, origin, name)]
                                  for name in ("proposed", "revised", "approved", "rejected")}}
            for day, family, origin in keys]


def history_reviews(app: Dreaming, candidates: list[Candidate],
                    operations: dict[str, str]) -> list[dict[str, Any]]:
    """``analytics_reviews`` from the Candidates' stored events: latency between the proposal
    and the decision event."""
    rows = []
    for candidate in sorted(candidates, key=lambda c: c.candidate_id):
        events = app.store.history(candidate.id)
        decision = events[-1]
        if not isinstance(decision, (Candidate.Approved, Candidate.Rejected)):
            continue
        proposed_at, decided_at = to_micros(events[0].timestamp), to_micros(decision.timestamp)
        rows.append({
            "scope_id": candidate.scope_id, "candidate_id": candidate.candidate_id,
            "family": candidate.family,
            "origin": "manual" if candidate.run_id is None else "dream",
            "run_id": candidate.run_id, "operation": operations.get(candidate.run_id or ""),
            "proposed_at": proposed_at, "decided_at": decided_at,
            "decision": "approved" if isinstance(decision, Candidate.Approved) else "rejected",
            "versions": candidate.candidate_version, "latency_us": decided_at - proposed_at})
    return rows


RUN_OPERATIONS = {"r1": REFINE, "r3": DERIVE, "r7": REFINE, "r8": REFINE}


# -- exact counters -------------------------------------------------------------------------------


def test_run_counters_usage_and_admissions_match_the_workload(app: Dreaming,
                                                              running: Running) -> None:
    workload(app, "scope-a")
    running.catch_up()
    view = running.view

    def runs(day: str, operation: str, status: str, outcome: str | None, error: str | None,
             count: int) -> dict[str, Any]:
        return {"scope_id": "scope-a", "day": day, "operation": operation, "status": status,
                "outcome": outcome, "error": error, "runs": count}

    assert sorted(view.run_counters("scope-a"), key=repr) == sorted([
        runs(DAY1, REFINE, "succeeded", "no_change", None, 1),
        runs(DAY1, REFINE, "succeeded", "proposed", None, 1),
        runs(DAY2, DERIVE, "failed", None, "provider_error", 1),
        runs(DAY2, DERIVE, "succeeded", "proposed", None, 1),  # r3 ended after midnight
        runs(DAY2, REFINE, "failed", None, "budget_exceeded", 1),
        runs(DAY2, REFINE, "succeeded", "proposed", None, 2),
    ], key=repr)
    assert view.accepted_counters("scope-a") == [
        {"scope_id": "scope-a", "day": DAY1, "operation": DERIVE, "runs": 1},
        {"scope_id": "scope-a", "day": DAY1, "operation": REFINE, "runs": 2},
        {"scope_id": "scope-a", "day": DAY2, "operation": DERIVE, "runs": 1},
        {"scope_id": "scope-a", "day": DAY2, "operation": REFINE, "runs": 4},
    ]

    def usage(day: str, operation: str, calls: int, tokens_in: int, tokens_out: int,
              unknown: int) -> dict[str, Any]:
        return {"scope_id": "scope-a", "day": day, "operation": operation,
                "model_calls": calls, "input_tokens": tokens_in, "output_tokens": tokens_out,
                "calls_without_token_counts": unknown}

    assert view.usage_counters("scope-a") == [
        usage(DAY1, REFINE, 2, 100, 20, 1),  # r1 + r2 (no counts)
        usage(DAY2, DERIVE, 2, 300, 50, 0),  # r3's two requests; r4 made no call
        # r5 (never reported), r7 (two attempts), r8 (input known, output not)
        usage(DAY2, REFINE, 4, 57, 8, 2),
    ]


def test_candidate_counters_and_reviews_follow_the_events_own_times(
        app: Dreaming, running: Running) -> None:
    candidates = workload(app, "scope-a")
    running.catch_up()
    view = running.view

    counters = view.candidate_counters("scope-a")
    assert counters == history_counters(app, candidates)
    totals = Counter[str]()
    for row in counters:
        totals.update({name: row[name] for name in ("proposed", "revised", "approved",
                                                     "rejected")})
    assert totals == Counter(proposed=6, revised=3, approved=3, rejected=2)

    reviews = view.reviews("scope-a")
    assert reviews == history_reviews(app, candidates, RUN_OPERATIONS)
    assert [(row["candidate_id"], row["decision"], row["versions"], row["operation"])
            for row in reviews] == [
        ("c1", "approved", 1, REFINE), ("c3", "rejected", 2, DERIVE),
        ("c7", "rejected", 1, REFINE), ("c8", "approved", 1, REFINE),
        ("m1", "approved", 3, None)]
    assert all(row["latency_us"] > 0 for row in reviews)


def test_rates_latency_and_cost_are_sql_over_the_tables(app: Dreaming,
                                                        running: Running) -> None:
    candidates = workload(app, "scope-a")
    running.catch_up()
    view = running.view

    assert view.acceptance_rate("scope-a") == [
        AcceptanceRate(DERIVE, decided=1, approved=0, rejected=1),
        AcceptanceRate(REFINE, decided=3, approved=2, rejected=1)]
    assert [rate.rate for rate in view.acceptance_rate("scope-a")] == [0.0, 2 / 3]

    latencies = sorted(row["latency_us"]
                       for row in history_reviews(app, candidates, RUN_OPERATIONS))
    assert len(latencies) == 5
    assert view.review_latency_p50("scope-a") == timedelta(microseconds=latencies[2])
    skills = [row["latency_us"] for row in history_reviews(app, candidates, RUN_OPERATIONS)
              if row["family"] == "skill"]
    assert view.review_latency_p50("scope-a", family="skill") == timedelta(
        microseconds=skills[0])

    # c1 (r1: 1 call, 100 + 20 tokens) and c8 (r8: 1 call, 40 + unknown); m1 is manual.
    cost = view.cost_per_approved_experience("scope-a")
    assert cost == ApprovedCost("experience", approved=2, model_calls=2, input_tokens=140,
                                output_tokens=20, calls_without_token_counts=1)
    assert cost.tokens == 160
    assert cost.tokens_per_approved == 80.0
    assert view.cost_per_approved("scope-a", "skill") == ApprovedCost("skill", 0, 0, 0, 0, 0)


def test_daily_summaries_add_up_every_table(app: Dreaming, running: Running) -> None:
    candidates = workload(app, "scope-a")
    running.catch_up()
    view = running.view
    days = view.daily("scope-a")
    assert days[:2] == [
        DailySummary(DAY1, accepted=3, succeeded=2, failed=0, model_calls=2, input_tokens=100,
                     output_tokens=20, calls_without_token_counts=1, proposed=0, revised=0,
                     approved=0, rejected=0),
        DailySummary(DAY2, accepted=5, succeeded=3, failed=2, model_calls=6, input_tokens=357,
                     output_tokens=58, calls_without_token_counts=2, proposed=0, revised=0,
                     approved=0, rejected=0)]
    expected = Counter[tuple[str, str]]()
    for row in history_counters(app, candidates):
        for name in ("proposed", "revised", "approved", "rejected"):
            expected[(row["day"], name)] += row[name]
    later = days[2:]
    assert [summary.day for summary in later] == sorted({day for day, _ in expected})
    for summary in later:
        assert summary.accepted == summary.model_calls == 0
        for name in ("proposed", "revised", "approved", "rejected"):
            assert getattr(summary, name) == expected[(summary.day, name)]

    assert view.daily("scope-a", since_day=DAY2) == days[1:]
    assert view.daily("scope-a", since_day=date(2025, 3, 2)) == days[1:]
    assert view.daily("scope-a", since_day="2999-01-01") == []
    for bad in ("2025-3-1", "yesterday", "2025-02-30", 20250301, datetime.now(UTC)):
        with pytest.raises(InvalidRequestError) as caught:
            view.daily("scope-a", since_day=bad)  # type: ignore[arg-type]
        assert caught.value.details["field"] == "since_day"


def test_scopes_are_isolated_and_empty_scopes_answer_plainly(app: Dreaming,
                                                             running: Running) -> None:
    workload(app, "scope-a")
    other = accept("scope-b", "r1", REFINE, D1)  # same ids, day and operation
    attempt = start(other, D1 + timedelta(seconds=1))
    call(other, attempt, 1, 1000, 1000)
    candidate = propose("scope-b", "c1", "experience", "r1")
    succeed_with(app, other, attempt, candidate, D1 + timedelta(minutes=1))
    approve(app, candidate)
    running.catch_up()
    view = running.view

    assert view.usage_counters("scope-a")[0]["input_tokens"] == 100
    assert view.cost_per_approved_experience("scope-a").input_tokens == 140
    assert view.cost_per_approved_experience("scope-b") == ApprovedCost(
        "experience", 1, 1, 1000, 1000, 0)
    assert view.acceptance_rate("scope-b") == [AcceptanceRate(REFINE, 1, 1, 0)]
    assert [row["runs"] for row in view.run_counters("scope-b")] == [1]

    assert view.daily("scope-c") == []
    assert view.acceptance_rate("scope-c") == []
    assert view.review_latency_p50("scope-c") is None
    empty = view.cost_per_approved_experience("scope-c")
    assert empty == ApprovedCost("experience", 0, 0, 0, 0, 0)
    assert empty.tokens_per_approved is None


def test_every_event_is_tracked_and_none_twice(app: Dreaming, view: AnalyticsView) -> None:
    projection = AnalyticsProjection(view)
    run = accept("scope-e", "r1", REFINE, D1)
    (accepted,) = run.collect_events()
    attempt = start(run, D1)
    (started,) = run.collect_events()
    projection.process_event(accepted, Tracking(APP, 1))
    projection.process_event(started, Tracking(APP, 2))  # changes no counter, still tracked
    assert view.max_tracking_id(APP) == 2
    with pytest.raises(IntegrityError):
        projection.process_event(accepted, Tracking(APP, 3))  # the run row already exists
    with pytest.raises(IntegrityError):
        projection.process_event(started, Tracking(APP, 2))
    run.fail(attempt, "boom", D1)
    (failed,) = run.collect_events()
    stranger = accept("scope-e", "r2", REFINE, D1)
    with pytest.raises(LookupError):  # a run the view never saw admitted
        view.run_ended(stranger.id, "failed", None, "boom", D1, Tracking(APP, 3))
    assert view.max_tracking_id(APP) == 2
    projection.process_event(failed, Tracking(APP, 3))
    assert view.accepted_counters("scope-e") == [
        {"scope_id": "scope-e", "day": DAY1, "operation": REFINE, "runs": 1}]
    assert [row["error"] for row in view.run_counters("scope-e")] == ["boom"]


# -- rebuild --------------------------------------------------------------------------------------


def snapshot(view: AnalyticsView, scopes: list[str]) -> dict[str, Any]:
    return {scope_id: {
        "runs": view.run_counters(scope_id), "accepted": view.accepted_counters(scope_id),
        "usage": view.usage_counters(scope_id), "candidates": view.candidate_counters(scope_id),
        "reviews": view.reviews(scope_id), "daily": view.daily(scope_id),
        "acceptance": view.acceptance_rate(scope_id),
        "p50": view.review_latency_p50(scope_id),
        "cost": view.cost_per_approved_experience(scope_id)} for scope_id in scopes}


def test_a_rebuilt_view_equals_the_live_one(settings: Settings, app: Dreaming,
                                            running: Running) -> None:
    scopes = ["scope-a", "scope-b"]
    for scope_id in scopes:
        workload(app, scope_id)
    running.catch_up()
    live = snapshot(running.view, scopes)
    for name in ("acceptance", "cost"):
        assert live["scope-a"][name] == live["scope-b"][name]

    fresh = ANALYTICS.renamed("analytics_rebuilt")
    with rebuilt_view(fresh, settings, app.store.max_position()) as rebuilt:
        assert snapshot(rebuilt, scopes) == live
        assert rebuilt.max_tracking_id(APP) == running.position()


def test_rebuilding_in_place_starts_from_scratch(settings: Settings, app: Dreaming) -> None:
    workload(app, "scope-a")
    with start_projection(ANALYTICS, settings) as running:
        running.catch_up()
        live = snapshot(running.view, ["scope-a"])
    with rebuilt_view(ANALYTICS, settings, app.store.max_position()) as view:
        assert snapshot(view, ["scope-a"]) == live
