"""Transitions that move a DreamRun and its scope's DreamQueue together.

The queue holds the scope's capacity and single-flight slot; the run holds the attempt. Each
function here changes both, so a caller saves the pair in one ``save()`` and the queue can
never drift from the runs it counts. Nothing here reads the clock or the store.
"""

from __future__ import annotations

from datetime import datetime

from domain.budget import Budget
from domain.dream_queue import DreamQueue
from domain.dream_request import DreamRequest
from domain.dream_run import DreamRun, RunOutcome, RunTrigger


def admit(queue: DreamQueue, *, run_id: str, requester: str, request: DreamRequest,
          budget: Budget, prompt_version: str, now: datetime, max_pending: int,
          trigger: RunTrigger = RunTrigger.REQUEST,
          trace_parent: str | None = None) -> DreamRun:
    """A queued run, counted against the scope's capacity (``capacity_exceeded`` when full)."""
    queue.admit(run_id, request.operation, max_pending)
    return DreamRun.accept(queue.scope_id, run_id, requester, request, budget, prompt_version,
                           now, trigger, trace_parent)


def claim(run: DreamRun, queue: DreamQueue, now: datetime, model_config_id: str,
          lease_seconds: float) -> bool:
    """Start the run's next attempt and take its single-flight slot (``scope_busy`` while
    another run of the operation holds a live lease); ``False`` when it had no attempt or
    time left, and has failed ``budget_exceeded`` instead."""
    started = run.start_attempt(now, model_config_id, lease_seconds)
    if not started:
        queue.finish(run.run_id)
        return False
    assert run.lease_expires_at is not None
    queue.start(run.run_id, run.operation, now, run.lease_expires_at)
    return True


def renew(run: DreamRun, queue: DreamQueue, attempt: int, now: datetime,
          lease_seconds: float) -> None:
    """Hold the run (``attempt_conflict`` once superseded) and its slot for another lease."""
    run.renew_lease(attempt, now, lease_seconds)
    assert run.lease_expires_at is not None
    queue.renew(run.run_id, run.lease_expires_at)


def propose(run: DreamRun, queue: DreamQueue, attempt: int, reason: str, candidate_id: str,
            now: datetime, reused: bool = False) -> None:
    """Succeed with a Candidate (version 1), freeing the slot and the capacity it held."""
    run.succeed(attempt, RunOutcome.PROPOSED, reason,
                {"candidate_id": candidate_id, "version": 1}, now, reused=reused)
    queue.finish(run.run_id)


def conclude(run: DreamRun, queue: DreamQueue, attempt: int, outcome: str, reason: str,
             now: datetime, reused: bool = False) -> None:
    """Succeed without a Candidate (``no_change`` or ``needs_evidence``)."""
    run.succeed(attempt, outcome, reason, None, now, reused=reused)
    queue.finish(run.run_id)


def fail(run: DreamRun, queue: DreamQueue, attempt: int, code: str, now: datetime) -> None:
    run.fail(attempt, code, now)
    queue.finish(run.run_id)


def requeue(run: DreamRun, queue: DreamQueue, attempt: int, code: str) -> None:
    """Give a transient failure another attempt: queued again, its slot released."""
    run.requeue(attempt, code)
    queue.requeue(run.run_id)

