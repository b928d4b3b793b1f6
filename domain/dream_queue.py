"""DreamQueue: how many runs of a scope are unfinished, and which run holds each operation's
single-flight slot, so admission can hold the per-scope capacity exactly.

Admission and every terminal transition write to it in the same ``save()`` as the run, so the
count can never drift from the runs themselves; which runs they are is the runs' own business
(a run knows whether it is terminal). The state is a count and at most one lease per operation,
so a scope holding a thousand pending runs loads and admits as fast as an empty one. Queues are
snapshotted: ``class_version`` and the ``upcast_*`` methods keep earlier snapshots loadable.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from domain.dream_request import OPERATIONS, DreamOperation
from domain.errors import (
    CapacityExceededError,
    InvalidRequestError,
    ScopeBusyError,
)
from domain.ids import aggregate_id
from domain.snapshots import TypedSnapshot
from domain.text import check_scope_id


@dataclass(frozen=True)
class Lease:
    """The run holding an operation's single-flight slot, and until when."""

    run_id: str
    lease_expires_at: datetime


class DreamQueue(Aggregate):
    # Version 3 of the snapshot state: a count of unfinished runs, and ``Lease``s by operation.
    class_version = 3
    Snapshot = TypedSnapshot

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
        self.unfinished = 0  # runs admitted and not yet terminal
        self.running: dict[DreamOperation, Lease] = {}

    @staticmethod
    def retype_state(state: dict[str, Any]) -> None:
        """A snapshot gives the operations back as plain strings (see ``domain.snapshots``)."""
        state["running"] = {DreamOperation(operation): lease
                            for operation, lease in state["running"].items()}

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        """Version 1 held each lease as a ``{"run_id", "lease_expires_at"}`` dict."""
        state["running"] = {operation: Lease(holder["run_id"], holder["lease_expires_at"])
                            for operation, holder in state["running"].items()}

    @classmethod
    def upcast_v2_v3(cls, state: dict[str, Any]) -> None:
        """Version 2 listed every pending run; only their number matters. Version 1 snapshots
        were stored untyped, so the state is retyped here too."""
        state["unfinished"] = len(state.pop("pending"))
        cls.retype_state(state)

    def admit(self, run_id: str, operation: str, max_pending: int) -> None:
        if operation not in OPERATIONS:
            raise InvalidRequestError(f"unknown operation {operation!r}", field="operation")
        if self.unfinished >= max_pending:
            raise CapacityExceededError(
                f"scope {self.scope_id} already has {self.unfinished} unfinished runs",
                limit=max_pending, pending=self.unfinished)
        self._run_admitted(run_id=run_id, operation=operation)

    @event(RunAdmitted)
    def _run_admitted(self, run_id: str, operation: str) -> None:
        self.unfinished += 1

    def start(self, run_id: str, operation: str, now: datetime,
              lease_expires_at: datetime) -> None:
        """Single flight per scope and operation: one running run, unless its lease expired.
        ``run_id`` is an unfinished run of ``operation`` (its own state says so)."""
        operation = DreamOperation(operation)
        self.check_free(run_id, operation, now)
        self._run_started(run_id=run_id, operation=operation,
                          lease_expires_at=lease_expires_at)

    def check_free(self, run_id: str, operation: str, now: datetime) -> None:
        """``scope_busy`` while another run of ``operation`` holds a live lease."""
        holder = self.running.get(DreamOperation(operation))
        if holder is not None and holder.run_id != run_id and now < holder.lease_expires_at:
            raise ScopeBusyError(f"run {holder.run_id} is already running {operation} here",
                                 run_id=holder.run_id, operation=str(operation))

    @event(RunStarted)
    def _run_started(self, run_id: str, operation: str, lease_expires_at: datetime) -> None:
        self.running[DreamOperation(operation)] = Lease(run_id, lease_expires_at)

    def _slot_of(self, run_id: str) -> DreamOperation | None:
        """The operation whose single-flight slot ``run_id`` holds, if it holds one."""
        return next((operation for operation, lease in self.running.items()
                     if lease.run_id == run_id), None)

    def renew(self, run_id: str, lease_expires_at: datetime) -> bool:
        """Extend the single-flight hold of a running run whose attempt renewed its lease;
        ``False`` when the run does not hold it (nothing to extend)."""
        if self._slot_of(run_id) is None:
            return False
        self._run_lease_renewed(run_id=run_id, lease_expires_at=lease_expires_at)
        return True

    @event(RunLeaseRenewed)
    def _run_lease_renewed(self, run_id: str, lease_expires_at: datetime) -> None:
        operation = self._slot_of(run_id)
        if operation is not None:
            self.running[operation] = Lease(run_id, lease_expires_at)

    def requeue(self, run_id: str) -> None:
        self._run_requeued(run_id=run_id)

    @event(RunRequeued)
    def _run_requeued(self, run_id: str) -> None:
        self._release(run_id)

    def _release(self, run_id: str) -> None:
        operation = self._slot_of(run_id)
        if operation is not None:
            del self.running[operation]

    def finish(self, run_id: str) -> None:
        """Count off a run that has just reached a terminal state, and free its slot."""
        self._run_finished(run_id=run_id)

    @event(RunFinished)
    def _run_finished(self, run_id: str) -> None:
        self._release(run_id)
        self.unfinished -= 1
