"""Authorisation matrix of the HTTP API: every route x every caller situation.

``MATRIX`` below *is* the access policy, written as data: one row per route (some routes twice,
against a resource with a per-resource grant or revocation), one expected status per caller
situation. Every refused request must leave the event store untouched; every accepted write
must move it forward; a read never writes.

Situations (``SITUATIONS``): no token, a bad token, a revoked token; an outsider; a principal
with a role in another scope only; reader, contributor, reviewer and scope admin (role "admin"
in the scope); the deployment admin (bootstrap token); a reader and a contributor whose read of
one Source and one Artifact (and one Skill) is revoked; an outsider granted the read of one
Artifact.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import httpx
import pytest
from starlette.routing import Match

from adapters.http.routes import ops, v1
from adapters.http.routes.webhooks import webhooks_router
from application.bootstrap import Dreaming
from application.erasure import ErasureTarget
from domain.access import Resource
from domain.dream_request import DreamRequest
from domain.policy import Caller
from domain.refs import ArtifactRef, Lineage, SourceRef
from tests.conftest import LiveApi
from tests.http_routes import api_routes

ADMIN = Caller("admin", admin=True)
SCOPE = "team"
OTHER_SCOPE = "elsewhere"
EXPERIENCE = {"situation": "s", "action": "a", "outcome": "o", "lesson": "l"}
HIDDEN_SOURCE = ("task", "hidden")  # read revoked for reader_revoked and contributor_revoked
HIDDEN_ARTIFACT = ("experience", "hidden")  # likewise
GRANTED_ARTIFACT = ("experience", "granted")  # read granted to granted_outsider
HIDDEN_SKILL = ("skill", "hidden")  # read revoked like HIDDEN_ARTIFACT
SKILL = {"name": "pin-images", "description": "Pin images", "instructions": "Pin by digest.",
         "validation": ["the tag is a digest"]}
PROPOSER = "carl"  # the contributor, who proposes the candidates review rows act on

# Caller situation -> (principal, role in SCOPE, role in OTHER_SCOPE); None: no principal.
SITUATIONS: dict[str, tuple[str, str | None, str | None] | None] = {
    "anonymous": None,
    "bad_token": None,
    "revoked_token": ("ghost", "admin", None),  # even a scope admin, once its token is revoked
    "outsider": ("olga", None, None),
    "other_scope": ("otto", None, "admin"),
    "reader": ("rita", "reader", None),
    "reader_revoked": ("rory", "reader", None),
    "granted_outsider": ("gina", None, None),
    "contributor": ("carl", "contributor", None),
    "contributor_revoked": ("cora", "contributor", None),
    "reviewer": ("vera", "reviewer", None),
    "scope_admin": ("sam", "admin", None),
    "deployment_admin": None,
}
ERROR_CODES = {401: "unauthorized", 403: "forbidden", 404: "scope_not_found"}

# -- the policy, as data -------------------------------------------------------------------------

NO_VALID_TOKEN = {"anonymous": 401, "bad_token": 401, "revoked_token": 401}
# No role and no grant in SCOPE: the scope looks absent, whether or not the resource exists.
SCOPE_INVISIBLE = {"outsider": 404, "other_scope": 404}


def read(ok: int = 200, **overrides: int) -> dict[str, int]:
    """READ: every role; an outsider's lone read grant acknowledges the scope (403, not 404)."""
    return {**NO_VALID_TOKEN, **SCOPE_INVISIBLE, "granted_outsider": 403,
            "reader": ok, "reader_revoked": ok, "contributor": ok, "contributor_revoked": ok,
            "reviewer": ok, "scope_admin": ok, "deployment_admin": ok, **overrides}


def contribute(ok: int, **overrides: int) -> dict[str, int]:
    """CONTRIBUTE: contributor and admin roles, and the deployment admin."""
    return {**NO_VALID_TOKEN, **SCOPE_INVISIBLE, "granted_outsider": 403,
            "reader": 403, "reader_revoked": 403, "contributor": ok, "contributor_revoked": ok,
            "reviewer": 403, "scope_admin": ok, "deployment_admin": ok, **overrides}


def administer(ok: int = 200) -> dict[str, int]:
    """ADMINISTER: the scope's admin role and the deployment admin only."""
    return {**NO_VALID_TOKEN, **SCOPE_INVISIBLE, "granted_outsider": 403,
            "reader": 403, "reader_revoked": 403, "contributor": 403, "contributor_revoked": 403,
            "reviewer": 403, "scope_admin": ok, "deployment_admin": ok}


def review(ok: int = 200, **overrides: int) -> dict[str, int]:
    """REVIEW: reviewer and admin roles, and the deployment admin (a contributor may not
    approve, not even its own Candidate)."""
    return {**NO_VALID_TOKEN, **SCOPE_INVISIBLE, "granted_outsider": 403,
            "reader": 403, "reader_revoked": 403, "contributor": 403, "contributor_revoked": 403,
            "reviewer": ok, "scope_admin": ok, "deployment_admin": ok, **overrides}


def deployment_admin_only(ok: int) -> dict[str, int]:
    """Creating scopes needs the deployment admin; scope roles count for nothing."""
    return {**NO_VALID_TOKEN, **{s: 403 for s in SITUATIONS if s not in NO_VALID_TOKEN},
            "deployment_admin": ok}


def everyone(status: int) -> dict[str, int]:
    return dict.fromkeys(SITUATIONS, status)


HIDDEN_READ = {"reader_revoked": 403, "contributor_revoked": 403}
GRANTED_READ = {"granted_outsider": 200}


# -- routes: each builds one request, preparing what it needs as the deployment admin ---------

@dataclass(frozen=True)
class World:
    app: Dreaming
    citation: dict[str, Any]  # a MemoryCitation of memory "m", entry "cited"
    run_id: str  # a Dream run admitted by the deployment admin
    candidate_id: str  # a pending Candidate proposed by the contributor
    hidden_candidate_id: str  # one whose evidence includes HIDDEN_SOURCE
    webhook_id: str = ""  # a subscription of SCOPE (its secret kept nowhere)


Request = tuple[str, str, dict[str, Any] | None]  # method, path, JSON body
Build = Callable[[World, str], Request]  # (world, unique suffix) -> request
_counter = itertools.count(1)
S = f"/v1/scopes/{SCOPE}"


def _entry(world: World, entry_id: str, deactivated: bool = False) -> None:
    world.app.records.add_entry(ADMIN, SCOPE, "m", entry_id, "note", f"text of {entry_id}")
    if deactivated:
        world.app.records.deactivate_entry(ADMIN, SCOPE, "m", entry_id)


def _replace_artifact(world: World, suffix: str) -> Request:
    world.app.records.create_artifact(ADMIN, SCOPE, "experience", f"r-{suffix}", EXPERIENCE,
                                      principal="admin")
    head = world.app.records.get_artifact(ADMIN, SCOPE, "experience",
                                          f"r-{suffix}").head_revision
    return ("PUT", f"{S}/artifacts/experience/r-{suffix}",
            {"content": EXPERIENCE | {"lesson": "l2"}, "expected_revision": head})


def _revise_entry(world: World, suffix: str) -> Request:
    _entry(world, f"e-{suffix}")
    return "PUT", f"{S}/memories/m/entries/e-{suffix}", {"kind": "note", "text": "revised"}


def _deactivate_entry(world: World, suffix: str) -> Request:
    _entry(world, f"e-{suffix}")
    return "POST", f"{S}/memories/m/entries/e-{suffix}/deactivate", {"reason": "stale"}


def _reactivate_entry(world: World, suffix: str) -> Request:
    _entry(world, f"e-{suffix}", deactivated=True)
    return "POST", f"{S}/memories/m/entries/e-{suffix}/reactivate", {}


def _principal(world: World, suffix: str) -> str:
    """A registered grantee: roles and grants name registered principals only."""
    world.app.access.register_principal(ADMIN, f"p-{suffix}")
    return f"p-{suffix}"


def _granted_role(world: World, principal: str) -> Request:
    world.app.records.grant_role(ADMIN, SCOPE, principal, "reader")
    return "DELETE", f"{S}/roles/{principal}/reader", None


def _exact_version(world: World, _: str) -> Request:
    ref, c = world.citation["memory_ref"], world.citation
    return ("GET", f"{S}/memories/m/revisions/{ref['revision']}/entries/{c['entry_id']}"
                   f"/versions/{c['entry_version_id']}", None)


def _candidate(world: World, suffix: str, proposer: str = "admin") -> str:
    """A pending Experience Candidate over the open Source, proposed by ``proposer``."""
    candidate_id = f"c-{suffix}"
    caller = ADMIN if proposer == "admin" else Caller(proposer)
    world.app.review.propose_candidate(caller, SCOPE, candidate_id, "experience", EXPERIENCE,
                                       Lineage(sources=(SourceRef("task", "open"),)), "seen once")
    return candidate_id


def _revise(proposer: str) -> Build:
    def build(world: World, suffix: str) -> Request:
        candidate_id = _candidate(world, suffix, proposer)
        return ("POST", f"{S}/candidates/{candidate_id}/revise",
                {"expected_version": 1, "reason": "clearer"})
    return build


def _decide(decision: str) -> Build:
    def build(world: World, suffix: str) -> Request:
        candidate_id = _candidate(world, suffix, PROPOSER)
        body: dict[str, Any] = {"expected_version": 1}
        if decision == "reject":
            body["reason"] = "not general enough"
        return "POST", f"{S}/candidates/{candidate_id}/{decision}", body
    return build


def _webhook(world: World) -> str:
    """A new subscription of SCOPE, its secret kept nowhere (no delivery runs here)."""
    return world.app.webhooks.create(ADMIN, SCOPE, "http://127.0.0.1:9/hook", [], None,
                                     lambda *_: None).value.webhook.webhook_id


def _erasable(world: World, suffix: str) -> dict[str, Any]:
    """A fresh Source of SCOPE to erase, as an erasure request names it."""
    world.app.records.record_source(ADMIN, SCOPE, "task", f"forget-{suffix}", text="personal")
    return {"source": {"source_type": "task", "source_id": f"forget-{suffix}"},
            "reason": "asked to be forgotten"}


def _erasure(world: World, suffix: str) -> Request:
    body = _erasable(world, suffix)
    erased = world.app.erasures.erase(ADMIN, SCOPE, ErasureTarget.of_source(
        "task", f"forget-{suffix}"), body["reason"], lambda scope, records: [])
    return "GET", f"{S}/erasures/{erased.value.erasure.erasure_id}", None


def _package(artifact_id: str, file: str = "") -> Build:
    return lambda w, u: ("GET", f"{S}/artifacts/skill/{artifact_id}/revisions/1/package{file}",
                         None)


def _resource(family_or_type: str, ident: str, kind: str = "artifact") -> dict[str, str]:
    if kind == "artifact":
        return {"kind": "artifact", "family": family_or_type, "artifact_id": ident}
    return {"kind": "source", "source_type": family_or_type, "source_id": ident}


# Row: (label, request builder, expected status per situation). In labels {s} is /v1/scopes/team.
MATRIX: list[tuple[str, Build, dict[str, int]]] = [
    # scopes
    ("POST /v1/scopes",
     lambda w, u: ("POST", "/v1/scopes", {"scope_id": f"new-{u}"}),
     deployment_admin_only(201)),
    ("GET /v1/scopes",  # every valid caller may list: each sees the scopes it may read
     lambda w, u: ("GET", "/v1/scopes", None),
     {**everyone(200), **NO_VALID_TOKEN}),
    ("GET {s}",
     lambda w, u: ("GET", S, None),
     read()),
    ("GET {s}/status",
     lambda w, u: ("GET", f"{S}/status", None),
     read()),
    ("GET {s} (no such scope)",
     lambda w, u: ("GET", "/v1/scopes/nowhere", None),
     {**everyone(404), **NO_VALID_TOKEN}),
    ("PATCH {s}/settings",
     lambda w, u: ("PATCH", f"{S}/settings",
                   {"settings": {"auto_min_new_records": next(_counter)}}),
     administer()),
    # access
    ("GET {s}/roles",
     lambda w, u: ("GET", f"{S}/roles", None),
     administer()),
    ("POST {s}/roles",
     lambda w, u: ("POST", f"{S}/roles", {"principal": _principal(w, u), "role": "reader"}),
     administer()),
    ("DELETE {s}/roles/{principal}/{role}",
     lambda w, u: _granted_role(w, _principal(w, u)),
     administer()),
    ("POST {s}/read-grants",
     lambda w, u: ("POST", f"{S}/read-grants",
                   {"principal": _principal(w, u), "resource": _resource("experience", "open")}),
     administer()),
    ("POST {s}/read-revocations",
     lambda w, u: ("POST", f"{S}/read-revocations",
                   {"principal": _principal(w, u),
                    "resource": _resource("task", "open", "source")}),
     administer()),
    # dream runs
    ("POST {s}/dream",
     lambda w, u: ("POST", f"{S}/dream", {
         "operation": "refine_experience", "idempotency_key": f"k-{u}",
         "artifacts": [{"family": "experience", "artifact_id": "open", "revision": 1}]}),
     contribute(202)),
    ("GET {s}/dream",
     lambda w, u: ("GET", f"{S}/dream", None),
     read()),
    ("GET {s}/dream/{run_id}",
     lambda w, u: ("GET", f"{S}/dream/{w.run_id}", None),
     read()),
    ("GET {s}/dream/auto",
     lambda w, u: ("GET", f"{S}/dream/auto", None),
     read()),
    # sources
    ("POST {s}/sources",
     lambda w, u: ("POST", f"{S}/sources",
                   {"source_type": "task", "source_id": f"s-{u}", "text": "work"}),
     contribute(201)),
    ("GET {s}/sources/{type}/{id}",
     lambda w, u: ("GET", f"{S}/sources/task/open", None),
     read()),
    ("GET {s}/sources/{type}/{id} (read revoked)",
     lambda w, u: ("GET", f"{S}/sources/task/hidden", None),
     read(**HIDDEN_READ)),
    # artifacts
    ("POST {s}/artifacts",
     lambda w, u: ("POST", f"{S}/artifacts",
                   {"family": "experience", "artifact_id": f"a-{u}", "content": EXPERIENCE}),
     contribute(201)),
    ("POST {s}/artifacts citing a read-revoked source",
     lambda w, u: ("POST", f"{S}/artifacts", {
         "family": "experience", "artifact_id": f"a-{u}", "content": EXPERIENCE,
         "lineage": {"sources": [{"source_type": "task", "source_id": "hidden"}]}}),
     contribute(201, **HIDDEN_READ)),
    ("PUT {s}/artifacts/{family}/{id}",
     _replace_artifact,
     contribute(200)),
    ("GET {s}/artifacts/{family}/{id}",
     lambda w, u: ("GET", f"{S}/artifacts/experience/open", None),
     read()),
    ("GET {s}/artifacts/{family}/{id}/revisions/{n}",
     lambda w, u: ("GET", f"{S}/artifacts/experience/open/revisions/1", None),
     read()),
    ("GET {s}/artifacts/{family}/{id} (read revoked)",
     lambda w, u: ("GET", f"{S}/artifacts/experience/hidden", None),
     read(**HIDDEN_READ)),
    ("GET {s}/artifacts/{family}/{id}/revisions/{n} (read revoked)",
     lambda w, u: ("GET", f"{S}/artifacts/experience/hidden/revisions/1", None),
     read(**HIDDEN_READ)),
    ("GET {s}/artifacts/{family}/{id} (read granted)",
     lambda w, u: ("GET", f"{S}/artifacts/experience/granted", None),
     read(**GRANTED_READ)),
    ("GET {s}/artifacts/{family}/{id}/revisions/{n} (read granted)",
     lambda w, u: ("GET", f"{S}/artifacts/experience/granted/revisions/1", None),
     read(**GRANTED_READ)),
    # memory
    ("POST {s}/memories",
     lambda w, u: ("POST", f"{S}/memories", {"memory_id": f"m-{u}"}),
     contribute(201)),
    ("GET {s}/memories/{m}",
     lambda w, u: ("GET", f"{S}/memories/m", None),
     read()),
    ("POST {s}/memories/{m}/entries",
     lambda w, u: ("POST", f"{S}/memories/m/entries",
                   {"entry_id": f"e-{u}", "kind": "note", "text": "a note"}),
     contribute(201)),
    ("POST {s}/memories/{m}/entries citing a read-revoked artifact",
     lambda w, u: ("POST", f"{S}/memories/m/entries", {
         "entry_id": f"e-{u}", "kind": "note", "text": "a note",
         "artifacts": [{"family": "experience", "artifact_id": "hidden", "revision": 1}]}),
     contribute(201, **HIDDEN_READ)),
    ("PUT {s}/memories/{m}/entries/{e}",
     _revise_entry,
     contribute(200)),
    ("POST {s}/memories/{m}/entries/{e}/deactivate",
     _deactivate_entry,
     contribute(200)),
    ("POST {s}/memories/{m}/entries/{e}/reactivate",
     _reactivate_entry,
     contribute(200)),
    ("GET {s}/memories/{m}/revisions/{n}/entries/{e}/versions/{v}",
     _exact_version,
     read()),
    # review
    ("POST {s}/candidates",
     lambda w, u: ("POST", f"{S}/candidates", {
         "candidate_id": f"c-{u}", "family": "experience", "proposal": EXPERIENCE,
         "reason": "seen once", "sources": [{"source_type": "task", "source_id": "open"}]}),
     contribute(201, reviewer=201)),
    ("POST {s}/candidates citing a read-revoked source",
     lambda w, u: ("POST", f"{S}/candidates", {
         "candidate_id": f"c-{u}", "family": "experience", "proposal": EXPERIENCE,
         "reason": "seen once", "sources": [{"source_type": "task", "source_id": "hidden"}]}),
     contribute(201, reviewer=201, contributor_revoked=403)),
    ("GET {s}/candidates",
     lambda w, u: ("GET", f"{S}/candidates?status=all", None),
     read()),
    ("GET {s}/candidates/{c}",
     lambda w, u: ("GET", f"{S}/candidates/{w.candidate_id}", None),
     read()),
    ("GET {s}/candidates/{c}/evidence",
     lambda w, u: ("GET", f"{S}/candidates/{w.candidate_id}/evidence", None),
     read()),
    ("GET {s}/candidates/{c}/evidence (cites a read-revoked source)",
     lambda w, u: ("GET", f"{S}/candidates/{w.hidden_candidate_id}/evidence", None),
     read()),  # 200 for everyone who may read the scope: the view says "unavailable"
    ("POST {s}/candidates/{c}/revise (the deployment admin's candidate)",
     _revise("admin"),
     review()),
    ("POST {s}/candidates/{c}/revise (the contributor's own candidate)",
     _revise(PROPOSER),
     review(contributor=200)),
    ("POST {s}/candidates/{c}/approve (the contributor's candidate)",
     _decide("approve"),
     review()),
    ("POST {s}/candidates/{c}/reject",
     _decide("reject"),
     review()),
    # knowledge and Skill packages
    ("GET {s}/knowledge",
     lambda w, u: ("GET", f"{S}/knowledge?q=lesson", None),
     read()),
    ("GET {s}/artifacts/skill/{id}/revisions/{n}/package",
     _package("open"),
     read()),
    ("GET {s}/artifacts/skill/{id}/revisions/{n}/package/SKILL.md",
     _package("open", "/SKILL.md"),
     read()),
    ("GET {s}/artifacts/skill/{id}/revisions/{n}/package (read revoked)",
     _package("hidden"),
     read(**HIDDEN_READ)),
    ("GET {s}/artifacts/skill/{id}/revisions/{n}/package/SKILL.md (read revoked)",
     _package("hidden", "/SKILL.md"),
     read(**HIDDEN_READ)),
    # audit
    ("GET {s}/audit/{aggregate}/{key} (source)",
     lambda w, u: ("GET", f"{S}/audit/source/task/open", None),
     read()),
    ("GET {s}/audit/{aggregate}/{key} (source, read revoked)",
     lambda w, u: ("GET", f"{S}/audit/source/task/hidden?as_of_version=1", None),
     read(**HIDDEN_READ)),
    ("GET {s}/audit/{aggregate}/{key} (artifact, read revoked)",
     lambda w, u: ("GET", f"{S}/audit/artifact/experience/hidden", None),
     read(**HIDDEN_READ)),
    ("GET {s}/audit/{aggregate}/{key} (artifact, read granted)",
     lambda w, u: ("GET", f"{S}/audit/artifact/experience/granted?as_of_version=1", None),
     read(**GRANTED_READ)),
    ("GET {s}/audit/{aggregate}/{key} (the scope: roles and grants)",
     lambda w, u: ("GET", f"{S}/audit/scope/{SCOPE}", None),
     administer()),
    ("GET {s}/audit/{aggregate}/{key} (candidate)",
     lambda w, u: ("GET", f"{S}/audit/candidate/{w.candidate_id}", None),
     read()),
    ("GET {s}/audit/{aggregate}/{key} (dream run)",
     lambda w, u: ("GET", f"{S}/audit/dream_run/{w.run_id}", None),
     read()),
    ("GET {s}/audit/trace/{family}/{id}/{n}",
     lambda w, u: ("GET", f"{S}/audit/trace/experience/open/1", None),
     read()),
    ("GET {s}/audit/trace/{family}/{id}/{n} (read revoked)",
     lambda w, u: ("GET", f"{S}/audit/trace/experience/hidden/1", None),
     read(**HIDDEN_READ)),
    ("GET {s}/events (public fields only, read like the audit)",
     lambda w, u: ("GET", f"{S}/events", None),
     read()),
    ("GET {s}/provenance/impact (source)",
     lambda w, u: ("GET", f"{S}/provenance/impact?kind=source&key=task/open", None),
     read()),
    ("GET {s}/provenance/impact (source, read revoked)",
     lambda w, u: ("GET", f"{S}/provenance/impact?kind=source&key=task/hidden", None),
     read(**HIDDEN_READ)),
    # webhooks: the scope's administrators only
    ("POST {s}/webhooks",
     lambda w, u: ("POST", f"{S}/webhooks", {"url": f"http://127.0.0.1:9/{u}"}),
     administer(201)),
    ("GET {s}/webhooks",
     lambda w, u: ("GET", f"{S}/webhooks", None),
     administer()),
    ("GET {s}/webhooks/{id}",
     lambda w, u: ("GET", f"{S}/webhooks/{w.webhook_id}", None),
     administer()),
    ("GET {s}/webhooks/{id}/deliveries",
     lambda w, u: ("GET", f"{S}/webhooks/{w.webhook_id}/deliveries", None),
     administer()),
    ("POST {s}/webhooks/{id}/secret",
     lambda w, u: ("POST", f"{S}/webhooks/{w.webhook_id}/secret", {}),
     administer()),
    ("DELETE {s}/webhooks/{id}",  # a fresh subscription per case: revoking twice writes once
     lambda w, u: ("DELETE", f"{S}/webhooks/{_webhook(w)}", None),
     administer()),
    # erasure: deployment administrators erase and read erasures; reviewers work the queue
    ("POST {s}/erasures",
     lambda w, u: ("POST", f"{S}/erasures", _erasable(w, u)),
     deployment_admin_only(201)),
    ("GET {s}/erasures",
     lambda w, u: ("GET", f"{S}/erasures", None),
     deployment_admin_only(200)),
    ("GET {s}/erasures/{id}",
     _erasure,
     deployment_admin_only(200)),
    ("GET {s}/erasures/derived",
     lambda w, u: ("GET", f"{S}/erasures/derived", None),
     review()),
    # operations
    ("GET /v1/ops/overview",
     lambda w, u: ("GET", "/v1/ops/overview", None),
     deployment_admin_only(200)),
    ("GET /healthz",
     lambda w, u: ("GET", "/healthz", None),
     everyone(200)),
    ("GET /metrics",
     lambda w, u: ("GET", "/metrics", None),
     everyone(200)),
]
WRITES = {"POST", "PUT", "PATCH", "DELETE"}
# Situations whose refusal carries another code than ERROR_CODES says, per row: evidence the
# caller may not read is "access_revoked", as when a Dream run's resolution meets it.
ROW_CODES = {"POST {s}/candidates citing a read-revoked source": {
    "contributor_revoked": "access_revoked"}}


def test_the_table_has_an_expectation_for_every_situation() -> None:
    assert all(set(expected) == set(SITUATIONS) for _, _, expected in MATRIX)


# -- running the matrix -----------------------------------------------------------------------

def _name(situation: str) -> str:
    principal = SITUATIONS[situation]
    assert principal is not None
    return principal[0]


def _world(live_api: LiveApi) -> tuple[World, dict[str, dict[str, str]]]:
    """Scopes, principals, tokens, roles, resources and grants; returns the headers per case."""
    app = live_api.dreaming
    headers = {"anonymous": {}, "bad_token": {"Authorization": "Bearer dream_not-a-token"},
               "deployment_admin": live_api.headers()}
    app.records.create_scope(ADMIN, SCOPE)
    app.records.create_scope(ADMIN, OTHER_SCOPE)
    for situation, principal in SITUATIONS.items():
        if principal is None:
            continue
        name, role, other_role = principal
        app.access.register_principal(ADMIN, name)
        headers[situation] = live_api.headers(app.access.issue_token(ADMIN, name).value)
        if role:
            app.records.grant_role(ADMIN, SCOPE, name, role)
        if other_role:
            app.records.grant_role(ADMIN, OTHER_SCOPE, name, other_role)
    app.access.revoke_token(ADMIN,
                            headers["revoked_token"]["Authorization"].removeprefix("Bearer "))

    for source_id in ("open", "hidden"):
        app.records.record_source(ADMIN, SCOPE, "task", source_id, text=f"{source_id} work")
    for artifact_id in ("open", "hidden", "granted"):
        app.records.create_artifact(ADMIN, SCOPE, "experience", artifact_id, EXPERIENCE,
                                    principal="admin")
    app.records.create_memory(ADMIN, SCOPE, "m", principal="admin")
    cited = app.records.add_entry(ADMIN, SCOPE, "m", "cited", "note", "cited text").value.citation

    for name in (_name("reader_revoked"), _name("contributor_revoked")):
        app.records.revoke_read(ADMIN, SCOPE, name, Resource.source(*HIDDEN_SOURCE))
        app.records.revoke_read(ADMIN, SCOPE, name, Resource.artifact(*HIDDEN_ARTIFACT))
    app.records.grant_read(ADMIN, SCOPE, _name("granted_outsider"),
                           Resource.artifact(*GRANTED_ARTIFACT))
    run = app.runs.request_dream(ADMIN, SCOPE, DreamRequest.create(
        "refine_experience", "matrix", artifacts=[ArtifactRef("experience", "open", 1)]))
    for artifact_id in ("open", "hidden"):
        app.records.create_artifact(ADMIN, SCOPE, "skill", artifact_id, SKILL, principal="admin")
    for name in (_name("reader_revoked"), _name("contributor_revoked")):
        app.records.revoke_read(ADMIN, SCOPE, name, Resource.artifact(*HIDDEN_SKILL))
    app.review.propose_candidate(ADMIN, SCOPE, "hidden", "experience", EXPERIENCE,
                                 Lineage(sources=(SourceRef(*HIDDEN_SOURCE),)), "seen once")
    world = World(app, cited.to_dict(), run.value.run.run_id, "", "hidden")
    candidate_id = _candidate(world, "read", PROPOSER)
    return replace(world, candidate_id=candidate_id, webhook_id=_webhook(world)), headers


def _check(http: httpx.Client, world: World, headers: dict[str, str], label: str,
           method: str, path: str, body: dict[str, Any] | None, situation: str,
           expected: int) -> str | None:
    """Run one prepared case; a description of what went wrong, or None."""
    before = world.app.store.max_position()
    response = http.request(method, path, json=body, headers=headers)
    after = world.app.store.max_position()
    problems = []
    if response.status_code != expected:
        problems.append(f"status {response.status_code} (expected {expected}): "
                        f"{response.text[:160]}")
    elif expected in ERROR_CODES:
        code = response.json().get("error", {}).get("code")
        wanted = ROW_CODES.get(label, {}).get(situation, ERROR_CODES[expected])
        if code != wanted:
            problems.append(f"error code {code!r} (expected {wanted!r})")
    wrote = after != before
    should_write = method in WRITES and 200 <= expected < 300
    if wrote != should_write:
        problems.append(f"position {before} -> {after} "
                        f"({'a write was expected' if should_write else 'nothing may be written'})")
    if not problems:
        return None
    return f"{label} as {situation}: " + "; ".join(problems)


def test_every_route_answers_every_caller_as_the_policy_says(live_api: LiveApi) -> None:
    world, headers = _world(live_api)
    failures: list[str | None] = []
    sent: set[tuple[str, str]] = set()
    with httpx.Client(base_url=live_api.base_url) as http:
        for row, (label, build, expected) in enumerate(MATRIX):
            for situation, status in expected.items():
                method, path, body = build(world, f"{row}-{situation}")
                sent.add((method, path))
                failures.append(_check(http, world, headers[situation], label, method, path,
                                       body, situation, status))
    cases = sum(len(expected) for _, _, expected in MATRIX)
    problems = [f for f in failures if f is not None]
    problems += [f"{route}: no row of MATRIX exercises it" for route in _uncovered(sent)]
    assert not problems, f"{len(problems)} of {cases} cases differ:\n" + "\n".join(problems)


def _uncovered(sent: set[tuple[str, str]]) -> list[str]:
    """Every route the API serves must have been exercised by some row of the matrix."""
    routes = list(api_routes((*(route for router in v1 for route in router.routes),
                              *ops.routes, *webhooks_router.routes)))
    assert len(routes) >= 40  # every route is seen, however FastAPI keeps them
    return [f"{method} {route.path}" for route in routes for method in route.methods or ()
            if not any(route.matches({"type": "http", "method": m,
                                      "path": p.partition("?")[0]})[0] == Match.FULL
                       and m == method for m, p in sent)]


# -- a write never answers with what the caller may not read ------------------------------------

@pytest.mark.parametrize("command", ["deactivate", "reactivate"])
def test_an_entry_command_never_discloses_a_memory_the_caller_may_not_read(
        live_api: LiveApi, command: str) -> None:
    app = live_api.dreaming
    app.records.create_scope(ADMIN, SCOPE)
    app.access.register_principal(ADMIN, "cora")
    cora = live_api.headers(app.access.issue_token(ADMIN, "cora").value)
    app.records.grant_role(ADMIN, SCOPE, "cora", "contributor")
    app.records.create_memory(ADMIN, SCOPE, "secret", principal="admin")
    app.records.add_entry(ADMIN, SCOPE, "secret", "e1", "note", "the secret text")
    if command == "reactivate":
        app.records.deactivate_entry(ADMIN, SCOPE, "secret", "e1")
    app.records.revoke_read(ADMIN, SCOPE, "cora", Resource.artifact("memory", "secret"))
    with httpx.Client(base_url=live_api.base_url, headers=cora) as http:
        assert http.get(f"{S}/memories/secret").status_code == 403
        response = http.post(f"{S}/memories/secret/entries/e1/{command}", json={})
    # Writing needs read of the artifact, so the command is refused before it discloses.
    assert response.status_code == 403, response.text
    assert "the secret text" not in response.text
