"""The client's errors: one exception class per error code of the API.

When a code belongs to a domain rule, its exception is *also* an instance of that rule's
:class:`domain.errors.DomainError` subclass, so ``except ArtifactConflictError`` works the same
in-process and over HTTP.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from domain.errors import DomainError

if TYPE_CHECKING:
    import httpx

__all__ = [
    "ERRORS_BY_CODE",
    "AccessUnavailableError",
    "ApiError",
    "HttpError",
    "InternalError",
    "MethodNotAllowedError",
    "NotFoundError",
    "PayloadTooLargeError",
    "ReadModelBehindError",
    "ReadModelUnavailableError",
    "StoreUnavailableError",
    "error_class",
    "error_from",
]


class ApiError(Exception):
    """The API refused a request. Carries the HTTP status and the error envelope's fields."""

    code: str = "http_error"

    def __init__(self, message: str, *, status: int, code: str | None = None,
                 details: Mapping[str, Any] | None = None,
                 response_headers: Mapping[str, str] | None = None) -> None:
        Exception.__init__(self, message)
        self.message = message
        self.status = status
        self.code = type(self).code if code is None else code
        self.details: dict[str, Any] = dict(details or {})
        self.response_headers: Mapping[str, str] = response_headers or {}

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(status={self.status}, code={self.code!r}, "
                f"message={self.message!r}, details={self.details!r})")


class HttpError(ApiError):
    """A response without the API's error envelope (e.g. from a proxy)."""

    code = "http_error"


class NotFoundError(ApiError):
    """No such route."""

    code = "not_found"


class MethodNotAllowedError(ApiError):
    code = "method_not_allowed"


class PayloadTooLargeError(ApiError):
    """The request body exceeded the server's limit (``details.limit_bytes``)."""

    code = "payload_too_large"


class InternalError(ApiError):
    code = "internal_error"


class AccessUnavailableError(ApiError):
    code = "access_unavailable"


class ReadModelBehindError(ApiError):
    """The read model had not reached the position the read needed in time; retry."""

    code = "read_model_behind"


class ReadModelUnavailableError(ApiError):
    code = "read_model_unavailable"


class StoreUnavailableError(ApiError):
    """The event store did not answer in time; nothing was half-stored, retry."""

    code = "store_unavailable"


_TRANSPORT_ERRORS: tuple[type[ApiError], ...] = (
    HttpError, NotFoundError, MethodNotAllowedError, PayloadTooLargeError, InternalError,
    AccessUnavailableError, ReadModelBehindError, ReadModelUnavailableError,
    StoreUnavailableError,
)


def _domain_errors() -> dict[str, type[DomainError]]:
    """Every DomainError subclass that declares its own code, first declaration wins."""
    found: dict[str, type[DomainError]] = {}
    pending = list(DomainError.__subclasses__())
    while pending:
        cls = pending.pop(0)
        pending.extend(cls.__subclasses__())
        if issubclass(cls, ApiError) or "code" not in vars(cls):
            continue
        found.setdefault(cls.code, cls)
    return found


def _combined(domain_class: type[DomainError]) -> type[ApiError]:
    name = f"Api{domain_class.__name__}"
    combined = type(name, (ApiError, domain_class), {
        "code": domain_class.code, "__module__": __name__, "__qualname__": name,
        "__doc__": f"{domain_class.__doc__ or domain_class.__name__} (over HTTP)"})
    return cast(type[ApiError], combined)


ERRORS_BY_CODE: dict[str, type[ApiError]] = {
    **{code: _combined(cls) for code, cls in _domain_errors().items()},
    **{cls.code: cls for cls in _TRANSPORT_ERRORS},
}


def error_class(code: str) -> type[ApiError]:
    """The exception class raised for ``code``; :class:`ApiError` for an unknown code."""
    return ERRORS_BY_CODE.get(code, ApiError)


def error_from(response: httpx.Response) -> ApiError:
    """The typed error a failed response stands for."""
    headers = response.headers
    try:
        envelope = response.json()
    except ValueError:
        envelope = None
    error = envelope.get("error") if isinstance(envelope, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        code: str = error["code"]
        details = error.get("details")
        return error_class(code)(str(error.get("message", "")), status=response.status_code,
                                 code=code,
                                 details=details if isinstance(details, dict) else {},
                                 response_headers=headers)
    reason = response.reason_phrase or "error"
    return HttpError(f"HTTP {response.status_code} {reason} without an API error body",
                     status=response.status_code,
                     details={"content_type": headers.get("content-type", ""),
                              "body": response.text[:500]},
                     response_headers=headers)
