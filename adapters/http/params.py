"""Path and query parameters are checked before any route looks anything up with them (see
``adapters.api.params``)."""

from __future__ import annotations

from fastapi import Request

from adapters.api.params import check_plain


def check_plain_parameters(request: Request) -> None:
    """Refuse a path or query value with a control character. Every ``/v1`` route's caller
    dependency calls it first (``adapters.http.dependencies.bearer_of``): a dependency of its
    own cost every request a resolution by FastAPI."""
    for name, value in request.path_params.items():
        if isinstance(value, str):
            check_plain("path", name, value)
    for name, value in request.query_params.multi_items():
        check_plain("query", name, name)
        check_plain("query", name, value)
