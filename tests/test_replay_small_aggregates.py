"""Replay for the small aggregates: rebuilt from events (and from the store) equals live."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from application.dreaming import Dreaming
from domain.dream_queue import DreamQueue
from domain.errors import DomainError
from domain.principal import AccessToken, Principal
from domain.proposal_record import ProposalRecord

NOW = datetime(2026, 11, 30, tzinfo=UTC)


def replayed(events: list[Any]) -> Any:
    aggregate = None
    for domain_event in events:
        aggregate = domain_event.mutate(aggregate)
    return aggregate


# An action on a queue: admit a new run, start / requeue / finish the run at an index.
actions = st.lists(st.tuples(st.sampled_from(["admit", "start", "requeue", "finish"]),
                             st.integers(0, 20), st.sampled_from(["refine", "derive"])),
                   max_size=60)


@given(actions)
@settings(max_examples=60, deadline=None, database=None)
def test_a_dream_queue_keeps_its_invariants_and_replays(steps: list[tuple[str, int, str]],
                                                        ) -> None:
    queue = DreamQueue.open("s")
    events = list(queue.collect_events())
    admitted: list[str] = []
    for step, (action, index, operation) in enumerate(steps):
        run_id = admitted[index % len(admitted)] if admitted else "none"
        try:
            if action == "admit":
                queue.admit(f"r{step}", operation, max_pending=8)
                admitted.append(f"r{step}")
            elif action == "start" and run_id in queue.pending:
                queue.start(run_id, NOW, NOW + timedelta(seconds=30))
            elif action == "requeue" and run_id in queue.pending:
                queue.requeue(run_id)
            elif action == "finish":
                queue.finish(run_id)
        except DomainError as refused:
            refusal = refused.code
            assert refusal in ("capacity_exceeded", "scope_busy")
        events += queue.collect_events()
        # Capacity is exact; a running run is pending; one running run per operation.
        assert len(queue.pending) <= 8
        assert all(holder["run_id"] in queue.pending for holder in queue.running.values())
        assert replayed(events) == queue


@pytest.mark.parametrize("count", [5, 130])  # 130 crosses several snapshots (every 20)
def test_queues_principals_tokens_and_records_round_trip_the_store(
        open_app: Callable[[], Dreaming], count: int) -> None:
    app = open_app()
    queue = DreamQueue.open("s")
    for index in range(count):
        queue.admit(f"r{index}", "refine", max_pending=1000)
        if index % 3 == 0:
            queue.start(f"r{index}", NOW, NOW + timedelta(seconds=30))
            if index % 2 == 0:
                queue.finish(f"r{index}")
            else:
                queue.requeue(f"r{index}")
        app.commit(queue)
    principal = Principal.register("alice", admin=True)
    token = AccessToken.issue("ab" * 32, "alice", "laptop")
    token.revoke("lost")
    record = ProposalRecord(scope_id="s", principal_key="k", fingerprint="sha256:f",
                            candidate_id="c1")
    record.replace("c2")
    app.commit(principal, token, record)
    other = open_app()
    for live in (queue, principal, token, record):
        assert other.repository.get(live.id) == live
