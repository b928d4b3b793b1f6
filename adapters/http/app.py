"""The FastAPI application, wired to one deployment and its read models."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import ExitStack, asynccontextmanager
from importlib.metadata import version
from threading import Thread
from typing import Any

from fastapi import FastAPI

from adapters.http.errors import install_error_handlers
from adapters.http.limits import MAX_BODY_BYTES, BodyLimit
from adapters.http.review_page import review_page_router
from adapters.http.routes import ops, router
from adapters.http.token_routes import tokens_router
from adapters.settings import Settings
from adapters.store.projection_runtime import start_projection
from adapters.store.shared_feed import SharedFeed
from adapters.store.view_host import view_lease
from adapters.workers.pool import worker_pool
from application.bootstrap import Dreaming
from projections.catalog import READ_MODELS
from projections.runs import RUNS

log = logging.getLogger("dream.http")

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


def create_app(dreaming: Dreaming, settings: Settings,
               max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    """The API; its read models follow the store while the server runs (lifespan)."""

    @asynccontextmanager
    async def lifespan(api: FastAPI) -> AsyncIterator[None]:
        with ExitStack() as stack:  # stops in reverse: the workers, then the read models
            feed = SharedFeed(settings)  # every view reads and decodes each event once
            stack.callback(_stop_quietly, "the shared event feed", feed.close)
            api.state.read_models = {}
            stack.callback(_stop_all_quietly, api.state.read_models)  # the ones started
            for spec in READ_MODELS:
                api.state.read_models[spec.name] = start_projection(
                    spec, settings, feed, view_lease(settings, spec.name))
            api.state.workers = None
            if settings.workers:
                runs = api.state.read_models[RUNS.name]
                pool = worker_pool(dreaming, settings, runs.fresh(runs.view.claimable)).start()
                stack.callback(_stop_quietly, "the workers", pool.stop)
                api.state.workers = pool
            yield

    api = FastAPI(title="Artifact Dreaming", version=version("artifact-dreaming"),
                  description=DESCRIPTION, lifespan=lifespan)
    api.state.dreaming = dreaming
    api.state.read_wait_seconds = settings.read_wait_seconds
    install_error_handlers(api)
    api.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    api.include_router(router)
    api.include_router(tokens_router)
    api.include_router(ops)
    if settings.review_page:
        api.include_router(review_page_router())
    return api
