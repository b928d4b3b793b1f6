"""The web review page (``DREAM_REVIEW_PAGE``, off by default): static files under ``/review``;
and the operations page (``DREAM_OPS_PAGE``, off by default) under ``/ops``, served alike.

The page carries no data and no secret. It runs in the reviewer's browser and calls the ``/v1``
review routes with a bearer token the reviewer pastes (kept in the tab's sessionStorage), so
every read and decision goes through the same access checks as any other client. The responses
forbid inline scripts and styles, framing, MIME sniffing and referrers.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.resources import files

from fastapi import APIRouter, Response

CONTENT_SECURITY_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; "
                           "connect-src 'self'; frame-ancestors 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
# URL path -> (file in adapters/http/static, media type)
PAGE_FILES = {
    "/review": ("review.html", "text/html; charset=utf-8"),
    "/review/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/review/app.css": ("app.css", "text/css; charset=utf-8"),
    "/review/page.js": ("page.js", "text/javascript; charset=utf-8"),
    "/review/page.css": ("page.css", "text/css; charset=utf-8"),
}
# The operations page draws ``GET /v1/ops/overview`` (deployment administrators only).
OPS_PAGE_FILES = {
    "/ops": ("ops.html", "text/html; charset=utf-8"),
    "/ops/ops.js": ("ops.js", "text/javascript; charset=utf-8"),
    "/ops/ops.css": ("ops.css", "text/css; charset=utf-8"),
    "/ops/page.js": ("page.js", "text/javascript; charset=utf-8"),  # shared with /review
    "/ops/page.css": ("page.css", "text/css; charset=utf-8"),
}


def _endpoint(body: bytes, media_type: str) -> Callable[[], Response]:
    def serve() -> Response:
        return Response(body, media_type=media_type, headers=SECURITY_HEADERS)

    return serve


def review_page_router() -> APIRouter:
    """``GET /review`` and its script and style sheet, read once; not part of the OpenAPI."""
    return _static_router(PAGE_FILES)


def ops_page_router() -> APIRouter:
    """``GET /ops`` and its script and style sheet, read once; not part of the OpenAPI."""
    return _static_router(OPS_PAGE_FILES)


def _static_router(page_files: dict[str, tuple[str, str]]) -> APIRouter:
    static = files("adapters.http").joinpath("static")
    router = APIRouter(include_in_schema=False)
    for path, (name, media_type) in page_files.items():
        router.add_api_route(path, _endpoint(static.joinpath(name).read_bytes(), media_type),
                             methods=["GET"], include_in_schema=False)
    return router
