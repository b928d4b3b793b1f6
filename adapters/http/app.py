"""The FastAPI application, wired to one write model."""

from __future__ import annotations

from importlib.metadata import version

from fastapi import FastAPI

from adapters.http.errors import install_error_handlers
from adapters.http.limits import MAX_BODY_BYTES, BodyLimit
from adapters.http.routes import ops, router
from application.dreaming import Dreaming

DESCRIPTION = """Artifact Dreaming: Sources and Memory entries in, reviewed Experiences and Skills
out. Every command returns the event `position` it produced. Errors are
`{"error": {"code", "message", "details"}}` with stable codes."""


def create_app(dreaming: Dreaming, max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    api = FastAPI(title="Artifact Dreaming", version=version("artifact-dreaming"),
                  description=DESCRIPTION)
    api.state.dreaming = dreaming
    install_error_handlers(api)
    api.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    api.include_router(router)
    api.include_router(ops)
    return api
