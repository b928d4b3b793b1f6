"""Checks of the parameters that read-model queries take from callers.

A wrong value is ``invalid_request``, naming the parameter, so HTTP clients and the CLI see
the same error whichever query refused it.
"""

from __future__ import annotations

from collections.abc import Sequence

from domain.errors import InvalidRequestError


def check_choice(field: str, value: object, choices: Sequence[str]) -> str:
    """One of ``choices``."""
    if value not in choices:
        raise InvalidRequestError(f"{field} must be one of {', '.join(choices)}",
                                  field=field, **{field: value})
    return str(value)


def check_optional_choice(field: str, value: object, choices: Sequence[str]) -> str | None:
    """``None`` (no filter) or one of ``choices``."""
    return None if value is None else check_choice(field, value, choices)


def check_bounded_int(field: str, value: object, maximum: int) -> int:
    """An ``int`` in ``[1, maximum]`` (not a ``bool``, nor a float that happens to be whole)."""
    if type(value) is not int or not 1 <= value <= maximum:
        raise InvalidRequestError(f"{field} must be an integer in [1, {maximum}]",
                                  field=field, **{field: value}, maximum=maximum)
    return value
