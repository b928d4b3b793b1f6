"""A typed Python client for the HTTP API: one method per route, one exception per error code.

Responses are the API's own response models (``adapters.http.schemas``). Every refusal raises
an :class:`ApiError`; when the code belongs to a domain rule the exception is *also* an instance
of that rule's :class:`domain.errors.DomainError` subclass, so ``except ArtifactConflictError``
works the same in-process and over HTTP::

    with DreamClient("http://127.0.0.1:8000", token) as dream:
        dream.create_scope("team")
        try:
            dream.replace_artifact("team", "experience", "x", content, expected_revision=1)
        except ArtifactConflictError as error:
            ...  # error.status == 409, error.details["current"]
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any, ClassVar, TypeAlias, TypeVar, cast
from urllib.parse import quote, urlencode

import httpx
from pydantic import BaseModel

from adapters.http.schemas import (
    ArtifactRefBody,
    AuditView,
    CandidateEvidenceView,
    CandidatePage,
    CandidateView,
    DreamRunPage,
    DreamRunView,
    EntryVersionView,
    Health,
    ImpactView,
    KnowledgePage,
    LineageBody,
    MemoryCitationBody,
    ResourceBody,
    RevisionView,
    RolesView,
    ScopeView,
    SkillPackageView,
    SourceRefBody,
    SourceView,
    TraceView,
)
from adapters.http.token_routes import IssuedTokenView, TokenChange, TokenPage
from domain.access import Resource
from domain.dream_request import DreamRequest
from domain.errors import DomainError
from domain.refs import MEMORY, ArtifactRef, Lineage, MemoryCitation, SourceRef

__all__ = [
    "ERRORS_BY_CODE",
    "AccessUnavailableError",
    "ApiError",
    "DreamClient",
    "HttpError",
    "InternalError",
    "MethodNotAllowedError",
    "NotFoundError",
    "PayloadTooLargeError",
    "ReadModelBehindError",
    "ReadModelUnavailableError",
    "SkillFile",
    "error_class",
]

# -- errors ------------------------------------------------------------------------------------


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


def _error_from(response: httpx.Response) -> ApiError:
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


# -- request values ----------------------------------------------------------------------------

SourceRefLike: TypeAlias = SourceRef | SourceRefBody | Mapping[str, Any]
ArtifactRefLike: TypeAlias = ArtifactRef | ArtifactRefBody | Mapping[str, Any]
CitationLike: TypeAlias = MemoryCitation | MemoryCitationBody | Mapping[str, Any]
LineageLike: TypeAlias = Lineage | LineageBody | Mapping[str, Any]
ResourceLike: TypeAlias = Resource | ResourceBody | Mapping[str, Any]

View = TypeVar("View", bound=BaseModel)


def _plain(value: Any) -> dict[str, Any]:
    """A domain value object, request model or mapping as a JSON object."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, Mapping):
        return dict(value)
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return dict(to_dict())
    raise TypeError(f"expected a reference value, model or mapping, got {type(value).__name__}")


def _segment(value: str | int, *, keep_slashes: bool = False) -> str:
    """Percent-encode one path segment (with ``keep_slashes``: a ``{name:path}`` tail)."""
    parts = str(value).split("/") if keep_slashes else [str(value)]
    # "." and ".." would be collapsed by URL normalisation: encode their dots.
    return "/".join(part.replace(".", "%2E") if part in {".", ".."} else quote(part, safe="")
                    for part in parts)


def _path(*segments: str | int) -> str:
    return "/v1/" + "/".join(_segment(segment) for segment in segments)


def _body(**fields: Any) -> dict[str, Any]:
    """Fields left as ``None`` are omitted, so the server's defaults apply."""
    return {name: value for name, value in fields.items() if value is not None}


def _refs(refs: Iterable[Any]) -> list[dict[str, Any]]:
    return [_plain(ref) for ref in refs]


@dataclass(frozen=True)
class SkillFile:
    """A downloaded SKILL.md: its text and the sha256 digest of its bytes."""

    text: str
    digest: str
    content_type: str


# -- the client --------------------------------------------------------------------------------


class DreamClient:
    """A synchronous client for one API server; close it, or use it as a context manager."""

    USER_AGENT: ClassVar[str] = "artifact-dreaming-client"

    def __init__(self, base_url: str, token: str | None = None, *, timeout: float = 10.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        headers = {"User-Agent": self.USER_AGENT, "Accept": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        self.http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers,
                                 timeout=timeout, transport=transport)

    def __enter__(self) -> DreamClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def request(self, method: str, path: str, *, json: Any = None) -> Any:
        """Send one request to ``path`` (already encoded); the decoded JSON body, or raise."""
        response = self._send(method, path, json=json)
        try:
            return response.json()
        except ValueError:
            raise HttpError(f"HTTP {response.status_code} without a JSON body",
                            status=response.status_code,
                            details={"content_type": response.headers.get("content-type", ""),
                                     "body": response.text[:500]},
                            response_headers=response.headers) from None

    def _send(self, method: str, path: str, *, json: Any = None,
              accept: str | None = None) -> httpx.Response:
        """Send one request; the response if successful, else raise its typed error."""
        headers = None if accept is None else {"Accept": accept}
        response = self.http.request(method, path, json=json, headers=headers)
        if not response.is_success:
            raise _error_from(response)
        return response

    def _call(self, view: type[View], method: str, path: str, json: Any = None) -> View:
        return view.model_validate(self.request(method, path, json=json))

    # -- scopes ----------------------------------------------------------------------------

    def create_scope(self, scope_id: str, *,
                     settings: Mapping[str, Any] | None = None) -> ScopeView:
        return self._call(ScopeView, "POST", _path("scopes"),
                          _body(scope_id=scope_id, settings=_opt_dict(settings)))

    def get_scope(self, scope_id: str) -> ScopeView:
        return self._call(ScopeView, "GET", _path("scopes", scope_id))

    def change_settings(self, scope_id: str, *, settings: Mapping[str, Any]) -> ScopeView:
        return self._call(ScopeView, "PATCH", _path("scopes", scope_id, "settings"),
                          {"settings": dict(settings)})

    # -- access ----------------------------------------------------------------------------

    def get_roles(self, scope_id: str) -> RolesView:
        return self._call(RolesView, "GET", _path("scopes", scope_id, "roles"))

    def grant_role(self, scope_id: str, *, principal: str, role: str) -> RolesView:
        return self._call(RolesView, "POST", _path("scopes", scope_id, "roles"),
                          {"principal": principal, "role": role})

    def revoke_role(self, scope_id: str, *, principal: str, role: str) -> RolesView:
        return self._call(RolesView, "DELETE",
                          _path("scopes", scope_id, "roles", principal, role))

    def grant_read(self, scope_id: str, *, principal: str, resource: ResourceLike) -> RolesView:
        return self._call(RolesView, "POST", _path("scopes", scope_id, "read-grants"),
                          {"principal": principal, "resource": _plain(resource)})

    def revoke_read(self, scope_id: str, *, principal: str,
                    resource: ResourceLike) -> RolesView:
        return self._call(RolesView, "POST", _path("scopes", scope_id, "read-revocations"),
                          {"principal": principal, "resource": _plain(resource)})

    # -- tokens (deployment administrators) ------------------------------------------------

    def list_tokens(self, *, principal: str | None = None) -> TokenPage:
        """Every token's public record (never a secret), oldest first."""
        return self._call(TokenPage, "GET", _query(_path("admin", "tokens"),
                                                   principal=principal))

    def issue_token(self, *, principal: str, label: str | None = None, admin: bool = False,
                    expires_in_seconds: int | None = None,
                    expires_at: datetime | str | None = None) -> IssuedTokenView:
        """A new token (registering ``principal`` if new); ``.token`` is the only copy."""
        when = expires_at.isoformat() if isinstance(expires_at, datetime) else expires_at
        return self._call(IssuedTokenView, "POST", _path("admin", "tokens"),
                          _body(principal=principal, label=label, admin=admin,
                                expires_in_seconds=expires_in_seconds, expires_at=when))

    def revoke_token(self, token_id: str) -> TokenChange:
        """Revoke by public id; every server refuses the token from its next request on."""
        return self._call(TokenChange, "DELETE", _path("admin", "tokens", token_id))

    # -- sources ---------------------------------------------------------------------------

    def record_source(self, scope_id: str, *, source_type: str, source_id: str,
                      text: str | None = None, payload: Mapping[str, Any] | None = None,
                      eligibility: str | None = None, attempt_id: str | None = None,
                      occurred_at: datetime | str | None = None) -> SourceView:
        """Record a Source; recording an identical one again answers ``position=None``."""
        when = occurred_at.isoformat() if isinstance(occurred_at, datetime) else occurred_at
        return self._call(SourceView, "POST", _path("scopes", scope_id, "sources"), _body(
            source_type=source_type, source_id=source_id, text=text,
            payload=_opt_dict(payload), eligibility=eligibility, attempt_id=attempt_id,
            occurred_at=when))

    def get_source(self, scope_id: str, *, source_type: str, source_id: str) -> SourceView:
        path = (_path("scopes", scope_id, "sources", source_type) + "/"
                + _segment(source_id, keep_slashes=True))
        return self._call(SourceView, "GET", path)

    # -- artifacts -------------------------------------------------------------------------

    def create_artifact(self, scope_id: str, *, family: str, artifact_id: str,
                        content: Mapping[str, Any],
                        lineage: LineageLike | None = None) -> RevisionView:
        return self._call(RevisionView, "POST", _path("scopes", scope_id, "artifacts"), _body(
            family=family, artifact_id=artifact_id, content=dict(content),
            lineage=None if lineage is None else _plain(lineage)))

    def replace_artifact(self, scope_id: str, *, family: str, artifact_id: str,
                         content: Mapping[str, Any], expected_revision: int,
                         lineage: LineageLike | None = None) -> RevisionView:
        """A new head revision, only if the head is still ``expected_revision``."""
        return self._call(
            RevisionView, "PUT", _path("scopes", scope_id, "artifacts", family, artifact_id),
            _body(content=dict(content), expected_revision=expected_revision,
                  lineage=None if lineage is None else _plain(lineage)))

    def get_artifact(self, scope_id: str, *, family: str, artifact_id: str) -> RevisionView:
        """The head revision."""
        return self._call(RevisionView, "GET",
                          _path("scopes", scope_id, "artifacts", family, artifact_id))

    def get_revision(self, scope_id: str, *, family: str, artifact_id: str,
                     revision: int) -> RevisionView:
        """One exact revision."""
        return self._call(RevisionView, "GET", _path(
            "scopes", scope_id, "artifacts", family, artifact_id, "revisions", revision))

    # -- memory ----------------------------------------------------------------------------

    def create_memory(self, scope_id: str, *, memory_id: str,
                      title: str | None = None) -> RevisionView:
        return self._call(RevisionView, "POST", _path("scopes", scope_id, "memories"),
                          _body(memory_id=memory_id, title=title))

    def get_memory(self, scope_id: str, *, memory_id: str) -> RevisionView:
        """The head revision, with its manifest of exact entry versions."""
        return self._call(RevisionView, "GET", _path("scopes", scope_id, "memories", memory_id))

    def add_entry(self, scope_id: str, *, memory_id: str, entry_id: str, kind: str, text: str,
                  sources: Iterable[SourceRefLike] = (),
                  artifacts: Iterable[ArtifactRefLike] = (),
                  expected_revision: int | None = None) -> EntryVersionView:
        return self._call(EntryVersionView, "POST",
                          _path("scopes", scope_id, "memories", memory_id, "entries"), _body(
                              entry_id=entry_id, kind=kind, text=text, sources=_refs(sources),
                              artifacts=_refs(artifacts),
                              expected_revision=expected_revision))

    def revise_entry(self, scope_id: str, *, memory_id: str, entry_id: str, kind: str,
                     text: str, sources: Iterable[SourceRefLike] = (),
                     artifacts: Iterable[ArtifactRefLike] = (),
                     expected_revision: int | None = None,
                     expected_entry_version_id: str | None = None) -> EntryVersionView:
        return self._call(EntryVersionView, "PUT",
                          _path("scopes", scope_id, "memories", memory_id, "entries", entry_id),
                          _body(kind=kind, text=text, sources=_refs(sources),
                                artifacts=_refs(artifacts), expected_revision=expected_revision,
                                expected_entry_version_id=expected_entry_version_id))

    def deactivate_entry(self, scope_id: str, *, memory_id: str, entry_id: str,
                         reason: str | None = None,
                         expected_revision: int | None = None) -> EntryVersionView:
        return self._call(EntryVersionView, "POST", _path(
            "scopes", scope_id, "memories", memory_id, "entries", entry_id, "deactivate"),
            _body(reason=reason, expected_revision=expected_revision))

    def reactivate_entry(self, scope_id: str, *, memory_id: str, entry_id: str,
                         expected_revision: int | None = None) -> EntryVersionView:
        return self._call(EntryVersionView, "POST", _path(
            "scopes", scope_id, "memories", memory_id, "entries", entry_id, "reactivate"),
            _body(expected_revision=expected_revision))

    def read_entry_version(self, scope_id: str, citation: CitationLike | None = None, *,
                           memory_id: str | None = None, revision: int | None = None,
                           entry_id: str | None = None,
                           entry_version_id: str | None = None) -> EntryVersionView:
        """The exact entry version a citation names: pass the citation, or all four ids."""
        ids = (memory_id, revision, entry_id, entry_version_id)
        if citation is not None:
            if any(part is not None for part in ids):
                raise TypeError("pass either a citation or the explicit ids, not both")
            cited = _plain(citation)
            ref = cited["memory_ref"]
            if ref.get("family", MEMORY) != MEMORY:
                raise ValueError("a memory citation's memory_ref.family must be memory")
            memory_id, revision = ref["artifact_id"], ref["revision"]
            entry_id, entry_version_id = cited["entry_id"], cited["entry_version_id"]
        if memory_id is None or revision is None or entry_id is None or entry_version_id is None:
            raise TypeError("pass a citation, or memory_id, revision, entry_id and "
                            "entry_version_id")
        return self._call(EntryVersionView, "GET", _path(
            "scopes", scope_id, "memories", memory_id, "revisions", revision, "entries",
            entry_id, "versions", entry_version_id))

    # -- dream runs --------------------------------------------------------------------------

    def request_dream(self, scope_id: str, request: DreamRequest | Mapping[str, Any],
                      ) -> DreamRunView:
        """Admit a run, or replay the run its idempotency key names (202 and 200 both decode)."""
        if isinstance(request, DreamRequest):
            body: dict[str, Any] = {**request.to_dict(),
                                    "idempotency_key": request.idempotency_key}
        else:
            body = dict(request)
        return self._call(DreamRunView, "POST", _path("scopes", scope_id, "dream"), body)

    def get_dream(self, scope_id: str, run_id: str) -> DreamRunView:
        return self._call(DreamRunView, "GET", _path("scopes", scope_id, "dream", run_id))

    def list_dreams(self, scope_id: str, *, status: str | None = None,
                    operation: str | None = None, cursor: str | None = None,
                    limit: int | None = None, after: int | None = None) -> DreamRunPage:
        """Newest first; pass ``next_cursor`` back as ``cursor`` for the next page."""
        return self._call(DreamRunPage, "GET", _query(
            _path("scopes", scope_id, "dream"), status=status, operation=operation,
            cursor=cursor, limit=limit, after=after))

    # -- review ------------------------------------------------------------------------------

    def propose_candidate(self, scope_id: str, *, candidate_id: str, family: str,
                          proposal: Mapping[str, Any], reason: str,
                          sources: Iterable[SourceRefLike] = (),
                          artifacts: Iterable[ArtifactRefLike] = (),
                          memory_citations: Iterable[CitationLike] = (),
                          target: ArtifactRefLike | None = None) -> CandidateView:
        """A new pending Candidate; proposing the identical one again answers
        ``position=None``."""
        return self._call(CandidateView, "POST", _path("scopes", scope_id, "candidates"), _body(
            candidate_id=candidate_id, family=family, proposal=dict(proposal), reason=reason,
            sources=_refs(sources), artifacts=_refs(artifacts),
            memory_citations=_refs(memory_citations),
            target=None if target is None else _plain(target)))

    def list_candidates(self, scope_id: str, *, status: str | None = None,
                        family: str | None = None, cursor: str | None = None,
                        limit: int | None = None, after: int | None = None) -> CandidatePage:
        """The review inbox (default: pending; ``status="all"`` for every status), in
        candidate id order; pass ``next_cursor`` back as ``cursor`` for the next page."""
        return self._call(CandidatePage, "GET", _query(
            _path("scopes", scope_id, "candidates"), status=status, family=family,
            cursor=cursor, limit=limit, after=after))

    def get_candidate(self, scope_id: str, candidate_id: str) -> CandidateView:
        return self._call(CandidateView, "GET",
                          _path("scopes", scope_id, "candidates", candidate_id))

    def candidate_evidence(self, scope_id: str, candidate_id: str) -> CandidateEvidenceView:
        """The current version's evidence re-resolved with this caller's rights now."""
        return self._call(CandidateEvidenceView, "GET",
                          _path("scopes", scope_id, "candidates", candidate_id, "evidence"))

    def revise_candidate(self, scope_id: str, candidate_id: str, *, expected_version: int,
                         proposal: Mapping[str, Any] | None = None,
                         sources: Iterable[SourceRefLike] | None = None,
                         artifacts: Iterable[ArtifactRefLike] | None = None,
                         memory_citations: Iterable[CitationLike] | None = None,
                         reason: str | None = None,
                         target: ArtifactRefLike | None = None) -> CandidateView:
        """A new version. ``None`` (the default) keeps a field's current value; an empty
        sequence clears a list."""
        def refs(values: Iterable[Any] | None) -> list[dict[str, Any]] | None:
            return None if values is None else _refs(values)

        return self._call(CandidateView, "POST", _path(
            "scopes", scope_id, "candidates", candidate_id, "revise"), _body(
                expected_version=expected_version, proposal=_opt_dict(proposal),
                sources=refs(sources), artifacts=refs(artifacts),
                memory_citations=refs(memory_citations), reason=reason,
                target=None if target is None else _plain(target)))

    def approve_candidate(self, scope_id: str, candidate_id: str, *,
                          expected_version: int) -> CandidateView:
        """Approve that version; ``result`` names the Artifact revision it wrote."""
        return self._call(CandidateView, "POST", _path(
            "scopes", scope_id, "candidates", candidate_id, "approve"),
            {"expected_version": expected_version})

    def reject_candidate(self, scope_id: str, candidate_id: str, *, expected_version: int,
                         reason: str) -> CandidateView:
        return self._call(CandidateView, "POST", _path(
            "scopes", scope_id, "candidates", candidate_id, "reject"),
            {"expected_version": expected_version, "reason": reason})

    # -- knowledge -----------------------------------------------------------------------------

    def search_knowledge(self, scope_id: str, q: str | None = None, *,
                         family: str | None = None, limit: int | None = None,
                         after: int | None = None) -> KnowledgePage:
        """Approved Experiences and Skills this caller may read, most relevant first
        (without ``q``: the newest approvals)."""
        return self._call(KnowledgePage, "GET", _query(
            _path("scopes", scope_id, "knowledge"), q=q, family=family, limit=limit,
            after=after))

    def skill_package(self, scope_id: str, *, artifact_id: str,
                      revision: int) -> SkillPackageView:
        """One Skill revision's package: the SKILL.md text and its digest."""
        return self._call(SkillPackageView, "GET", _path(
            "scopes", scope_id, "artifacts", "skill", artifact_id, "revisions", revision,
            "package"))

    def download_skill_md(self, scope_id: str, *, artifact_id: str,
                          revision: int) -> SkillFile:
        """The SKILL.md file itself; its digest is checked against the server's ``ETag``."""
        response = self._send("GET", _path(
            "scopes", scope_id, "artifacts", "skill", artifact_id, "revisions", revision,
            "package", "SKILL.md"), accept="text/markdown")
        content = response.content
        digest = "sha256:" + hashlib.sha256(content).hexdigest()
        etag = response.headers.get("etag", "").strip('"')
        if etag and etag != digest:
            raise HttpError("the SKILL.md received does not match its ETag digest",
                            status=response.status_code,
                            details={"etag": etag, "digest": digest},
                            response_headers=response.headers)
        return SkillFile(text=content.decode("utf-8"), digest=digest,
                         content_type=response.headers.get("content-type", ""))

    # -- audit -----------------------------------------------------------------------------

    def audit(self, scope_id: str, aggregate: str, key: str, *,
              as_of_version: int | None = None) -> AuditView:
        """An aggregate's events (who acted, when, what); with ``as_of_version``, those up to
        it and the state right after it. ``key``: see :data:`application.audit.AUDITABLE`."""
        path = _path("scopes", scope_id, "audit", aggregate) + "/" + _segment(
            key, keep_slashes=True)
        return self._call(AuditView, "GET", _query(path, as_of_version=as_of_version))

    def trace(self, scope_id: str, ref: ArtifactRef) -> TraceView:
        """The provenance chain of one Artifact revision, down to exact entry versions."""
        return self._call(TraceView, "GET", _path(
            "scopes", scope_id, "audit", "trace", ref.family, ref.artifact_id, ref.revision))

    def impact(self, scope_id: str, kind: str, key: str, *, max_depth: int | None = None,
               after: int | None = None) -> ImpactView:
        """What depends on one node, transitively (see ``GET …/provenance/impact``)."""
        return self._call(ImpactView, "GET", _query(
            _path("scopes", scope_id, "provenance", "impact"), kind=kind, key=key,
            max_depth=max_depth, after=after))

    # -- operations ------------------------------------------------------------------------

    def health(self) -> Health:
        """``/healthz``, also while degraded (it answers 503 then, with the same body)."""
        response = self.http.request("GET", "/healthz")
        if response.status_code not in (200, 503):
            raise _error_from(response)
        return Health.model_validate(response.json())

    def metrics(self) -> str:
        """The Prometheus text exposition of ``/metrics``."""
        return self._send("GET", "/metrics", accept="text/plain").text


def _query(path: str, **params: Any) -> str:
    """``path`` with the given query parameters; those left as ``None`` are omitted."""
    query = urlencode(_body(**params))
    return path + (f"?{query}" if query else "")


def _opt_dict(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if value is None else dict(value)
