"""Checks on identifiers and free text. Limits are enforced, never silently truncated."""

from __future__ import annotations

import math
import re
import unicodedata

from domain.errors import (
    DomainError,
    InvalidIdentifierError,
    InvalidScopeIdError,
    InvalidTextError,
    JsonTooDeepError,
    TextTooLargeError,
)

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
# ADR-0009: RFC 3986 unreserved characters plus ":" and "@", all of which a URL path segment
# carries unescaped; no whitespace, controls, non-ASCII look-alikes or invisible characters.
ID_ALPHABET = "A-Z a-z 0-9 . _ ~ : @ -"
_ID_SEGMENT = re.compile(r"[A-Za-z0-9._~:@-]+")
_DOT_SEGMENTS = frozenset({".", ".."})
# Scope ids use a subset of the identifier alphabet (ADR-0002, ADR-0009).
_SCOPE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
MAX_JSON_DEPTH = 64
"""Free-form JSON values (Source payloads, Prompt parameters) nest at most this many arrays and
objects (``{"a": [1]}`` nests 2); deeper ones are refused with ``json_too_deep``."""


def check_identifier(field: str, value: object, max_length: int = 128, *,
                     path_segment: bool = True,
                     error: type[DomainError] = InvalidIdentifierError) -> str:
    """A new identifier: 1..max_length characters of the identifier alphabet (ADR-0009).

    A ``path_segment`` identifier is one segment of API paths, so it has no ``/``; otherwise
    (Source ids) ``/`` separates segments, none of them empty, ``.`` or ``..``.
    """
    text = check_recorded_identifier(field, value, max_length, path_segment=path_segment,
                                     error=error)
    segments = [text] if path_segment else text.split("/")
    if not all(_ID_SEGMENT.fullmatch(part) and part not in _DOT_SEGMENTS for part in segments):
        rule = (f"use only {ID_ALPHABET} and must not be '.' or '..'" if path_segment else
                f"be '/'-separated segments of {ID_ALPHABET}, none empty, '.' or '..'")
        raise error(f"{field} must {rule}", field=field, alphabet=ID_ALPHABET)
    return text


def check_scope_id(scope_id: object) -> str:
    """A subset of the identifier alphabet (ADR-0009); ``.`` and ``..`` would be path steps."""
    if (not isinstance(scope_id, str) or not _SCOPE_ID.fullmatch(scope_id)
            or scope_id in _DOT_SEGMENTS):
        raise InvalidScopeIdError(
            "scope_id must be 1-128 characters of A-Z a-z 0-9 . _ : - and not '.' or '..'",
            field="scope_id",
        )
    return scope_id


def check_recorded_identifier(field: str, value: object, max_length: int = 128, *,
                              path_segment: bool = False,
                              error: type[DomainError] = InvalidIdentifierError) -> str:
    """The rules identifiers were recorded under before the alphabet: 1..max_length characters,
    trimmed, no control characters.

    For value objects rebuilt from stored events and for names that only look records up, so
    what was stored under these rules still loads and replays.
    """
    if not isinstance(value, str) or not value or not value.strip():
        raise error(f"{field} must be a non-blank string", field=field)
    if value != value.strip() or _CONTROL.search(value) or _SURROGATE.search(value):
        raise error(
            f"{field} must not have surrounding whitespace, control characters or unpaired "
            "surrogates", field=field,
        )
    if path_segment and "/" in value:
        raise error(f"{field} must not contain '/'", field=field)
    if len(value) > max_length:
        raise error(
            f"{field} must be at most {max_length} characters",
            field=field, limit=max_length, actual=len(value),
        )
    return value


def check_label(field: str, value: object, max_length: int) -> str:
    """A human label (a token's, say): recorded-identifier rules, and nothing invisible or
    direction-changing (Unicode format characters such as U+200B and U+202E)."""
    text = check_recorded_identifier(field, value, max_length)
    if any(unicodedata.category(char) == "Cf" for char in text):
        raise InvalidIdentifierError(f"{field} must not contain invisible formatting characters",
                                     field=field)
    return text


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


def is_plain_json(value: object, field: str = "value") -> bool:
    """String keys, finite numbers, valid Unicode: what survives a JSON round trip unchanged.

    Walked with an explicit stack, so nesting costs no Python stack frames (and a cycle ends);
    arrays and objects nested deeper than ``MAX_JSON_DEPTH`` raise ``json_too_deep``.
    """
    pending: list[tuple[object, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if not isinstance(item, list | tuple | dict):
            if not _is_plain_scalar(item):
                return False
            continue
        if depth >= MAX_JSON_DEPTH:
            raise JsonTooDeepError(
                f"{field} nests arrays and objects deeper than {MAX_JSON_DEPTH} levels",
                field=field, limit_depth=MAX_JSON_DEPTH)
        if isinstance(item, dict):
            if not all(isinstance(key, str) and _is_plain_scalar(key) for key in item):
                return False
            item = list(item.values())
        pending.extend((child, depth + 1) for child in item)
    return True


def _is_plain_scalar(value: object) -> bool:
    if isinstance(value, str):
        return not _SURROGATE.search(value)
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, bool | int)


def has_control_characters(text: str) -> bool:
    """Whether ``text`` holds a C0 control character or DEL: nothing this service issues or
    stores does, and PostgreSQL text cannot even hold NUL."""
    return _CONTROL.search(text) is not None
