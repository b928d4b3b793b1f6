"""``GET /v1/scopes``: every caller finds the scopes it may read, and only those.

A story over real HTTP with access enforced, then a property: whatever roles were granted and
revoked, the listed scopes are exactly those the access policy lets the principal read, paged
without gaps or repeats, and the read model rebuilt from the events lists the same.
"""

from __future__ import annotations

import contextlib
from typing import Any

import httpx
from hypothesis import HealthCheck, given
from hypothesis import settings as examples_of
from hypothesis import strategies as st

from adapters.settings import Settings
from application.bootstrap import Dreaming
from domain.access import Action, Role
from domain.errors import PrincipalExistsError
from domain.policy import AccessPolicy, Caller
from projections.scopes import SCOPES
from tests.conftest import LiveApi
from tests.projection_support import rebuilt_view

ADMIN = Caller("admin", admin=True)


def _listed(http: httpx.Client, headers: dict[str, str], limit: int = 100) -> list[dict[str, Any]]:
    """Every page of the list, followed by its cursors."""
    scopes: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        response = http.get("/v1/scopes", params=params, headers=headers)
        assert response.status_code == 200, response.text
        page = response.json()
        assert len(page["scopes"]) <= limit
        scopes += page["scopes"]
        cursor = page["next_cursor"]
        if cursor is None:
            return scopes


def test_each_caller_lists_the_scopes_it_may_read(live_api: LiveApi) -> None:
    app = live_api.dreaming
    for scope_id in ("alpha", "beta", "gamma", "delta"):
        app.records.create_scope(ADMIN, scope_id, {"auto_min_new_records": 3}
                                 if scope_id == "beta" else None)
    for name in ("rita", "olga"):
        app.access.register_principal(ADMIN, name)
    rita = live_api.headers(app.access.issue_token(ADMIN, "rita").value)
    olga = live_api.headers(app.access.issue_token(ADMIN, "olga").value)
    app.records.grant_role(ADMIN, "beta", "rita", "reader")
    app.records.grant_role(ADMIN, "beta", "rita", "reviewer")
    app.records.grant_role(ADMIN, "delta", "rita", "contributor")
    app.records.grant_role(ADMIN, "gamma", "rita", "reader")
    app.records.revoke_role(ADMIN, "gamma", "rita", "reader")

    with httpx.Client(base_url=live_api.base_url) as http:
        before = app.store.max_position()
        # The administrator sees every scope, two a page, in scope id order.
        everything = _listed(http, live_api.headers(), limit=2)
        assert [s["scope_id"] for s in everything] == ["alpha", "beta", "delta", "gamma"]
        assert everything[1]["settings"] == {"auto_min_new_records": 3}
        # Rita sees the scopes where she holds a role now, with her roles; not gamma.
        hers = _listed(http, rita, limit=1)
        assert [(s["scope_id"], s["roles"]) for s in hers] == [
            ("beta", ["reader", "reviewer"]), ("delta", ["contributor"])]
        # Olga holds no role anywhere: an empty list, not a refusal.
        assert _listed(http, olga) == []
        # Without a token: refused as every route refuses it.
        assert http.get("/v1/scopes").json()["error"]["code"] == "unauthorized"
        # A cursor it did not issue, or one of another list, is refused; so is a bad limit.
        for params, code in (({"cursor": "bm90LWEtc2NvcGUtY3Vyc29y"}, "invalid_cursor"),
                             ({"cursor": "!!"}, "invalid_cursor"),
                             ({"limit": 0}, "invalid_request"),
                             ({"limit": 101}, "invalid_request")):
            refused = http.get("/v1/scopes", params=params, headers=rita)
            assert refused.status_code == 422, (params, refused.text)
            assert refused.json()["error"]["code"] == code, params
        assert app.store.max_position() == before  # reading and refusing wrote nothing

        # A role granted now is listed by the very next read (read-your-writes).
        app.records.grant_role(ADMIN, "alpha", "olga", "reader")
        assert [s["scope_id"] for s in _listed(http, olga)] == ["alpha"]


def test_the_scope_status_shows_the_queue_and_the_inbox(live_api: LiveApi) -> None:
    app = live_api.dreaming
    app.records.create_scope(ADMIN, "team")
    with httpx.Client(base_url=live_api.base_url, headers=live_api.headers()) as http:
        status = http.get("/v1/scopes/team/status").json()
        assert (status["queued_runs"], status["running_runs"], status["pending_candidates"]) \
            == (0, 0, 0)
        http.post("/v1/scopes/team/artifacts", json={
            "family": "experience", "artifact_id": "x0", "content": {
                "situation": "s", "action": "a", "outcome": "o", "lesson": "l"}},
        ).raise_for_status()
        admitted = http.post("/v1/scopes/team/dream", json={
            "operation": "refine_experience", "idempotency_key": "k1",
            "artifacts": [{"family": "experience", "artifact_id": "x0", "revision": 1}]})
        assert admitted.status_code == 202, admitted.text
        status = http.get("/v1/scopes/team/status").json()
        assert status["queued_runs"] == 1  # no worker runs in this server
        assert status["auto"]["due"] is False
        assert http.get("/v1/scopes/nowhere/status").json()["error"]["code"] == \
            "scope_not_found"


# -- the property --------------------------------------------------------------------------

PRINCIPALS = ("p0", "p1", "p2")
SCOPE_IDS = ("s0", "s1", "s2", "s3", "s4")
ROLES = tuple(role.value for role in Role)
Step = tuple[str, str, str, str]  # grant or revoke, scope, principal, role

steps = st.lists(st.tuples(st.sampled_from(["grant", "revoke"]), st.sampled_from(SCOPE_IDS),
                           st.sampled_from(PRINCIPALS), st.sampled_from(ROLES)), max_size=25)
examples = iter(range(10**6))


@examples_of(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=steps, limit=st.integers(1, 3))
def test_the_list_is_what_the_policy_says_after_any_grants(
        app: Dreaming, settings: Settings, history: list[Step], limit: int) -> None:
    prefix = f"e{next(examples)}-"  # each example's scopes are its own in the shared store
    for principal in PRINCIPALS:
        with contextlib.suppress(PrincipalExistsError):  # registered by an earlier example
            app.access.register_principal(ADMIN, principal)
    for scope_id in SCOPE_IDS:
        app.records.create_scope(ADMIN, prefix + scope_id)
    for command, scope_id, principal, role in history:
        if command == "grant":
            app.records.grant_role(ADMIN, prefix + scope_id, principal, role)
        else:
            app.records.revoke_role(ADMIN, prefix + scope_id, principal, role)

    policy = AccessPolicy(enforced=True)
    readers_roles = policy.roles_permitting(Action.READ)
    with rebuilt_view(SCOPES, settings, app.store.max_position()) as view:
        for principal in PRINCIPALS:
            expected = [prefix + s for s in SCOPE_IDS
                        if policy.permits(Caller(principal), app.gate.load(prefix + s),
                                          Action.READ)]
            listed, cursor = [], None
            while True:
                page, cursor = view.list_scopes(holders_of=(principal, readers_roles),
                                                cursor=cursor, limit=limit)
                listed += [s.scope_id for s in page if s.scope_id.startswith(prefix)]
                if cursor is None:
                    break
            assert listed == expected
            roles = view.roles_in(principal, expected)
            assert all(roles[s] == sorted(app.gate.load(s).roles_of(principal))
                       for s in expected)
