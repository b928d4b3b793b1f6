"""Erasure's rules on both stores: what one erasure takes and leaves, every refusal with its
stable code and nothing changed, only deployment administrators, a race with a writer, and a
property: erasing at any point of a random history leaves no readable text of what it erased
and changes nothing else."""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.settings import Settings
from adapters.store import sealing
from adapters.store.held_queues import HeldQueues
from adapters.store.persistence import application_env
from adapters.store.sealing import SealedValue
from adapters.store.shared_feed import SharedFeed
from application.bootstrap import Dreaming
from application.erasure import ErasureTarget
from application.store import EventStore
from domain.artifact import Artifact, EntryStatus
from domain.erasure import Erasure, KeyRecord
from domain.errors import DomainError
from domain.ids import source_aggregate_id
from domain.policy import LOCAL, Caller
from domain.refs import SourceRef
from domain.source import Source
from tests.property_support import STORED, replay
from tests.test_review import refused

NO_DERIVED: Callable[[str, Any], list[dict[str, Any]]] = lambda scope, records: []  # noqa: E731


def erase(app: Dreaming, scope: str, target: ErasureTarget, caller: Caller = LOCAL,
          reason: str = "asked to be forgotten") -> Erasure:
    return app.erasures.erase(caller, scope, target, reason, NO_DERIVED).value.erasure


@pytest.fixture
def clinic(app: Dreaming) -> Dreaming:
    app.records.create_scope(LOCAL, "c")
    app.records.record_source(LOCAL, "c", "task", "a", text="Ann's visit", subject="ann")
    app.records.record_source(LOCAL, "c", "task", "b", text="Bob's visit", payload={"n": 1},
                              subject="bob")
    app.records.create_memory(LOCAL, "c", "m", principal="svc")
    app.records.add_entry(LOCAL, "c", "m", "ann-pref", "preference", "Ann: mornings",
                          sources=[SourceRef("task", "a")], subject="ann")
    app.records.add_entry(LOCAL, "c", "m", "team", "fact", "The team meets on Mondays")
    app.records.revise_entry(LOCAL, "c", "m", "ann-pref", "preference", "Ann: early mornings")
    return app


def test_erasing_a_source_takes_it_alone(clinic: Dreaming,
                                          open_app: Callable[[], Dreaming]) -> None:
    erasure = erase(clinic, "c", ErasureTarget.of_source("task", "a"))
    assert [r["source_id"] for r in erasure.records] == ["a"]
    fresh = open_app()  # no key in its memory: reads the store as it is
    gone = fresh.records.get_source(LOCAL, "c", "task", "a")
    assert (gone.erased, gone.text, gone.payload) == (True, None, None)
    kept = fresh.records.get_source(LOCAL, "c", "task", "b")
    assert (kept.text, kept.payload) == ("Bob's visit", {"n": 1})
    # The history keeps the event, but its text reads as erased.
    recorded = fresh.store.history(gone.id)[0]
    assert (recorded.text, recorded.payload) == ("", {})
    refused(fresh, "source_erased", lambda: fresh.records.record_source(
        LOCAL, "c", "task", "a", text="Ann's visit"))
    refused(fresh, "source_erased", lambda: fresh.records.amend_source(
        LOCAL, "c", "task", "a", text="again"))


def test_the_read_models_read_personal_fields_sealed(clinic: Dreaming,
                                                     settings: Settings) -> None:
    """No view holds or reads a record's text, so the views' feed neither looks a key up nor
    decrypts: what it hands them is still sealed (and readers of the write model open it)."""
    feed = SharedFeed(settings)
    try:
        events = [event for event, _ in feed(0, feed.app.max_position(), 100)]
    finally:
        feed.close()
    texts = {e.source_id if isinstance(e, Source.Recorded) else e.entry_id: e.text
             for e in events if isinstance(e, Source.Recorded | Artifact.EntryAdded) and e.text}
    assert {"a", "b", "ann-pref", "team"} <= texts.keys()
    assert all(isinstance(text, SealedValue) for text in texts.values())
    assert "Ann" not in repr(events)
    assert clinic.records.get_source(LOCAL, "c", "task", "a").text == "Ann's visit"


def test_erasing_an_entry_takes_every_version_and_keeps_ids_and_hashes(
        clinic: Dreaming, open_app: Callable[[], Dreaming]) -> None:
    before = clinic.records.get_artifact(LOCAL, "c", "memory", "m")
    hashes = [v.content_hash for v in before.entry_versions["ann-pref"]]
    erasure = erase(clinic, "c", ErasureTarget.of_entry("m", "ann-pref"))
    [record] = erasure.records
    assert [v["content_hash"] for v in record["versions"]] == hashes
    memory = open_app().records.get_artifact(LOCAL, "c", "memory", "m")
    assert memory.entry_status("ann-pref") == EntryStatus.ERASED
    assert [(v.text, v.content_hash) for v in memory.entry_versions["ann-pref"]] == [
        ("", h) for h in hashes]
    assert memory.current_entry("team").text == "The team meets on Mondays"
    assert open_app().records.get_source(LOCAL, "c", "task", "a").text == "Ann's visit"
    refused(clinic, "memory_entry_erased", lambda: clinic.records.revise_entry(
        LOCAL, "c", "m", "ann-pref", "preference", "back"))
    refused(clinic, "memory_entry_erased", lambda: clinic.records.reactivate_entry(
        LOCAL, "c", "m", "ann-pref"))


def test_a_memory_snapshot_stores_entry_text_sealed_and_forgets_it_with_the_entry(
        clinic: Dreaming, open_app: Callable[[], Dreaming]) -> None:
    """A Memory past its snapshot interval is loaded from a snapshot: the snapshot holds
    each entry version's text sealed under the entry's key, so erasing the entry forgets it
    there too."""
    for n in range(EventStore.snapshot_intervals[Artifact]):
        clinic.records.revise_entry(LOCAL, "c", "m", "team", "fact", f"Mondays, week {n}")
    memory = clinic.records.get_artifact(LOCAL, "c", "memory", "m")
    assert clinic.store.snapshots is not None
    [snapshot] = clinic.store.snapshots.get(memory.id, desc=True, limit=1)
    stored = clinic.store.snapshots.recorder.select_events(memory.id, desc=True, limit=1)[0]
    assert b"Ann: early mornings" not in stored.state
    assert b"Mondays, week" not in stored.state
    assert {type(v.text) for vs in snapshot.state["entry_versions"].values() for v in vs} == {str}
    erase(clinic, "c", ErasureTarget.of_entry("m", "ann-pref"))
    fresh = open_app().records.get_artifact(LOCAL, "c", "memory", "m")
    assert [v.text for v in fresh.entry_versions["ann-pref"]] == ["", ""]
    assert fresh.current_entry("team").text == f"Mondays, week {n}"


def test_loading_many_sealed_records_looks_their_keys_up_in_one_query(
        clinic: Dreaming, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that remembers none of the keys (another process wrote the records) reads a
    batch of Sources with one key query, not one per sealed value, and a destroyed key is
    still read as erased."""
    for n in range(5):
        clinic.records.record_source(LOCAL, "c", "visit", f"v{n}", text=f"visit {n}",
                                     payload={"n": n})
    erase(clinic, "c", ErasureTarget.of_source("visit", "v0"))
    ids = {source_aggregate_id("c", "visit", f"v{n}"): Source for n in range(5)}
    monkeypatch.setattr(sealing, "_REMEMBERED", OrderedDict())  # a process that knows none
    queries: list[str] = []
    original = sealing.DataKeys._rows
    monkeypatch.setattr(sealing.DataKeys, "_rows", lambda keys, statement, params: (
        queries.append(statement), original(keys, statement, params))[1])
    found = clinic.store.find_many(ids)
    assert [(found[i].text, found[i].payload) for i in ids] == [
        (None, None), *((f"visit {n}", {"n": n}) for n in range(1, 5))]
    assert len(queries) == 1  # the destroyed key is known gone from that query too
    queries.clear()
    clinic.store.find_many(ids)
    assert queries == []  # every key, and the destroyed one's absence, remembered


def test_erasing_a_subject_takes_its_sources_and_entries_only(
        clinic: Dreaming, open_app: Callable[[], Dreaming]) -> None:
    erasure = erase(clinic, "c", ErasureTarget.of_subject("ann"))
    assert sorted((r["kind"], r.get("source_id") or r.get("entry_id"))
                  for r in erasure.records) == [("memory_entry", "ann-pref"), ("source", "a")]
    fresh = open_app()
    assert fresh.records.get_source(LOCAL, "c", "task", "a").erased
    assert fresh.records.get_source(LOCAL, "c", "task", "b").text == "Bob's visit"
    assert fresh.store.keyring is not None
    assert fresh.store.keyring.exists(KeyRecord.of(source_aggregate_id("c", "task", "b")).key_id)
    assert not fresh.store.keyring.exists(
        KeyRecord.of(source_aggregate_id("c", "task", "a")).key_id)
    refused(fresh, "subject_not_found",
            lambda: erase(fresh, "c", ErasureTarget.of_subject("ann")))


def test_every_bad_erasure_is_refused_and_changes_nothing(clinic: Dreaming) -> None:
    cases: list[tuple[str, Callable[[], object]]] = [
        ("subject_not_found", lambda: erase(clinic, "c", ErasureTarget.of_subject("nobody"))),
        ("source_not_found", lambda: erase(clinic, "c", ErasureTarget.of_source("task", "z"))),
        ("memory_entry_not_found", lambda: erase(clinic, "c",
                                                 ErasureTarget.of_entry("m", "none"))),
        ("artifact_not_found", lambda: erase(clinic, "c", ErasureTarget.of_entry("x", "e"))),
        ("scope_not_found", lambda: erase(clinic, "nope", ErasureTarget.of_subject("ann"))),
        ("invalid_text", lambda: erase(clinic, "c", ErasureTarget.of_subject("ann"),
                                       reason=" ")),
        ("invalid_request", lambda: ErasureTarget.of_subject("")),
        ("invalid_request", lambda: ErasureTarget.of_subject("x" * 257)),
        ("invalid_request", lambda: ErasureTarget.of_subject("tab\there")),
    ]
    for code, command in cases:
        refused(clinic, code, command)
    erase(clinic, "c", ErasureTarget.of_source("task", "b"))
    refused(clinic, "already_erased",
            lambda: erase(clinic, "c", ErasureTarget.of_source("task", "b")))
    erase(clinic, "c", ErasureTarget.of_entry("m", "team"))
    refused(clinic, "already_erased",
            lambda: erase(clinic, "c", ErasureTarget.of_entry("m", "team")))


def test_a_record_keeps_the_subject_it_was_first_recorded_for(clinic: Dreaming) -> None:
    refused(clinic, "subject_conflict", lambda: clinic.records.record_source(
        LOCAL, "c", "task", "a", text="Ann's visit", subject="bob"))
    clinic.records.record_source(LOCAL, "c", "task", "untagged", text="x")
    refused(clinic, "subject_conflict", lambda: clinic.records.record_source(
        LOCAL, "c", "task", "untagged", text="x", subject="ann"))
    # The same subject again is the idempotent replay it always was.
    again = clinic.records.record_source(LOCAL, "c", "task", "a", text="Ann's visit",
                                         subject="ann")
    assert again.position is None


def test_only_a_deployment_administrator_erases(clinic: Dreaming,
                                                enforced_app: Dreaming) -> None:
    root = Caller("admin", admin=True)
    enforced_app.access.register_principal(root, "scope-admin")
    enforced_app.records.grant_role(root, "c", "scope-admin", "admin")
    scope_admin = Caller("scope-admin")
    refused(enforced_app, "forbidden", lambda: erase(
        enforced_app, "c", ErasureTarget.of_subject("ann"), caller=scope_admin))
    erasure = erase(enforced_app, "c", ErasureTarget.of_subject("ann"), caller=root)
    assert enforced_app.store.history(erasure.id)[0].acted_by == "admin"
    refused(enforced_app, "forbidden", lambda: enforced_app.erasures.get(
        scope_admin, "c", erasure.erasure_id))
    assert enforced_app.erasures.get(root, "c", erasure.erasure_id).records == erasure.records


def test_a_record_stored_before_sealing_cannot_be_erased_provably(
        settings: Settings, app: Dreaming) -> None:
    app.records.create_scope(LOCAL, "old")
    plain = Dreaming(env=application_env(settings), enforce_access=False,
                     store=EventStore(env=application_env(settings)), run_queues=HeldQueues)
    try:
        plain.records.record_source(LOCAL, "old", "task", "legacy", text="stored in the clear")
    finally:
        plain.close()
    assert app.records.get_source(LOCAL, "old", "task", "legacy").text == "stored in the clear"
    refused(app, "record_not_sealed",
            lambda: erase(app, "old", ErasureTarget.of_source("task", "legacy")))


def test_an_erasure_and_a_writer_racing_on_one_source_never_leave_its_text_readable(
        clinic: Dreaming, open_app: Callable[[], Dreaming]) -> None:
    writer = open_app()
    start = threading.Barrier(2)
    outcomes: dict[str, Any] = {}

    def amend() -> None:
        start.wait()
        for n in range(20):
            try:
                writer.records.amend_source(LOCAL, "c", "task", "a", text=f"amended {n}")
            except DomainError as error:
                outcomes["writer"] = error.code
                return

    def forget() -> None:
        start.wait()
        outcomes["erasure"] = erase(clinic, "c", ErasureTarget.of_source("task", "a"))

    threads = [threading.Thread(target=amend), threading.Thread(target=forget)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert outcomes.get("writer") in (None, "source_erased")
    fresh = open_app()
    source = fresh.records.get_source(LOCAL, "c", "task", "a")
    assert (source.erased, source.text) == (True, None)
    texts = [getattr(e, "text", "") for e in fresh.store.history(source.id)]
    assert all(text == "" for text in texts), texts  # no version left readable


def test_an_erasure_replays_from_its_events(clinic: Dreaming,
                                            open_app: Callable[[], Dreaming]) -> None:
    erasure = erase(clinic, "c", ErasureTarget.of_subject("bob"))
    stored = open_app().store.history(erasure.id)
    assert replay(list(stored)) == erasure
    assert open_app().store.load(erasure.id, AssertionError) == erasure


# -- the property --------------------------------------------------------------------------------

SUBJECTS = ("ann", "bob", None)
steps = st.lists(st.tuples(st.sampled_from(["source", "amend", "entry", "revise"]),
                           st.integers(0, 3), st.sampled_from(SUBJECTS)),
                 min_size=1, max_size=12)


@given(history=steps, cut=st.integers(0, 12), whom=st.sampled_from(["ann", "bob"]))
@STORED
def test_an_erasure_anywhere_in_a_history_forgets_its_records_and_nothing_else(
        open_app: Callable[[], Dreaming], history: list[tuple[str, int, str | None]], cut: int,
        whom: str) -> None:
    app, scope = open_app(), f"p-{uuid.uuid4().hex[:10]}"
    app.records.create_scope(LOCAL, scope)
    app.records.create_memory(LOCAL, scope, "m", principal="svc")
    texts: dict[tuple[str, int], str] = {}  # the model: what each record reads now
    subjects: dict[tuple[str, int], str | None] = {}
    erased: set[tuple[str, int]] = set()
    for at, (kind, n, subject) in enumerate(history):
        if at == cut:
            erased |= _erase_subject(app, scope, whom, subjects, erased)
        _apply(app, scope, kind, n, subject, at, texts, subjects, erased)
    if cut >= len(history):
        erased |= _erase_subject(app, scope, whom, subjects, erased)
    reader = open_app()  # a fresh process's view: no key remembered
    for (kind, n), text in texts.items():
        gone = (kind, n) in erased
        assert _read(reader, scope, kind, n) == (None if gone else text), (kind, n)
        stored = _stored_texts(reader, scope, kind, n)
        assert stored == ["" for _ in stored] if gone else stored[-1] == text, (kind, n)


def _erase_subject(app: Dreaming, scope: str, whom: str,
                   subjects: dict[tuple[str, int], str | None],
                   erased: set[tuple[str, int]]) -> set[tuple[str, int]]:
    mine = {record for record, subject in subjects.items()
            if subject == whom and record not in erased}
    if not mine:
        with pytest.raises(DomainError, match="no record"):
            erase(app, scope, ErasureTarget.of_subject(whom))
        return set()
    erase(app, scope, ErasureTarget.of_subject(whom))
    return mine


def _apply(app: Dreaming, scope: str, kind: str, n: int, subject: str | None, at: int,
           texts: dict[tuple[str, int], str], subjects: dict[tuple[str, int], str | None],
           erased: set[tuple[str, int]]) -> None:
    text = f"{kind} {n} at {at}"
    family = "source" if kind in ("source", "amend") else "entry"
    record = (family, n)
    try:
        if kind == "source" and record not in texts:
            app.records.record_source(LOCAL, scope, "task", str(n), text=text, subject=subject)
        elif kind == "amend" and record in texts:
            app.records.amend_source(LOCAL, scope, "task", str(n), text=text)
        elif kind == "entry" and record not in texts:
            app.records.add_entry(LOCAL, scope, "m", f"e{n}", "fact", text, subject=subject)
        elif kind == "revise" and record in texts:
            app.records.revise_entry(LOCAL, scope, "m", f"e{n}", "fact", text)
        else:
            return
    except DomainError as error:
        refusal = error
    else:
        texts[record] = text
        subjects.setdefault(record, subject)
        return
    assert record in erased, refusal  # only an erased record refuses a valid write
    assert refusal.code in ("source_erased", "memory_entry_erased")


def _stored_texts(app: Dreaming, scope: str, family: str, n: int) -> list[str]:
    """The text every stored event of the record decodes to, oldest first."""
    if family == "source":
        return [e.text for e in app.store.history(source_aggregate_id(scope, "task", str(n)))
                if hasattr(e, "text")]
    memory = app.records.get_artifact(LOCAL, scope, "memory", "m")
    return [e.text for e in app.store.history(memory.id)
            if getattr(e, "entry_id", None) == f"e{n}" and hasattr(e, "text")]


def _read(app: Dreaming, scope: str, family: str, n: int) -> str | None:
    if family == "source":
        return app.records.get_source(LOCAL, scope, "task", str(n)).text
    memory = app.records.get_artifact(LOCAL, scope, "memory", "m")
    version = memory.current_entry(f"e{n}")
    return None if memory.entry_status(f"e{n}") == EntryStatus.ERASED else version.text
