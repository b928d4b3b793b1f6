"""A bearer token is proved by the command's own first read: reading a run back, or replaying
its admission, costs one read of the store instead of two, and every refusal stays as strict
and in the same order as when the token was read on its own (401 before anything else; a
revoked or expired token refused at once)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

from application.access import TokenCredentials
from application.bootstrap import Dreaming
from domain.errors import (
    InvalidScopeIdError,
    ScopeNotFoundError,
    TokenExpiredError,
    UnauthorizedError,
)
from domain.policy import LOCAL
from tests.conftest import LiveApi
from tests.test_hot_scope import request
from tests.test_workers import seed_scope


@pytest.fixture
def store_reads(enforced_app: Dreaming, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every read of aggregates' events the store sends (one round trip each)."""
    reads: list[str] = []
    recorder = enforced_app.store.read_set_recorder
    for name in ("select_events_of_many", "select_events_and_position"):
        original = getattr(recorder, name)

        def counted(*args: Any, _name: str = name, _original: Any = original,
                    **kwargs: Any) -> Any:
            reads.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(recorder, name, counted)
    return reads


@pytest.fixture
def token(app: Dreaming, enforced_app: Dreaming) -> str:
    """A contributor's token in scope ``s``, which holds the evidence of an admission."""
    seed_scope(app, "s")
    issued = enforced_app.access.issue_token_for(LOCAL, "alice", "t").value
    enforced_app.records.grant_role(LOCAL, "s", "alice", "contributor")
    return issued.secret


def test_reading_a_run_back_proves_the_token_in_the_same_read(
        enforced_app: Dreaming, token: str, store_reads: list[str]) -> None:
    credentials = enforced_app.access.credentials(token)
    admitted = enforced_app.runs.request_dream(credentials, "s", request("k")).value.run
    assert enforced_app.access.credentials(token).principal == "alice"  # learnt
    store_reads.clear()
    again = enforced_app.runs.get_dream(enforced_app.access.credentials(token), "s",
                                        admitted.run_id)
    assert again.run_id == admitted.run_id
    assert store_reads == ["select_events_of_many"]  # token, scope and run: one round trip
    store_reads.clear()
    replay = enforced_app.runs.request_dream(enforced_app.access.credentials(token), "s",
                                             request("k")).value
    assert replay.replayed
    assert replay.run.run_id == admitted.run_id
    assert store_reads == ["select_events_of_many"]


def test_recording_a_source_proves_the_token_with_the_scope_and_the_source_in_one_read(
        enforced_app: Dreaming, token: str, store_reads: list[str]) -> None:
    """Every command takes the same ``Who``: the token is read with the command's first read,
    not on its own before it."""
    enforced_app.records.record_source(enforced_app.access.credentials(token), "s", "task",
                                       "t0", text="first")  # the principal's admin flag: learnt
    store_reads.clear()
    credentials = enforced_app.access.credentials(token)
    written = enforced_app.records.record_source(credentials, "s", "task", "t1", text="did it")
    assert written.position is not None
    assert store_reads == ["select_events_of_many"]  # token, scope and the Source, if any
    store_reads.clear()
    replayed = enforced_app.records.record_source(enforced_app.access.credentials(token), "s",
                                                  "task", "t1", text="did it")
    assert replayed.position is None  # the identical Source: found by that same read
    assert store_reads == ["select_events_of_many"]
    enforced_app.access.revoke_token(LOCAL, token)
    with pytest.raises(UnauthorizedError):
        enforced_app.records.record_source(enforced_app.access.credentials(token), "s",
                                           "task", "t2", text="after the revocation")


def test_a_token_not_seen_before_is_read_on_its_own_first_for_an_admission(
        enforced_app: Dreaming, token: str, store_reads: list[str]) -> None:
    credentials = enforced_app.access.credentials(token)
    assert credentials.principal is None
    enforced_app.runs.request_dream(credentials, "s", request("k"))
    assert store_reads[0] == "select_events_and_position"  # the token alone: whose run id?


def test_a_revoked_or_expired_token_is_refused_at_once(
        enforced_app: Dreaming, token: str) -> None:
    run = enforced_app.runs.request_dream(enforced_app.access.credentials(token), "s",
                                          request("k")).value.run
    enforced_app.access.revoke_token(LOCAL, token)
    for read in (lambda who: enforced_app.runs.get_dream(who, "s", run.run_id),
                 lambda who: enforced_app.runs.request_dream(who, "s", request("k"))):
        with pytest.raises(UnauthorizedError):
            read(enforced_app.access.credentials(token))
    brief = enforced_app.access.issue_token_for(
        LOCAL, "alice", "brief", expires_at=enforced_app.clock() + timedelta(seconds=1))
    later = enforced_app.clock() + timedelta(seconds=2)
    enforced_app.access.clock = lambda: later
    with pytest.raises(TokenExpiredError):
        enforced_app.runs.get_dream(enforced_app.access.credentials(brief.value.secret), "s",
                                    run.run_id)


@pytest.mark.parametrize("scope_id", ["no-such-scope", "../bad"])
def test_an_unknown_token_is_told_so_before_anything_about_the_scope(
        enforced_app: Dreaming, scope_id: str) -> None:
    stranger = enforced_app.access.credentials("dream_nobody")
    with pytest.raises(UnauthorizedError):
        enforced_app.runs.get_dream(stranger, scope_id, "dr_x")
    # Known as a caller, the same reads are refused for what is wrong with the scope.
    with pytest.raises((ScopeNotFoundError, InvalidScopeIdError)):
        enforced_app.runs.get_dream(LOCAL, scope_id, "dr_x")


def test_credentials_must_name_the_principal_the_token_names(
        enforced_app: Dreaming, token: str) -> None:
    """A token never changes hands: a run key derived from another principal is never read
    for it."""
    forged = TokenCredentials(enforced_app.access, enforced_app.access.credentials(token).key,
                              "mallory")
    with pytest.raises(UnauthorizedError):
        enforced_app.runs.request_dream(forged, "s", request("k"))


@pytest.fixture
def http(live_api: LiveApi) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live_api.base_url) as client:
        yield client


def test_over_http_a_refused_request_is_still_unauthorized_first(
        live_api: LiveApi, http: httpx.Client) -> None:
    """A body the domain refuses (a family that does not exist) is 401 without a valid token
    and 422 with one; an unknown or malformed scope is 401 without one."""
    admin = live_api.headers()
    http.post("/v1/scopes", json={"scope_id": "team"}, headers=admin)
    ref = {"family": "no-such-family", "artifact_id": "x", "revision": 1}
    body = {"operation": "refine_experience", "idempotency_key": "k", "artifacts": [ref],
            "memory_citations": [], "sources": [], "target": ref}
    stranger = {"Authorization": "Bearer dream_nobody"}
    before = live_api.dreaming.store.max_position()
    assert http.post("/v1/scopes/team/dream", json=body, headers=stranger).status_code == 401
    assert http.post("/v1/scopes/team/dream", json=body, headers=admin).status_code == 422
    for path in ("/v1/scopes/nowhere/dream/dr_x", "/v1/scopes/a..b!/dream/dr_x"):
        assert http.get(path, headers=stranger).status_code == 401
    assert http.get("/v1/scopes/nowhere/dream/dr_x", headers=admin).status_code == 404
    # A value the route itself refuses before its command proves who calls: 401 first too.
    revision_zero = "/v1/scopes/team/memories/m/revisions/0/entries/e1/versions/v1"
    assert http.get(revision_zero, headers=stranger).status_code == 401
    assert http.get(revision_zero, headers=admin).status_code == 422
    assert live_api.dreaming.store.max_position() == before
