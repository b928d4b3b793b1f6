"""The error envelope ``{"error": {"code", "message", "details"}}`` and status mapping.

No stack trace, exception class or internal name ever reaches a response.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from adapters.projection_runtime import ProjectionFailedError, ProjectionStoppedError
from domain.errors import DomainError

log = logging.getLogger("dream.http")

_STATUS_CODES: dict[int, tuple[str, ...]] = {
    401: ("unauthorized",),
    403: ("forbidden", "access_revoked"),
    404: ("not_found", "scope_not_found", "source_not_found", "artifact_not_found",
          "revision_not_found", "memory_entry_not_found", "reference_not_found",
          "candidate_not_found", "dream_not_found", "principal_not_found",
          "aggregate_not_found"),
    409: ("scope_exists", "source_conflict", "source_withdrawn", "artifact_exists",
          "artifact_conflict", "memory_entry_exists", "candidate_exists", "candidate_conflict",
          "candidate_terminal", "write_conflict", "idempotency_conflict", "principal_exists"),
    413: ("payload_too_large",),
    429: ("capacity_exceeded",),
    503: ("access_unavailable", "capability_unavailable", "read_model_lagging",
          "read_model_unavailable"),
}
STATUS_BY_CODE = {code: status for status, codes in _STATUS_CODES.items() for code in codes}
UNPROCESSABLE = 422
_ERROR_HEADERS = {"unauthorized": {"WWW-Authenticate": "Bearer"},
                  "capacity_exceeded": {"Retry-After": "1"}}


def status_for(code: str) -> int:
    """Every other domain rule violation is a 422 with its own code."""
    return STATUS_BY_CODE.get(code, UNPROCESSABLE)


def error_response(status: int, code: str, message: str, details: dict[str, Any] | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": {"code": code, "message": message,
                      "details": jsonable_encoder(details or {})}}
    return JSONResponse(body, status_code=status, headers=headers)


def _domain_error(_: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, DomainError)
    headers = _ERROR_HEADERS.get(error.code)
    return error_response(status_for(error.code), error.code, error.message, error.details,
                          headers)


def _validation_error(_: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    problems = [{"loc": [str(part) for part in e.get("loc", ())], "msg": e.get("msg", ""),
                 "type": e.get("type", "")} for e in error.errors()]
    return error_response(UNPROCESSABLE, "invalid_request",
                          "the request is not valid JSON of the expected shape",
                          {"errors": problems})


def _http_error(_: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code, "http_error")
    return error_response(error.status_code, code, str(error.detail))


def _read_model_behind(_: Request, error: Exception) -> JSONResponse:
    # A read model that has not reached the requested position (or has stopped) is a
    # temporary condition, never a server bug.
    code = "read_model_lagging" if isinstance(error, TimeoutError) else "read_model_unavailable"
    return error_response(503, code, "the read model is not available at that position yet",
                          headers={"Retry-After": "1"})


def _unexpected(_: Request, error: Exception) -> JSONResponse:
    log.exception("unhandled error", exc_info=error)
    return error_response(500, "internal_error", "the server could not complete the request")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(DomainError, _domain_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    for error in (TimeoutError, ProjectionFailedError, ProjectionStoppedError):
        app.add_exception_handler(error, _read_model_behind)
    app.add_exception_handler(Exception, _unexpected)
