"""A scope at a glance: automatic dreaming, the review inbox and the run queue together."""

from __future__ import annotations

from adapters.api.acting import Acting
from adapters.api.schemas import AutoDreamStatusView, ScopeStatusView
from domain.dream_run import RunStatus
from projections.auto_records import AUTO_RECORDS
from projections.review_inbox import REVIEW_INBOX
from projections.runs import RUNS


def status(acting: Acting, scope_id: str) -> ScopeStatusView:
    """The caller's read access is checked once, before any read model is waited for."""
    app = acting.app
    scope = app.records.get_scope(acting.who(), scope_id)
    runs = acting.view(RUNS)()
    return ScopeStatusView(
        scope_id=scope_id,
        auto=AutoDreamStatusView.of(app.auto.status_of(scope, acting.view(AUTO_RECORDS)())),
        pending_candidates=acting.view(REVIEW_INBOX)().count(scope_id),
        queued_runs=runs.count_runs(scope_id, RunStatus.QUEUED),
        running_runs=runs.count_runs(scope_id, RunStatus.RUNNING))
