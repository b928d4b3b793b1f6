"""Traces with OpenTelemetry: off unless the standard ``OTEL_*`` variables ask for them.

On when ``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``, or ``console`` for a terminal)
or an OTLP endpoint is set (``OTEL_EXPORTER_OTLP_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``). The SDK reads the rest itself: the sampler
(``OTEL_TRACES_SAMPLER``, ``OTEL_TRACES_SAMPLER_ARG``), the service name and resource, the
exporter's endpoint, headers and timeout.

A Dream run is traced across processes: its admission stores the request's ``traceparent``
with the run's ``Accepted`` event, and the worker that claims it, in any process and however
much later, continues that trace (claim, evidence, model call, commit). While tracing is off
nothing of OpenTelemetry is imported.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI

SERVICE_NAME = "artifact-dreaming"
TRACER_NAME = "artifact_dreaming"
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")

_tracer: Any = None  # set once by configure_tracing, for this process's whole life
_provider: Any = None


def tracing_requested() -> bool:
    exporter = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none" or os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    return bool(exporter) or any(os.environ.get(name) for name in ENDPOINT_VARIABLES)


def configure_tracing(role: str) -> bool:
    """Start this process's tracer provider if the environment asks for traces; whether it
    did. Spans are exported in batches and flushed when the process exits."""
    global _tracer, _provider  # noqa: PLW0603 - one provider per process, as OpenTelemetry has it
    if _tracer is not None or not tracing_requested():
        return _tracer is not None
    from opentelemetry import trace  # noqa: PLC0415 - only with tracing on
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor  # noqa: PLC0415
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor  # noqa: PLC0415
    from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415

    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME",
                                                               SERVICE_NAME),
                                "process.role": role})
    provider = TracerProvider(resource=resource)  # the sampler comes from OTEL_TRACES_SAMPLER
    provider.add_span_processor(BatchSpanProcessor(_exporter()))
    trace.set_tracer_provider(provider)
    atexit.register(provider.shutdown)  # the last batch is sent before the process ends
    _provider = provider
    HTTPXClientInstrumentor().instrument()  # model calls (the OpenAI client speaks httpx)
    PsycopgInstrumentor().instrument(enable_commenter=False)
    _tracer = trace.get_tracer(TRACER_NAME)
    return True


def flush_tracing() -> None:
    """Send the spans still batched. A server calls it as it shuts down: uvicorn ends by
    raising the signal it stopped on again, and a process killed so runs no exit handler."""
    if _provider is not None:
        _provider.force_flush()


def _exporter() -> Any:
    if os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter  # noqa: PLC0415

        return ConsoleSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
        OTLPSpanExporter,
    )

    return OTLPSpanExporter()


def instrument_app(api: FastAPI) -> None:
    """A server span for every HTTP request, when tracing is on (the outermost middleware)."""
    if _tracer is None:
        return
    from adapters.observability.request_spans import TraceRequests  # noqa: PLC0415

    api.add_middleware(TraceRequests, routes=api.router.routes, tracer=_tracer)


def current_traceparent() -> str | None:
    """The current span's W3C ``traceparent``, to store with what continues elsewhere."""
    if _tracer is None:
        return None
    from opentelemetry.propagate import inject  # noqa: PLC0415

    carrier: dict[str, str] = {}
    inject(carrier)
    return carrier.get("traceparent")


def current_trace_id() -> str | None:
    """The current trace's id in hex, for log lines (None outside a sampled span)."""
    if _tracer is None:
        return None
    from opentelemetry import trace  # noqa: PLC0415

    context = trace.get_current_span().get_span_context()
    return f"{context.trace_id:032x}" if context.is_valid else None


def tracing_on() -> bool:
    return _tracer is not None


def continued(name: str, trace_parent: str | None, attributes: dict[str, str | int], *,
              linked: bool = False) -> AbstractContextManager[Any]:
    """A span continuing the trace ``trace_parent`` names (a new trace when there is none);
    ``linked``: with a link to the current span, whose trace it leaves (a request that acts
    on an earlier run)."""
    if _tracer is None:
        return nullcontext()
    return _continued(name, trace_parent, attributes, linked)


@contextmanager
def _continued(name: str, trace_parent: str | None, attributes: dict[str, str | int],
               linked: bool) -> Iterator[Any]:
    from opentelemetry import trace  # noqa: PLC0415
    from opentelemetry.propagate import extract  # noqa: PLC0415

    parent = extract({"traceparent": trace_parent}) if trace_parent else None
    here = trace.get_current_span().get_span_context()
    links = [trace.Link(here)] if linked and here.is_valid else None
    with _tracer.start_as_current_span(name, context=parent, attributes=attributes,
                                       links=links) as span:
        yield span


def span(name: str, attributes: dict[str, str | int]) -> AbstractContextManager[Any]:
    """A child of the current span, when tracing is on."""
    if _tracer is None:
        return nullcontext()
    started: AbstractContextManager[Any] = _tracer.start_as_current_span(name,
                                                                         attributes=attributes)
    return started
