"""Audit over real loopback HTTP and the real ``dream`` command: history with who acted, time
travel, the trace of approved knowledge, dead letters surfacing in /healthz and /metrics, and
``dream audit replay`` exiting 1 on a tampered view."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from adapters.settings import Settings
from adapters.store.view_batches import open_view
from domain.policy import Caller
from domain.refs import ArtifactRef
from dream_client import DreamClient
from dream_client.errors import InvalidRequestError
from projections.review_inbox import REVIEW_INBOX
from tests.conftest import LiveApi
from tests.projection_support import tamper
from tests.test_cli import dream

EXPERIENCE = {"situation": "a payment call timed out", "action": "retried with the same key",
              "outcome": "charged once", "lesson": "retry payments with idempotency keys"}
TASK = {"source_type": "task", "source_id": "pay-1"}


@pytest.fixture
def clients(live_api: LiveApi) -> Iterator[tuple[DreamClient, DreamClient, DreamClient]]:
    """The deployment admin, contributor carl and reviewer vera in scope ``team``."""
    app = live_api.dreaming
    deployment_admin = Caller("admin", admin=True)
    app.records.create_scope(deployment_admin, "team")
    tokens = {}
    for name, role in (("carl", "contributor"), ("vera", "reviewer")):
        app.access.register_principal(deployment_admin, name)
        tokens[name] = app.access.issue_token(deployment_admin, name).value
        app.records.grant_role(deployment_admin, "team", name, role)
    admin = DreamClient(live_api.base_url, live_api.admin_token)
    carl = DreamClient(live_api.base_url, tokens["carl"])
    vera = DreamClient(live_api.base_url, tokens["vera"])
    yield admin, carl, vera
    for client in (admin, carl, vera):
        client.close()


def approved_lesson(carl: DreamClient, vera: DreamClient) -> ArtifactRef:
    carl.sources.record("team", **TASK, text="the retry charged once")
    carl.candidates.propose("team", candidate_id="c-1", family="experience",
                            proposal=EXPERIENCE, reason="seen in pay-1", sources=[TASK])
    approved = vera.candidates.approve("team", "c-1", expected_version=1)
    assert approved.result is not None
    return ArtifactRef.from_dict(approved.result.model_dump())


def test_history_names_who_acted_and_travels_back_in_time(
        clients: tuple[DreamClient, DreamClient, DreamClient]) -> None:
    _, carl, vera = clients
    carl.sources.record("team", **TASK, text="first account")
    carl.candidates.propose("team", candidate_id="c-1", family="experience",
                            proposal=EXPERIENCE, reason="seen once", sources=[TASK])
    vera.candidates.reject("team", "c-1", expected_version=1, reason="too specific")

    history = vera.audit.history("team", "candidate", "c-1")
    assert [(e.type, e.principal) for e in history.events] == [
        ("Candidate.Proposed", "carl"), ("Candidate.Rejected", "vera")]
    assert history.events[1].payload["reason"] == "too specific"
    assert history.state is None

    back = vera.audit.history("team", "candidate", "c-1", as_of_version=1)
    assert (back.current_version, back.as_of_version, len(back.events)) == (2, 1, 1)
    assert back.state is not None
    assert back.state["status"] == "pending"
    rejected = vera.audit.history("team", "candidate", "c-1", as_of_version=2)
    assert rejected.state["status"] == "rejected"
    source = carl.audit.history("team", "source", "task/pay-1")
    assert source.events[0].payload["text"] == "first account"
    with pytest.raises(InvalidRequestError):
        vera.audit.history("team", "candidate", "c-1", as_of_version=3)


def test_the_trace_names_the_approval_and_the_exact_evidence(
        clients: tuple[DreamClient, DreamClient, DreamClient]) -> None:
    _, carl, vera = clients
    lesson = approved_lesson(carl, vera)
    trace = carl.audit.trace("team", lesson)
    assert trace.revision["provenance"]["approver"] == "vera"
    assert trace.candidate is not None
    assert (trace.candidate["proposer"], trace.candidate["approved_by"]) == ("carl", "vera")
    assert trace.run is None  # proposed by hand, not by a Dream run
    [source] = trace.evidence["sources"]
    assert source["source_id"] == "pay-1"
    assert source["available_now"] is True
    assert source["content_hash"]


def test_a_poison_event_is_a_dead_letter_that_health_and_metrics_report(
        live_api: LiveApi, settings: Settings,
        clients: tuple[DreamClient, DreamClient, DreamClient]) -> None:
    admin, carl, vera = clients
    assert admin.health().status == "ok"
    carl.sources.record("team", **TASK, text="the retry charged once")
    proposed = carl.candidates.propose("team", candidate_id="c-1", family="experience",
                                       proposal=EXPERIENCE, reason="seen", sources=[TASK])
    carl.candidates.list("team", after=proposed.position)  # the inbox has the row
    view = open_view(REVIEW_INBOX, settings)
    try:
        with view._writing() as cursor:  # the row vanishes behind the projection's back
            cursor.execute(f"DELETE FROM {view.table()}", {})
    finally:
        view.close()
    rejected = vera.candidates.reject("team", "c-1", expected_version=1, reason="no")
    carl.candidates.list("team", after=rejected.position)  # applied: as a dead letter

    health = admin.health()
    assert health.status == "degraded"
    assert health.projections["review_inbox"].dead_letters == 1
    assert health.projections["runs"].dead_letters == 0
    metrics = admin.metrics()
    assert 'dream_read_model_dead_letters{projection="review_inbox"} 1' in metrics
    assert f"dream_store_position {live_api.dreaming.store.max_position()}" in metrics
    assert "# TYPE dream_read_model_lag gauge" in metrics


def test_dream_audit_replay_exits_1_on_a_tampered_view_and_traces_from_the_cli(
        live_api: LiveApi, settings: Settings,
        clients: tuple[DreamClient, DreamClient, DreamClient]) -> None:
    _, carl, vera = clients
    lesson = approved_lesson(carl, vera)
    carl.knowledge.search("team", "idempotency", after=live_api.dreaming.store.max_position())
    store = (["--database-url", settings.database_url] if settings.database_url
             else ["--data-dir", str(settings.data_dir)])

    clean = dream("audit", "replay", *store, "--json", "--processes", "2")
    assert clean.returncode == 0, clean.stderr
    report = json.loads(clean.stdout)
    assert report["equal"] is True
    assert report["events"] == max(p["position"] for p in report["projections"]) > 0
    assert {p["projection"] for p in report["projections"]} >= {"knowledge", "review_inbox"}

    tamper(settings, REVIEW_INBOX, "UPDATE {table} SET proposer = 'mallory'")
    tampered = dream("audit", "replay", *store, "--processes", "3")
    assert tampered.returncode == 1
    assert "8 read models in" in tampered.stdout
    assert "3 processes" in tampered.stdout
    assert "DIFFERENCES FOUND" in tampered.stdout
    assert "mallory" in tampered.stdout  # the first differing row is shown

    traced = dream("audit", "trace", f"experience/{lesson.artifact_id}@1", "--scope", "team",
                   "--url", live_api.base_url, "--token", live_api.admin_token)
    assert traced.returncode == 0, traced.stderr
    assert "approved by vera" in traced.stdout
    assert "source task/pay-1" in traced.stdout

    history = dream("audit", "history", "candidate", "c-1", "--scope", "team", "--url",
                    live_api.base_url, "--token", live_api.admin_token, "--as-of-version", "1")
    assert history.returncode == 0, history.stderr
    assert "Candidate.Proposed" in history.stdout
    assert "carl" in history.stdout
    assert "Candidate.Approved" not in history.stdout  # only the events up to version 1
    assert '"status": "pending"' in history.stdout


def test_impact_of_a_source_reaches_everything_built_on_it_that_the_caller_may_read(
        live_api: LiveApi, clients: tuple[DreamClient, DreamClient, DreamClient]) -> None:
    admin, carl, vera = clients
    carl.sources.record("team", **TASK, text="the retry charged once")
    carl.memories.create("team", memory_id="m")
    entry = carl.memories.add_entry("team", memory_id="m", entry_id="retries", kind="task_record",
                                    text="payments are retried with the same key", sources=[TASK])
    citation = entry.citation.model_dump()
    carl.candidates.propose("team", candidate_id="c-1", family="experience",
                            proposal=EXPERIENCE, reason="seen", memory_citations=[citation])
    approved = vera.candidates.approve("team", "c-1", expected_version=1)
    assert approved.result is not None
    lesson = ArtifactRef.from_dict(approved.result.model_dump())

    impact = carl.audit.impact("team", "source", "task/pay-1", after=approved.position)
    found = {(d.kind, d.key): d.depth for d in impact.dependents}
    entry_key = f"m/retries@{entry.entry_version_id}"
    lesson_key = f"experience/{lesson.artifact_id}@1"
    assert found[("entry_version", entry_key)] == 1
    assert found[("candidate_version", "c-1@1")] == 1  # its Sources include the root
    assert found[("artifact_revision", lesson_key)] == 1
    assert impact.hidden == 0

    admin.access.revoke_read("team", principal="vera",
                             resource={"kind": "artifact", "family": "experience",
                                       "artifact_id": lesson.artifact_id})
    seen_by_vera = vera.audit.impact("team", "source", "task/pay-1")
    assert ("artifact_revision", lesson_key) not in {(d.kind, d.key)
                                                     for d in seen_by_vera.dependents}
    assert seen_by_vera.hidden == 1
    with pytest.raises(InvalidRequestError):
        carl.audit.impact("team", "artifact_revision", "no-slash-or-at")
