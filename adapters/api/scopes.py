"""A scope at a glance: automatic dreaming, the review inbox and the run queue together."""

from __future__ import annotations

from adapters.api import review, runs
from adapters.api.acting import Acting
from adapters.api.schemas import ScopeStatusView
from domain.dream_run import RunStatus


def status(acting: Acting, scope_id: str) -> ScopeStatusView:
    return ScopeStatusView(scope_id=scope_id, auto=runs.auto_status(acting, scope_id),
                           pending_candidates=review.pending_count(acting, scope_id),
                           queued_runs=runs.count_runs(acting, scope_id, RunStatus.QUEUED),
                           running_runs=runs.count_runs(acting, scope_id, RunStatus.RUNNING))
