"""A scope's queue stays in memory between admissions of one process: the next admission reads
only the events stored after it, sees every other writer's, and a failed admission leaves
nothing of itself behind."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from adapters.generators.factory import GeneratorRegistry
from adapters.store.held_queues import HeldQueues
from application.bootstrap import Dreaming
from application.store import StoreUnavailableError
from domain.dream_queue import DreamQueue
from domain.errors import CapacityExceededError
from domain.policy import LOCAL
from domain.run_lifecycle import QueuedRun
from tests.dream_support import ScriptedModel
from tests.test_hot_scope import request
from tests.test_workers import seed_scope


@pytest.fixture
def queue_rebuilds(app: Dreaming, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every full load of a Dream queue (snapshot and events), as opposed to a refresh."""
    rebuilt: list[Any] = []
    rebuild = app.store._rebuild

    def counted(aggregate_id: Any, version: Any, kind: Any) -> Any:
        if kind is DreamQueue:
            rebuilt.append(aggregate_id)
        return rebuild(aggregate_id, version, kind)

    monkeypatch.setattr(app.store, "_rebuild", counted)
    return rebuilt


def unfinished(app: Dreaming, scope_id: str = "s") -> int:
    queue: DreamQueue = app.store.find(DreamQueue.create_id(scope_id))
    return queue.unfinished


def test_admissions_after_the_first_refresh_the_held_queue_instead_of_loading_it(
        app: Dreaming, queue_rebuilds: list[Any]) -> None:
    seed_scope(app, "s")
    for n in range(30):  # past a snapshot (every 20 events)
        app.runs.request_dream(LOCAL, "s", request(f"k{n}"))
    assert queue_rebuilds == [DreamQueue.create_id("s")]  # the first admission's load only
    assert unfinished(app) == 30
    assert app.store.find(DreamQueue.create_id("s")) == app.queues._held["s"]


def test_another_process_admitting_in_between_is_seen_and_capacity_stays_exact(
        open_app: Callable[[], Dreaming]) -> None:
    here, there = open_app(), open_app()
    seed_scope(here, "s")
    here.records.change_scope_settings(LOCAL, "s", {"dream_max_pending_per_scope": 3})
    here.runs.request_dream(LOCAL, "s", request("here-1"))  # now held here
    there.runs.request_dream(LOCAL, "s", request("there-1"))
    there.runs.request_dream(LOCAL, "s", request("there-2"))
    with pytest.raises(CapacityExceededError) as refused:
        here.runs.request_dream(LOCAL, "s", request("here-2"))
    assert refused.value.details["pending"] == 3
    assert unfinished(here) == 3


def test_a_worker_finishing_a_run_is_seen_by_the_next_admission(app: Dreaming) -> None:
    seed_scope(app, "s")
    app.records.change_scope_settings(LOCAL, "s", {"dream_max_pending_per_scope": 1})
    run = app.runs.request_dream(LOCAL, "s", request("first")).value.run
    with pytest.raises(CapacityExceededError):
        app.runs.request_dream(LOCAL, "s", request("second"))
    pair = QueuedRun(run, app.runs.queue_of("s"))  # as a worker did, without the turn
    assert pair.claim(app.clock(), "model", lease_seconds=60)
    pair.fail(run.attempt, "generator_failed", app.clock())
    app.store.commit(*pair.aggregates)
    app.runs.request_dream(LOCAL, "s", request("second"))  # the place is free again
    assert unfinished(app) == 1


def test_a_run_and_its_queue_are_saved_together_when_the_block_ends_or_not_at_all(
        app: Dreaming) -> None:
    seed_scope(app, "s")
    run = app.runs.request_dream(LOCAL, "s", request("k0")).value.run
    before = app.store.max_position()

    def stopped_in_the_block() -> None:
        with app.queues.changing(run) as pair:
            assert pair.claim(app.clock(), "model", lease_seconds=60)
            raise RuntimeError("the worker stops before the block ends")

    with pytest.raises(RuntimeError):
        stopped_in_the_block()
    assert app.store.max_position() == before
    assert app.runs.queue_of("s").running == {}
    stored = app.runs.existing_run("s", run.run_id)
    assert stored is not None
    assert stored.attempt == 0
    with app.queues.changing(stored) as pair:
        assert pair.claim(app.clock(), "model", lease_seconds=60)
    assert app.store.max_position() == before + 2  # the run's event and the queue's
    assert app.runs.existing_run("s", run.run_id).attempt == 1  # type: ignore[union-attr]
    assert [lease.run_id for lease in app.runs.queue_of("s").running.values()] == [run.run_id]


def test_a_failed_commit_leaves_nothing_held(app: Dreaming,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    seed_scope(app, "s")
    app.runs.request_dream(LOCAL, "s", request("k0"))
    commit = app.store.commit
    failures = iter([StoreUnavailableError("the store went away mid-commit")])

    def failing_once(*changed: Any, **kwargs: Any) -> Any:
        error = next(failures, None)
        if error is not None:
            raise error
        return commit(*changed, **kwargs)

    monkeypatch.setattr(app.store, "commit", failing_once)
    with pytest.raises(StoreUnavailableError):
        app.runs.request_dream(LOCAL, "s", request("k1"))  # counted in memory, not stored
    assert "s" not in app.queues._held
    app.runs.request_dream(LOCAL, "s", request("k1"))
    app.runs.request_dream(LOCAL, "s", request("k2"))
    assert unfinished(app) == 3  # not 4: the failed admission's count did not survive
    assert app.queues._held["s"] == app.store.find(DreamQueue.create_id("s"))


def test_a_process_holds_a_bounded_number_of_queues(app: Dreaming) -> None:
    queues = HeldQueues(app.store, capacity=2)
    for scope_id in ("a", "b", "c"):
        with queues.turn(scope_id) as queue:
            app.store.commit(queue)
    assert list(queues._held) == ["b", "c"]  # the longest-waiting one went first
    with queues.turn("a") as queue:  # loaded again from the store
        assert queue.version == 1


def test_a_worker_of_the_same_process_claims_and_finishes_on_the_held_queue(
        app: Dreaming, queue_rebuilds: list[Any]) -> None:
    seed_scope(app, "s")
    run_ids = [app.runs.request_dream(LOCAL, "s", request(f"k{n}")).value.run.run_id
               for n in range(3)]
    executor = app.executor(GeneratorRegistry(ScriptedModel()), 60.0)
    for run_id in run_ids:
        attempt = executor.claim("s", run_id)
        assert attempt is not None
        finished = executor.execute(attempt)
        assert finished is not None
        assert finished.status == "succeeded"
    # Claims and finishes took the scope's turn and its queue as held, like admissions.
    assert queue_rebuilds == [DreamQueue.create_id("s")]
    assert unfinished(app) == 0
    assert app.store.find(DreamQueue.create_id("s")) == app.queues._held["s"]
