"""A DreamRun and its scope's DreamQueue, moved together.

The queue holds the scope's capacity and single-flight slot; the run holds the attempt. Every
transition of a run that frees or takes a place in the queue changes both, so the pair is one
object here and a command saves it in one commit: the queue can never drift from the runs it
counts. A refused transition changes neither. Nothing here reads the clock or the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from domain.budget import Budget
from domain.dream_queue import DreamQueue
from domain.dream_request import DreamRequest
from domain.dream_run import DreamRun, RunOutcome, RunTrigger


@dataclass(frozen=True)
class QueuedRun:
    """A run and the queue of its scope, changed together and saved together."""

    run: DreamRun
    queue: DreamQueue

    @classmethod
    def admit(cls, queue: DreamQueue, *, run_id: str, requester: str, request: DreamRequest,
              budget: Budget, prompt_version: str, now: datetime, max_pending: int,
              trigger: RunTrigger = RunTrigger.REQUEST,
              trace_parent: str | None = None) -> QueuedRun:
        """A queued run, counted against the scope's capacity (``capacity_exceeded`` when
        full)."""
        run = DreamRun.accept(queue.scope_id, run_id, requester, request, budget,
                              prompt_version, now, trigger, trace_parent)
        queue.admit(run_id, request.operation, max_pending)  # a refusal leaves the queue as is
        return cls(run, queue)

    @property
    def aggregates(self) -> tuple[DreamRun, DreamQueue]:
        """What a command saves after changing the pair."""
        return self.run, self.queue

    def claim(self, now: datetime, model_config_id: str, lease_seconds: float) -> bool:
        """Start the run's next attempt and take its single-flight slot (``scope_busy``
        while another run of the operation holds a live lease); ``False`` when it had no
        attempt or time left, and has failed ``budget_exceeded`` instead."""
        if self.run.claimable(now) and not self.run.out_of_budget(now):  # it would start:
            self.queue.check_free(self.run.run_id, self.run.operation, now)  # before it moves
        started = self.run.start_attempt(now, model_config_id, lease_seconds)
        if not started:
            self.queue.finish(self.run.run_id)
            return False
        assert self.run.lease_expires_at is not None
        self.queue.start(self.run.run_id, self.run.operation, now, self.run.lease_expires_at)
        return True

    def renew(self, attempt: int, now: datetime, lease_seconds: float) -> None:
        """Hold the run (``attempt_conflict`` once superseded) and its slot for another
        lease."""
        self.run.renew_lease(attempt, now, lease_seconds)
        assert self.run.lease_expires_at is not None
        self.queue.renew(self.run.run_id, self.run.lease_expires_at)

    def propose(self, attempt: int, reason: str, candidate_id: str, now: datetime,
                reused: bool = False) -> None:
        """Succeed with a Candidate (version 1), freeing the slot and the capacity it held."""
        self.run.succeed(attempt, RunOutcome.PROPOSED, reason,
                         {"candidate_id": candidate_id, "version": 1}, now, reused=reused)
        self.queue.finish(self.run.run_id)

    def conclude(self, attempt: int, outcome: str, reason: str, now: datetime,
                 reused: bool = False) -> None:
        """Succeed without a Candidate (``no_change`` or ``needs_evidence``)."""
        self.run.succeed(attempt, outcome, reason, None, now, reused=reused)
        self.queue.finish(self.run.run_id)

    def fail(self, attempt: int, code: str, now: datetime) -> None:
        self.run.fail(attempt, code, now)
        self.queue.finish(self.run.run_id)

    def requeue(self, attempt: int, code: str) -> None:
        """Give a transient failure another attempt: queued again, its slot released."""
        self.run.requeue(attempt, code)
        self.queue.requeue(self.run.run_id)
