"""Auditors replay history: every aggregate's events with who acted, any aggregate as of any
version, the provenance trace of approved knowledge, and replay verification of every read
model against the event store — on a real SQLite file and a real PostgreSQL."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from adapters.cli.demo import run_demo
from adapters.settings import Settings
from adapters.store.persistence import open_dreaming
from adapters.store.projection_runtime import start_projection
from adapters.store.replay_verification import verify
from adapters.store.view_batches import open_view, rebuild
from application.audit import replay, state_of
from application.bootstrap import Dreaming
from domain.access import Resource
from domain.artifact import Artifact
from domain.errors import (
    AuditNotFoundError,
    ForbiddenError,
    InvalidRequestError,
    ScopeNotFoundError,
)
from domain.policy import LOCAL, Caller
from domain.refs import ArtifactRef, Lineage, SourceRef
from projections.catalog import READ_MODELS
from projections.knowledge import KNOWLEDGE
from projections.review_inbox import REVIEW_INBOX
from tests.audit_workload import WorkloadRunner
from tests.projection_support import tamper

ALICE, BOB = Caller("alice"), Caller("bob")
EXPERIENCE = {"situation": "s", "action": "a", "outcome": "o", "lesson": "l"}


def catch_up_every_read_model(settings: Settings) -> None:
    for spec in READ_MODELS:
        with start_projection(spec, settings) as running:
            running.catch_up(timeout=120)


# -- replay verification ---------------------------------------------------------------------


@hypothesis_settings(max_examples=1, deadline=None, database=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture,
                                            HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_replay_verification_passes_on_a_random_workload_and_finds_a_corrupted_row(
        seed: int, settings: Settings, open_app: Callable[[], Dreaming]) -> None:
    app = open_app()
    done = WorkloadRunner(app, random.Random(seed), scopes=20).run(commands=2_000)
    assert sum(done.accepted.values()) > 1_000  # both kinds happened
    assert done.refused
    catch_up_every_read_model(settings)

    report = verify(settings, READ_MODELS)
    assert [c.projection for c in report] == [spec.name for spec in READ_MODELS]
    assert all(c.equal for c in report), [t for c in report for t in c.tables if not t.equal]
    assert all(c.position == app.store.max_position() for c in report)
    assert sum(t.live_rows for t in report[1].tables) > 0  # the inbox is not trivially empty

    # An auditor's check is only worth something if it can fail: tamper with one inbox row.
    inbox = next(c for c in report if c.projection == REVIEW_INBOX.name)
    assert inbox.tables[0].live_rows > 0
    tamper(settings, REVIEW_INBOX, "UPDATE {table} SET reason = 'tampered' WHERE candidate_id = "
           "(SELECT MIN(candidate_id) FROM {table})")
    [tampered] = verify(settings, [REVIEW_INBOX])
    assert not tampered.equal
    [main] = [t for t in tampered.tables if not t.equal]
    assert main.table == "main"
    assert main.live_rows == main.replayed_rows
    assert [row["reason"] for row in main.only_live] == ["tampered"]
    assert main.only_replayed[0]["candidate_id"] == main.only_live[0]["candidate_id"]


# -- time travel -------------------------------------------------------------------------------


def test_any_aggregate_as_of_any_version_equals_folding_its_first_events(
        settings: Settings, app: Dreaming) -> None:
    rng = random.Random(11)
    WorkloadRunner(app, rng, scopes=3).run(commands=600)
    originators = sorted({n.originator_id for n in app.store.recorder.select_notifications(
        start=1, limit=100_000)}, key=str)
    checked = 0
    for aggregate_id in rng.sample(originators, min(60, len(originators))):
        events = list(app.store.history(aggregate_id))
        for version in {1, len(events), rng.randint(1, len(events))}:
            as_of = app.store.repository.get(aggregate_id, version=version)  # snapshots may apply
            folded = replay(events[:version])
            assert folded is not None
            assert state_of(as_of) == state_of(folded)
            checked += 1
    assert checked > 60

    # The Memory has snapshots (every 50 events): time travel across them stays exact.
    memory = app.records.get_artifact(LOCAL, "scope-00", "memory", "notes")
    assert memory.version > 50
    for version in (49, 50, 51, memory.version):
        state = app.audit.audit_state(LOCAL, "scope-00", "artifact", "memory/notes", version)
        events = list(app.store.history(memory.id))
        assert state.state == state_of(replay(events[:version]))  # type: ignore[arg-type]
        assert state.current_version == memory.version


def test_as_of_version_outside_the_history_is_refused(app: Dreaming) -> None:
    app.records.create_scope(LOCAL, "s")
    app.records.record_source(LOCAL, "s", "task", "t-1", text="ran it")
    for bad in (0, 2, -1):
        with pytest.raises(InvalidRequestError) as refused:
            app.audit.audit_state(LOCAL, "s", "source", "task/t-1", bad)
        assert refused.value.details["field"] == "as_of_version"
    with pytest.raises(AuditNotFoundError):
        app.audit.audit_history(LOCAL, "s", "source", "task/nope")
    with pytest.raises(InvalidRequestError):
        app.audit.audit_history(LOCAL, "s", "widget", "x")
    with pytest.raises(InvalidRequestError):
        app.audit.audit_history(LOCAL, "s", "artifact", "no-slash")


# -- history and who acted ----------------------------------------------------------------------


@pytest.fixture
def enforced(settings: Settings, tmp_path: Path) -> Dreaming:
    app = open_dreaming(settings.model_copy(update={"access": "enforced"}))
    admin = Caller("admin", admin=True)
    app.records.create_scope(admin, "team")
    for name, role in (("alice", "contributor"), ("bob", "reader")):
        app.access.register_principal(admin, name)
        app.records.grant_role(admin, "team", name, role)
    return app


def test_history_names_who_acted_and_is_read_like_the_aggregate(enforced: Dreaming) -> None:
    app = enforced
    app.records.record_source(ALICE, "team", "task", "t-1", text="first")
    app.records.amend_source(ALICE, "team", "task", "t-1", text="second")
    history = app.audit.audit_history(ALICE, "team", "source", "task/t-1")
    assert [(e.type, e.version, e.principal) for e in history] == [
        ("Source.Recorded", 1, "alice"), ("Source.Amended", 2, "alice")]
    assert history[1].payload["text"] == "second"
    assert history[0].time <= history[1].time

    # a reader may read the Source, so its history too
    assert len(app.audit.audit_history(BOB, "team", "source", "task/t-1")) == 2
    with pytest.raises(ForbiddenError):  # roles and grants: administrators only
        app.audit.audit_history(BOB, "team", "scope", "team")
    app.records.revoke_read(Caller("admin", admin=True), "team", "bob",
                            Resource.source("task", "t-1"))
    scope_history = app.audit.audit_history(Caller("admin", admin=True), "team", "scope", "team")
    assert scope_history[-1].principal == "admin"
    with pytest.raises(ForbiddenError):
        app.audit.audit_history(BOB, "team", "source", "task/t-1")
    with pytest.raises(ScopeNotFoundError):
        app.audit.audit_history(Caller("mallory"), "team", "source", "task/t-1")


# -- trace --------------------------------------------------------------------------------------


def test_the_trace_of_the_demos_knowledge_reaches_exact_entry_versions(
        settings: Settings, app: Dreaming) -> None:
    report = run_demo(app, settings, "demo", lambda _: None)
    experience = ArtifactRef.from_dict(report["approved"]["experience"]["ref"])
    skill = ArtifactRef.from_dict(report["approved"]["skill"]["ref"])
    refine_run, _, skill_run = report["dreams"]

    trace = app.audit.trace(LOCAL, "demo", experience)
    candidate, run = trace["candidate"], trace["run"]
    assert trace["revision"]["provenance"]["candidate_id"] == candidate["candidate_id"]
    assert candidate["approved_by"] == "local"
    assert candidate["approved_at"] is not None
    assert run["run_id"] == refine_run["run_id"]
    assert run["requester"] == "local"
    assert run["model_config_id"] == refine_run["model_config_id"]
    assert run["usage"]["model_calls"] == 1
    assert run["prompt_version"]
    stored_run = app.runs.get_dream(LOCAL, "demo", run["run_id"])
    assert trace["manifest"]["digest"] == run["manifest_digest"] == stored_run.manifest_digest
    # The exact entry version the Experience cites, with the content hash stored for it.
    [cited] = trace["evidence"]["memory_entries"]
    memory = app.records.get_artifact(LOCAL, "demo", "memory", "team-notes")
    version = memory.entry_version(cited["entry_id"], cited["entry_version_id"])
    assert cited["content_hash"] == version.content_hash
    assert cited["active_now"] is True
    sources = {s["source_id"]: s for s in trace["evidence"]["sources"]}
    assert set(sources) == {"deploy-42", "deploy-43"}
    assert all(s["available_now"] and s["content_hash"] for s in sources.values())
    manifest_entries = trace["manifest"]["evidence"]["memory_entries"]
    assert {e["entry_version_id"] for e in manifest_entries} >= {cited["entry_version_id"]}

    # The Skill's chain goes through its own run to the Experience's entry versions.
    skill_trace = app.audit.trace(LOCAL, "demo", skill)
    assert skill_trace["run"]["run_id"] == skill_run["run_id"]
    assert skill_trace["run"]["operation"] == "derive_skill"
    skill_entries = skill_trace["manifest"]["evidence"]["memory_entries"]
    assert cited["entry_version_id"] in {e["entry_version_id"] for e in skill_entries}

    # Status "now" follows the store: retire the entry and the trace says so.
    app.records.deactivate_entry(LOCAL, "demo", "team-notes", cited["entry_id"],
                                 reason="superseded")
    [after] = app.audit.trace(LOCAL, "demo", experience)["evidence"]["memory_entries"]
    assert (after["active_now"], after["status_now"]) == (False, "inactive")
    assert after["content_hash"] == cited["content_hash"]  # what was cited never changes


def test_the_demos_automatic_window_moves_the_cursor_and_every_view_replays_equal(
        settings: Settings, app: Dreaming) -> None:
    auto = run_demo(app, settings, "demo", lambda _: None)["automatic_dreaming"]
    window = auto["admitted"]
    state = app.auto.state_of("demo")  # the write model, not the report
    assert (state.cursor, state.window) == (window["end"], None)
    [run_id] = window["run_ids"]
    run = app.runs.get_dream(LOCAL, "demo", run_id)
    assert (run.trigger, run.idempotency_key) == ("automatic", window["work_key"])
    new = {SourceRef("task", source["source_id"]) for source in auto["new_sources"]}
    assert new <= set(run.request.sources)
    assert all(window["after"] < source["position"] <= window["end"]
               for source in auto["new_sources"])
    assert run.candidate is not None
    candidate = app.review.get_candidate(LOCAL, "demo", run.candidate.candidate_id).candidate
    assert candidate.status == "pending"
    catch_up_every_read_model(settings)
    report = verify(settings, READ_MODELS)
    assert "auto_records" in {c.projection for c in report}
    assert all(c.equal for c in report), [t for c in report for t in c.tables if not t.equal]


def test_a_poison_event_is_the_same_dead_letter_live_rebuilt_and_replayed(
        settings: Settings, app: Dreaming) -> None:
    """Rebuilds and replays apply events in fast batches; a batch with a failing event is
    redone an event per savepoint, so the view ends exactly as the live one does."""
    app.records.create_scope(LOCAL, "s")
    lineage = Lineage(sources=(SourceRef("task", "t-1"),))

    def approved(artifact_id: str, provenance: dict[str, Any]) -> int | None:
        return app.store.commit(Artifact.create("s", "experience", artifact_id, EXPERIENCE, lineage,
                                                provenance))

    review = {"kind": "review", "candidate_id": "c", "candidate_version": 1,
              "proposer": "p", "approver": "a", "run_id": None}
    approved("good-1", review)
    poison = approved("poison", {"kind": "review"})  # approved, but says by whom nowhere
    approved("good-2", review)
    with start_projection(KNOWLEDGE, settings) as live:
        live.catch_up()
        [letter] = live.view.dead_letters()
        assert (letter.notification_id, letter.error_type) == (poison, "ValueError")
        assert live.view.count("s") == 2

    [verified] = verify(settings, [KNOWLEDGE])
    assert verified.equal  # the replay hit the same dead letter, and applied the rest

    assert rebuild(KNOWLEDGE, settings) == app.store.max_position()
    view = open_view(KNOWLEDGE, settings)
    try:
        assert [d.notification_id for d in view.dead_letters()] == [poison]
        assert view.count("s") == 2
    finally:
        view.close()
