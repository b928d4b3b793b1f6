"""The FastAPI application, wired to one deployment and its read models."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from functools import partial
from importlib.metadata import version
from threading import Thread
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.telemetry import TelemetryConfig
from starlette.routing import Route

from adapters.http.api_docs import api_docs_router
from adapters.http.errors import install_error_handlers
from adapters.http.limits import MAX_BODY_BYTES, BodyLimit
from adapters.http.priority import CountRequests
from adapters.http.review_page import ops_page_router, review_page_router
from adapters.http.routes import ops, v1
from adapters.http.routes.webhooks import webhooks_router
from adapters.http.token_routes import tokens_router
from adapters.mcp.http import PATH as MCP_PATH
from adapters.mcp.http import McpEndpoint
from adapters.observability.http import ObserveRequests
from adapters.observability.tracing import flush_tracing, instrument_app
from adapters.settings import Settings
from adapters.store.foreground import Foreground
from adapters.store.projection_runtime import RunningProjection, start_projection
from adapters.store.shared_feed import SharedFeed
from adapters.store.view_host import view_lease
from adapters.store.webhook_outbox import webhook_outbox
from adapters.workers.pool import WorkerPool, patiently, worker_pool
from adapters.workers.webhooks import WebhookDelivery
from application.bootstrap import Dreaming
from projections.auto_records import AUTO_RECORDS
from projections.catalog import READ_MODELS
from projections.event_feed import EVENT_FEED
from projections.runs import RUNS

log = logging.getLogger("dream.http")
# How long a server that has opened the store waits for each read model's first connections.
STARTUP_PATIENCE_SECONDS = 30.0

DESCRIPTION = """Artifact Dreaming: Sources and Memory entries in, reviewed Experiences and Skills
out. Every command returns the event `position` it produced, and every read of an aggregate the
position of its last event. List reads include every event recorded before the request arrived
(read-your-writes, waiting at most `DREAM_READ_WAIT_SECONDS`, else 503 `read_model_behind`) and
answer the view position they were served from in `X-Dream-View-Position`. Errors are
`{"error": {"code", "message", "details"}}` with stable codes."""


def _stop_quietly(what: str, stop: Callable[[], None]) -> None:
    """Shutting down never fails on one part: in a store outage a part may not stop cleanly,
    and what it held is picked up on the next start (tracking positions, leases)."""
    try:
        stop()
    except Exception:
        log.warning("stopping %s failed", what, exc_info=True)


def _stop_all_quietly(parts: dict[str, Any]) -> None:
    """Stop the read models side by side: in an outage each may wait for a store call to time
    out, and side by side those waits overlap instead of adding up."""
    stoppers = [Thread(target=_stop_quietly, args=(f"read model {name}", part.stop),
                       name=f"stop-{name}") for name, part in parts.items()]
    for stopper in stoppers:
        stopper.start()
    for stopper in stoppers:
        stopper.join()


@dataclass
class Background:
    """What a serving process runs beside its requests: the read models, and the workers."""

    read_models: dict[str, RunningProjection[Any]] = field(default_factory=dict)
    workers: WorkerPool | None = None
    webhooks: WebhookDelivery | None = None


@contextmanager
def background(dreaming: Dreaming, settings: Settings,
               foreground: Foreground | None = None) -> Iterator[Background]:
    """The read models following the store, and ``settings.workers`` workers, until exit;
    with a ``foreground``, views no reader waits for give way to the requests in flight."""
    with ExitStack() as stack:  # stops in reverse: the workers, then the read models
        # Every view reads and decodes each event once, from one feed.
        feed = patiently(partial(SharedFeed, settings), STARTUP_PATIENCE_SECONDS)
        stack.callback(_stop_quietly, "the shared event feed", feed.close)
        parts = Background()
        stack.callback(_stop_all_quietly, parts.read_models)  # the ones started
        for spec in READ_MODELS:
            parts.read_models[spec.name] = patiently(partial(
                start_projection, spec, settings, feed, view_lease(settings, spec.name),
                foreground), STARTUP_PATIENCE_SECONDS)
        if settings.workers:
            runs, records = parts.read_models[RUNS.name], parts.read_models[AUTO_RECORDS.name]
            pool = worker_pool(dreaming, settings, runs.fresh(runs.view.claimable),
                               lambda: (records.view, runs.view)).start()
            runs.when_applied(pool.wake)  # a run may have become claimable
            if pool.scheduler is not None:  # a record landed: a scope may be due
                records.when_applied(pool.scheduler.wake)
            stack.callback(_stop_quietly, "the workers", pool.stop)
            parts.workers = pool
            feed_model = parts.read_models[EVENT_FEED.name]
            delivery = WebhookDelivery(dreaming, webhook_outbox(settings),
                                       lambda: feed_model.view).start()
            feed_model.when_applied(delivery.wake)  # a new event may be due somewhere
            stack.callback(_stop_quietly, "the webhook deliveries", delivery.stop)
            parts.webhooks = delivery
        yield parts


# FastAPI's own OpenTelemetry (a span for every dependency, endpoint and serialisation, its
# metrics and logs) stays off: with tracing on, requests are traced by
# ``adapters.observability.request_spans``, and they are counted by our metrics.
NATIVE_TELEMETRY_OFF: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False,
                                         "operation_spans": False}


def add_routes(api: FastAPI, *routers: APIRouter) -> None:
    """The routers' routes on the app's own router, as they are. ``include_router`` would keep
    each router as a node that FastAPI matches the request against again at every level it is
    nested in, on every request (performance notes); these routers carry their prefix, tags,
    error responses and dependencies in their routes already."""
    for router in routers:
        api.router.routes.extend(router.routes)


def create_app(dreaming: Dreaming, settings: Settings, max_body_bytes: int = MAX_BODY_BYTES,
               started: Callable[[], object] | None = None) -> FastAPI:
    """The API; its read models follow the store while the server runs (lifespan), which
    calls ``started`` once they and the workers have started."""
    mcp = McpEndpoint(dreaming, settings, lambda: api.state.background)

    @asynccontextmanager
    async def lifespan(api: FastAPI) -> AsyncIterator[None]:
        with background(dreaming, settings, foreground) as parts:
            api.state.background = parts
            api.state.read_models, api.state.workers = parts.read_models, parts.workers
            if started is not None:
                started()
            async with mcp.run():  # the MCP sessions end first, then the parts stop
                yield
        api.state.webhook_outbox.close()
        flush_tracing()  # the spans of the last requests and runs

    api = FastAPI(title="Artifact Dreaming", version=version("artifact-dreaming"),
                  description=DESCRIPTION, lifespan=lifespan, docs_url=None, redoc_url=None,
                  telemetry=NATIVE_TELEMETRY_OFF)
    api.state.dreaming = dreaming
    api.state.read_wait_seconds = settings.read_wait_seconds
    api.state.webhook_outbox = webhook_outbox(settings)  # opened on first use
    install_error_handlers(api)
    api.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    foreground = Foreground()
    api.add_middleware(CountRequests, foreground=foreground)
    add_routes(api, *v1, tokens_router, webhooks_router, ops)
    add_routes(api, api_docs_router(api.title))  # /docs and /redoc, from local files
    # MCP over streamable HTTP: an ASGI app of its own, outside the OpenAPI document.
    api.router.routes.append(Route(MCP_PATH, mcp.app, include_in_schema=False))
    if settings.review_page:
        add_routes(api, review_page_router())
    if settings.ops_page:
        add_routes(api, ops_page_router())
    if settings.metrics:
        api.add_middleware(ObserveRequests, routes=api.router.routes)  # outermost: sees all
    instrument_app(api)  # with tracing on, a server span for every request (ours)
    return api
