"""Group commit: the admissions to a scope that wait for its turn are committed together.

Every admission to a scope writes the scope's queue, so admissions to one scope take turns
(``adapters.store.turns``, ``adapters.store.held_queues``), and a turn lasts a read of the queue and
a commit: on PostgreSQL, round trips that the other admissions to the scope wait out, one
after the other. Here the thread that gets the turn admits every admission waiting for it on
the queue it holds, and commits their runs, the queue and every read set in one transaction.

Each admission is checked on its own, exactly as alone: a refused one (``capacity_exceeded``)
is told so and the others go on; the queue counts every admitted run, so capacity stays exact.
One that cannot join the batch (its key is already in it, or it read another version of an
aggregate the batch read) is told ``write_conflict`` and re-runs on fresh state, as after a
lost race. A failed commit fails every admission of the batch, none of which was stored; each
re-runs. Each admission's events are stamped with its own caller.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING
from uuid import UUID

from eventsourcing.domain import Aggregate

from application.noted_head import wrote
from application.run_queues import Admitting
from application.store import EventStore, stamp_acted_by
from domain.dream_queue import DreamQueue
from domain.errors import DomainError, WriteConflictError

if TYPE_CHECKING:  # the held queues make their batcher
    from adapters.store.held_queues import HeldQueues

MAX_BATCH = 64  # admissions per transaction; those beyond wait for the next turn


class GroupedAdmissions:
    """Admissions per scope, committed in batches by whichever thread holds the scope's turn."""

    def __init__(self, store: EventStore, queues: HeldQueues) -> None:
        self.store = store
        self.queues = queues
        self._guard = threading.Lock()
        self._waiting: dict[str, list[Admitting]] = {}

    def admit(self, scope_id: str, admitting: Admitting) -> tuple[Aggregate, int | None]:
        """Wait for the scope's turn; unless another holder committed this admission
        meanwhile, commit it with every other one waiting. The run and its position."""
        wrote()  # whichever thread commits it, this call's later reads must include it
        with self._guard:
            self._waiting.setdefault(scope_id, []).append(admitting)
        with self.queues.turns.of(scope_id):
            while not admitting.settled.is_set():  # more than a batch may be waiting before it
                with self.queues.holding(scope_id) as queue:
                    self._commit_batch(scope_id, queue)
        return admitting.outcome()

    def _commit_batch(self, scope_id: str, queue: DreamQueue) -> None:
        batch = self._take_batch(scope_id)
        admitted: list[Admitting] = []
        read: dict[UUID, Aggregate] = {}
        try:
            for admitting in batch:
                if self._joins(admitting, queue, admitted, read):
                    admitted.append(admitting)
            runs = [admitting.run for admitting in admitted if admitting.run is not None]
            position = self.store.commit(*runs, queue, read=read.values()) if runs else None
        except BaseException as error:
            for admitting in batch:  # nothing of the batch was stored
                if not admitting.settled.is_set():
                    admitting.settle(error=error)
            raise
        for admitting in admitted:
            admitting.settle(admitting.run, position)

    def _take_batch(self, scope_id: str) -> list[Admitting]:
        with self._guard:
            waiting = self._waiting.pop(scope_id, [])
            if len(waiting) > MAX_BATCH:
                self._waiting[scope_id] = waiting[MAX_BATCH:]
            return waiting[:MAX_BATCH]

    @staticmethod
    def _joins(admitting: Admitting, queue: DreamQueue, admitted: list[Admitting],
               read: dict[UUID, Aggregate]) -> bool:
        """Admit ``admitting`` on the queue if it can share the batch's commit; settle it
        when it cannot, or when its own check refuses it."""
        if (any(other.run_id == admitting.run_id for other in admitted)
                or any(read.get(a.id, a).version != a.version for a in admitting.read)):
            admitting.settle(error=WriteConflictError(
                "another admission in the same commit wrote this key or read another "
                "version of its evidence; nothing was stored"))
            return False
        try:
            admitting.run = admitting.admit(queue)
        except DomainError as refused:  # checked before any change: the queue is untouched
            admitting.settle(error=refused)
            return False
        stamp_acted_by([admitting.run, queue], admitting.acted_by)
        read.update((a.id, a) for a in admitting.read)
        return True
