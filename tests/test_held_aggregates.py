"""A Memory is held in each process between loads (ADR-0034): a load reads only the events
stored after the held version, so it sees every other writer's change, an erasure included; a
command that changes its copy and fails leaves nothing behind; a fork shares nothing a
command changes; adding an entry no longer costs more the more entries a Memory holds."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any

import pytest

from application.bootstrap import Dreaming
from application.erasure import ErasureTarget
from domain.artifact import Artifact
from domain.erasure import ERASED_TEXT
from domain.errors import WriteConflictError
from domain.ids import artifact_aggregate_id
from domain.policy import LOCAL
from domain.refs import ArtifactFamily, SourceRef
from tests.test_grouped_admissions import wait_until
from tests.test_hot_scope import count_lost_races

MEMORY = artifact_aggregate_id("s", ArtifactFamily.MEMORY, "m")


def memory_with_entries(app: Dreaming, entries: int) -> None:
    app.records.create_scope(LOCAL, "s")
    app.records.create_memory(LOCAL, "s", "m", "tester")
    app.records.record_source(LOCAL, "s", "task", "t1", text="did it")
    for n in range(entries):
        app.records.add_entry(LOCAL, "s", "m", f"e{n}", "lesson", f"lesson {n}",
                              sources=[SourceRef("task", "t1")])


def memory(app: Dreaming) -> Artifact:
    found: Artifact = app.records.get_artifact(LOCAL, "s", ArtifactFamily.MEMORY, "m")
    return found


def test_a_fork_shares_nothing_a_command_changes(app: Dreaming) -> None:
    memory_with_entries(app, 3)
    held = memory(app)
    before = copy.deepcopy(held)
    twin = held.fork()
    twin.add_entry("e9", "lesson", "new", [SourceRef("task", "t1")], [], None)
    twin.revise_entry("e0", "lesson", "revised", [SourceRef("task", "t1")], [], None, None)
    twin.deactivate_entry("e1", "stale", None)
    twin.erase_entry("e2", "er_1")
    assert held == before
    assert held.pending_events == []
    assert len(twin.pending_events) == 4


def test_a_fork_shares_the_lists_of_the_entries_it_leaves_alone(app: Dreaming) -> None:
    """A fork copies no entry's list (it would cost a list per entry at every load): an
    entry's lists are replaced when it changes, in the twin that changes it."""
    memory_with_entries(app, 3)
    held = memory(app)
    twin = held.fork()
    twin.revise_entry("e0", "lesson", "revised", [SourceRef("task", "t1")], [], None, None)
    assert twin.entry_versions["e1"] is held.entry_versions["e1"]
    assert twin._entry_log["e1"] is held._entry_log["e1"]
    assert [v.text for v in held.entry_versions["e0"]] == ["lesson 0"]
    assert [v.text for v in twin.entry_versions["e0"]] == ["lesson 0", "revised"]


def test_a_load_forks_the_held_memory_while_no_other_load_can_take_it(
        app: Dreaming, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once kept, the held Memory is another load's to take and bring up to date: a fork made
    after keeping it could copy it halfway through that change (seen under load as
    "dictionary changed size during iteration", a 500)."""
    memory_with_entries(app, 60)
    memory(app)  # held from here on
    forked_while_visible: list[bool] = []
    fork = Artifact.fork

    def watched(aggregate: Artifact) -> Artifact:
        forked_while_visible.append(app.store.held._held.get(aggregate.id) is aggregate)
        return fork(aggregate)

    monkeypatch.setattr(Artifact, "fork", watched)
    app.records.add_entry(LOCAL, "s", "m", "one-more", "lesson", "small")
    memory(app)
    assert forked_while_visible  # the held Memory was loaded (and kept) by both calls
    assert not any(forked_while_visible)


def test_only_a_memory_grown_past_its_first_snapshot_is_held(
        open_app: Callable[[], Dreaming]) -> None:
    small, large = open_app(), open_app()
    memory_with_entries(small, 3)
    memory(small)
    assert len(small.store.held) == 0  # loaded from its events in one query, as before
    for n in range(3, 60):
        small.records.add_entry(LOCAL, "s", "m", f"e{n}", "lesson", f"lesson {n}")
    memory(large)
    assert len(large.store.held) == 1


def test_a_load_sees_every_writer_of_the_store_and_reads_only_what_is_new(
        open_app: Callable[[], Dreaming], monkeypatch: pytest.MonkeyPatch) -> None:
    here, there = open_app(), open_app()
    memory_with_entries(here, 60)  # past the first snapshot
    assert memory(here).head_revision == 61
    there.records.add_entry(LOCAL, "s", "m", "from-there", "lesson", "written elsewhere")
    read: list[Any] = []
    events_after = here.store._events_after

    def counted(aggregate_id: Any, version: int) -> Any:
        found = list(events_after(aggregate_id, version))
        read.append(len(found))
        return found

    monkeypatch.setattr(here.store, "_events_after", counted)
    seen = memory(here)
    assert seen.current_entry("from-there").text == "written elsewhere"
    assert read == [1]  # the held Memory, and the one event stored after it
    assert seen == there.store.repository.get(MEMORY)


def test_a_failed_command_leaves_nothing_behind(app: Dreaming,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    memory_with_entries(app, 60)  # past the first snapshot: held
    memory(app)  # held
    commit = app.store.commit

    def conflicting(*changed: Any, **kwargs: Any) -> Any:
        raise WriteConflictError("another writer went first")

    monkeypatch.setattr(app.store, "commit", conflicting)
    with pytest.raises(WriteConflictError):
        app.records.add_entry(LOCAL, "s", "m", "lost", "lesson", "never stored")
    monkeypatch.setattr(app.store, "commit", commit)
    after = memory(app)
    assert "lost" not in after.entry_versions
    assert after.pending_events == []
    assert after == app.store.repository.get(MEMORY)


def test_an_erasure_by_another_process_is_seen_at_the_next_load(
        open_app: Callable[[], Dreaming]) -> None:
    here, there = open_app(), open_app()
    memory_with_entries(here, 60)  # past the first snapshot: held
    assert memory(here).current_entry("e0").text == "lesson 0"  # held here, readable
    there.erasures.erase(LOCAL, "s", ErasureTarget.of_entry("m", "e0"), "asked to forget",
                         lambda scope, records: [])
    assert memory(here).current_entry("e0").text == ERASED_TEXT
    assert memory(here).current_entry("e1").text == "lesson 1"


def test_adding_an_entry_costs_no_more_in_a_large_memory(
        app: Dreaming, monkeypatch: pytest.MonkeyPatch) -> None:
    """The events a load decodes do not grow with the Memory: one held Memory, the events
    after it, never its whole snapshot again."""
    memory_with_entries(app, 120)
    decoded: list[int] = []
    to_domain_event = app.store.mapper.to_domain_event

    def counted(stored: Any) -> Any:
        decoded.append(len(stored.state))
        return to_domain_event(stored)

    monkeypatch.setattr(app.store.mapper, "to_domain_event", counted)
    app.records.add_entry(LOCAL, "s", "m", "one-more", "lesson", "small")
    largest = max(decoded, default=0)
    assert largest < 2_000  # an event of its own, not a snapshot of 120 entries


def test_writers_of_one_memory_take_turns_instead_of_racing(
        app: Dreaming, monkeypatch: pytest.MonkeyPatch) -> None:
    """While one entry's commit is held, the other writers of the Memory wait for their turn
    rather than load the same version and lose the race: none of them meets a conflict."""
    memory_with_entries(app, 1)
    entered, release = threading.Event(), threading.Event()
    conflicts: list[WriteConflictError] = []
    count_lost_races(app, monkeypatch, conflicts)
    commit = app.store.commit

    def first_held(*changed: Any, **kwargs: Any) -> Any:
        if not entered.is_set():
            entered.set()
            assert release.wait(10)
        return commit(*changed, **kwargs)

    monkeypatch.setattr(app.store, "commit", first_held)
    writers = [threading.Thread(target=app.records.add_entry,
                                args=(LOCAL, "s", "m", f"w{n}", "lesson", f"written by {n}"))
               for n in range(4)]
    writers[0].start()
    assert entered.wait(10)
    for writer in writers[1:]:
        writer.start()
    # One writer in its turn, three waiting for it.
    wait_until(lambda: app.records.memory_writers._locks.get("s\0m", (None, 0))[1] == 4)
    release.set()
    for writer in writers:
        writer.join(10)
    assert conflicts == []
    assert memory(app).version == 1 + 1 + 4  # created, one entry, four more
    assert len(app.records.memory_writers) == 0  # nothing left behind
