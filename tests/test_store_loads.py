"""Loads ask the snapshot store only for aggregates whose class is snapshotted; an aggregate of
any other class costs one query, and loads the same."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.generators.factory import GeneratorRegistry
from application.bootstrap import Dreaming
from application.read_hints import ReadHints
from application.store import EventStore
from domain.dream_queue import DreamQueue
from domain.errors import ReferenceNotFoundError, ScopeNotFoundError, SourceNotFoundError
from domain.ids import source_aggregate_id
from domain.policy import LOCAL
from domain.refs import SourceRef
from domain.scope import Scope
from domain.source import Source
from tests.dream_support import ScriptedModel
from tests.test_hot_scope import request
from tests.test_workers import admit, seed_scope


@pytest.fixture
def snapshot_queries(app: Dreaming, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    asked: list[Any] = []
    snapshots = app.store.snapshots
    assert snapshots is not None
    original = snapshots.get

    def counted(*args: Any, **kwargs: Any) -> Any:
        asked.append(kwargs.get("originator_id", args[0] if args else None))
        return original(*args, **kwargs)

    monkeypatch.setattr(snapshots, "get", counted)
    return asked


def test_a_scope_is_asked_for_a_snapshot_once_then_loaded_from_its_events(
        app: Dreaming, snapshot_queries: list[Any]) -> None:
    app.records.create_scope(LOCAL, "s")
    scope_id = Scope.create_id("s")
    first = app.store.load(scope_id, lambda: ScopeNotFoundError("no"))
    app.records.change_scope_settings(LOCAL, "s", {"max_items": 8})
    again = app.store.load(scope_id, lambda: ScopeNotFoundError("no"))
    as_of_first = app.store.load(scope_id, lambda: ScopeNotFoundError("no"), first.version)
    assert snapshot_queries.count(scope_id) == 1  # learned on the first load
    assert again.version == first.version + 1
    assert again == app.store.repository.get(scope_id)  # the library's own load agrees
    assert as_of_first == first


def test_a_snapshotted_aggregate_is_loaded_through_its_snapshot_once_it_may_have_one(
        app: Dreaming, snapshot_queries: list[Any]) -> None:
    app.records.create_scope(LOCAL, "s")
    queue = DreamQueue.open("s")
    app.store.commit(queue)
    for _ in range(3):  # short of its first snapshot: learned on the first load
        assert app.store.load(queue.id, lambda: ScopeNotFoundError("no")) == queue
    assert snapshot_queries.count(queue.id) == 1
    grow_past_first_snapshot(app, queue)
    snapshot_queries.clear()  # the snapshot the save took looked one up too
    grown = app.store.load(queue.id, lambda: ScopeNotFoundError("no"))  # all its events, once
    assert snapshot_queries == []
    for _ in range(2):
        assert app.store.load(queue.id, lambda: ScopeNotFoundError("no")) == grown
    assert snapshot_queries == [queue.id, queue.id]  # through its snapshot again
    assert grown == app.store.repository.get(queue.id)
    assert app.store.snapshots is not None
    assert list(app.store.snapshots.get(queue.id, desc=True, limit=1))  # one was taken


def grow_past_first_snapshot(app: Dreaming, queue: DreamQueue) -> None:
    for n in range(EventStore.snapshot_intervals[DreamQueue]):
        queue.admit(f"run-{n}", "refine_experience", max_pending=1000)
        app.store.commit(queue)


def test_a_missing_aggregate_is_still_missing(app: Dreaming) -> None:
    app.records.create_scope(LOCAL, "s")
    app.store.load(Scope.create_id("s"), lambda: ScopeNotFoundError("no"))
    assert app.store.find(Scope.create_id("other")) is None
    with pytest.raises(ScopeNotFoundError):
        app.store.load(Scope.create_id("other"), lambda: ScopeNotFoundError("no"))


def test_a_caller_that_names_the_class_saves_even_the_first_snapshot_lookup(
        app: Dreaming, snapshot_queries: list[Any]) -> None:
    app.records.create_scope(LOCAL, "s")
    queue = DreamQueue.open("s")
    app.store.commit(queue)
    snapshot_queries.clear()  # whatever the setup looked up
    scope_id = Scope.create_id("s")
    scope = app.store.load(scope_id, lambda: ScopeNotFoundError("no"), kind=Scope)
    assert app.auto.gate.load("s") == scope
    assert app.store.find(Scope.create_id("other"), Scope) is None
    assert snapshot_queries == []  # a Scope is never snapshotted: no lookup at all
    assert app.store.find(queue.id, DreamQueue) == queue
    assert snapshot_queries == [queue.id]  # a snapshotted class still goes through its snapshot
    assert scope == app.store.repository.get(scope_id)  # the library's own load agrees


def test_the_position_of_an_aggregate_just_loaded_from_its_events_costs_no_query(
        app: Dreaming, monkeypatch: pytest.MonkeyPatch) -> None:
    app.records.create_scope(LOCAL, "s")
    app.records.change_scope_settings(LOCAL, "s", {"max_items": 8})
    recorder = app.store.recorder
    asked: list[Any] = []
    ask = recorder.position_of
    monkeypatch.setattr(recorder, "position_of", lambda *a: asked.append(a) or ask(*a))
    scope = app.records.get_scope(LOCAL, "s")
    first = app.store.load(Scope.create_id("s"), lambda: ScopeNotFoundError("no"), version=1)
    assert app.store.position_of(scope) == ask(scope.id, scope.version)
    assert app.store.position_of(first) == ask(first.id, 1) < app.store.position_of(scope)
    assert asked == []  # both answered from their loads
    scope.change_settings({"max_items": 9})  # changed since it was loaded: asked again
    app.store.commit(scope)
    assert app.store.position_of(scope) == app.store.max_position()
    assert len(asked) == 1


@pytest.fixture
def store_reads(app: Dreaming, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every read of the event store, by kind: one aggregate, several at once, the events after
    a version, a snapshot."""
    reads: list[str] = []
    recorder = app.store.read_set_recorder
    for name in ("select_events_and_position", "select_events_of_many", "select_events"):
        monkeypatch.setattr(recorder, name, counting(reads, name, getattr(recorder, name)))
    snapshots = app.store.snapshots
    assert snapshots is not None
    monkeypatch.setattr(snapshots, "get", counting(reads, "snapshot", snapshots.get))
    return reads


def counting(reads: list[str], name: str, read: Any) -> Any:
    def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(name)
        return read(*args, **kwargs)
    return counted


def test_aggregates_that_cannot_have_a_snapshot_are_found_together_in_one_query(
        app: Dreaming, store_reads: list[str]) -> None:
    seed_scope(app, "s")
    queue = DreamQueue.open("s")
    app.store.commit(queue)
    source = source_aggregate_id("s", "task", "t")
    wanted = {Scope.create_id("s"): Scope, source: Source, Scope.create_id("none"): Scope,
              queue.id: DreamQueue}
    store_reads.clear()
    found = app.store.find_many(wanted)
    # The queue's class is snapshotted and this process never loaded it: loaded on its own,
    # through the snapshot store.
    assert sorted(store_reads) == ["select_events", "select_events_of_many", "snapshot"]
    assert found == {aggregate_id: app.store.find(aggregate_id, kind)
                     for aggregate_id, kind in wanted.items()}
    assert found[Scope.create_id("none")] is None
    store_reads.clear()
    scope = found[Scope.create_id("s")]
    assert app.store.position_of(scope) == app.store.read_set_recorder.position_of(
        scope.id, scope.version)  # learned from the query
    assert store_reads == []


def test_an_admission_reads_its_scope_its_key_and_its_evidence_in_one_round_trip(
        app: Dreaming, store_reads: list[str]) -> None:
    seed_scope(app, "s")
    admit(app, "s", "first")
    app.runs.read_hints = ReadHints()  # what the first admission's resolution taught, forgotten
    store_reads.clear()
    admit(app, "s", "second")
    # Scope, the key's run and the requested Experience together; then both Sources its
    # lineage names (the task, and its own write's provenance) together; then the events after
    # the held queue's version. One at a time, that was seven reads.
    assert store_reads == ["select_events_of_many", "select_events_of_many", "select_events"]
    store_reads.clear()
    admit(app, "s", "third")
    # The same Experience named again: the Sources its lineage named come with the first read
    # (ADR-0049).
    assert store_reads == ["select_events_of_many", "select_events"]
    assert app.runs.get_dream(LOCAL, "s", run_id_of(app, "second")).run_id
    store_reads.clear()
    replayed = app.runs.request_dream(LOCAL, "s", request("second"))
    assert replayed.value.replayed
    assert store_reads == ["select_events_of_many"]


def run_id_of(app: Dreaming, key: str) -> str:
    return app.runs.run_id_for(LOCAL.name, "s", request(key))


def test_a_worker_reads_the_scope_with_the_runs_evidence_and_a_candidate_from_its_events(
        app: Dreaming, store_reads: list[str]) -> None:
    seed_scope(app, "s")
    first, second = (app.runs.request_dream(LOCAL, "s", request(key)).value.run.run_id
                     for key in ("first", "second"))
    executor = app.executor(GeneratorRegistry(ScriptedModel()), 60.0)
    for run_id in (first, second):
        store_reads.clear()
        attempt = executor.claim("s", run_id)
        assert attempt is not None
        finished = executor.execute(attempt)
        assert finished is not None
        assert finished.status == "succeeded"
    # The second run reuses the first one's proposal (same evidence): its run, the held
    # queue's refresh, the scope with the requested Experience and the Sources of its lineage
    # (ADR-0049), the proposal record, the earlier Candidate (no snapshot lookup), the queue
    # again, and the run as stored. Ten reads before.
    assert len(store_reads) == 7, store_reads
    assert "snapshot" not in store_reads


def test_reading_amending_and_withdrawing_a_source_each_read_in_one_round_trip(
        app: Dreaming, store_reads: list[str]) -> None:
    seed_scope(app, "s")
    app.records.record_source(LOCAL, "s", "task", "t-1", text="first")
    store_reads.clear()
    assert app.records.get_source(LOCAL, "s", "task", "t-1").text == "first"
    app.records.amend_source(LOCAL, "s", "task", "t-1", text="second")
    assert app.records.get_source(LOCAL, "s", "task", "t-1").text == "second"
    app.records.withdraw_source(LOCAL, "s", "task", "t-1", "recorded twice")
    # The scope and the Source together, each time (two reads each, one after the other).
    assert store_reads == ["select_events_of_many"] * 4
    assert app.records.get_source(LOCAL, "s", "task", "t-1").withdrawn
    with pytest.raises(SourceNotFoundError):
        app.records.get_source(LOCAL, "s", "task", "t-2")


def test_an_entry_reads_the_sources_it_cites_with_the_scope(
        app: Dreaming, store_reads: list[str]) -> None:
    seed_scope(app, "s")
    app.records.create_memory(LOCAL, "s", "m", "tester")
    cited = [SourceRef("task", "t")]
    app.records.add_entry(LOCAL, "s", "m", "e0", "lesson", "first", sources=cited)
    store_reads.clear()
    app.records.add_entry(LOCAL, "s", "m", "e1", "lesson", "second", sources=cited)
    app.records.revise_entry(LOCAL, "s", "m", "e1", "lesson", "second, revised", sources=cited)
    # Each time the scope, the Memory (too small yet for a snapshot) and the cited Source
    # together: one read each, not two (the Sources were read after the Memory).
    assert store_reads == ["select_events_of_many"] * 2
    with pytest.raises(ReferenceNotFoundError):  # a Source that is not there is still refused
        app.records.add_entry(LOCAL, "s", "m", "e2", "lesson", "third",
                              sources=[SourceRef("task", "missing")])
    entry = app.records.get_artifact(LOCAL, "s", "memory", "m").current_entry("e1")
    assert entry.text == "second, revised"
    assert entry.sources == tuple(cited)
