"""Admissions to one scope from many threads of one process take turns: none of them loses a
write race (no conflict, no retry), and the scope's capacity stays exact."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from application.bootstrap import Dreaming
from domain.dream_queue import DreamQueue
from domain.dream_request import DreamRequest
from domain.errors import CapacityExceededError, WriteConflictError
from domain.policy import LOCAL
from domain.refs import ArtifactRef
from tests.test_workers import seed_scope

THREADS = 8
PER_THREAD = 6


def request(key: str) -> DreamRequest:
    return DreamRequest.create("refine_experience", key,
                               artifacts=[ArtifactRef("experience", "x0", 1)])


@pytest.fixture
def lost_races(app: Dreaming, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every commit that lost a write race."""
    lost: list[Any] = []
    count_lost_races(app, monkeypatch, lost)
    return lost


def count_lost_races(app: Dreaming, monkeypatch: pytest.MonkeyPatch, lost: list[Any]) -> None:
    """Append every commit of ``app`` that loses a write race to ``lost``."""
    commit = app.store.commit

    def counted(*changed: Any, **kwargs: Any) -> Any:
        try:
            return commit(*changed, **kwargs)
        except WriteConflictError as error:
            lost.append(error)
            raise

    monkeypatch.setattr(app.store, "commit", counted)


def admit_from_threads(app: Dreaming, keys: list[list[str]]) -> list[Exception]:
    barrier, refused = threading.Barrier(len(keys)), []

    def admit(mine: list[str]) -> None:
        barrier.wait()
        for key in mine:
            try:
                app.runs.request_dream(LOCAL, "s", request(key))
            except CapacityExceededError as error:
                refused.append(error)

    threads = [threading.Thread(target=admit, args=(mine,)) for mine in keys]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return refused


def test_concurrent_admissions_to_one_scope_never_lose_a_write_race(
        app: Dreaming, lost_races: list[Any]) -> None:
    seed_scope(app, "s")
    keys = [[f"t{t}-{n}" for n in range(PER_THREAD)] for t in range(THREADS)]
    assert admit_from_threads(app, keys) == []
    assert lost_races == []
    assert app.store.find(DreamQueue.create_id("s")).unfinished == THREADS * PER_THREAD


def test_capacity_stays_exact_when_threads_race_for_the_last_places(app: Dreaming) -> None:
    seed_scope(app, "s")
    app.records.change_scope_settings(LOCAL, "s", {"dream_max_pending_per_scope": 5})
    refused = admit_from_threads(app, [[f"t{t}"] for t in range(THREADS)])
    assert len(refused) == THREADS - 5
    assert app.store.find(DreamQueue.create_id("s")).unfinished == 5
