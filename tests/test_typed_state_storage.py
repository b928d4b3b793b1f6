"""Typed aggregate state in the store: events keep their plain JSON, snapshots keep loading.

Runs, queues and artifacts hold enum members and frozen value objects, but their stored events
keep the field names and JSON values they always had, so existing stores replay. Queues and
Artifacts are snapshotted: snapshots carry ``class_version`` and restore the types; snapshots
of earlier versions (a queue's version 1 and 2, an artifact's version 1) still load into the
same typed state.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.domain import Snapshot
from eventsourcing.persistence import JSONTranscoder, StoredEvent
from hypothesis import given, settings
from hypothesis import strategies as st

from application.transcodings import register_reference_transcodings
from domain.artifact import Artifact, EntryStatus
from domain.budget import Budget
from domain.canonical import digest
from domain.dream_queue import DreamQueue, Lease
from domain.dream_request import DreamOperation, DreamRequest
from domain.dream_run import DreamRun, ProposedCandidate, RunOutcome, RunStatus
from domain.errors import DomainError
from domain.evidence.manifest import EvidenceManifest
from domain.refs import ArtifactFamily, ArtifactRef, Lineage, SourceRef
from tests.property_support import assert_queue_typed, assert_refused, stored_manifest

T0 = datetime(2026, 3, 1, tzinfo=UTC)
LEASE = T0 + timedelta(seconds=30)
REFINE, DERIVE = DreamOperation.REFINE_EXPERIENCE, DreamOperation.DERIVE_SKILL


class Store(Application[UUID]):
    """An in-memory event store with the service's transcodings and a snapshot store."""

    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        super().register_transcodings(transcoder)
        register_reference_transcodings(transcoder)


class EagerStore(Store):
    """Snapshots a queue every three events, so loads keep crossing snapshots."""

    snapshotting_intervals = {DreamQueue: 3}


def open_store(store: type[Store] = Store) -> Store:
    return store(env={"PERSISTENCE_MODULE": "eventsourcing.popo",
                      "IS_SNAPSHOTTING_ENABLED": "y"})


def iso(moment: datetime) -> dict[str, str]:
    return {"_type_": "datetime_iso", "_data_": moment.isoformat()}


def stored_state(stored: StoredEvent) -> dict[str, Any]:
    state: dict[str, Any] = json.loads(stored.state)
    return state


def v1_queue_snapshot(queue: DreamQueue) -> StoredEvent:
    """A snapshot of ``queue`` (admitted r1 and r2, started r1) exactly as version 1 stored it:
    each lease a plain dict, no class version, the library's own snapshot class."""
    state = {"scope_id": "s", "_created_on": iso(queue.created_on),
             "_modified_on": iso(queue.modified_on),
             "pending": {"r1": "refine_experience", "r2": "derive_skill"},
             "running": {"refine_experience": {"run_id": "r1", "lease_expires_at": iso(LEASE)}}}
    body = {"topic": "domain.dream_queue:DreamQueue", "state": state, "timestamp": iso(T0)}
    return StoredEvent(originator_id=queue.id, originator_version=queue.version,
                       topic="eventsourcing.domain:Snapshot", state=json.dumps(body).encode())


def started_queue() -> DreamQueue:
    queue = DreamQueue.open("s")
    queue.admit("r1", REFINE, max_pending=5)
    queue.admit("r2", DERIVE, max_pending=5)
    queue.start("r1", REFINE, T0, LEASE)
    return queue


# -- DreamQueue snapshots ------------------------------------------------------------------------


def test_a_version_1_queue_snapshot_loads_into_the_typed_state() -> None:
    store, queue = open_store(), started_queue()
    queue.collect_events()
    snapshot = store.mapper.to_domain_event(v1_queue_snapshot(queue))
    loaded = snapshot.mutate(None)
    assert loaded.unfinished == 2
    assert loaded.running == {REFINE: Lease("r1", LEASE)}
    assert_queue_typed(loaded)
    assert loaded == queue


def test_a_queue_loads_from_a_version_1_snapshot_and_the_events_after_it() -> None:
    store, queue = open_store(), started_queue()
    store.save(queue)
    store.snapshots.recorder.insert_events([v1_queue_snapshot(queue)])
    queue.renew("r1", LEASE + timedelta(seconds=30))
    queue.start("r2", DERIVE, T0, LEASE)
    queue.finish("r1")
    store.save(queue)
    assert type(next(iter(store.snapshots.get(queue.id, desc=True, limit=1)))) is Snapshot
    loaded = store.repository.get(queue.id)
    assert loaded == queue
    assert loaded.running == {DERIVE: Lease("r2", LEASE)}
    assert_queue_typed(loaded)


def v2_queue_snapshot(queue: DreamQueue) -> StoredEvent:
    """A snapshot of ``queue`` (admitted r1 and r2, started r1) as version 2 stored it: every
    pending run listed by id."""
    lease = {"_type_": "dream_queue_lease",
             "_data_": {"run_id": "r1", "lease_expires_at": iso(LEASE)}}
    state = {"scope_id": "s", "_created_on": iso(queue.created_on),
             "_modified_on": iso(queue.modified_on), "class_version": 2,
             "pending": {"r1": "refine_experience", "r2": "derive_skill"},
             "running": {"refine_experience": lease}}
    body = {"topic": "domain.dream_queue:DreamQueue", "state": state, "timestamp": iso(T0)}
    return StoredEvent(originator_id=queue.id, originator_version=queue.version,
                       topic="domain.snapshots:TypedSnapshot", state=json.dumps(body).encode())


def test_a_version_2_queue_snapshot_loads_as_a_count() -> None:
    store, queue = open_store(), started_queue()
    store.save(queue)
    store.snapshots.recorder.insert_events([v2_queue_snapshot(queue)])
    loaded = store.repository.get(queue.id)
    assert loaded.unfinished == 2
    assert loaded.running == {REFINE: Lease("r1", LEASE)}
    assert_queue_typed(loaded)
    assert loaded == queue


def test_a_new_queue_snapshot_is_version_3_and_stays_small() -> None:
    store, queue = open_store(), started_queue()
    for index in range(3, 500):  # a backlog: the snapshot holds a count, not the runs
        queue.admit(f"r{index}", REFINE, 1000)
    store.save(queue)
    store.take_snapshot(queue.id)
    stored = store.snapshots.recorder.select_events(queue.id, desc=True, limit=1)[0]
    state = stored_state(stored)["state"]
    assert state["class_version"] == 3
    assert state["unfinished"] == 499
    assert "pending" not in state
    assert len(stored.state) < 1_000
    assert state["running"] == {"refine_experience": {
        "_type_": "dream_queue_lease", "_data_": {"run_id": "r1", "lease_expires_at": iso(LEASE)}}}
    loaded = store.repository.get(queue.id)
    assert loaded == queue
    assert_queue_typed(loaded)


steps = st.lists(st.tuples(st.sampled_from(["admit", "start", "renew", "requeue", "finish"]),
                           st.integers(0, 9), st.sampled_from(list(DreamOperation))),
                 max_size=30)


@given(steps)
@settings(max_examples=40, deadline=None, database=None)
def test_a_queue_snapshotted_every_few_events_loads_typed_and_equal(
        plan: list[tuple[str, int, DreamOperation]]) -> None:
    store, queue = open_store(EagerStore), DreamQueue.open("s")
    store.save(queue)
    unfinished: dict[str, DreamOperation] = {}  # as the runs know it
    for step, (action, index, operation) in enumerate(plan):
        run_id = f"r{index}"
        if action != "admit" and run_id not in unfinished:
            continue  # the lifecycle moves only unfinished runs
        if action == "admit" and run_id in unfinished:
            continue  # a run is admitted once
        held = unfinished.get(run_id, operation)
        commands = {"admit": partial(queue.admit, run_id, operation, 8),
                    "start": partial(queue.start, run_id, held, T0,
                                     LEASE + timedelta(seconds=step)),
                    "renew": partial(queue.renew, run_id, LEASE + timedelta(seconds=step)),
                    "requeue": partial(queue.requeue, run_id),
                    "finish": partial(queue.finish, run_id)}
        try:
            commands[action]()
        except DomainError:
            continue  # refused: nothing to save
        if action == "admit":
            unfinished[run_id] = operation
        elif action == "finish":
            del unfinished[run_id]
        store.save(queue)
        loaded = store.repository.get(queue.id)
        assert loaded == queue
        assert loaded.unfinished == len(unfinished)
        assert_queue_typed(loaded)


# -- DreamQueue commands -------------------------------------------------------------------------


def test_capacity_counts_unfinished_runs_and_a_finished_one_frees_its_place() -> None:
    queue = started_queue()
    queue.collect_events()
    assert_refused(queue, "capacity_exceeded", partial(queue.admit, "r3", REFINE, 2))
    queue.finish("r1")
    assert not queue.running
    queue.admit("r3", REFINE, 2)
    assert queue.unfinished == 2


def test_admitting_an_unknown_operation_is_refused() -> None:
    queue = DreamQueue.open("s")
    queue.collect_events()
    assert_refused(queue, "invalid_request", partial(queue.admit, "r1", "refine", 5))


# -- Artifact snapshots --------------------------------------------------------------------------


def test_a_version_1_artifact_snapshot_loads_its_family_and_statuses_typed() -> None:
    store = open_store()
    memory = Artifact.create("s", "memory", "m1", {}, Lineage(), {"kind": "test"})
    memory.add_entry("en1", "fact", "a fact", [SourceRef("task", "t1")], [])
    memory.deactivate_entry("en1", "stale")
    store.save(memory)
    # Version 1 had the same shape, without a class version; JSON gave the words back as text.
    snapshot = store.mapper.to_stored_event(Snapshot.take(memory))
    body = stored_state(snapshot)
    assert body["state"].pop("class_version") == 2
    assert body["state"]["family"] == "memory"
    store.snapshots.recorder.insert_events([StoredEvent(
        snapshot.originator_id, snapshot.originator_version, snapshot.topic,
        json.dumps(body).encode())])
    memory.reactivate_entry("en1")
    store.save(memory)
    for loaded in (store.repository.get(memory.id), _after_a_new_snapshot(store, memory.id)):
        assert loaded == memory
        assert type(loaded.family) is ArtifactFamily
        assert type(loaded.entry_status("en1")) is EntryStatus
        assert {type(entry.status) for entry in loaded.manifest(2).values()} == {EntryStatus}


def _after_a_new_snapshot(store: Store, aggregate_id: UUID) -> Any:
    store.take_snapshot(aggregate_id)
    return store.repository.get(aggregate_id)


# -- DreamRun events -----------------------------------------------------------------------------


def test_dream_run_events_keep_their_json_and_load_typed() -> None:
    store = open_store()
    target = ArtifactRef(ArtifactFamily.EXPERIENCE, "e1", 1)
    request = DreamRequest.create(REFINE, "k1", artifacts=[target], target=target)
    run = DreamRun.accept("s", "r1", "alice", request, Budget(), "p1", T0)
    run.start_attempt(T0, "model-a", 30)
    manifest = stored_manifest(SourceRef("task", "t1"))
    run.freeze_manifest(1, manifest, digest(manifest))
    run.succeed(1, RunOutcome.PROPOSED, "why", {"candidate_id": "c1", "version": 1}, T0)
    store.save(run)
    stored = {event.topic.rsplit(".", 1)[-1]: stored_state(event)
              for event in store.recorder.select_events(run.id)}
    target_json = {"family": "experience", "artifact_id": "e1", "revision": 1}
    assert (stored["Accepted"]["operation"], stored["Accepted"]["request"]) == (
        "refine_experience", {"operation": "refine_experience", "artifacts": [target_json],
                              "memory_citations": [], "sources": [], "target": target_json})
    assert stored["ManifestFrozen"]["manifest"] == manifest
    assert (stored["Succeeded"]["outcome"], stored["Succeeded"]["candidate"]) == (
        "proposed", {"candidate_id": "c1", "version": 1})
    loaded = store.repository.get(run.id)
    assert loaded == run
    assert (loaded.operation, loaded.status, loaded.outcome) == (
        REFINE, RunStatus.SUCCEEDED, RunOutcome.PROPOSED)
    assert [type(value) for value in (loaded.operation, loaded.status, loaded.outcome)] == [
        DreamOperation, RunStatus, RunOutcome]
    assert loaded.request == request
    assert loaded.candidate == ProposedCandidate("c1", 1)
    assert loaded.manifest == EvidenceManifest.from_dict(manifest)
