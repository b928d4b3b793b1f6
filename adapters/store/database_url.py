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


def require_answer(database_url: str, timeout_seconds: int) -> None:
    """Connect once and hang up: a server that refuses, or a database or user it does not
    know, is reported at once as ``StoreUnavailableError``; one that is merely busy may take
    up to ``timeout_seconds`` to answer."""
    import psycopg  # noqa: PLC0415 - only the commands that open PostgreSQL load the driver

    from application.store import StoreUnavailableError  # noqa: PLC0415 - likewise

    split_postgres_url(database_url)  # a malformed URL is invalid_request, not an outage
    try:
        psycopg.connect(database_url, connect_timeout=timeout_seconds).close()
    except psycopg.OperationalError as error:
        raise StoreUnavailableError(str(error).strip()) from error
