"""A Memory's snapshot holds its whole history, so snapshots are spaced out as it grows (every
50 events at first, then 100, 200, 400, ...), and are taken from the Memory just saved rather
than loaded again; what is stored equals what a load from the store would have snapshotted,
and a process that has never seen the Memory loads it through them exactly."""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from typing import Any

from eventsourcing.domain import Snapshot

from application.audit import state_of
from application.bootstrap import Dreaming
from application.store import EventStore
from domain.artifact import Artifact
from domain.dream_queue import DreamQueue
from domain.ids import artifact_aggregate_id
from domain.policy import LOCAL
from domain.refs import ArtifactFamily, SourceRef

MEMORY = artifact_aggregate_id("s", ArtifactFamily.MEMORY, "m")


def snapshot_versions(kind: type[Any], up_to: int) -> list[int]:
    return [v for v in range(1, up_to + 1) if EventStore.snapshot_due(kind, v)]


def test_a_memory_is_snapshotted_less_often_as_it_grows_and_a_queue_evenly() -> None:
    expected = [*range(50, 800, 50), *range(800, 1600, 100), *range(1600, 3200, 200),
                *range(3200, 6400, 400), *range(6400, 10_001, 800)]
    assert snapshot_versions(Artifact, 10_000) == expected
    assert snapshot_versions(DreamQueue, 10_000) == list(range(20, 10_001, 20))
    gaps = [(after, after - before) for before, after in pairwise(expected)]
    assert all(gap <= max(50, version // 8) for version, gap in gaps)  # a cold load stays short


def test_the_snapshots_stored_are_those_a_load_would_take_and_a_cold_load_equals_the_live(
        open_app: Callable[[], Dreaming]) -> None:
    app = open_app()
    app.records.create_scope(LOCAL, "s")
    app.records.create_memory(LOCAL, "s", "m", "tester")
    app.records.record_source(LOCAL, "s", "task", "t1", text="did it")
    for n in range(1_000):
        app.records.add_entry(LOCAL, "s", "m", f"e{n}", "lesson", f"lesson {n}",
                              sources=[SourceRef("task", "t1")])
    live: Artifact = app.records.get_artifact(LOCAL, "s", ArtifactFamily.MEMORY, "m")
    assert live.version == 1_001

    store = app.store
    assert store.snapshots is not None
    stored = [event.originator_version
              for event in store.snapshots.recorder.select_events(MEMORY)]
    assert stored == [*range(50, 800, 50), 800, 900, 1_000]

    # Taken from the Memory in hand: equal to the library's way (load version 1,000, take).
    [latest] = store.snapshots.get(MEMORY, desc=True, limit=1)
    reloaded = Snapshot.take(store.repository.get(MEMORY, version=1_000))
    round_trip = store.mapper.to_domain_event(store.mapper.to_stored_event(reloaded))
    assert latest.state == round_trip.state  # type: ignore[attr-defined]

    cold = open_app()  # holds nothing: loads through the snapshot at 1,000 and one event
    loaded: Artifact = cold.records.get_artifact(LOCAL, "s", ArtifactFamily.MEMORY, "m")
    assert state_of(loaded) == state_of(live)
    assert loaded.current_entry("e999").text == "lesson 999"  # its sealed text opened
