"""Who calls: the token of a local agent (stdio) or the bearer header of each HTTP request,
resolved exactly as the REST API resolves bearer tokens (read per request, never cached)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

import anyio
from fastapi.security.utils import get_authorization_scheme_param
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from adapters.api.acting import caller_of
from adapters.api.problems import problem_of
from adapters.http.errors import problem_response
from application.bootstrap import Dreaming
from domain.policy import Caller

CALLER_KEY = "dream.caller"  # where the HTTP gate leaves the caller in the ASGI scope
SCOPE_HEADER = "x-dream-scope"
NO_TOKEN = "start `dream mcp` with DREAM_TOKEN=<token> (or --token)"


class Identity(Protocol):
    """The caller and the default scope of one MCP request (``request`` is the HTTP request
    that carried it, None over stdio)."""

    def caller(self, request: Any) -> Caller: ...

    def default_scope(self, request: Any) -> str | None: ...

    def later(self, request: Any) -> Callable[[], Caller]:
        """Resolve this request's caller again later (e.g. to re-list for a notification),
        with the token's rights as they are then."""


class LocalIdentity:
    """A local agent over stdio: one token (or the local principal when access is disabled)
    and the scope it was started for."""

    def __init__(self, dreaming: Dreaming, token: str | None, scope: str | None) -> None:
        self.dreaming = dreaming
        self.token = token
        self.scope = scope

    def caller(self, request: Any) -> Caller:
        return caller_of(self.dreaming, self.token, missing=NO_TOKEN)

    def default_scope(self, request: Any) -> str | None:
        return self.scope

    def later(self, request: Any) -> Callable[[], Caller]:
        return partial(self.caller, request)


class HttpIdentity:
    """A remote agent: the caller the gate resolved for this HTTP request, the scope its
    ``X-Dream-Scope`` header names."""

    def __init__(self, dreaming: Dreaming) -> None:
        self.dreaming = dreaming

    def caller(self, request: Any) -> Caller:
        assert isinstance(request, Request), "MCP over HTTP always carries its request"
        caller: Caller = request.scope[CALLER_KEY]
        return caller

    def default_scope(self, request: Any) -> str | None:
        assert isinstance(request, Request)
        return request.headers.get(SCOPE_HEADER) or None

    def later(self, request: Any) -> Callable[[], Caller]:
        assert isinstance(request, Request)
        return partial(caller_of, self.dreaming, bearer_token(request.scope))


def bearer_token(scope: Scope) -> str | None:
    header = Request(scope).headers.get("authorization")
    scheme, token = get_authorization_scheme_param(header)
    return token if scheme.lower() == "bearer" and token else None


class BearerGate:
    """Every request to ``/mcp`` needs a valid bearer token when access is enforced, as every
    ``/v1`` route does; refusals are the API's envelope (401 ``unauthorized``, ...)."""

    def __init__(self, app: ASGIApp, dreaming: Dreaming) -> None:
        self.app = app
        self.dreaming = dreaming

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:  # reads the token from the store: off the event loop
            caller = await anyio.to_thread.run_sync(caller_of, self.dreaming,
                                                    bearer_token(scope))
        except Exception as error:
            await problem_response(problem_of(error))(scope, receive, send)
            return
        scope[CALLER_KEY] = caller
        await self.app(scope, receive, send)
