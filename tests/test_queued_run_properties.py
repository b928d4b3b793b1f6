"""A scope's queue and its runs, moved only as pairs (``QueuedRun``), under random admissions,
claims, renewals, requeues and endings and a fake clock:

* the queue counts exactly the runs that are not terminal, and never more than its limit;
* every single-flight slot is held by a running run of that operation, one per operation;
* a refused transition changes neither the run nor the queue;
* rebuilding the queue and every run from their events gives the same state.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    rule,
    run_state_machine_as_test,
)

from domain.budget import Budget
from domain.dream_queue import DreamQueue
from domain.dream_request import DreamOperation, DreamRequest
from domain.dream_run import DreamRun, RunOutcome, RunStatus
from domain.errors import DomainError
from domain.refs import ArtifactRef
from domain.run_lifecycle import QueuedRun
from tests.property_support import PURE, assert_queue_typed, assert_refused, replay

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
LEASE_SECONDS = 60
MAX_PENDING = 3
OPERATIONS = [DreamOperation.REFINE_EXPERIENCE, DreamOperation.DERIVE_SKILL]


class QueuedRunMachine(RuleBasedStateMachine):
    runs = Bundle("runs")

    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.queue = DreamQueue.open("s")
        self.by_id: dict[str, DreamRun] = {}
        self.events: dict[Any, list[Any]] = {self.queue.id: self.queue.collect_events()}

    def pair(self, run_id: str) -> QueuedRun:
        return QueuedRun(self.by_id[run_id], self.queue)

    def save(self, pair: QueuedRun) -> None:
        for aggregate in pair.aggregates:
            self.events.setdefault(aggregate.id, []).extend(aggregate.collect_events())

    def attempt(self, pair: QueuedRun, change: Any) -> bool:
        """``change`` the pair: saved if it holds, or refused with neither of them changed."""
        before = copy.deepcopy(pair.aggregates)
        try:
            result = change()
        except DomainError:
            assert pair.run.pending_events == []
            assert pair.queue.pending_events == []
            assert pair.aggregates == before
            return False
        self.save(pair)
        return result is not False

    @rule(target=runs, operation=st.sampled_from(OPERATIONS))
    def admit(self, operation: DreamOperation) -> str:
        run_id = f"r{len(self.by_id)}"
        request = DreamRequest.create(operation, run_id,
                                      artifacts=[ArtifactRef("experience", "e", 2)])

        def admit() -> QueuedRun:
            return QueuedRun.admit(self.queue, run_id=run_id, requester="p", request=request,
                                   budget=Budget.of({"max_model_calls": 2}),
                                   prompt_version="v", now=self.now, max_pending=MAX_PENDING)

        if self.queue.unfinished == MAX_PENDING:
            assert_refused(self.queue, "capacity_exceeded", admit)
            return run_id  # never admitted: every later rule on it is a no-op
        pair = admit()
        self.by_id[run_id] = pair.run
        self.save(pair)
        return run_id

    @rule(run_id=runs)
    def claim(self, run_id: str) -> None:
        if run_id in self.by_id:
            pair = self.pair(run_id)
            self.attempt(pair, lambda: pair.claim(self.now, "model", LEASE_SECONDS))

    @rule(run_id=runs)
    def renew(self, run_id: str) -> None:
        if run_id in self.by_id:
            pair = self.pair(run_id)
            self.attempt(pair, lambda: pair.renew(pair.run.attempt, self.now, LEASE_SECONDS))

    @rule(run_id=runs, code=st.sampled_from(["timeout", "rate_limited"]))
    def requeue(self, run_id: str, code: str) -> None:
        if run_id in self.by_id:
            pair = self.pair(run_id)
            self.attempt(pair, lambda: pair.requeue(pair.run.attempt, code))

    @rule(run_id=consumes(runs), ending=st.sampled_from(["propose", "conclude", "fail"]))
    def end(self, run_id: str, ending: str) -> None:
        if run_id not in self.by_id:
            return
        pair = self.pair(run_id)
        number = pair.run.attempt
        change = {
            "propose": lambda: pair.propose(number, "r", f"c_{run_id}", self.now),
            "conclude": lambda: pair.conclude(number, RunOutcome.NO_CHANGE, "r", self.now),
            "fail": lambda: pair.fail(number, "generation_failed", self.now),
        }[ending]
        self.attempt(pair, change)

    @rule(seconds=st.sampled_from([1, 30, LEASE_SECONDS, 4 * LEASE_SECONDS]))
    def time_passes(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    @invariant()
    def the_queue_counts_the_runs_that_are_not_terminal(self) -> None:
        unfinished = sum(not run.terminal for run in self.by_id.values())
        assert self.queue.unfinished == unfinished <= MAX_PENDING

    @invariant()
    def each_slot_is_held_by_a_running_run_of_its_operation(self) -> None:
        assert_queue_typed(self.queue)
        for operation, lease in self.queue.running.items():
            holder = self.by_id[lease.run_id]
            assert holder.status == RunStatus.RUNNING
            assert holder.operation == operation
            assert holder.lease_expires_at == lease.lease_expires_at

    @invariant()
    def the_pairs_rebuild_from_their_events(self) -> None:
        assert self.queue.pending_events == []
        assert replay(self.events[self.queue.id]) == self.queue
        for run in self.by_id.values():
            assert replay(self.events[run.id]) == run


def test_a_queue_and_its_runs_move_only_together() -> None:
    run_state_machine_as_test(QueuedRunMachine, settings=PURE)


def test_a_claim_the_scope_is_busy_for_changes_neither_the_run_nor_the_queue() -> None:
    queue = DreamQueue.open("s")
    request = DreamRequest.create(DreamOperation.REFINE_EXPERIENCE, "k",
                                  artifacts=[ArtifactRef("experience", "e", 2)])
    first, second = (QueuedRun.admit(queue, run_id=run_id, requester="p", request=request,
                                     budget=Budget(), prompt_version="v", now=T0,
                                     max_pending=MAX_PENDING) for run_id in ("a", "b"))
    assert first.claim(T0, "model", LEASE_SECONDS)
    before = copy.deepcopy(second.aggregates)
    with pytest.raises(DomainError) as refused:
        second.claim(T0, "model", LEASE_SECONDS)
    assert refused.value.code == "scope_busy"
    assert second.aggregates == before
