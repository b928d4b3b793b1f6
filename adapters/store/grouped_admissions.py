"""Group commit: the admissions waiting in this process are committed together, whatever
their scopes.

Every admission to a scope writes the scope's queue, and every commit waits for the store's one
writer (SQLite) or its insert lock (PostgreSQL): a commit is a transaction, a sync of the
log and a batch for each read model, which the other admissions wait out, one after the
other. Here the thread whose turn it is admits every admission waiting (up to ``MAX_BATCH``),
each on its own scope's queue, holding those scopes' turns, and commits their runs, the
queues and every read set in one transaction (ADR-0020 for one scope, ADR-0046 across scopes).

Each admission is checked on its own, exactly as alone: a refused one (``capacity_exceeded``)
is told so and the others go on; each queue counts every admitted run, so capacity stays
exact. One that cannot join the batch (its key is already in it, or it read another version
of an aggregate the batch read) is told ``write_conflict`` and re-runs on fresh state, as
after a lost race. A failed commit fails every admission of the batch, none of which was
stored; each re-runs. Each admission's events are stamped with its own caller. The turn and the
batches are :mod:`adapters.store.group_commit`'s.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING
from uuid import UUID

from eventsourcing.domain import Aggregate

from adapters.store.group_commit import GroupCommit
from application.noted_head import wrote
from application.run_queues import Admitting
from application.store import EventStore, stamp_acted_by
from domain.dream_queue import DreamQueue
from domain.errors import DomainError, WriteConflictError

if TYPE_CHECKING:  # the held queues make their batcher
    from adapters.store.held_queues import HeldQueues

MAX_BATCH = 64  # admissions per transaction; those beyond wait for the next turn


@dataclass(frozen=True)
class ScopeAdmitting:
    """An admission waiting, with the scope whose queue counts it."""

    scope_id: str
    admitting: Admitting

    @property
    def settled(self) -> threading.Event:
        return self.admitting.settled

    def fail(self, error: BaseException) -> None:
        self.admitting.fail(error)


class GroupedAdmissions:
    """Admissions, committed in batches by whichever thread holds the process's turn to
    commit them."""

    def __init__(self, store: EventStore, queues: HeldQueues) -> None:
        self.store = store
        self.queues = queues
        self.group: GroupCommit[ScopeAdmitting] = GroupCommit(self._commit_batch, MAX_BATCH)

    def admit(self, scope_id: str, admitting: Admitting) -> tuple[Aggregate, int | None]:
        """Wait for the turn to commit; unless another holder committed this admission
        meanwhile, commit it with every other one waiting. The run and its position."""
        wrote()  # whichever thread commits it, this call's later reads must include it
        self.group.join(ScopeAdmitting(scope_id, admitting))
        return admitting.outcome()

    def _commit_batch(self, batch: list[ScopeAdmitting]) -> None:
        scopes = sorted({waiting.scope_id for waiting in batch})
        admitted: list[Admitting] = []
        read: dict[UUID, Aggregate] = {}
        with self.queues.turns_of(scopes), self.queues.holding_all(scopes) as queues:
            for waiting in batch:
                if self._joins(waiting.admitting, queues[waiting.scope_id], admitted, read):
                    admitted.append(waiting.admitting)
            runs = [admitting.run for admitting in admitted if admitting.run is not None]
            position = (self.store.commit(*runs, *queues.values(), read=read.values())
                        if runs else None)
        for admitting in admitted:
            assert admitting.run is not None
            admitting.settle((admitting.run, position))

    @staticmethod
    def _joins(admitting: Admitting, queue: DreamQueue, admitted: list[Admitting],
               read: dict[UUID, Aggregate]) -> bool:
        """Admit ``admitting`` on the queue if it can share the batch's commit; settle it
        when it cannot, or when its own check refuses it."""
        if (any(other.run_id == admitting.run_id for other in admitted)
                or any(read.get(a.id, a).version != a.version for a in admitting.read)):
            admitting.fail(WriteConflictError(
                "another admission in the same commit wrote this key or read another "
                "version of its evidence; nothing was stored"))
            return False
        try:
            admitting.run = admitting.admit(queue)
        except DomainError as refused:  # checked before any change: the queue is untouched
            admitting.fail(refused)
            return False
        stamp_acted_by([admitting.run, queue], admitting.acted_by)
        read.update((a.id, a) for a in admitting.read)
        return True
