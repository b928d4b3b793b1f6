"""The port for a scope's Dream queue and the runs it counts.

Every command that changes a run's place in its scope's queue writes the run and the queue
together: an admission counts a new run, a worker's claim, renewal or finish moves one. So
those commands go through one port. ``changing`` gives the block a run paired with its
scope's queue, current (``domain.run_lifecycle.QueuedRun``), and saves the pair when the block
ends; ``turn`` gives a block that admits several runs at once the queue, and the block's own
commit is the only write to the queue meanwhile: writers of one scope take turns rather than
race to a write conflict. ``admit`` hands a requested admission to the port, which may commit it
together with other admissions waiting, of its scope or others, each checked exactly as alone.

How the turns are taken (in this process, across the processes of a host), how the queue is
kept between turns and how admissions are batched is the implementation's business
(``adapters.store.held_queues``), chosen where the application is assembled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol
from uuid import UUID

from eventsourcing.domain import Aggregate

from application.pending import Pending
from application.store import EventStore
from domain.dream_queue import DreamQueue
from domain.dream_run import DreamRun
from domain.policy import Caller
from domain.run_lifecycle import QueuedRun


@dataclass(eq=False)
class Admitting(Pending[tuple[Aggregate, int | None]]):
    """One admission waiting to be committed: the run it creates (``run_id``), what its checks
    read, who acts, and ``admit``, which counts its run in the queue (or refuses). Settled with
    the run and the position of its commit."""

    run_id: UUID
    read: Sequence[Aggregate]
    acted_by: Caller
    admit: Callable[[DreamQueue], Aggregate]
    run: Aggregate | None = None


class RunQueues(Protocol):
    """A scope's Dream queue, for the commands that write it with its runs."""

    def changing(self, run: DreamRun, also: Sequence[Aggregate] = (),
                 read: Iterable[Aggregate] = ()) -> AbstractContextManager[QueuedRun]:
        """Wait for the run's scope's turn; the block changes the run and the current queue,
        and they are saved when it ends, in one commit with ``also``, checked against
        ``read`` (an exception in the block leaves nothing of its changes behind)."""

    def turn(self, scope_id: str) -> AbstractContextManager[DreamQueue]:
        """Wait for the scope's turn; the block gets the current queue and commits it (an
        exception in the block leaves nothing of its changes behind)."""

    def admit(self, scope_id: str, admitting: Admitting) -> tuple[Aggregate, int | None]:
        """Commit a requested admission, holding its scope's turn: its run and the position
        of the commit, or its own refusal (``capacity_exceeded``, ``write_conflict``...)."""

    def load(self, scope_id: str) -> DreamQueue:
        """The queue as stored (empty for a scope that never had a run), outside any turn."""


RunQueuesFactory = Callable[[EventStore], RunQueues]  # given the application's event store
