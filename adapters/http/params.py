"""Path and query parameters are checked before any route looks anything up with them (see
``adapters.api.params``)."""

from __future__ import annotations

from fastapi import Request

from adapters.api.params import check_plain


async def plain_parameters(request: Request) -> None:
    """Refuse a path or query value with a control character (a router dependency; ``async``
    because it does no I/O, so it runs on the event loop instead of taking a worker thread)."""
    for name, value in request.path_params.items():
        if isinstance(value, str):
            check_plain("path", name, value)
    for name, value in request.query_params.multi_items():
        check_plain("query", name, name)
        check_plain("query", name, value)
