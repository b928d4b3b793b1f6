"""The API's routes as FastAPI resolves them, whichever way its release keeps included routers
(a flat list of ``APIRoute``, or included routers that list their effective routes)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from fastapi.routing import APIRoute


def api_routes(routes: Iterable[Any]) -> Iterator[Any]:
    """Every API route under ``routes``, with its full ``path``, ``methods``, ``dependant``
    and ``matches``."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif hasattr(route, "effective_route_contexts"):
            yield from route.effective_route_contexts()
