"""The request spans' middleware, with an in-memory exporter: one server span per request,
named by its route template, continuing the caller's trace; none for the scraped routes; and
nothing exported for a request whose caller did not sample its trace."""

from __future__ import annotations

import anyio
import httpx
from fastapi import FastAPI
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from adapters.observability.request_spans import TraceRequests

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def traced_app() -> tuple[FastAPI, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    api = FastAPI(telemetry={"tracing": False, "metrics": False, "logs": False})

    @api.get("/v1/scopes/{scope_id}")
    def scope(scope_id: str) -> dict[str, str]:
        return {"scope_id": scope_id}

    @api.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @api.get("/boom")
    def boom() -> None:
        raise RuntimeError("boom")

    api.add_middleware(TraceRequests, routes=api.router.routes,
                       tracer=provider.get_tracer("test"))
    return api, exporter


def get(api: FastAPI, path: str, headers: dict[str, str] | None = None) -> int:
    async def call() -> int:
        transport = httpx.ASGITransport(app=api, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            return (await http.get(path, headers=headers)).status_code
    return anyio.run(call)


def test_a_request_is_one_server_span_named_by_its_route_in_the_callers_trace() -> None:
    api, exporter = traced_app()
    assert get(api, "/v1/scopes/team", {
        "traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"}) == 200
    (span,) = exporter.get_finished_spans()
    assert span.name == "GET /v1/scopes/{scope_id}"
    assert span.kind == SpanKind.SERVER
    assert f"{span.context.trace_id:032x}" == TRACE_ID
    assert span.parent is not None
    assert f"{span.parent.span_id:016x}" == "00f067aa0ba902b7"
    assert span.attributes is not None
    assert span.attributes["http.route"] == "/v1/scopes/{scope_id}"
    assert span.attributes["url.path"] == "/v1/scopes/team"
    assert span.attributes["http.response.status_code"] == 200


def test_scrapes_are_not_traced_and_failures_are_marked() -> None:
    api, exporter = traced_app()
    assert get(api, "/healthz") == 200
    assert exporter.get_finished_spans() == ()
    assert get(api, "/boom") == 500
    (span,) = exporter.get_finished_spans()
    assert span.name == "GET /boom"
    assert span.status.status_code == StatusCode.ERROR


def test_an_unsampled_trace_exports_nothing() -> None:
    api, exporter = traced_app()
    assert get(api, "/v1/scopes/team", {
        "traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-00"}) == 200
    assert exporter.get_finished_spans() == ()
