"""What a refusal or failure answers, whatever carries it: the stable code, its HTTP status,
the message and details, in the envelope ``{"error": {"code", "message", "details"}}``.

No stack trace, exception class or internal name ever reaches an answer. REST sends it as the
response (``adapters.http.errors``); an MCP tool as its error result.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from fastapi.encoders import jsonable_encoder

from adapters.store.projection_runtime import ProjectionStoppedError, ProjectionUnavailableError
from application.store import OUTAGE_ERRORS
from domain.errors import DomainError

log = logging.getLogger("dream.api")
_UNENCODABLE = re.compile(r"[\ud800-\udfff]")

_STATUS_CODES: dict[int, tuple[str, ...]] = {
    401: ("unauthorized", "token_expired"),
    403: ("forbidden", "access_revoked"),
    404: ("not_found", "scope_not_found", "source_not_found", "artifact_not_found",
          "revision_not_found", "memory_entry_not_found", "reference_not_found",
          "candidate_not_found", "dream_not_found", "principal_not_found",
          "aggregate_not_found", "token_not_found", "webhook_not_found", "subject_not_found",
          "erasure_not_found"),
    409: ("scope_exists", "source_conflict", "source_withdrawn", "artifact_exists",
          "artifact_conflict", "memory_entry_exists", "candidate_exists", "candidate_conflict",
          "candidate_terminal", "write_conflict", "idempotency_conflict", "principal_exists",
          "source_erased", "memory_entry_erased", "already_erased", "record_not_sealed",
          "subject_conflict", "evidence_erased"),
    413: ("payload_too_large",),
    429: ("capacity_exceeded",),
    503: ("access_unavailable", "capability_unavailable", "read_model_behind",
          "read_model_unavailable", "store_unavailable"),
}
STATUS_BY_CODE = {code: status for status, codes in _STATUS_CODES.items() for code in codes}
UNPROCESSABLE = 422
STORE_RETRY_AFTER = "1"
# The store library's outage errors (StoreUnavailableError is one), and the driver's own for
# code that talks to a connection directly (a pool timeout is an OperationalError).
STORE_OUTAGES = (*OUTAGE_ERRORS, psycopg.OperationalError, psycopg.InterfaceError)
_ERROR_HEADERS = {"unauthorized": {"WWW-Authenticate": "Bearer"},
                  "token_expired": {"WWW-Authenticate": 'Bearer error="invalid_token"'},
                  "capacity_exceeded": {"Retry-After": "1"}}


def status_for(code: str) -> int:
    """Every other domain rule violation is a 422 with its own code."""
    return STATUS_BY_CODE.get(code, UNPROCESSABLE)


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """``{"error": {"code", "message", "details"}}``: whatever a message or the details echo of
    the request, the body renders (see ``printable``)."""
    return {"error": {"code": code, "message": printable(message),
                      "details": printable(jsonable_encoder(details or {}))}}


def printable(value: Any) -> Any:
    """A copy of a JSON-like value that always renders as UTF-8 JSON: lone surrogates (a
    client can send ``"\\ud800"``; UTF-8 cannot encode it) become U+FFFD, non-finite numbers
    become their names. Details are built by this service, so their depth is small."""
    if isinstance(value, str):
        return _UNENCODABLE.sub("\ufffd", value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {printable(str(key)): printable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [printable(item) for item in value]
    return value


@dataclass(frozen=True)
class Problem:
    """One refusal as every adapter reports it: the HTTP status, the stable code, a message,
    details and response headers (the MCP tools report the same code, message and details)."""

    status: int
    code: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] | None = None


def shape_problem(errors: Sequence[Mapping[str, Any]]) -> Problem:
    """Input that is not JSON of the expected shape (a pydantic validation error's list)."""
    problems = [{"loc": [str(part) for part in e.get("loc", ())], "msg": e.get("msg", ""),
                 "type": e.get("type", "")} for e in errors]
    return Problem(UNPROCESSABLE, "invalid_request",
                   "the request is not valid JSON of the expected shape", {"errors": problems})


def problem_of(error: Exception) -> Problem:
    """What a command or query that raised ``error`` answers."""
    if isinstance(error, DomainError):
        return Problem(status_for(error.code), error.code, error.message, error.details,
                       _ERROR_HEADERS.get(error.code))
    # A read model that has not reached the position a read needs, or cannot follow the
    # store right now, is a temporary condition, never a server bug.
    if isinstance(error, TimeoutError):
        return Problem(503, "read_model_behind",
                       "the read model has not caught up with the store yet; retry",
                       headers={"Retry-After": "1"})
    if isinstance(error, ProjectionUnavailableError | ProjectionStoppedError):
        return Problem(503, "read_model_unavailable",
                       "the read model cannot follow the store right now (see /healthz); retry",
                       headers={"Retry-After": "1"})
    if isinstance(error, STORE_OUTAGES):
        # The store is down, the connection dropped or a lock was held past its timeout: the
        # command stored all or nothing and may be retried. Logged, as a store bug would land
        # here.
        log.warning("store unavailable: %s: %s", type(error).__name__, error)
        return Problem(503, "store_unavailable",
                       "the event store is not answering right now; nothing was half-stored, "
                       "retry", headers={"Retry-After": STORE_RETRY_AFTER})
    log.exception("unhandled error", exc_info=error)
    return Problem(500, "internal_error", "the server could not complete the request")


