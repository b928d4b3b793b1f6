"""Checks on identifiers and free text. Limits are enforced, never silently truncated."""

from __future__ import annotations

import math
import re
import unicodedata

from domain.errors import InvalidIdentifierError, InvalidTextError, TextTooLargeError

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def check_identifier(field: str, value: object, max_length: int = 128, *,
                     path_segment: bool = False) -> str:
    """1..max_length characters, trimmed, no control characters.

    A ``path_segment`` identifier appears as one segment of API paths, so it has no ``/``.
    """
    if not isinstance(value, str) or not value or not value.strip():
        raise InvalidIdentifierError(f"{field} must be a non-blank string", field=field)
    if value != value.strip() or _CONTROL.search(value) or _SURROGATE.search(value):
        raise InvalidIdentifierError(
            f"{field} must not have surrounding whitespace, control characters or unpaired "
            "surrogates", field=field,
        )
    if path_segment and "/" in value:
        raise InvalidIdentifierError(f"{field} must not contain '/'", field=field)
    if len(value) > max_length:
        raise InvalidIdentifierError(
            f"{field} must be at most {max_length} characters",
            field=field, limit=max_length, actual=len(value),
        )
    return value


def check_text(field: str, value: object, max_bytes: int, *, allow_empty: bool = False) -> str:
    """NFC-normalised text whose UTF-8 encoding fits ``max_bytes``."""
    if not isinstance(value, str) or _SURROGATE.search(value):
        raise InvalidTextError(f"{field} must be a valid Unicode string", field=field)
    text = unicodedata.normalize("NFC", value)
    if not allow_empty and not text.strip():
        raise InvalidTextError(f"{field} must not be blank", field=field)
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise TextTooLargeError(
            f"{field} is {size} bytes; the limit is {max_bytes} bytes",
            field=field, limit_bytes=max_bytes, actual_bytes=size,
        )
    return text


def check_bounded_chars(field: str, value: object, max_chars: int) -> str:
    """Trimmed, non-blank text of at most ``max_chars`` characters (reasons, content fields)."""
    if not isinstance(value, str) or not value.strip() or _SURROGATE.search(value):
        raise InvalidTextError(f"{field} must be a non-blank, valid Unicode string",
                               field=field)
    if value != value.strip():
        raise InvalidTextError(f"{field} must not have surrounding whitespace", field=field)
    if len(value) > max_chars:
        raise TextTooLargeError(
            f"{field} is {len(value)} characters; the limit is {max_chars}",
            field=field, limit_chars=max_chars, actual_chars=len(value),
        )
    return value


def is_plain_json(value: object) -> bool:
    """Strings keys, finite numbers, valid Unicode: what survives a JSON round trip unchanged."""
    if isinstance(value, str):
        return not _SURROGATE.search(value)
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list | tuple):
        return all(is_plain_json(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_plain_json(k) and is_plain_json(v)
                   for k, v in value.items())
    return False
