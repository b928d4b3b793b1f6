"""Dream runs: admission (or replay), the runs list, one run, automatic dreaming's status."""

from __future__ import annotations

from adapters.api.acting import Acting
from adapters.api.schemas import (
    AutoDreamStatusView,
    CreateDreamRun,
    DreamRunPage,
    DreamRunSummary,
    DreamRunView,
)
from projections.auto_records import AUTO_RECORDS
from projections.runs import RUNS


def request_dream(acting: Acting, scope_id: str, body: CreateDreamRun) -> DreamRunView:
    """Admit (or replay) a run, and wake this process's workers for a run still to execute."""
    app, who = acting.app, acting.who()
    written = app.runs.request_dream(who, scope_id, app.gate.checked(who, body.to_domain))
    run = written.value.run
    if acting.workers is not None and not run.terminal:
        acting.workers.wake()
    return DreamRunView.of(run, acting.shown(written, run))


def list_runs(acting: Acting, scope_id: str, status: str | None, operation: str | None,
              cursor: str | None, limit: int) -> DreamRunPage:
    """Run summaries, newest first, once the caller may read the scope."""
    acting.app.records.get_scope(acting.who(), scope_id)
    summaries, next_cursor = acting.view(RUNS)().list_runs(
        scope_id, status=status, operation=operation, cursor=cursor, limit=limit)
    return DreamRunPage(runs=[DreamRunSummary.from_summary(s) for s in summaries],
                        next_cursor=next_cursor)


def get_run(acting: Acting, scope_id: str, run_id: str) -> DreamRunView:
    app = acting.app
    run = app.runs.get_dream(acting.who(), scope_id, run_id)
    return DreamRunView.of(run, app.store.position_of(run))


def auto_status(acting: Acting, scope_id: str) -> AutoDreamStatusView:
    """Automatic dreaming in the scope: each gate, and why the scope is or is not due now."""
    app = acting.app
    scope = app.records.get_scope(acting.who(), scope_id)  # refused before any wait
    return AutoDreamStatusView.of(app.auto.status_of(scope, acting.view(AUTO_RECORDS)()))
