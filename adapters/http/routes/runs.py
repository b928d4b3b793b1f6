"""Dream runs: admission (or replay), the runs list and one run."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import Response
from starlette.concurrency import run_in_threadpool

from adapters.api import runs
from adapters.api.schemas import (
    AutoDreamStatusView,
    CreateDreamRun,
    DreamRunPage,
    DreamRunView,
    ErrorResponse,
)
from adapters.api.schemas.vocabulary import DreamOperationName, RunStatusName
from adapters.http.dependencies import (
    After,
    Calling,
    answered,
    read_first,
    reading,
    rendered,
    v1_router,
)
from projections.auto_records import AUTO_RECORDS
from projections.runs import RUNS

router = v1_router()


@router.post("/scopes/{scope_id}/dream", status_code=202, tags=["dream"],
             response_model=DreamRunView, responses={
    200: {"model": DreamRunView, "description": "Replay of a run that already finished"},
    429: {"model": ErrorResponse, "description": "Too many unfinished runs in the scope"},
    503: {"model": ErrorResponse, "description": "Dream runs are unavailable"}})
async def request_dream(scope_id: str, body: CreateDreamRun, acting: Calling) -> Response:
    """Admit a run (202 with Location), or replay the run this idempotency key names."""
    view = None
    if runs.replay_likely(acting, scope_id, body):  # a read answers it: see ``read_first``
        view = await read_first(runs.replayed, acting, scope_id, body)
    if view is None:
        view = await run_in_threadpool(runs.request_dream, acting, scope_id, body)
    location = f"/v1/scopes/{quote(view.scope_id)}/dream/{view.run_id}"
    return answered(view, 200 if view.terminal else 202, {"Location": location})


@router.get("/scopes/{scope_id}/dream", tags=["dream"], dependencies=[reading(RUNS)],
            response_model=DreamRunPage)
async def list_dreams(scope_id: str, acting: Calling, response: Response,
                      status: RunStatusName | None = None,
                      operation: DreamOperationName | None = None,
                      cursor: str | None = None, limit: int = 20,
                      after: After = None) -> Response:
    """Run summaries, newest first (keyset pagination with an opaque cursor)."""
    return rendered(await read_first(runs.list_runs_body, acting.including(after), scope_id,
                                     status, operation, cursor, limit), response)


@router.get("/scopes/{scope_id}/dream/auto", tags=["dream"],
            dependencies=[reading(AUTO_RECORDS)])
def auto_dream_status(scope_id: str, acting: Calling, after: After = None) -> AutoDreamStatusView:
    """Automatic dreaming in this scope: each gate with its value, and why the scope is or is
    not due now; the cursor and the window in flight. (Before ``/dream/{run_id}``: a run id
    never reads ``auto``.)"""
    return runs.auto_status(acting.including(after), scope_id)


@router.get("/scopes/{scope_id}/dream/{run_id}", tags=["dream"], response_model=DreamRunView)
async def get_dream(scope_id: str, run_id: str, acting: Calling) -> Response:
    return answered(await read_first(runs.get_run, acting, scope_id, run_id))
