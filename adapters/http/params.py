"""Path and query parameters are checked before any route looks anything up with them.

No identifier, cursor, key or search word this service issues or stores has a control
character, and PostgreSQL text cannot even hold NUL: such a value is refused with 422 on every
store alike, with the code its kind of parameter has elsewhere.
"""

from __future__ import annotations

from fastapi import Request

from domain.errors import (
    DomainError,
    InvalidCursorError,
    InvalidIdentifierError,
    InvalidRequestError,
    InvalidScopeIdError,
)
from domain.text import has_control_characters


def _refusal(place: str, name: str) -> DomainError:
    message = f"{name} must not contain control characters"
    if name == "scope_id":
        return InvalidScopeIdError(message, field=name)
    if name == "cursor":
        return InvalidCursorError(message, field=name, reason="control characters")
    if place == "path":  # every other path parameter is an identifier (integers are typed)
        return InvalidIdentifierError(message, field=name)
    return InvalidRequestError(message, field=name)


async def plain_parameters(request: Request) -> None:
    """Refuse a path or query value with a control character (a router dependency; ``async``
    because it does no I/O, so it runs on the event loop instead of taking a worker thread)."""
    for name, value in request.path_params.items():
        if isinstance(value, str):
            check_plain("path", name, value)
    for name, value in request.query_params.multi_items():
        check_plain("query", name, name)
        check_plain("query", name, value)


def check_plain(place: str, name: str, value: str) -> None:
    """Refuse a ``path`` or ``query`` value (or name) with a control character."""
    if has_control_characters(value):
        raise _refusal(place, name)
