"""The FastAPI application, wired to one write model and its read models."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager
from importlib.metadata import version

from fastapi import FastAPI

from adapters.http.errors import install_error_handlers
from adapters.http.limits import MAX_BODY_BYTES, BodyLimit
from adapters.http.review_page import review_page_router
from adapters.http.routes import ops, router
from adapters.projection_runtime import start_projection
from adapters.settings import Settings
from adapters.workers import worker_pool
from application.dreaming import Dreaming
from projections.catalog import READ_MODELS
from projections.runs import RUNS

DESCRIPTION = """Artifact Dreaming: Sources and Memory entries in, reviewed Experiences and Skills
out. Every command returns the event `position` it produced; list reads accept `after=<position>`
to wait for their read model to include it. Errors are `{"error": {"code", "message",
"details"}}` with stable codes."""


def create_app(dreaming: Dreaming, settings: Settings,
               max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    """The API; its read models follow the store while the server runs (lifespan)."""

    @asynccontextmanager
    async def lifespan(api: FastAPI) -> AsyncIterator[None]:
        with ExitStack() as stack:
            api.state.read_models = {
                spec.name: stack.enter_context(start_projection(spec, settings))
                for spec in READ_MODELS}
            api.state.workers = None
            if settings.workers:
                runs = api.state.read_models[RUNS.name]
                api.state.workers = stack.enter_context(
                    worker_pool(dreaming, settings, runs.view.claimable))
            yield

    api = FastAPI(title="Artifact Dreaming", version=version("artifact-dreaming"),
                  description=DESCRIPTION, lifespan=lifespan)
    api.state.dreaming = dreaming
    install_error_handlers(api)
    api.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    api.include_router(router)
    api.include_router(ops)
    if settings.review_page:
        api.include_router(review_page_router())
    return api
