"""Dream runs: admission (or replay), the runs list, one run, automatic dreaming's status."""

from __future__ import annotations

from weakref import WeakKeyDictionary

from adapters.api import rendered_pages
from adapters.api.acting import Acting
from adapters.api.schemas import (
    AutoDreamStatusView,
    CreateDreamRun,
    DreamRunPage,
    DreamRunSummary,
    DreamRunView,
)
from application.bootstrap import Dreaming
from application.dream_runs import Admission
from application.store import Written
from projections.auto_records import AUTO_RECORDS
from projections.runs import RUNS

# Keys this process has answered with a run, per deployment: a request naming one again is
# most likely a replay, worth trying as a read (bounded: forgotten all at once when full).
MAX_ANSWERED_KEYS = 16_384
_answered_keys: WeakKeyDictionary[Dreaming, set[tuple[str, str]]] = WeakKeyDictionary()


def request_dream(acting: Acting, scope_id: str, body: CreateDreamRun) -> DreamRunView:
    """Admit (or replay) a run, and wake this process's workers for a run still to execute."""
    app, who = acting.app, acting.who()
    written = app.runs.request_dream(who, scope_id, app.gate.checked(who, body.to_domain))
    if acting.workers is not None and not written.value.run.terminal:
        acting.workers.wake()
    _remember_answered(app, scope_id, body.idempotency_key)
    return _run_view(acting, written)


def replay_likely(acting: Acting, scope_id: str, body: CreateDreamRun) -> bool:
    """Whether this process has answered the request's key in the scope before."""
    return (scope_id, body.idempotency_key) in _answered_keys.get(acting.app, ())


def replayed(acting: Acting, scope_id: str, body: CreateDreamRun) -> DreamRunView | None:
    """The replay of the run the request's key names, with every check an admission makes
    first; None when the key names no run of this caller's yet (then admit). Reads only."""
    app, who = acting.app, acting.who()
    written = app.runs.replayed(who, scope_id, app.gate.checked(who, body.to_domain))
    return None if written is None else _run_view(acting, written)


def _run_view(acting: Acting, written: Written[Admission]) -> DreamRunView:
    run = written.value.run
    return DreamRunView.of(run, acting.shown(written, run))


def _remember_answered(app: Dreaming, scope_id: str, key: str) -> None:
    answered = _answered_keys.setdefault(app, set())
    if len(answered) >= MAX_ANSWERED_KEYS:
        answered.clear()
    answered.add((scope_id, key))


def list_runs(acting: Acting, scope_id: str, status: str | None, operation: str | None,
              cursor: str | None, limit: int) -> DreamRunPage:
    """Run summaries, newest first, once the caller may read the scope."""
    acting.app.records.get_scope(acting.who(), scope_id)
    summaries, next_cursor = acting.view(RUNS)().list_runs(
        scope_id, status=status, operation=operation, cursor=cursor, limit=limit)
    return DreamRunPage(runs=[DreamRunSummary.from_summary(s) for s in summaries],
                        next_cursor=next_cursor)


def list_runs_body(acting: Acting, scope_id: str, status: str | None, operation: str | None,
                   cursor: str | None, limit: int) -> bytes:
    """The page ``list_runs`` answers, as the JSON body of the items the view keeps
    rendered (ADR-0041, ADR-0042)."""
    acting.app.records.get_scope(acting.who(), scope_id)
    view = acting.view(RUNS)()
    documents, next_cursor = view.list_documents(scope_id, status=status, operation=operation,
                                                 cursor=cursor, limit=limit)
    return rendered_pages.page_body("runs", documents, next_cursor)


def get_run(acting: Acting, scope_id: str, run_id: str) -> DreamRunView:
    app = acting.app
    run = app.runs.get_dream(acting.who(), scope_id, run_id)
    return DreamRunView.of(run, app.store.position_of(run))


def auto_status(acting: Acting, scope_id: str) -> AutoDreamStatusView:
    """Automatic dreaming in the scope: each gate, and why the scope is or is not due now."""
    app = acting.app
    scope = app.records.get_scope(acting.who(), scope_id)  # refused before any wait
    return AutoDreamStatusView.of(app.auto.status_of(scope, acting.view(AUTO_RECORDS)()))
