"""A server span for every HTTP request, imported only with tracing on.

Written for this service instead of OpenTelemetry's FastAPI instrumentation, which finds each
request's route by matching it against every route again and sets a dozen attributes even on
the requests the sampler drops. Here an unsampled request costs the span's start and end: the
name and attributes are set only on a recorded span, from the route template routing found.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.propagate import extract
from opentelemetry.trace import SpanKind, Status, StatusCode

from adapters.observability.http import RouteTemplates, method_of

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

UNTRACED_PATHS = frozenset({"/healthz", "/metrics"})  # scraped every few seconds
PROPAGATED = (b"traceparent", b"tracestate")


class TraceRequests:
    def __init__(self, app: ASGIApp, routes: list[Any], tracer: Any) -> None:
        self.app = app
        self.templates = RouteTemplates(routes)
        self.tracer = tracer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNTRACED_PATHS:
            await self.app(scope, receive, send)
            return
        carrier = {name.decode(): value.decode("latin-1") for name, value in scope["headers"]
                   if name in PROPAGATED}
        status = 500  # if the app fails before answering

        async def answer(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        method = method_of(scope)
        with self.tracer.start_as_current_span(
                method, context=extract(carrier) if carrier else None,
                kind=SpanKind.SERVER) as span:
            try:
                await self.app(scope, receive, answer)
            finally:
                if span.is_recording():
                    self._describe(span, scope, method, status)

    def _describe(self, span: trace.Span, scope: Scope, method: str, status: int) -> None:
        route = self.templates.of(scope)
        span.update_name(f"{method} {route}")
        span.set_attributes({"http.request.method": method, "http.route": route,
                             "url.path": scope["path"], "http.response.status_code": status})
        if status >= 500:
            span.set_status(Status(StatusCode.ERROR))
