"""Review over real loopback HTTP: propose, the inbox, revise, approve or reject, knowledge
search, Skill derivation and its package, with access enforced."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from domain.access import Resource
from domain.policy import Caller
from dream_client import DreamClient
from dream_client import errors as client_errors
from dream_client.errors import ApiError
from projections.catalog import READ_MODELS
from tests.conftest import LiveApi

S = "/v1/scopes/team"
EXPERIENCE = {"situation": "a payment call timed out", "action": "retried with the same key",
              "outcome": "charged once", "lesson": "retry payments with idempotency keys"}
SKILL = {"name": "idempotent-retries", "description": "Retry payment calls safely",
         "instructions": "Send the same idempotency key on every retry.",
         "validation": ["the key is stable across retries"]}
TASK = {"source_type": "task", "source_id": "pay-1"}


@dataclass
class Team:
    """Scope ``team``: a Source, a Memory entry citing it, and one client per principal."""

    api: LiveApi
    admin: DreamClient
    carl: DreamClient  # contributor
    vera: DreamClient  # reviewer
    rita: DreamClient  # reader
    citation: dict[str, Any]

    def position(self) -> int:
        return self.api.dreaming.store.max_position()


@pytest.fixture
def team(live_api: LiveApi) -> Iterator[Team]:
    app = live_api.dreaming
    tokens = {}
    deployment_admin = Caller("admin", admin=True)
    app.records.create_scope(deployment_admin, "team")
    for name, role in (("carl", "contributor"), ("vera", "reviewer"), ("rita", "reader")):
        app.access.register_principal(deployment_admin, name)
        tokens[name] = app.access.issue_token(deployment_admin, name).value
        app.records.grant_role(deployment_admin, "team", name, role)
    clients = {name: DreamClient(live_api.base_url, token) for name, token in tokens.items()}
    admin = DreamClient(live_api.base_url, live_api.admin_token)
    admin.sources.record("team", **TASK, text="the retry charged once")
    admin.memories.create("team", memory_id="m")
    entry = admin.memories.add_entry("team", memory_id="m", entry_id="retries", kind="task_record",
                                     text="payments are retried with the same key", sources=[TASK])
    yield Team(live_api, admin, citation=entry.citation.model_dump(), **clients)
    for client in (admin, *clients.values()):
        client.close()


def propose_body(candidate_id: str, **changes: Any) -> dict[str, Any]:
    return {"candidate_id": candidate_id, "family": "experience", "proposal": EXPERIENCE,
            "reason": "seen in one payment run", "sources": [], "artifacts": [],
            "memory_citations": [], "target": None, **changes}


def test_the_review_flow_from_proposal_to_a_skill_package(team: Team) -> None:
    carl, vera, http = team.carl, team.vera, team.carl.http

    # Propose: 201 with Location; an identical proposal replays with 200 and the same body.
    body = propose_body("pay-retries", memory_citations=[team.citation])
    first = http.post(f"{S}/candidates", json=body)
    assert first.status_code == 201, first.text
    assert first.headers["location"] == f"{S}/candidates/pay-retries"
    proposed = first.json()
    assert (proposed["status"], proposed["version"], proposed["proposer"]) == (
        "pending", 1, "carl")
    assert proposed["memory_citations"] == [team.citation]
    assert proposed["sources"] == [TASK]  # the cited entry's root Source, carried directly
    assert proposed["permissions"] == {"can_revise": True, "can_approve": False,
                                       "can_reject": False}
    replay = http.post(f"{S}/candidates", json=body)
    assert replay.status_code == 200
    assert replay.json() == proposed  # the same answer, position included
    with pytest.raises(client_errors.CandidateExistsError):
        carl.candidates.propose("team", candidate_id="pay-retries", family="experience",
                                proposal=EXPERIENCE, reason="another reason",
                                memory_citations=[team.citation])

    # The inbox shows it at once when asked to wait for the proposal's position.
    page = vera.candidates.list("team", after=proposed["position"])
    assert [item.candidate_id for item in page.candidates] == ["pay-retries"]
    item = page.candidates[0]
    assert (item.family, item.status, item.version, item.proposer, item.conflict,
            item.conflict_code, item.target, item.run_id) == (
        "experience", "pending", 1, "carl", False, None, None, None)
    assert item.reason == "seen in one payment run"
    assert 0 <= item.age_seconds < 60
    assert page.next_cursor is None
    assert vera.candidates.get("team", "pay-retries").permissions.can_approve
    evidence = vera.candidates.evidence("team", "pay-retries")
    assert evidence.status == "resolved"
    assert evidence.evidence is not None
    assert {node.kind for node in evidence.evidence.nodes} == {"memory", "source"}

    # Revise (contract.md#review): omitted and null memory_citations keep them, [] clears them.
    revise = f"{S}/candidates/pay-retries/revise"
    kept = http.post(revise, json={"expected_version": 1, "reason": "clearer"}).json()
    assert (kept["version"], kept["memory_citations"], kept["reason"]) == (
        2, [team.citation], "clearer")
    kept = http.post(revise, json={"expected_version": 2, "memory_citations": None,
                                   "proposal": None, "sources": None}).json()
    assert (kept["version"], kept["memory_citations"], kept["proposal"]) == (
        3, [team.citation], EXPERIENCE)
    cleared = vera.candidates.revise("team", "pay-retries", expected_version=3,
                                     memory_citations=[])
    assert (cleared.version, cleared.memory_citations, cleared.author) == (4, [], "vera")
    assert [s.model_dump() for s in cleared.sources] == [TASK]

    # A stale version is a conflict and changes nothing.
    before = team.position()
    stale = http.post(revise, json={"expected_version": 3, "reason": "late"})
    assert (stale.status_code, stale.json()["error"]["code"]) == (409, "candidate_conflict")
    assert stale.json()["error"]["details"] == {"expected": 3, "current": 4}
    assert team.position() == before

    # The contributor cannot approve its own Candidate; a reviewer can (contract.md#review).
    with pytest.raises(client_errors.ForbiddenError) as forbidden:
        carl.candidates.approve("team", "pay-retries", expected_version=4)
    assert isinstance(forbidden.value, ApiError)
    assert forbidden.value.status == 403
    assert team.position() == before
    approved = vera.candidates.approve("team", "pay-retries", expected_version=4)
    assert (approved.status, approved.decided_by, approved.decided_version) == (
        "approved", "vera", 4)
    assert approved.result is not None
    assert approved.position is not None
    again = vera.candidates.approve("team", "pay-retries", expected_version=4)
    assert again.result == approved.result
    assert again.position is not None
    assert again.position <= approved.position
    with pytest.raises(client_errors.CandidateTerminalError):
        carl.candidates.revise("team", "pay-retries", expected_version=4, reason="too late")
    experience = team.admin.artifacts.get_revision(
        "team", family="experience", artifact_id=approved.result.artifact_id, revision=1)
    assert experience.provenance["approver"] == "vera"
    assert experience.provenance["proposer"] == "carl"

    # A pending and a rejected Candidate never reach knowledge; the approved one does.
    carl.candidates.propose("team", candidate_id="pending-one", family="experience",
                            proposal={**EXPERIENCE, "lesson": "pendingword idempotency"},
                            reason="r", sources=[TASK])
    carl.candidates.propose("team", candidate_id="rejected-one", family="experience",
                            proposal={**EXPERIENCE, "lesson": "rejectedword idempotency"},
                            reason="r", sources=[TASK])
    rejected = vera.candidates.reject("team", "rejected-one", expected_version=1,
                                      reason="not general")
    assert (rejected.status, rejected.decision_reason) == ("rejected", "not general")
    found = team.rita.knowledge.search("team", "idempotency", after=rejected.position)
    assert [i.ref for i in found.items] == [approved.result]
    assert found.items[0].candidate_id == "pay-retries"
    assert found.items[0].lineage.memory_citations == []  # cleared at version 4
    for word in ("pendingword", "rejectedword"):
        assert team.rita.knowledge.search("team", word).items == []
    assert [i.ref for i in team.rita.knowledge.search("team").items] == [approved.result]
    inbox = vera.candidates.list("team", status="all", after=rejected.position)
    assert {i.candidate_id: i.status for i in inbox.candidates} == {
        "pay-retries": "approved", "pending-one": "pending", "rejected-one": "rejected"}
    assert [i.candidate_id for i in vera.candidates.list("team").candidates] == ["pending-one"]

    # Derive a Skill from the approved Experience, approve it, download its package.
    skill = carl.candidates.propose("team", candidate_id="pay-skill", family="skill",
                                    proposal=SKILL, reason="generalises the lesson",
                                    artifacts=[approved.result])
    done = vera.candidates.approve("team", "pay-skill", expected_version=skill.version)
    assert done.result is not None
    assert done.result.family == "skill"
    package = team.rita.knowledge.skill_package("team", artifact_id=done.result.artifact_id,
                                                revision=done.result.revision)
    assert package.digest == "sha256:" + hashlib.sha256(
        package.skill_md.encode("utf-8")).hexdigest()
    assert "name: idempotent-retries" in package.skill_md
    path = (f"{S}/artifacts/skill/{done.result.artifact_id}/revisions/"
            f"{done.result.revision}/package/SKILL.md")
    download = team.rita.http.get(path)
    assert download.status_code == 200
    assert download.headers["content-type"] == "text/markdown; charset=utf-8"
    assert download.headers["content-disposition"] == 'attachment; filename="SKILL.md"'
    assert download.headers["etag"] == f'"{package.digest}"'
    assert download.headers["digest"] == "sha-256=" + base64.b64encode(
        hashlib.sha256(download.content).digest()).decode()
    assert download.text == package.skill_md
    file = team.rita.knowledge.download_skill_md("team", artifact_id=done.result.artifact_id,
                                                 revision=done.result.revision)
    assert (file.text, file.digest) == (package.skill_md, package.digest)
    skills = team.rita.knowledge.search("team", "retry", family="skill", after=done.position)
    assert [(i.ref, i.package_digest) for i in skills.items] == [(done.result, package.digest)]


def test_knowledge_hides_what_the_caller_may_not_read(team: Team) -> None:
    made = team.carl.candidates.propose("team", candidate_id="c", family="experience",
                                        proposal=EXPERIENCE, reason="r", sources=[TASK])
    approved = team.vera.candidates.approve("team", "c", expected_version=made.version)
    assert approved.result is not None
    result = approved.result
    team.admin.access.revoke_read("team", principal="rita",
                                  resource=Resource.artifact(result.family, result.artifact_id))
    assert team.vera.knowledge.search("team", "idempotency", after=approved.position).items
    assert team.rita.knowledge.search("team", "idempotency").items == []
    assert team.rita.knowledge.search("team").items == []
    # A Source the reader may not read makes the evidence view say so, with its code.
    team.admin.access.revoke_read("team", principal="rita", resource=Resource.source(**TASK))
    view = team.rita.candidates.evidence("team", "c")
    assert (view.status, view.evidence) == ("unavailable", None)
    assert view.error is not None
    assert view.error.code == "access_revoked"


@pytest.mark.parametrize(("route", "body", "status", "code"), [
    ("candidates", propose_body("x", family="prompt", sources=[TASK]), 422,
     "invalid_candidate"),
    ("candidates", propose_body("x", proposal={**EXPERIENCE, "colour": "red"}, sources=[TASK]), 422,
     "invalid_content"),
    ("candidates", propose_body("x"), 422, "evidence_limit_exceeded"),
    ("candidates", propose_body("x", reason="", sources=[TASK]), 422, "invalid_text"),
    ("candidates", propose_body("bad/id", sources=[TASK]), 422, "invalid_identifier"),
    ("candidates", {**propose_body("x", sources=[TASK]), "colour": "red"}, 422,
     "invalid_request"),
    ("candidates", propose_body("x", sources=[{"source_type": "task", "source_id": "nope"}]),
     404, "reference_not_found"),
    ("candidates", propose_body("x", family="skill", proposal=SKILL,
                                memory_citations=["citation"]), 422, "invalid_candidate"),
    ("candidates/open/revise", {"reason": "no version"}, 422, "invalid_request"),
    ("candidates/open/revise", {"expected_version": 1, "memory_citations": [{}]}, 422,
     "invalid_request"),
    ("candidates/open/revise", {"expected_version": 1, "sources": [], "memory_citations": []},
     422, "evidence_limit_exceeded"),
    ("candidates/open/revise", {"expected_version": 1, "target": {
        "family": "experience", "artifact_id": "other", "revision": 1}}, 422,
     "invalid_candidate"),
    ("candidates/open/revise", {"expected_version": 2}, 409, "candidate_conflict"),
    ("candidates/open/approve", {"expected_version": 0}, 409, "candidate_conflict"),
    ("candidates/open/reject", {"expected_version": 1, "reason": "  "}, 422, "invalid_text"),
    ("candidates/open/reject", {"expected_version": 1}, 422, "invalid_request"),
    ("candidates/ghost/approve", {"expected_version": 1}, 404, "candidate_not_found"),
])
def test_bad_review_requests_have_stable_codes_and_change_nothing(
        team: Team, route: str, body: dict[str, Any], status: int, code: str) -> None:
    if "memory_citations" in body and body["memory_citations"] == ["citation"]:
        body = {**body, "memory_citations": [team.citation]}
    team.carl.candidates.propose("team", candidate_id="open", family="experience",
                                 proposal=EXPERIENCE, reason="r", sources=[TASK])
    before = team.position()
    response = team.vera.http.post(f"{S}/{route}", json=body)
    assert (response.status_code, response.json()["error"]["code"]) == (status, code), (
        response.text)
    assert team.position() == before
    assert team.vera.candidates.get("team", "open").version == 1


@pytest.mark.parametrize(("path", "code"), [
    ("candidates?status=done", "invalid_request"),
    ("candidates?family=prompt", "invalid_request"),
    ("candidates?limit=0", "invalid_request"),
    ("candidates?limit=101", "invalid_request"),
    ("candidates?cursor=not-a-cursor", "invalid_cursor"),
    ("candidates?after=999999", "invalid_request"),
    ("knowledge?q=", "invalid_request"),
    ("knowledge?q=%21%21%21", "invalid_request"),
    ("knowledge?limit=101", "invalid_request"),
    ("knowledge?family=memory", "invalid_request"),
])
def test_bad_read_queries_are_refused(team: Team, path: str, code: str) -> None:
    response = team.rita.http.get(f"{S}/{path}")
    assert (response.status_code, response.json()["error"]["code"]) == (422, code)


def test_inbox_pages_by_candidate_id(team: Team) -> None:
    positions = [team.carl.candidates.propose(
        "team", candidate_id=f"c{i}", family="experience", proposal=EXPERIENCE, reason="r",
        sources=[TASK]).position for i in range(5)]
    last = max(p for p in positions if p is not None)
    seen: list[str] = []
    cursor = None
    while True:
        page = team.rita.candidates.list("team", limit=2, cursor=cursor, after=last)
        seen += [item.candidate_id for item in page.candidates]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == ["c0", "c1", "c2", "c3", "c4"]
    assert team.rita.candidates.list("team", family="skill").candidates == []


def test_packages_exist_only_for_skills(team: Team) -> None:
    team.admin.artifacts.create("team", family="experience", artifact_id="x",
                                content=EXPERIENCE, lineage={"sources": [TASK]})
    for path in ("artifacts/skill/x/revisions/1/package",
                 "artifacts/skill/x/revisions/1/package/SKILL.md"):
        response = team.rita.http.get(f"{S}/{path}")
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "artifact_not_found"


def test_health_reports_every_read_model(team: Team) -> None:
    health = team.admin.health()
    assert set(health.projections) == {spec.name for spec in READ_MODELS}
    assert health.status == "ok"
    assert all(view.dead_letters == 0 for view in health.projections.values())


def test_refusals_are_typed_over_http(team: Team) -> None:
    with pytest.raises(client_errors.CandidateNotFoundError) as missing:
        team.rita.candidates.get("team", "ghost")
    assert isinstance(missing.value, ApiError)
    assert missing.value.status == 404
    with httpx.Client(base_url=team.api.base_url) as anonymous:
        assert anonymous.get(f"{S}/candidates").status_code == 401
