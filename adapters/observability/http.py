"""Every HTTP request counted and timed by route template, and named by a request id.

The id is the caller's ``X-Request-Id`` when it sends a plain one, else a fresh one; it is
answered in the same header and set for the request's log lines."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from fastapi.routing import iter_route_contexts

from adapters.observability import context
from adapters.observability.metrics import HTTP_REQUESTS, HTTP_SECONDS, UNMATCHED_ROUTE

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

REQUEST_ID_HEADER = b"x-request-id"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class RouteTemplates:
    """The full path template of the route that served a request. FastAPI names the route in
    the scope (a plain Starlette route, like /mcp, only its endpoint); included routers keep
    their prefixes apart, so the full templates are read once from the app."""

    def __init__(self, routes: list[Any]) -> None:
        self.routes = routes
        self._templates: dict[int, str] | None = None

    def of(self, scope: Scope) -> str:
        if self._templates is None:
            self._templates = {}
            for context in iter_route_contexts(self.routes):
                route, template = context.original_route, context.path_format
                if template is not None:
                    self._templates[id(route)] = template
                    self._templates.setdefault(id(getattr(route, "endpoint", route)), template)
        served = scope.get("route") or scope.get("endpoint")
        return self._templates.get(id(served), UNMATCHED_ROUTE)


def method_of(scope: Scope) -> str:
    return scope["method"] if scope["method"] in METHODS else "OTHER"


class ObserveRequests:
    """Outermost middleware: sees every answer, errors included."""

    def __init__(self, app: ASGIApp, routes: list[Any]) -> None:
        self.app = app
        self.templates = RouteTemplates(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sent = dict(scope["headers"]).get(REQUEST_ID_HEADER)
        request_id = context.request_id_from(sent.decode("latin-1") if sent else None)
        named = context.request_id.set(request_id)
        status = 500  # if the app fails before answering
        started = time.perf_counter()

        async def answer(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", []),
                                                  (REQUEST_ID_HEADER, request_id.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, answer)
        finally:
            method, route = method_of(scope), self.templates.of(scope)
            HTTP_REQUESTS.labels(method, route, str(status)).inc()
            HTTP_SECONDS.labels(method, route).observe(time.perf_counter() - started)
            context.request_id.reset(named)
