"""Routes authenticate on their own worker thread, and still refuse a caller without a valid
token before they look at the body."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from fastapi.dependencies.models import Dependant

from adapters.http.app import create_app
from adapters.http.dependencies import acting_of, bearer_of
from adapters.settings import Settings
from application.bootstrap import Dreaming
from tests.conftest import LiveApi
from tests.http_routes import api_routes

ADMIT = "/v1/scopes/team/dream"
BAD_BODY = {"operation": "refine_experience", "idempotency_key": "k", "artifacts": "many"}


def error_of(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


@pytest.mark.parametrize("authorization", [None, "Bearer nope", "Basic eDp5"])
def test_a_body_of_the_wrong_shape_without_a_valid_token_is_unauthorized(
        live_api: LiveApi, authorization: str | None) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    with httpx.Client(base_url=live_api.base_url) as http:
        http.post("/v1/scopes", json={"scope_id": "team"}, headers=live_api.headers())
        before = live_api.dreaming.store.max_position()
        refused = http.post(ADMIT, json=BAD_BODY, headers=headers)
        assert error_of(refused) == (401, "unauthorized")
        assert refused.headers["www-authenticate"] == "Bearer"
        # With the admin's token the same body is refused for its shape.
        assert error_of(http.post(ADMIT, json=BAD_BODY, headers=live_api.headers())) == (
            422, "invalid_request")
        assert error_of(http.get(f"{ADMIT}/no-such-run", headers=headers)) == (
            401, "unauthorized")
        assert live_api.dreaming.store.max_position() == before


def test_a_revoked_token_is_refused_before_the_body_is(live_api: LiveApi) -> None:
    with httpx.Client(base_url=live_api.base_url, headers=live_api.headers()) as http:
        http.post("/v1/scopes", json={"scope_id": "team"})
        issued = http.post("/v1/admin/tokens", json={"principal": "pat"}).json()
        revoked = {"Authorization": f"Bearer {issued['token']}"}
        assert http.get("/v1/scopes/team", headers=revoked).status_code == 404  # it worked
        assert http.delete(f"/v1/admin/tokens/{issued['token_id']}").status_code == 200
        assert error_of(http.post(ADMIT, json=BAD_BODY, headers=revoked))[0] == 401


def dependency_calls(dependant: Dependant) -> Iterator[Callable[..., Any]]:
    for dependency in dependant.dependencies:
        if dependency.call is not None:
            yield dependency.call
        yield from dependency_calls(dependency)


def resolved_on_the_event_loop(call: Callable[..., Any]) -> bool:
    """A coroutine function, or an object whose ``__call__`` is one (``HTTPBearer``)."""
    return inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(
        type(call).__call__)


def test_every_route_takes_one_worker_thread_at_most(app: Dreaming,
                                                     settings: Settings) -> None:
    """Every dependency of every route resolves on the event loop: a synchronous route's own
    call is the only one FastAPI hands to a worker thread."""
    routes = list(api_routes(create_app(app, settings).routes))
    assert len(routes) >= 40
    authenticating = 0
    for route in routes:
        calls = list(dependency_calls(route.dependant))
        assert [call for call in calls if not resolved_on_the_event_loop(call)] == [], route.path
        # The caller dependency, which also checks the path and query parameters.
        authenticating += bool({bearer_of, acting_of} & set(calls))
        assert route.path.startswith("/v1/") == bool({bearer_of, acting_of} & set(calls)), (
            route.path)
    assert authenticating >= 40  # every /v1 route but none of /healthz, /metrics
