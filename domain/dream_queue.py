"""DreamQueue: a scope's unfinished runs, so admission can hold the per-scope capacity exactly.

Admission and every terminal transition write to it in the same ``save()`` as the run, so the
count can never drift from the runs themselves.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from domain.errors import CapacityExceededError, ScopeBusyError
from domain.identity import aggregate_id, check_scope_id


class DreamQueue(Aggregate):
    class Opened(Aggregate.Created):
        scope_id: str

    class RunAdmitted(Aggregate.Event):
        run_id: str
        operation: str

    class RunStarted(Aggregate.Event):
        run_id: str
        operation: str
        lease_expires_at: datetime

    class RunLeaseRenewed(Aggregate.Event):
        run_id: str
        lease_expires_at: datetime

    class RunRequeued(Aggregate.Event):
        run_id: str

    class RunFinished(Aggregate.Event):
        run_id: str

    @staticmethod
    def create_id(scope_id: str) -> UUID:
        return aggregate_id("dream_queue", scope_id)

    @classmethod
    def open(cls, scope_id: str) -> DreamQueue:
        return cls(scope_id=check_scope_id(scope_id))

    @event(Opened)
    def __init__(self, scope_id: str) -> None:
        self.scope_id = scope_id
        self.pending: dict[str, str] = {}  # run id -> operation, in admission order
        # operation -> {"run_id", "lease_expires_at"}: plain values so snapshots round-trip
        self.running: dict[str, dict[str, Any]] = {}

    def admit(self, run_id: str, operation: str, max_pending: int) -> None:
        if len(self.pending) >= max_pending:
            raise CapacityExceededError(
                f"scope {self.scope_id} already has {len(self.pending)} unfinished runs",
                limit=max_pending, pending=len(self.pending))
        self._run_admitted(run_id=run_id, operation=operation)

    @event(RunAdmitted)
    def _run_admitted(self, run_id: str, operation: str) -> None:
        self.pending[run_id] = operation

    def start(self, run_id: str, now: datetime, lease_expires_at: datetime) -> None:
        """Single flight per scope and operation: one running run, unless its lease expired."""
        operation = self.pending[run_id]
        holder = self.running.get(operation)
        if holder is not None and holder["run_id"] != run_id and now < holder["lease_expires_at"]:
            raise ScopeBusyError(f"run {holder['run_id']} is already running {operation} here",
                                 run_id=holder["run_id"], operation=operation)
        self._run_started(run_id=run_id, operation=operation,
                          lease_expires_at=lease_expires_at)

    @event(RunStarted)
    def _run_started(self, run_id: str, operation: str, lease_expires_at: datetime) -> None:
        self.running[operation] = {"run_id": run_id, "lease_expires_at": lease_expires_at}

    def renew(self, run_id: str, lease_expires_at: datetime) -> bool:
        """Extend the single-flight hold of a running run whose attempt renewed its lease;
        ``False`` when the run does not hold it (nothing to extend)."""
        operation = self.pending.get(run_id)
        if operation is None or self.running.get(operation, {}).get("run_id") != run_id:
            return False
        self._run_lease_renewed(run_id=run_id, lease_expires_at=lease_expires_at)
        return True

    @event(RunLeaseRenewed)
    def _run_lease_renewed(self, run_id: str, lease_expires_at: datetime) -> None:
        self.running[self.pending[run_id]] = {"run_id": run_id,
                                              "lease_expires_at": lease_expires_at}

    def requeue(self, run_id: str) -> None:
        self._run_requeued(run_id=run_id)

    @event(RunRequeued)
    def _run_requeued(self, run_id: str) -> None:
        self._release(run_id)

    def _release(self, run_id: str) -> None:
        operation = self.pending.get(run_id)
        if operation is not None and self.running.get(operation, {}).get("run_id") == run_id:
            del self.running[operation]

    def finish(self, run_id: str) -> bool:
        """Forget a run that reached a terminal state; ``False`` if it was not pending."""
        if run_id not in self.pending:
            return False
        self._run_finished(run_id=run_id)
        return True

    @event(RunFinished)
    def _run_finished(self, run_id: str) -> None:
        self._release(run_id)
        del self.pending[run_id]
