"""The operations page's numbers: ``GET /v1/ops/overview``, for deployment administrators."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query, Request

from adapters.api.acting import caught_up
from adapters.api.schemas.ops import (
    DueScopeView,
    LatencyBucket,
    ModelCallsView,
    OpsOverview,
    RunCountView,
    RunMinuteView,
    ScopeInboxView,
    ScopeQueueView,
    SlotUse,
    WorkerHealth,
)
from adapters.http.dependencies import After, App, Bearing, v1_router
from adapters.http.routes.ops import projection_health
from adapters.observability.readings import model_calls
from adapters.store.projection_runtime import RunningProjection
from adapters.workers.pool import WorkerPool
from application.bootstrap import Dreaming
from application.operations import deployment_overview
from projections.auto_records import AUTO_RECORDS
from projections.operations import MAX_MINUTES, MAX_SCOPES, DeploymentOverview, overview_of
from projections.review_inbox import REVIEW_INBOX
from projections.runs import RUNS

router = v1_router()


@router.get("/ops/overview", tags=["ops"])
def ops_overview(request: Request, app: App, bearer: Bearing,
                 minutes: Annotated[int, Query(ge=1, le=MAX_MINUTES, description=(
                     "Minutes of run activity, the current one included."))] = 60,
                 scopes: Annotated[int, Query(ge=1, le=MAX_SCOPES, description=(
                     "Rows of each per-scope list at most."))] = 20,
                 after: After = None) -> OpsOverview:
    """What the operations page (`/ops`) draws: runs by status and trigger and per minute,
    each scope's queue and review inbox, the scopes automatic dreaming may find due, each
    read model's lag, model calls and generation slots. Deployment administrators only.
    The read models are read as they are now (their lag is part of the answer); with
    ``after``, once they include that position."""
    caller = bearer.caller()
    running: dict[str, RunningProjection[Any]] = request.app.state.read_models
    wait_seconds: float = request.app.state.read_wait_seconds

    def read() -> DeploymentOverview:
        views = {spec.name: running[spec.name].view if after is None else caught_up(
            app, running[spec.name], after, wait_seconds)
            for spec in (RUNS, REVIEW_INBOX, AUTO_RECORDS)}
        return overview_of(views[RUNS.name], views[REVIEW_INBOX.name],
                           views[AUTO_RECORDS.name], app.clock(), minutes, scopes)

    found = deployment_overview(app.policy, caller, read)
    return _answer(app, found, running, request.app.state.workers)


def _answer(app: Dreaming, found: DeploymentOverview,
            running: dict[str, RunningProjection[Any]], pool: WorkerPool | None) -> OpsOverview:
    head = app.store.max_position()
    slots = None if pool is None else pool.slots
    return OpsOverview(
        generated_at=app.clock(), position=head, minutes=found.minutes, since=found.since,
        runs=[RunCountView(**vars(row)) for row in found.runs],
        activity=[RunMinuteView(**vars(row)) for row in found.activity],
        queues=[ScopeQueueView(**vars(row)) for row in found.queues],
        inboxes=[ScopeInboxView(**vars(row)) for row in found.inboxes],
        due=[DueScopeView(**vars(row)) for row in found.due],
        projections={p.name: projection_health(p, head, []) for p in running.values()},
        model_calls=[ModelCallsView(
            generator=calls.generator, outcomes=calls.outcomes, count=calls.count,
            sum_seconds=calls.sum_seconds, p50_seconds=calls.quantile(0.5),
            p95_seconds=calls.quantile(0.95),
            buckets=[LatencyBucket(le=le, calls=n) for le, n in calls.buckets])
            for calls in model_calls()],
        workers=None if pool is None else WorkerHealth(
            capacity=pool.capacity, busy=pool.busy, completed=pool.completed),
        slots=[] if slots is None else [
            SlotUse(pool=name, cap=cap, in_use=len(slots.held(name)))
            for name, cap in sorted(slots.caps.items())])
