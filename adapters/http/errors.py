"""REST's answer to a refusal or failure: the envelope of ``adapters.api.problems`` as a JSON
response with its status and headers, counted by code; and the handlers that catch them."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from adapters.api.problems import (
    STORE_OUTAGES,
    UNPROCESSABLE,
    Problem,
    error_body,
    problem_of,
    shape_problem,
)
from adapters.observability.metrics import ERRORS
from adapters.observability.sharing import metrics_recorded
from adapters.store.projection_runtime import ProjectionStoppedError, ProjectionUnavailableError
from domain.errors import DomainError, UnauthorizedError


def error_response(status: int, code: str, message: str, details: dict[str, Any] | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    """The one place every error answer is built (see ``error_body``)."""
    if metrics_recorded():
        ERRORS.labels(code, "http").inc()
    return JSONResponse(error_body(code, message, details), status_code=status, headers=headers)



def problem_response(problem: Problem) -> JSONResponse:
    return error_response(problem.status, problem.code, problem.message, problem.details,
                          problem.headers)


def _problem(_: Request, error: Exception) -> JSONResponse:
    return problem_response(problem_of(error))


def _refusal(request: Request, error: Exception) -> JSONResponse:
    """A command's refusal, unless the caller cannot be authenticated: that answer wins. A
    command proves who calls with its first read, and a route may refuse a value before it
    gets there."""
    assert isinstance(error, DomainError)
    if not isinstance(error, UnauthorizedError):
        unauthenticated = _unauthenticated(request)
        if unauthenticated is not None:
            return unauthenticated
    return problem_response(problem_of(error))


def _unauthenticated(request: Request) -> JSONResponse | None:
    """The answer for a request whose route authenticates by itself and whose caller cannot
    be authenticated (on a worker thread: authentication reads the store)."""
    authenticate_first = getattr(request.state, "authenticate_first", None)
    if authenticate_first is not None:
        try:
            authenticate_first()
        except Exception as refusal:
            return problem_response(problem_of(refusal))
    return None


def _validation_error(request: Request, error: Exception) -> JSONResponse:
    """A body of the wrong shape (422), unless a route that authenticates by itself
    (``dependencies.Bearer``) would have refused the caller first: that answer wins, as it
    does on every other route (on a worker thread: authentication reads the store)."""
    assert isinstance(error, RequestValidationError)
    return _unauthenticated(request) or problem_response(shape_problem(error.errors()))


def _http_error(_: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, HTTPException)
    if error.status_code == 400:  # the framework could not parse the body
        return error_response(UNPROCESSABLE, "invalid_request",
                              "the request body is not valid JSON", {"field": "body"})
    code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code, "http_error")
    return error_response(error.status_code, code, str(error.detail))


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(DomainError, _refusal)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    for error in (TimeoutError, ProjectionUnavailableError, ProjectionStoppedError):
        app.add_exception_handler(error, _problem)
    for outage in STORE_OUTAGES:
        app.add_exception_handler(outage, _problem)
    app.add_exception_handler(Exception, _problem)
