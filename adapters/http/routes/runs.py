"""Dream runs: admission (or replay), the runs list and one run."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import quote

from fastapi import APIRouter, Request, Response

from adapters.http.dependencies import (
    After,
    App,
    Bearing,
    answered,
    read_view,
    reading,
    shown,
)
from adapters.http.schemas import (
    AutoDreamStatusView,
    CreateDreamRun,
    DreamRunPage,
    DreamRunSummary,
    DreamRunView,
    ErrorResponse,
)
from adapters.http.schemas.vocabulary import DreamOperationName, RunStatusName
from adapters.workers.pool import WorkerPool
from application.bootstrap import Dreaming
from application.credentials import Who
from domain.policy import Caller
from projections.auto_records import AUTO_RECORDS
from projections.runs import RUNS, RunsView

router = APIRouter()


@router.post("/scopes/{scope_id}/dream", status_code=202, tags=["dream"],
             response_model=DreamRunView, responses={
    200: {"model": DreamRunView, "description": "Replay of a run that already finished"},
    429: {"model": ErrorResponse, "description": "Too many unfinished runs in the scope"},
    503: {"model": ErrorResponse, "description": "Dream runs are unavailable"}})
def request_dream(scope_id: str, body: CreateDreamRun, request: Request, app: App,
                  bearer: Bearing) -> Response:
    """Admit a run (202 with Location), or replay the run this idempotency key names."""
    who = bearer.who()
    view = admit_dream(app, getattr(request.app.state, "workers", None), who, scope_id, body)
    location = f"/v1/scopes/{quote(view.scope_id)}/dream/{view.run_id}"
    return answered(view, 200 if view.terminal else 202, {"Location": location})


def admit_dream(app: Dreaming, workers: WorkerPool | None, who: Who, scope_id: str,
                body: CreateDreamRun) -> DreamRunView:
    """Admit (or replay) a run, and wake this process's workers for a run still to execute."""
    written = app.runs.request_dream(who, scope_id, app.gate.checked(who, body.to_domain))
    run = written.value.run
    if workers is not None and not run.terminal:
        workers.wake()
    return DreamRunView.of(run, shown(app, written, run))


@router.get("/scopes/{scope_id}/dream", tags=["dream"], dependencies=[reading(RUNS)])
def list_dreams(scope_id: str, request: Request, response: Response, app: App, bearer: Bearing,
                status: RunStatusName | None = None,
                operation: DreamOperationName | None = None,
                cursor: str | None = None, limit: int = 20,
                after: After = None) -> DreamRunPage:
    """Run summaries, newest first (keyset pagination with an opaque cursor)."""
    return runs_page(app, bearer.caller(), scope_id,
                     lambda: read_view(request, response, app, RUNS, after),
                     status, operation, cursor, limit)


def runs_page(app: Dreaming, caller: Caller, scope_id: str, view: Callable[[], RunsView],
              status: str | None, operation: str | None, cursor: str | None,
              limit: int) -> DreamRunPage:
    """One page of run summaries, once the caller may read the scope (``view`` may wait)."""
    app.records.get_scope(caller, scope_id)
    summaries, next_cursor = view().list_runs(scope_id, status=status, operation=operation,
                                              cursor=cursor, limit=limit)
    return DreamRunPage(runs=[DreamRunSummary.from_summary(s) for s in summaries],
                        next_cursor=next_cursor)


@router.get("/scopes/{scope_id}/dream/auto", tags=["dream"],
            dependencies=[reading(AUTO_RECORDS)])
def auto_dream_status(scope_id: str, request: Request, response: Response, app: App,
                      bearer: Bearing, after: After = None) -> AutoDreamStatusView:
    """Automatic dreaming in this scope: each gate with its value, and why the scope is or is
    not due now; the cursor and the window in flight. (Before ``/dream/{run_id}``: a run id
    never reads ``auto``.)"""
    caller = bearer.caller()
    scope = app.records.get_scope(caller, scope_id)  # refused before any wait for the view
    records = read_view(request, response, app, AUTO_RECORDS, after)
    return AutoDreamStatusView.of(app.auto.status_of(scope, records))


@router.get("/scopes/{scope_id}/dream/{run_id}", tags=["dream"], response_model=DreamRunView)
def get_dream(scope_id: str, run_id: str, app: App, bearer: Bearing) -> Response:
    return answered(run_view(app, bearer.who(), scope_id, run_id))


def run_view(app: Dreaming, who: Who, scope_id: str, run_id: str) -> DreamRunView:
    run = app.runs.get_dream(who, scope_id, run_id)
    return DreamRunView.of(run, app.store.position_of(run))
