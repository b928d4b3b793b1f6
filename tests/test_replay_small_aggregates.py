"""Replay for the small aggregates: rebuilt from events (and from the store) equals live."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.dream_queue import DreamQueue
from domain.dream_request import DreamOperation
from domain.errors import DomainError
from domain.principal import AccessToken, Principal
from domain.proposal_record import ProposalRecord
from tests.property_support import assert_queue_typed

NOW = datetime(2026, 11, 30, tzinfo=UTC)


def replayed(events: list[Any]) -> Any:
    aggregate = None
    for domain_event in events:
        aggregate = domain_event.mutate(aggregate)
    return aggregate


# An action on a queue: admit a new run, start / requeue / finish the unfinished run at an index.
actions = st.lists(st.tuples(st.sampled_from(["admit", "start", "requeue", "finish"]),
                             st.integers(0, 20), st.sampled_from(list(DreamOperation))),
                   max_size=60)


@given(actions)
@settings(max_examples=60, deadline=None, database=None)
def test_a_dream_queue_keeps_its_invariants_and_replays(steps: list[tuple[str, int, str]],
                                                        ) -> None:
    """Driven as the run lifecycle drives it: only unfinished runs start, requeue or finish
    (a run knows whether it is finished), so the model is the set of unfinished runs."""
    queue = DreamQueue.open("s")
    events = list(queue.collect_events())
    unfinished: dict[str, DreamOperation] = {}  # run id -> operation, as the runs know it
    for step, (action, index, operation) in enumerate(steps):
        run_id = list(unfinished)[index % len(unfinished)] if unfinished else None
        try:
            if action == "admit":
                queue.admit(f"r{step}", operation, max_pending=8)
                unfinished[f"r{step}"] = DreamOperation(operation)
            elif run_id is None:
                continue
            elif action == "start":
                queue.start(run_id, unfinished[run_id], NOW, NOW + timedelta(seconds=30))
            elif action == "requeue":
                queue.requeue(run_id)
            elif action == "finish":
                queue.finish(run_id)
                del unfinished[run_id]
        except DomainError as refused:  # a refusal changed nothing
            refusal = refused.code
            assert refusal == ("capacity_exceeded" if action == "admit" else "scope_busy")
            assert not queue.collect_events()
        events += queue.collect_events()
        # Capacity is exact; a running run is unfinished; one running run per operation.
        assert queue.unfinished == len(unfinished) <= 8
        assert all(unfinished.get(lease.run_id) == held for held, lease in queue.running.items())
        rebuilt = replayed(events)
        assert rebuilt == queue
        assert_queue_typed(rebuilt)


@pytest.mark.parametrize("count", [5, 130])  # 130 crosses several snapshots (every 20)
def test_queues_principals_tokens_and_records_round_trip_the_store(
        open_app: Callable[[], Any], count: int) -> None:
    app = open_app()
    queue = DreamQueue.open("s")
    for index in range(count):
        queue.admit(f"r{index}", DreamOperation.REFINE_EXPERIENCE, max_pending=1000)
        if index % 3 == 0:
            queue.start(f"r{index}", DreamOperation.REFINE_EXPERIENCE, NOW,
                        NOW + timedelta(seconds=30))
            if index % 2 == 0:
                queue.finish(f"r{index}")
            else:
                queue.requeue(f"r{index}")
        app.store.commit(queue)
    principal = Principal.register("alice", admin=True)
    token = AccessToken.issue("ab" * 32, "alice", "laptop")
    token.revoke("lost")
    record = ProposalRecord(scope_id="s", principal_key="k", fingerprint="sha256:f",
                            candidate_id="c1")
    record.replace("c2")
    app.store.commit(principal, token, record)
    other = open_app()
    for live in (queue, principal, token, record):
        assert other.store.repository.get(live.id) == live
    assert_queue_typed(other.store.repository.get(queue.id))
