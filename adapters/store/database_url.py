"""A PostgreSQL database URL, checked before anything connects with it."""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit

from domain.errors import InvalidRequestError

SHAPE = "DREAM_DATABASE_URL must look like postgresql://user:password@host:port/dbname"


class DatabaseUrlError(InvalidRequestError, ValueError):
    """A database URL that is not a PostgreSQL URL: ``invalid_request``, never a traceback
    (and still the ValueError it always was)."""


def split_postgres_url(database_url: str) -> tuple[SplitResult, int | None]:
    """The URL's parts and its port; a URL that does not parse (a bad IPv6 host, a port that
    is not a number) or is not PostgreSQL's is refused here, not at the first connection."""
    try:
        url = urlsplit(database_url)
        port = url.port
    except ValueError:
        raise DatabaseUrlError(SHAPE, field="DREAM_DATABASE_URL") from None
    if url.scheme not in ("postgresql", "postgres") or not url.path.strip("/"):
        raise DatabaseUrlError(SHAPE, field="DREAM_DATABASE_URL")
    return url, port
