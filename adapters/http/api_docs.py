"""The API's reference pages, ``/docs`` (Swagger UI) and ``/redoc``, served with their
scripts and style sheets from an installed package: they render without the internet.

FastAPI's own pages load their files from a CDN, so on a machine without the internet (or
behind a proxy that blocks it) they stay blank. The files come from ``fastapi-offline``, read
once at startup, and are served under ``/docs/assets`` with a long cache lifetime.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.resources import files

from fastapi import APIRouter, Response
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html

ASSETS = "/docs/assets"
# file name -> media type
ASSET_FILES = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "redoc.standalone.js": "text/javascript; charset=utf-8",
    "favicon.png": "image/png",
}
ASSET_HEADERS = {"Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff"}
# ReDoc's footer shows its logo from a CDN: pointed at the local icon instead, so that a page
# opened without the internet makes no request that fails (or that leaks who reads the docs).
ONLINE_ONLY = {"redoc.standalone.js": (b"https://cdn.redoc.ly/redoc/logo-mini.svg",
                                       f"{ASSETS}/favicon.png".encode())}


def api_docs_router(title: str, openapi_url: str = "/openapi.json") -> APIRouter:
    """``GET /docs``, ``GET /redoc`` and their files; not part of the OpenAPI document."""
    router = APIRouter(include_in_schema=False)
    static = files("fastapi_offline").joinpath("static")
    for name, media_type in ASSET_FILES.items():
        body = static.joinpath(name).read_bytes()
        if name in ONLINE_ONLY:
            body = body.replace(*ONLINE_ONLY[name])
        router.add_api_route(f"{ASSETS}/{name}", _asset(body, media_type))

    def swagger_ui() -> Response:
        return get_swagger_ui_html(
            openapi_url=openapi_url, title=f"{title} - Swagger UI",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon.png",
            swagger_ui_parameters={"validatorUrl": None})  # no call to an online validator

    def redoc() -> Response:
        return get_redoc_html(openapi_url=openapi_url, title=f"{title} - ReDoc",
                              redoc_js_url=f"{ASSETS}/redoc.standalone.js",
                              redoc_favicon_url=f"{ASSETS}/favicon.png",
                              with_google_fonts=False)

    router.add_api_route("/docs", swagger_ui)
    router.add_api_route("/redoc", redoc)
    return router


def _asset(body: bytes, media_type: str) -> Callable[[], Response]:
    def serve() -> Response:
        return Response(body, media_type=media_type, headers=ASSET_HEADERS)

    return serve
