"""A service records its work and keeps a Memory; every step is exact and replayable."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from application.bootstrap import Dreaming
from domain.content import entry_content_hash
from domain.errors import DomainError
from domain.policy import LOCAL
from domain.refs import ArtifactRef, Lineage, MemoryCitation, SourceRef

TASK = SourceRef(source_type="task", source_id="t-1")


def test_memory_entries_keep_every_version_exactly(app: Dreaming,
                                                   open_app: Callable[[], Dreaming]) -> None:
    # Create a scope and record the task Source the entries will cite.
    app.records.create_scope(LOCAL, "team-a")
    recorded = app.records.record_source(LOCAL, "team-a", "task", "t-1",
                                         text="Replayed the write with key K; the retry succeeded.")
    assert recorded.position is not None

    # Create a Memory and add an entry citing the task.
    app.records.create_memory(LOCAL, "team-a", "notes", principal="svc", title="Team notes")
    added = app.records.add_entry(LOCAL, "team-a", "notes", "e1", "task_record",
                                  "Use idempotency keys on retries", sources=[TASK])
    first = added.value.citation
    assert first.memory_ref == ArtifactRef("memory", "notes", 2)
    assert added.value.entry.content_hash == entry_content_hash(
        "task_record", "Use idempotency keys on retries", [TASK], [])

    # Revise it, then deactivate it: each change is a new Memory revision.
    revised = app.records.revise_entry(LOCAL, "team-a", "notes", "e1", "task_record",
                                       "Always use idempotency keys on retries", sources=[TASK])
    app.records.deactivate_entry(LOCAL, "team-a", "notes", "e1", reason="superseded")
    memory = app.records.get_artifact(LOCAL, "team-a", "memory", "notes")
    assert memory.head_revision == 4

    # The manifest of every revision is frozen: revision 2 still lists the first version.
    assert memory.manifest(2)["e1"].entry_version_id == first.entry_version_id
    assert memory.manifest(3)["e1"].entry_version_id == revised.value.entry.entry_version_id
    assert memory.manifest(4)["e1"].status == "inactive"
    assert memory.manifest(3)["e1"].status == "active"

    # The exact first version can still be read through its citation, from another instance.
    other = open_app()
    assert other.records.read_entry_version(LOCAL, "team-a",
                                            first).text == "Use idempotency keys on retries"
    assert other.records.get_artifact(LOCAL, "team-a", "memory", "notes") == memory

    # Reactivation brings the entry back in a new revision.
    app.records.reactivate_entry(LOCAL, "team-a", "notes", "e1")
    assert app.records.get_artifact(LOCAL, "team-a", "memory",
                                    "notes").manifest()["e1"].status == "active"


def test_citation_must_name_a_version_listed_in_the_cited_revision(app: Dreaming) -> None:
    app.records.create_scope(LOCAL, "s")
    app.records.create_memory(LOCAL, "s", "m", principal="svc")
    v1 = app.records.add_entry(LOCAL, "s", "m", "e1", "preference", "Prefers short answers").value
    v2 = app.records.revise_entry(LOCAL, "s", "m", "e1", "preference",
                                  "Prefers very short answers").value
    # The second version did not exist at revision 2: citing it there is not exact.
    wrong = MemoryCitation(v1.memory, "e1", v2.entry.entry_version_id)
    with pytest.raises(DomainError) as refused:
        app.records.read_entry_version(LOCAL, "s", wrong)
    assert refused.value.code == "invalid_memory_citation"


def test_management_writes_record_a_lineage_only_source(app: Dreaming) -> None:
    app.records.create_scope(LOCAL, "s")
    app.records.record_source(LOCAL, "s", "task", "t-1",
                              text="Fixed the flaky deploy by pinning the image.")
    experience = {"situation": "Flaky deploy", "action": "Pinned the image digest",
                  "outcome": "Deploys stable", "lesson": "Pin image digests"}
    created = app.records.create_artifact(LOCAL, "s", "experience", "x1", experience,
                                          principal="alice",
                                          lineage=Lineage(sources=(task("t-1"),)))
    revision = created.value.revision(1)
    management = [ref for ref in revision.lineage.sources if ref.source_type == "artifact_write"]
    assert management == [SourceRef("artifact_write", "experience/x1/1")]
    source = app.records.get_source(LOCAL, "s", "artifact_write", "experience/x1/1")
    assert source.eligibility == "lineage_only"
    assert source.payload is not None
    assert source.payload["principal"] == "alice"

    # Replace needs the current head; the replacement is revision 2 with its own write record.
    replaced = app.records.replace_artifact(LOCAL, "s", "experience", "x1",
                                            {**experience, "lesson": "Pin it"},
                                            principal="bob", expected_revision=1)
    assert replaced.value.head_ref == ArtifactRef("experience", "x1", 2)
    assert app.records.read_revision(LOCAL, "s",
                                     ArtifactRef("experience", "x1", 1)).content == experience
    with pytest.raises(DomainError) as stale:
        app.records.replace_artifact(LOCAL, "s", "experience", "x1", experience, principal="bob",
                                     expected_revision=1)
    assert stale.value.code == "artifact_conflict"
    assert stale.value.details["current"]["revision"] == 2


def task(source_id: str) -> SourceRef:
    return SourceRef(source_type="task", source_id=source_id)


def test_identical_ids_in_two_scopes_never_collide(app: Dreaming) -> None:
    for scope in ("a_b", "a"):
        app.records.create_scope(LOCAL, scope)
        app.records.create_memory(LOCAL, scope, "m", principal="svc")
    app.records.add_entry(LOCAL, "a_b", "m", "e", "note", "only in a_b")
    assert app.records.get_artifact(LOCAL, "a", "memory", "m").manifest() == {}
    assert app.records.get_artifact(LOCAL, "a_b", "memory", "m").manifest()["e"].status == "active"


def test_a_long_lived_memory_loads_from_snapshots_exactly(app: Dreaming,
                                                          open_app: Callable[[], Dreaming]) -> None:
    app.records.create_scope(LOCAL, "s")
    app.records.create_memory(LOCAL, "s", "big", principal="svc")
    for index in range(120):
        app.records.add_entry(LOCAL, "s", "big", f"e{index}", "note", f"entry {index}", sources=[])
    app.records.deactivate_entry(LOCAL, "s", "big", "e7")
    live = app.records.get_artifact(LOCAL, "s", "memory", "big")
    # A fresh instance loads from the latest snapshot plus the events after it.
    assert app.store.snapshots is not None
    assert list(app.store.snapshots.get(live.id, desc=True, limit=1))
    reopened = open_app().records.get_artifact(LOCAL, "s", "memory", "big")
    assert reopened == live
    # Time travel still works below and above the snapshot.
    assert open_app().store.repository.get(live.id, version=40).manifest() == live.manifest(40)
    assert open_app().store.repository.get(live.id, version=101).manifest() == live.manifest(101)
