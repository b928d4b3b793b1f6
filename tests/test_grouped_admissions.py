"""Admissions that wait for the turn to commit are committed together by its holder, whatever
their scopes: each checked as if alone (each scope's capacity stays exact, a refused one is
told so), each stamped with its own caller, a key given twice admitted once, and a failed
commit storing nothing."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

import hypothesis
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.store.grouped_admissions import ScopeAdmitting
from application import noted_head
from application.bootstrap import Dreaming
from application.run_queues import Admitting
from domain.dream_queue import DreamQueue
from domain.dream_run import DreamRun
from domain.errors import CapacityExceededError, DomainError, WriteConflictError
from domain.ids import dream_run_aggregate_id
from domain.policy import Caller
from tests.property_support import STORED
from tests.test_hot_scope import request
from tests.test_workers import seed_scope

WAITING = 5  # admissions that queue up behind the first one's commit


class HeldCommit:
    """Holds the first commit of an admission until released, so the others queue up."""

    def __init__(self, app: Dreaming, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.commits: list[int] = []  # runs per commit
        commit = app.store.commit

        def held(*changed: Any, **kwargs: Any) -> Any:
            runs = sum(isinstance(a, DreamRun) for a in changed)
            if not runs:  # not an admission
                return commit(*changed, **kwargs)
            self.commits.append(runs)
            if len(self.commits) == 1:
                self.entered.set()
                assert self.release.wait(10)
            return commit(*changed, **kwargs)

        monkeypatch.setattr(app.store, "commit", held)


@pytest.fixture
def held_commit(app: Dreaming, monkeypatch: pytest.MonkeyPatch) -> HeldCommit:
    seed_scope(app, "s")
    return HeldCommit(app, monkeypatch)


def caller(n: int) -> Caller:
    return Caller(f"svc-{n}", admin=True)


def admit_behind_the_first(app: Dreaming, held: HeldCommit, keys: list[str]
                           ) -> dict[str, Any]:
    """Admit ``keys[0]``, hold its commit, admit the rest meanwhile, then let it go: each
    key's run, or the error it got."""
    return admit_behind(app, held, [("s", key) for key in keys])


def admit_behind(app: Dreaming, held: HeldCommit, admissions: list[tuple[str, str]]
                 ) -> dict[str, Any]:
    """Admit the first (scope, key), hold its commit, admit the rest meanwhile, then let it
    go: each admission's run, or the error it got, by ``n:key`` (``n`` its caller)."""
    outcomes: dict[str, Any] = {}

    def admit(n: int, scope_id: str, key: str) -> None:
        try:
            outcomes[f"{n}:{key}"] = app.runs.request_dream(caller(n), scope_id, request(key))
        except DomainError as error:
            outcomes[f"{n}:{key}"] = error

    threads = [threading.Thread(target=admit, args=(n, scope_id, key))
               for n, (scope_id, key) in enumerate(admissions)]
    threads[0].start()
    assert held.entered.wait(10)
    for thread in threads[1:]:
        thread.start()
    wait_until(lambda: len(app.queues.grouped.group._waiting) == len(admissions) - 1)
    held.release.set()
    for thread in threads:
        thread.join(10)
    return outcomes


def waiting_in(app: Dreaming, scope_id: str) -> int:
    """Admissions to ``scope_id`` waiting to be committed."""
    return sum(waiting.scope_id == scope_id for waiting in app.queues.grouped.group._waiting)


def wait_until(condition: Callable[[], bool]) -> None:
    for _ in range(1000):
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError("the admissions never queued up")


def unfinished(app: Dreaming) -> int:
    queue: DreamQueue = app.store.find(DreamQueue.create_id("s"))
    return queue.unfinished


def test_admissions_waiting_for_the_turn_are_committed_together(
        app: Dreaming, held_commit: HeldCommit) -> None:
    keys = [f"k{n}" for n in range(WAITING + 1)]
    outcomes = admit_behind_the_first(app, held_commit, keys)
    assert held_commit.commits == [1, WAITING]  # the first alone, then the others in one
    assert unfinished(app) == WAITING + 1
    for name, written in outcomes.items():
        n = int(name.split(":")[0])
        run = written.value.run
        history = app.store.history(dream_run_aggregate_id("s", run.run_id))
        assert [event.acted_by for event in history] == [f"svc-{n}"]  # its own caller
        assert written.position is not None
        assert written.position >= app.store.position_of(app.runs.get_dream(caller(n), "s",
                                                                            run.run_id))
    stamps = [event.acted_by for event in app.store.history(DreamQueue.create_id("s"))]
    assert stamps[0] == "svc-0"  # opened the queue
    assert sorted(stamps[1:]) == sorted(f"svc-{n}" for n in range(WAITING + 1))  # admitted


def test_admissions_to_several_scopes_waiting_for_the_turn_are_committed_together(
        app: Dreaming, held_commit: HeldCommit) -> None:
    for scope_id in ("t", "u"):
        seed_scope(app, scope_id)
    app.records.change_scope_settings(caller(0), "u", {"dream_max_pending_per_scope": 1})
    outcomes = admit_behind(app, held_commit, [("s", "first"), ("t", "t1"), ("s", "s1"),
                                               ("u", "u1"), ("t", "t2"), ("u", "u2")])
    assert held_commit.commits == [1, 4]  # the first alone, then every scope's in one
    refused = [name for name, outcome in outcomes.items()
               if isinstance(outcome, CapacityExceededError)]
    assert refused in (["3:u1"], ["5:u2"])  # u's own capacity: whichever came second
    admitted = {name: written for name, written in outcomes.items() if name not in refused}
    assert len({written.position for name, written in admitted.items()
                if name != "0:first"}) == 1  # one commit
    for scope_id, count in (("s", 2), ("t", 2), ("u", 1)):
        queue: DreamQueue = app.store.find(DreamQueue.create_id(scope_id))
        assert queue.unfinished == count
    for name, written in admitted.items():
        run = written.value.run
        history = app.store.history(dream_run_aggregate_id(run.scope_id, run.run_id))
        assert [event.acted_by for event in history] == [f"svc-{name.split(':')[0]}"]


def test_a_call_whose_run_another_thread_commits_no_longer_takes_the_head_it_noted(
        app: Dreaming, held_commit: HeldCommit, monkeypatch: pytest.MonkeyPatch) -> None:
    """A call that wrote reads its writes (ADR-0044): a head it noted before admitting no
    longer serves its reads, though the thread holding the scope's turn did the commit."""
    noted_after: dict[str, int | None] = {}
    request_dream = app.runs.request_dream

    def noting_call(who: Caller, scope_id: str, dream_request: Any) -> Any:
        noted_head.note_heads()  # each thread runs in a context of its own
        noted_head.note_head(app.store.max_position())  # as the call's first read would
        try:
            return request_dream(who, scope_id, dream_request)
        finally:
            noted_after[dream_request.idempotency_key] = noted_head.noted_head()

    monkeypatch.setattr(app.runs, "request_dream", noting_call)
    keys = [f"k{n}" for n in range(WAITING + 1)]
    admit_behind_the_first(app, held_commit, keys)
    assert held_commit.commits == [1, WAITING]  # one thread committed the others' runs
    assert noted_after == dict.fromkeys(keys)


def test_capacity_stays_exact_within_a_batch(app: Dreaming, held_commit: HeldCommit) -> None:
    app.records.change_scope_settings(caller(0), "s", {"dream_max_pending_per_scope": 3})
    outcomes = admit_behind_the_first(app, held_commit, [f"k{n}" for n in range(WAITING + 1)])
    refused = [o for o in outcomes.values() if isinstance(o, CapacityExceededError)]
    assert len(refused) == WAITING + 1 - 3
    assert all(error.details["pending"] == 3 for error in refused)
    assert unfinished(app) == 3
    assert held_commit.commits == [1, 2]


def test_a_key_given_twice_in_one_batch_is_admitted_once(
        app: Dreaming, held_commit: HeldCommit) -> None:
    same = caller(7)
    outcomes: list[Any] = []
    threads = [threading.Thread(target=lambda: outcomes.append(
        app.runs.request_dream(same, "s", request("twice")))) for _ in range(2)]
    first = threading.Thread(target=app.runs.request_dream, args=(caller(0), "s", request("a")))
    first.start()
    assert held_commit.entered.wait(10)
    for thread in threads:
        thread.start()
    wait_until(lambda: waiting_in(app, "s") == 2)
    held_commit.release.set()
    for thread in [first, *threads]:
        thread.join(10)
    assert sorted(written.value.replayed for written in outcomes) == [False, True]
    assert outcomes[0].value.run.run_id == outcomes[1].value.run.run_id
    assert unfinished(app) == 2


def test_a_failed_batch_stores_nothing_and_every_admission_re_runs(
        app: Dreaming, monkeypatch: pytest.MonkeyPatch) -> None:
    seed_scope(app, "s")
    held = HeldCommit(app, monkeypatch)
    commit = app.store.commit  # the held one
    failed: list[int] = []

    def failing_once(*changed: Any, **kwargs: Any) -> Any:
        if len(held.commits) == 1 and not failed:  # the batch behind the first
            failed.append(sum(isinstance(a, DreamRun) for a in changed))
            raise WriteConflictError("lost a race")
        return commit(*changed, **kwargs)

    monkeypatch.setattr(app.store, "commit", failing_once)
    outcomes = admit_behind_the_first(app, held, [f"k{n}" for n in range(WAITING + 1)])
    assert failed == [WAITING]
    assert all(not isinstance(o, Exception) for o in outcomes.values()), outcomes
    assert unfinished(app) == WAITING + 1  # each admitted exactly once


# -- a property: one batch decides exactly as the admissions would one after the other -------

BATCH = st.lists(st.tuples(st.integers(0, 1), st.integers(0, 1), st.integers(0, 2)),
                 min_size=1, max_size=8)  # (scope, caller, key)


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
@hypothesis.settings(STORED, max_examples=25)
@given(batch=BATCH, capacity=st.integers(1, 5), earlier=st.integers(0, 2))
def test_a_batch_decides_like_its_admissions_in_order(
        app: Dreaming, batch: list[tuple[int, int, int]], capacity: int, earlier: int) -> None:
    scopes = [f"s{next(SCOPES)}" for _ in range(2)]
    for scope_id in scopes:
        seed_scope(app, scope_id)
        app.records.change_scope_settings(caller(0), scope_id,
                                          {"dream_max_pending_per_scope": max(capacity, earlier)})
        for n in range(earlier):
            app.runs.request_dream(caller(9), scope_id, request(f"earlier-{n}"))
        app.records.change_scope_settings(caller(0), scope_id,
                                          {"dream_max_pending_per_scope": capacity})
    waiting = [(scopes[at], admitting(app, scopes[at], who, f"k{key}"))
               for at, who, key in batch]
    app.queues.grouped.group._waiting = [ScopeAdmitting(*one) for one in waiting[:-1]]
    with suppress(DomainError):  # the leader's own outcome is checked with the others'
        app.queues.admit(*waiting[-1])
    # The model, per scope: in order, a key met earlier in the batch re-runs, a full queue
    # refuses; the other scope's admissions change neither.
    unfinished, keys = dict.fromkeys(scopes, earlier), set()
    for (at, who, key), (scope_id, outcome) in zip(batch, waiting, strict=True):
        assert outcome.settled.is_set()
        if (at, who, key) in keys:
            assert isinstance(outcome.error, WriteConflictError)
        elif unfinished[scope_id] >= capacity:
            assert isinstance(outcome.error, CapacityExceededError)
        else:
            assert outcome.error is None
            keys.add((at, who, key))
            unfinished[scope_id] += 1
            history = app.store.history(outcome.run_id)
            assert [event.acted_by for event in history] == [f"svc-{who}"]
    for scope_id in scopes:
        queue: DreamQueue | None = app.store.find(DreamQueue.create_id(scope_id))
        assert (queue.unfinished if queue else 0) == unfinished[scope_id]


SCOPES = itertools.count()


def admitting(app: Dreaming, scope_id: str, who: int, key: str) -> Admitting:
    """An admission as ``request_dream`` hands it to the batch, its evidence checked."""
    acting, wanted = caller(who), request(key)
    scope = app.records.get_scope(acting, scope_id)
    evidence = app.runs.check_evidence(acting, scope, wanted)
    run_id = dream_run_aggregate_id(scope_id, app.runs.run_id_for(acting.name, scope_id, wanted))
    return Admitting(run_id, evidence.read, acting, lambda queue: app.runs.admit_checked(
        acting, scope, queue, wanted, evidence))


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
def test_more_admissions_than_a_batch_are_committed_batch_after_batch(
        app: Dreaming, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app.queues.grouped.group, "max_batch", 2)
    seed_scope(app, "s")
    waiting = [admitting(app, "s", 0, f"k{n}") for n in range(5)]
    app.queues.grouped.group._waiting = [ScopeAdmitting("s", one) for one in waiting[:-1]]
    run, _ = app.queues.admit("s", waiting[-1])  # the last of three batches
    assert run.id == waiting[-1].run_id
    assert all(outcome.error is None for outcome in waiting)
    assert unfinished(app) == 5
