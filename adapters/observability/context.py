"""The request and run a piece of work belongs to, carried by ``contextvars``: every log line
and metric written while it runs can name them, in any thread or task that inherits them."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

request_id: ContextVar[str | None] = ContextVar("dream_request_id", default=None)
scope_id: ContextVar[str | None] = ContextVar("dream_scope_id", default=None)
run_id: ContextVar[str | None] = ContextVar("dream_run_id", default=None)

_CALLER_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def request_id_from(sent: str | None) -> str:
    """The caller's ``X-Request-Id`` when it is a plain token; a fresh id otherwise, so a
    header cannot write arbitrary text into the logs."""
    if sent is not None and _CALLER_REQUEST_ID.fullmatch(sent):
        return sent
    return secrets.token_hex(16)


@contextmanager
def working_on(scope: str, run: str) -> Iterator[None]:
    """Name the scope and run for everything logged inside."""
    scope_token, run_token = scope_id.set(scope), run_id.set(run)
    try:
        yield
    finally:
        run_id.reset(run_token)
        scope_id.reset(scope_token)
