"""Path and query values are plain text: no identifier, cursor, key or search word this service
issues or stores has a control character, and PostgreSQL text cannot even hold NUL. Such a value
is refused with 422 on every store and transport alike, with the code its kind of parameter has
elsewhere (REST checks every path and query parameter, MCP the arguments that stand for them).
"""

from __future__ import annotations

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


def check_plain(place: str, name: str, value: str) -> None:
    """Refuse a ``path`` or ``query`` value (or name) with a control character."""
    if has_control_characters(value):
        raise _refusal(place, name)
