"""Keyset pages, shared by the list queries: page size, opaque cursors, and the page cut.

A page continues strictly after the previous page's last row (a keyset, not an offset), so
rows written between two fetches never shift, repeat or hide the rows of later pages. A
cursor is opaque to clients: unpadded URL-safe base64 of text only this service interprets.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from application.queries import MAX_PAGE
from domain.errors import DomainError, InvalidCursorError
from projections.checks import check_bounded_int
from projections.dialect import Row

MAX_LIMIT = MAX_PAGE  # one bound: the application's queries look as far as this
_CURSOR_CHARS = re.compile(r"[A-Za-z0-9_-]+")


class PageItem(Protocol):
    """A listed value that knows the cursor of the page continuing after it."""

    @property
    def cursor(self) -> str: ...


TItem = TypeVar("TItem", bound=PageItem)


def check_limit(limit: object) -> int:
    return check_bounded_int("limit", limit, MAX_LIMIT)


def keyset_page(rows: Sequence[Row], limit: int,
                item: Callable[[Row], TItem]) -> tuple[list[TItem], str | None]:
    """The first ``limit`` rows as items, and the cursor after the last one, or ``None`` on
    the last page. The query asks for ``limit + 1`` rows: one more says a next page exists."""
    page = [item(row) for row in rows[:limit]]
    return page, (page[-1].cursor if len(rows) > limit else None)


def documents_page(rows: Sequence[Row], limit: int, cursor: Callable[[Row], str],
                   document: Callable[[Row], str] = lambda row: row["document"],
                   ) -> tuple[list[str], str | None]:
    """``keyset_page`` for rows of rendered documents (by default a ``document`` column, and
    the keys ``cursor`` encodes): their texts, and the cursor after the last one, or
    ``None``."""
    return ([document(row) for row in rows[:limit]],
            cursor(rows[limit - 1]) if len(rows) > limit else None)


def cursor_max_chars(max_bytes: int) -> int:
    """The length of the unpadded base64 of at most ``max_bytes`` bytes."""
    return 4 * -(-max_bytes // 3)


def encode_cursor_text(text: str) -> str:
    """Unpadded URL-safe base64 of ``text`` in UTF-8."""
    return base64.urlsafe_b64encode(text.encode()).decode("ascii").rstrip("=")


def decode_cursor_text(cursor: object, max_chars: int) -> str:
    """The text :func:`encode_cursor_text` encoded; anything else is ``invalid_cursor``."""
    if (not isinstance(cursor, str) or not 0 < len(cursor) <= max_chars
            or not _CURSOR_CHARS.fullmatch(cursor) or len(cursor) % 4 == 1):
        raise bad_cursor("the cursor is not URL-safe base64 of the expected size")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        return raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise bad_cursor("the cursor does not decode") from None


def bad_cursor(reason: str) -> InvalidCursorError:
    return InvalidCursorError("cursor is not one this service issued; start again without it",
                              field="cursor", reason=reason)


@dataclass(frozen=True)
class KeyCursors:
    """The cursors of a list paged by one text key, as ``"<tag>:<key>"``: tagged, so a cursor
    of one list is never taken for another's, and checked like the key it names."""

    tag: str
    key_name: str
    max_key_bytes: int
    check_key: Callable[[str], str]  # the key, or a DomainError

    def encode(self, key: str) -> str:
        return encode_cursor_text(f"{self.tag}:{key}")

    def decode(self, cursor: object) -> str:
        """The key a page ended on; anything this service did not issue is ``invalid_cursor``."""
        text = decode_cursor_text(cursor, cursor_max_chars(len(self.tag) + 1 + self.max_key_bytes))
        tag, _, key = text.partition(":")
        if tag != self.tag:
            raise bad_cursor(f"the cursor is not a {self.tag} cursor")
        try:
            return self.check_key(key)
        except DomainError:
            raise bad_cursor(f"the cursor's {self.key_name} is not a valid one") from None
