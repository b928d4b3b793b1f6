"""The client's errors: one exception class per stable error code of the API.

Every refusal raises an :class:`ApiError`; a code this client knows raises its own subclass
(``artifact_conflict`` raises :class:`ArtifactConflictError`), an unknown code the base class.
``tests/test_client_errors.py`` checks that every code the server declares has its class here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

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

    @property
    def retry_after(self) -> float | None:
        """The ``Retry-After`` header in seconds, if the server sent one as a number."""
        value = self.response_headers.get("retry-after") or self.response_headers.get(
            "Retry-After")
        try:
            return None if value is None else max(0.0, float(value))
        except ValueError:
            return None  # an HTTP date: not sent by this API, so treated as absent

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


# -- one class per code of a domain rule -----------------------------------------------


class InvalidRequestError(ApiError):
    code = "invalid_request"


class InvalidScopeIdError(ApiError):
    code = "invalid_scope_id"


class InvalidIdentifierError(ApiError):
    code = "invalid_identifier"


class InvalidTextError(ApiError):
    code = "invalid_text"


class TextTooLargeError(ApiError):
    code = "text_too_large"


class InvalidArtifactFamilyError(ApiError):
    code = "invalid_artifact_family"


class InvalidContentError(ApiError):
    code = "invalid_content"


class JsonTooDeepError(ApiError):
    """Free-form JSON nests deeper than the documented limit (``details`` name it)."""

    code = "json_too_deep"


class InvalidSettingsError(ApiError):
    code = "invalid_settings"


class InvalidRoleError(ApiError):
    code = "invalid_role"


class InvalidMemoryCitationError(ApiError):
    code = "invalid_memory_citation"


class EvidenceLimitExceededError(ApiError):
    code = "evidence_limit_exceeded"


class ScopeNotFoundError(ApiError):
    code = "scope_not_found"


class ScopeExistsError(ApiError):
    code = "scope_exists"


class SourceNotFoundError(ApiError):
    code = "source_not_found"


class SourceConflictError(ApiError):
    code = "source_conflict"


class SourceWithdrawnError(ApiError):
    code = "source_withdrawn"


class ReferenceNotFoundError(ApiError):
    code = "reference_not_found"


class ArtifactNotFoundError(ApiError):
    code = "artifact_not_found"


class ArtifactExistsError(ApiError):
    code = "artifact_exists"


class RevisionNotFoundError(ApiError):
    code = "revision_not_found"


class ArtifactConflictError(ApiError):
    code = "artifact_conflict"


class MemoryEntryNotFoundError(ApiError):
    code = "memory_entry_not_found"


class MemoryEntryExistsError(ApiError):
    code = "memory_entry_exists"


class MemoryEntryInactiveError(ApiError):
    code = "memory_entry_inactive"


class MemoryEntryActiveError(ApiError):
    code = "memory_entry_active"


class AuditNotFoundError(ApiError):
    """The audited aggregate has no events in this scope."""

    code = "aggregate_not_found"


class CandidateNotFoundError(ApiError):
    code = "candidate_not_found"


class CandidateExistsError(ApiError):
    code = "candidate_exists"


class CandidateConflictError(ApiError):
    code = "candidate_conflict"


class CandidateTerminalError(ApiError):
    code = "candidate_terminal"


class InvalidCandidateError(ApiError):
    code = "invalid_candidate"


class DreamNotFoundError(ApiError):
    code = "dream_not_found"


class RunTerminalError(ApiError):
    code = "run_terminal"


class AttemptConflictError(ApiError):
    """A superseded or absent attempt tried to write: the fencing token is stale."""

    code = "attempt_conflict"


class ManifestFrozenError(ApiError):
    code = "manifest_frozen"


class BudgetExceededError(ApiError):
    code = "budget_exceeded"


class WriteConflictError(ApiError):
    """Another writer changed an aggregate this command read or wrote; nothing was stored."""

    code = "write_conflict"


class UnauthorizedError(ApiError):
    """No valid credentials were presented."""

    code = "unauthorized"


class TokenExpiredError(ApiError):
    """The bearer token passed its expiry; a 401 like any other unusable token."""

    code = "token_expired"


class TokenNotFoundError(ApiError):
    code = "token_not_found"


class InvalidExpiryError(ApiError):
    code = "invalid_expiry"


class ForbiddenError(ApiError):
    """The caller is known in the scope but lacks the permission now."""

    code = "forbidden"


class PrincipalExistsError(ApiError):
    code = "principal_exists"


class PrincipalReservedError(ApiError):
    """The name belongs to the service's own principals (``dream:…``)."""

    code = "principal_reserved"


class PrincipalNotFoundError(ApiError):
    code = "principal_not_found"


class UnknownPrincipalError(ApiError):
    """A role or read grant named a principal that was never registered."""

    code = "unknown_principal"


class InvalidIdempotencyKeyError(ApiError):
    code = "invalid_idempotency_key"


class InvalidTargetError(ApiError):
    code = "invalid_target"


class InvalidDreamOperationError(ApiError):
    code = "invalid_dream_operation"


class IdempotencyConflictError(ApiError):
    code = "idempotency_conflict"


class ScopeBusyError(ApiError):
    """Single flight: another run of this operation is already running in the scope."""

    code = "scope_busy"


class CapacityExceededError(ApiError):
    code = "capacity_exceeded"


class CapabilityUnavailableError(ApiError):
    code = "capability_unavailable"


class SourceNotEligibleError(ApiError):
    code = "source_not_eligible"


class EvidenceUnavailableError(ApiError):
    code = "evidence_unavailable"


class AccessRevokedError(ApiError):
    code = "access_revoked"


class InvalidCursorError(ApiError):
    code = "invalid_cursor"


class InvalidGenerationOutputError(ApiError):
    """The model's plan broke the generator contract (here: an evidence id it may not use)."""

    code = "invalid_generation_output"


class AutoWindowOpenError(ApiError):
    """An automatic window is still in flight: a scope has at most one at a time."""

    code = "auto_window_open"


class AutoWindowMismatchError(ApiError):
    """An automatic window change named a window that is not the scope's open one."""

    code = "auto_window_mismatch"


class UnsafeDataDirError(ApiError):
    """The server's data directory is not on a disk it may use safely."""

    code = "unsafe_data_dir"


class BackupRefusedError(ApiError):
    """A backup or restore that would overwrite something, or a store it does not cover."""

    code = "backup_refused"


class BackupInvalidError(ApiError):
    """A backup that is not whole or was changed since it was taken."""

    code = "backup_invalid"


class BundleInvalidError(ApiError):
    """An export bundle cut or edited somewhere, or not a bundle at all."""

    code = "bundle_invalid"


class ImportConflictError(ApiError):
    """An import into a scope that exists, or over a history that diverged."""

    code = "import_conflict"


class ExportRefusedError(ApiError):
    """An export from a data directory that holds no store."""

    code = "export_refused"


class MigrationRefusedError(ApiError):
    """A migration whose source and target are the same store."""

    code = "migration_refused"


class MigrationConflictError(ApiError):
    """A migration target holding events that are not the source's."""

    code = "migration_conflict"


class InvalidWebhookUrlError(ApiError):
    """A webhook target that is not an absolute http:// or https:// URL with a host."""

    code = "invalid_webhook_url"


class InvalidEventTypeError(ApiError):
    """A webhook filter naming an event type the feed never carries."""

    code = "invalid_event_type"


class WebhookNotFoundError(ApiError):
    code = "webhook_not_found"


# -- erasure (docs/erasure.md) -------------------------------------------------------------------

class SourceErasedError(ApiError):
    """The Source was erased: it can be neither recorded again nor amended."""

    code = "source_erased"


class MemoryEntryErasedError(ApiError):
    code = "memory_entry_erased"


class AlreadyErasedError(ApiError):
    code = "already_erased"


class SubjectNotFoundError(ApiError):
    """No record of this data subject is left to erase in the scope."""

    code = "subject_not_found"


class SubjectConflictError(ApiError):
    """The record was first recorded for another data subject, or for none."""

    code = "subject_conflict"


class RecordNotSealedError(ApiError):
    """The record was stored before sealing existed: it cannot be erased provably."""

    code = "record_not_sealed"


class EvidenceErasedError(ApiError):
    code = "evidence_erased"


class ErasureNotFoundError(ApiError):
    code = "erasure_not_found"


_CODED_ERRORS: tuple[type[ApiError], ...] = tuple(
    cls for cls in list(globals().values())
    if isinstance(cls, type) and issubclass(cls, ApiError) and cls is not ApiError)


ERRORS_BY_CODE: dict[str, type[ApiError]] = {cls.code: cls for cls in _CODED_ERRORS}


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
