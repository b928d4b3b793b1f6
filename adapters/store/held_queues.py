"""Held queues: a scope's turn, and its Dream queue kept in memory between turns.

Every admission to a scope writes the scope's queue, and loading it (its latest snapshot, then
the events after it) was the largest single read of an admission. Within one process the
admissions to a scope already take turns (:class:`~adapters.store.turns.Turns`), so the queue a
turn committed can wait in memory for the next holder, uncopied: no other thread of this
process touches it meanwhile. The next holder brings it up to date with one read of the events
stored after its version (a worker's claim or finish, another process's admission), and the
commit's version check still refuses a writer that lands in between. A turn that ends without
a clean commit drops the queue, so a failed command never leaves its changes behind.

The turn is the store's too where it offers one (the processes of one host that share a data
directory wait for each other on a lock file), so admissions from several processes queue up
instead of racing. Admissions, a worker's claims, renewals and finishes, and automatic
admissions all take it. Requested admissions wait for the process's turn to commit instead,
whose holder takes the turns of every scope in its batch and commits them together
(:mod:`adapters.store.grouped_admissions`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from threading import Lock

from eventsourcing.domain import Aggregate

from adapters.store.grouped_admissions import GroupedAdmissions
from application.run_queues import Admitting
from application.store import EventStore
from application.turns import Turns
from domain.dream_queue import DreamQueue
from domain.dream_run import DreamRun
from domain.run_lifecycle import QueuedRun

HELD_QUEUES = 4_096  # scopes whose queue a process keeps (a queue is a count and a few leases)


class HeldQueues:
    """The store's ``RunQueues`` (``application.run_queues``): the turn of a scope's queue
    writers in this process and on the store, with the queue as last committed, and the
    admissions waiting for a turn committed together."""

    def __init__(self, store: EventStore, capacity: int = HELD_QUEUES) -> None:
        self.store = store
        self.turns = Turns()
        self._capacity = capacity
        self._guard = Lock()
        self._held: OrderedDict[str, DreamQueue] = OrderedDict()
        self.grouped = GroupedAdmissions(store, self)

    def admit(self, scope_id: str, admitting: Admitting) -> tuple[Aggregate, int | None]:
        return self.grouped.admit(scope_id, admitting)

    @contextmanager
    def changing(self, run: DreamRun, also: Sequence[Aggregate] = (),
                 read: Iterable[Aggregate] = ()) -> Iterator[QueuedRun]:
        """Wait for the run's scope's turn; the block changes the pair, saved on exit."""
        with self.turn(run.scope_id) as queue:
            yield QueuedRun(run, queue)
            self.store.commit(run, *also, queue, read=read)

    @contextmanager
    def turn(self, scope_id: str) -> Iterator[DreamQueue]:
        """Wait for the scope's turn; the block gets the current queue and commits it."""
        with self.turns.of(scope_id), self.holding(scope_id) as queue:
            yield queue

    @contextmanager
    def holding(self, scope_id: str) -> Iterator[DreamQueue]:
        """For the holder of the scope's turn in this process: the store's turn where it
        offers one, and the current queue, which the block commits."""
        with self.holding_all([scope_id]) as queues:
            yield queues[scope_id]

    @contextmanager
    def holding_all(self, scope_ids: Sequence[str]) -> Iterator[dict[str, DreamQueue]]:
        """For the holder of the turns of ``scope_ids`` in this process: the store's turns
        where it offers them, and their current queues, which the block commits."""
        with self.store.writers_turn(*scope_ids):
            queues = {scope_id: self._take(scope_id) for scope_id in scope_ids}
            yield queues  # an exception in the block drops the queues: none is put back
            for scope_id, queue in queues.items():
                if not queue.pending_events:  # committed (a save collects them), or unchanged
                    self._keep(scope_id, queue)

    @contextmanager
    def turns_of(self, scope_ids: Sequence[str]) -> Iterator[None]:
        """The turns of ``scope_ids`` in this process, taken in order: a holder of several
        never waits in a cycle with another (the others hold one at a time)."""
        with ExitStack() as stack:
            for scope_id in sorted(scope_ids):
                stack.enter_context(self.turns.of(scope_id))
            yield

    def load(self, scope_id: str) -> DreamQueue:
        """The queue from the store (an empty one for a scope that never had a run)."""
        queue: DreamQueue | None = self.store.find(DreamQueue.create_id(scope_id), DreamQueue)
        return queue if queue is not None else DreamQueue.open(scope_id)

    def _take(self, scope_id: str) -> DreamQueue:
        with self._guard:
            held = self._held.pop(scope_id, None)
        if held is None:
            return self.load(scope_id)
        refreshed: DreamQueue = self.store.refresh(held)
        return refreshed

    def _keep(self, scope_id: str, queue: DreamQueue) -> None:
        with self._guard:
            self._held[scope_id] = queue
            if len(self._held) > self._capacity:
                self._held.popitem(last=False)  # the scope whose queue waited longest

    def __len__(self) -> int:
        return len(self._held)
