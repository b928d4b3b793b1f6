"""Domain errors. Each carries a stable ``code`` that every adapter surfaces unchanged."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar


class DomainError(Exception):
    """A rule of the domain refused a command; nothing was changed."""

    code: ClassVar[str] = "invalid_request"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.message!r}, {self.details!r})"


def raise_violations(violations: Sequence[DomainError]) -> None:
    """Raise the first violation, its ``details.violations`` naming every violated field.

    The first keeps its own code and details, so a client that reads only those is unaffected.
    """
    if not violations:
        return
    first = violations[0]
    first.details["violations"] = [
        {"field": error.details.get("field"), "code": error.code, "message": error.message}
        for error in violations]
    raise first


class InvalidRequestError(DomainError):
    code = "invalid_request"


class InvalidScopeIdError(DomainError):
    code = "invalid_scope_id"


class InvalidIdentifierError(DomainError):
    code = "invalid_identifier"


class InvalidTextError(DomainError):
    code = "invalid_text"


class TextTooLargeError(DomainError):
    code = "text_too_large"


class InvalidArtifactFamilyError(DomainError):
    code = "invalid_artifact_family"


class InvalidContentError(DomainError):
    code = "invalid_content"


class JsonTooDeepError(DomainError):
    """Free-form JSON nests deeper than the documented limit (``domain.text.MAX_JSON_DEPTH``)."""

    code = "json_too_deep"


class InvalidSettingsError(DomainError):
    code = "invalid_settings"


class InvalidRoleError(DomainError):
    code = "invalid_role"


class InvalidMemoryCitationError(DomainError):
    code = "invalid_memory_citation"


class EvidenceLimitExceededError(DomainError):
    code = "evidence_limit_exceeded"


class ScopeNotFoundError(DomainError):
    code = "scope_not_found"


class ScopeExistsError(DomainError):
    code = "scope_exists"


class SourceNotFoundError(DomainError):
    code = "source_not_found"


class SourceConflictError(DomainError):
    code = "source_conflict"


class SourceWithdrawnError(DomainError):
    code = "source_withdrawn"


class SourceErasedError(DomainError):
    code = "source_erased"


class MemoryEntryErasedError(DomainError):
    code = "memory_entry_erased"


class SubjectNotFoundError(DomainError):
    code = "subject_not_found"


class AlreadyErasedError(DomainError):
    code = "already_erased"


class RecordNotSealedError(DomainError):
    code = "record_not_sealed"


class EvidenceErasedError(DomainError):
    code = "evidence_erased"


class SubjectConflictError(DomainError):
    code = "subject_conflict"


class ErasureNotFoundError(DomainError):
    code = "erasure_not_found"


class ReferenceNotFoundError(DomainError):
    code = "reference_not_found"


class ArtifactNotFoundError(DomainError):
    code = "artifact_not_found"


class ArtifactExistsError(DomainError):
    code = "artifact_exists"


class RevisionNotFoundError(DomainError):
    code = "revision_not_found"


class ArtifactConflictError(DomainError):
    code = "artifact_conflict"


class MemoryEntryNotFoundError(DomainError):
    code = "memory_entry_not_found"


class MemoryEntryExistsError(DomainError):
    code = "memory_entry_exists"


class MemoryEntryInactiveError(DomainError):
    code = "memory_entry_inactive"


class MemoryEntryActiveError(DomainError):
    code = "memory_entry_active"


class AuditNotFoundError(DomainError):
    """The audited aggregate has no events in this scope."""

    code = "aggregate_not_found"


class CandidateNotFoundError(DomainError):
    code = "candidate_not_found"


class CandidateExistsError(DomainError):
    code = "candidate_exists"


class CandidateConflictError(DomainError):
    code = "candidate_conflict"


class CandidateTerminalError(DomainError):
    code = "candidate_terminal"


class InvalidCandidateError(DomainError):
    code = "invalid_candidate"


class DreamNotFoundError(DomainError):
    code = "dream_not_found"


class RunTerminalError(DomainError):
    code = "run_terminal"


class AttemptConflictError(DomainError):
    """A superseded or absent attempt tried to write: the fencing token is stale."""

    code = "attempt_conflict"


class ManifestFrozenError(DomainError):
    code = "manifest_frozen"


class BudgetExceededError(DomainError):
    code = "budget_exceeded"


class WriteConflictError(DomainError):
    """Another writer changed an aggregate this command read or wrote; nothing was stored."""

    code = "write_conflict"


class UnauthorizedError(DomainError):
    """No valid credentials were presented."""

    code = "unauthorized"


class TokenExpiredError(DomainError):
    """The bearer token passed its expiry; a 401 like any other unusable token."""

    code = "token_expired"


class TokenNotFoundError(DomainError):
    code = "token_not_found"


class InvalidExpiryError(DomainError):
    code = "invalid_expiry"


class ForbiddenError(DomainError):
    """The caller is known in the scope but lacks the permission now."""

    code = "forbidden"


class PrincipalExistsError(DomainError):
    code = "principal_exists"


class PrincipalReservedError(DomainError):
    """The name belongs to the service's own principals (``dream:…``)."""

    code = "principal_reserved"


class PrincipalNotFoundError(DomainError):
    code = "principal_not_found"


class UnknownPrincipalError(DomainError):
    """A role or read grant named a principal that was never registered."""

    code = "unknown_principal"


class InvalidIdempotencyKeyError(DomainError):
    code = "invalid_idempotency_key"


class InvalidTargetError(DomainError):
    code = "invalid_target"


class InvalidDreamOperationError(DomainError):
    code = "invalid_dream_operation"


class IdempotencyConflictError(DomainError):
    code = "idempotency_conflict"


class ScopeBusyError(DomainError):
    """Single flight: another run of this operation is already running in the scope."""

    code = "scope_busy"


class CapacityExceededError(DomainError):
    code = "capacity_exceeded"


class CapabilityUnavailableError(DomainError):
    code = "capability_unavailable"


class SourceNotEligibleError(DomainError):
    code = "source_not_eligible"


class EvidenceUnavailableError(DomainError):
    code = "evidence_unavailable"


class AccessRevokedError(DomainError):
    code = "access_revoked"


class InvalidCursorError(DomainError):
    code = "invalid_cursor"


class InvalidGenerationOutputError(DomainError):
    """The model's plan broke the generator contract (here: an evidence id it may not use)."""

    code = "invalid_generation_output"


class AutoWindowOpenError(DomainError):
    """An automatic window is still in flight: a scope has at most one at a time."""

    code = "auto_window_open"


class AutoWindowMismatchError(DomainError):
    """An automatic window change named a window that is not the scope's open one."""

    code = "auto_window_mismatch"


class InvalidWebhookUrlError(DomainError):
    """A webhook target that is not an absolute http(s) URL with a host."""

    code = "invalid_webhook_url"


class InvalidEventTypeError(DomainError):
    """A webhook filter named an event type the feed never carries."""

    code = "invalid_event_type"


class WebhookNotFoundError(DomainError):
    code = "webhook_not_found"
