"""Routes: translate, delegate to the write model on behalf of the caller, translate back."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, Depends, Query, Request, Response, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from adapters.http.schemas import (
    AddEntry,
    ChangeSettings,
    CreateArtifact,
    CreateDreamRun,
    CreateMemory,
    CreateScope,
    DeactivateEntry,
    DreamRunPage,
    DreamRunSummary,
    DreamRunView,
    EntryVersionView,
    ErrorResponse,
    GrantRole,
    Health,
    ProjectionHealth,
    ReactivateEntry,
    ReadGrant,
    RecordSource,
    ReplaceArtifact,
    ReviseEntry,
    RevisionView,
    RolesView,
    ScopeView,
    SourceView,
)
from application.access import LOCAL_CALLER, Caller, acting_as
from application.dreaming import Dreaming, EntryWritten
from application.write_model import Written
from domain.access import Resource
from domain.errors import InvalidRequestError, UnauthorizedError
from domain.refs import MEMORY, ArtifactRef, MemoryCitation

ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": description}
    for status, description in [(401, "No valid bearer token"),
                                (403, "The caller lacks the permission"),
                                (404, "Not found, or not visible to the caller"),
                                (409, "Conflict with the current state"),
                                (413, "Request body over 1 MiB"),
                                (422, "Invalid request or a domain rule violated")]
}
router = APIRouter(prefix="/v1", responses=ERRORS)
ops = APIRouter()
bearer = HTTPBearer(auto_error=False, description="A token from `dream admin token create`.")


def dreaming_of(request: Request) -> Dreaming:
    app: Dreaming = request.app.state.dreaming
    return app


def authenticated(request: Request, credentials: Annotated[
        HTTPAuthorizationCredentials | None, Security(bearer)]) -> Caller:
    app = dreaming_of(request)
    if not app.enforce_access:
        return LOCAL_CALLER
    if credentials is None:
        raise UnauthorizedError("send Authorization: Bearer <token>")
    return app.authenticate(credentials.credentials)


App = Annotated[Dreaming, Depends(dreaming_of)]
As = Annotated[Caller, Depends(authenticated)]


def _entry(written: Written[EntryWritten]) -> EntryVersionView:
    return EntryVersionView.of(written.value.memory, written.value.entry, written.position)


def _head(written: Any) -> RevisionView:
    artifact = written.value
    return RevisionView.of(artifact, artifact.revision(artifact.head_revision), written.position)


# -- scopes ------------------------------------------------------------------------------------

@router.post("/scopes", status_code=201, tags=["scopes"])
def create_scope(body: CreateScope, app: App, caller: As) -> ScopeView:
    with acting_as(caller):
        written = app.create_scope(body.scope_id, body.settings)
    return ScopeView.of(written.value, written.position)


@router.get("/scopes/{scope_id}", tags=["scopes"])
def get_scope(scope_id: str, app: App, caller: As) -> ScopeView:
    with acting_as(caller):
        return ScopeView.of(app.get_scope(scope_id))


@router.patch("/scopes/{scope_id}/settings", tags=["scopes"])
def change_settings(scope_id: str, body: ChangeSettings, app: App, caller: As) -> ScopeView:
    with acting_as(caller):
        written = app.change_scope_settings(scope_id, body.settings)
    return ScopeView.of(written.value, written.position)


@router.get("/scopes/{scope_id}/roles", tags=["access"])
def get_roles(scope_id: str, app: App, caller: As) -> RolesView:
    with acting_as(caller):
        return RolesView.of(app.administered_scope(scope_id))


@router.post("/scopes/{scope_id}/roles", tags=["access"])
def grant_role(scope_id: str, body: GrantRole, app: App, caller: As) -> RolesView:
    with acting_as(caller):
        written = app.grant_role(scope_id, body.principal, body.role)
    return RolesView.of(written.value, written.position)


@router.delete("/scopes/{scope_id}/roles/{principal}/{role}", tags=["access"])
def revoke_role(scope_id: str, principal: str, role: str, app: App, caller: As) -> RolesView:
    with acting_as(caller):
        written = app.revoke_role(scope_id, principal, role)
    return RolesView.of(written.value, written.position)


@router.post("/scopes/{scope_id}/read-grants", tags=["access"])
def grant_read(scope_id: str, body: ReadGrant, app: App, caller: As) -> RolesView:
    resource = Resource.from_dict(body.resource.model_dump(exclude_none=True))
    with acting_as(caller):
        written = app.grant_read(scope_id, body.principal, resource)
    return RolesView.of(written.value, written.position)


@router.post("/scopes/{scope_id}/read-revocations", tags=["access"])
def revoke_read(scope_id: str, body: ReadGrant, app: App, caller: As) -> RolesView:
    resource = Resource.from_dict(body.resource.model_dump(exclude_none=True))
    with acting_as(caller):
        written = app.revoke_read(scope_id, body.principal, resource)
    return RolesView.of(written.value, written.position)


# -- sources -----------------------------------------------------------------------------------

@router.post("/scopes/{scope_id}/sources", status_code=201, tags=["sources"],
             responses={200: {"model": SourceView,
                              "description": "The identical Source was already recorded"}})
def record_source(scope_id: str, body: RecordSource, app: App, caller: As,
                  response: Response) -> SourceView:
    with acting_as(caller):
        written = app.record_source(scope_id, body.source_type, body.source_id, text=body.text,
                                    payload=body.payload, eligibility=body.eligibility,
                                    attempt_id=body.attempt_id, occurred_at=body.occurred_at)
    if written.position is None:
        response.status_code = 200
    return SourceView.of(written.value, written.position)


@router.get("/scopes/{scope_id}/sources/{source_type}/{source_id:path}", tags=["sources"])
def get_source(scope_id: str, source_type: str, source_id: str, app: App,
               caller: As) -> SourceView:
    with acting_as(caller):
        return SourceView.of(app.get_source(scope_id, source_type, source_id))


# -- artifacts ---------------------------------------------------------------------------------

@router.post("/scopes/{scope_id}/artifacts", status_code=201, tags=["artifacts"])
def create_artifact(scope_id: str, body: CreateArtifact, app: App, caller: As) -> RevisionView:
    with acting_as(caller):
        return _head(app.create_artifact(scope_id, body.family, body.artifact_id, body.content,
                                         principal=caller.name,
                                         lineage=body.lineage.to_domain()))


@router.put("/scopes/{scope_id}/artifacts/{family}/{artifact_id}", tags=["artifacts"])
def replace_artifact(scope_id: str, family: str, artifact_id: str, body: ReplaceArtifact,
                     app: App, caller: As) -> RevisionView:
    with acting_as(caller):
        return _head(app.replace_artifact(scope_id, family, artifact_id, body.content,
                                          principal=caller.name,
                                          expected_revision=body.expected_revision,
                                          lineage=body.lineage.to_domain()))


@router.get("/scopes/{scope_id}/artifacts/{family}/{artifact_id}", tags=["artifacts"])
def get_head(scope_id: str, family: str, artifact_id: str, app: App,
             caller: As) -> RevisionView:
    with acting_as(caller):
        artifact = app.get_artifact(scope_id, family, artifact_id)
    return RevisionView.of(artifact, artifact.revision(artifact.head_revision))


@router.get("/scopes/{scope_id}/artifacts/{family}/{artifact_id}/revisions/{revision}",
            tags=["artifacts"])
def get_revision(scope_id: str, family: str, artifact_id: str, revision: int, app: App,
                 caller: As) -> RevisionView:
    with acting_as(caller):
        artifact = app.get_artifact(scope_id, family, artifact_id)
    return RevisionView.of(artifact, artifact.revision(revision))


# -- memory ------------------------------------------------------------------------------------

@router.post("/scopes/{scope_id}/memories", status_code=201, tags=["memory"])
def create_memory(scope_id: str, body: CreateMemory, app: App, caller: As) -> RevisionView:
    with acting_as(caller):
        return _head(app.create_memory(scope_id, body.memory_id, principal=caller.name,
                                       title=body.title))


@router.post("/scopes/{scope_id}/memories/{memory_id}/entries", status_code=201,
             tags=["memory"])
def add_entry(scope_id: str, memory_id: str, body: AddEntry, app: App,
              caller: As) -> EntryVersionView:
    with acting_as(caller):
        return _entry(app.add_entry(
            scope_id, memory_id, body.entry_id, body.kind, body.text,
            sources=[s.to_domain() for s in body.sources],
            artifacts=[a.to_domain() for a in body.artifacts],
            expected_revision=body.expected_revision))


@router.put("/scopes/{scope_id}/memories/{memory_id}/entries/{entry_id}", tags=["memory"])
def revise_entry(scope_id: str, memory_id: str, entry_id: str, body: ReviseEntry, app: App,
                 caller: As) -> EntryVersionView:
    with acting_as(caller):
        return _entry(app.revise_entry(
            scope_id, memory_id, entry_id, body.kind, body.text,
            sources=[s.to_domain() for s in body.sources],
            artifacts=[a.to_domain() for a in body.artifacts],
            expected_revision=body.expected_revision,
            expected_entry_version_id=body.expected_entry_version_id))


@router.post("/scopes/{scope_id}/memories/{memory_id}/entries/{entry_id}/deactivate",
             tags=["memory"])
def deactivate_entry(scope_id: str, memory_id: str, entry_id: str, body: DeactivateEntry,
                     app: App, caller: As) -> EntryVersionView:
    with acting_as(caller):
        return _entry(app.deactivate_entry(scope_id, memory_id, entry_id, body.reason,
                                           body.expected_revision))


@router.post("/scopes/{scope_id}/memories/{memory_id}/entries/{entry_id}/reactivate",
             tags=["memory"])
def reactivate_entry(scope_id: str, memory_id: str, entry_id: str, body: ReactivateEntry,
                     app: App, caller: As) -> EntryVersionView:
    with acting_as(caller):
        return _entry(app.reactivate_entry(scope_id, memory_id, entry_id,
                                           body.expected_revision))


@router.get("/scopes/{scope_id}/memories/{memory_id}/revisions/{revision}/entries/{entry_id}"
            "/versions/{entry_version_id}", tags=["memory"])
def read_entry_version(scope_id: str, memory_id: str, revision: int, entry_id: str,
                       entry_version_id: str, app: App, caller: As) -> EntryVersionView:
    """The exact entry version a MemoryCitation names."""
    memory_ref = ArtifactRef(MEMORY, memory_id, revision)
    with acting_as(caller):
        entry = app.read_entry_version(scope_id, MemoryCitation(memory_ref, entry_id,
                                                                entry_version_id))
    return EntryVersionView.of(memory_ref, entry)


@router.get("/scopes/{scope_id}/memories/{memory_id}", tags=["memory"])
def get_memory(scope_id: str, memory_id: str, app: App, caller: As) -> RevisionView:
    return get_head(scope_id, MEMORY, memory_id, app, caller)


# -- dream runs --------------------------------------------------------------------------------

@router.post("/scopes/{scope_id}/dream", status_code=202, tags=["dream"], responses={
    200: {"model": DreamRunView, "description": "Replay of a run that already finished"},
    429: {"model": ErrorResponse, "description": "Too many unfinished runs in the scope"},
    503: {"model": ErrorResponse, "description": "Dream runs are unavailable"}})
def request_dream(scope_id: str, body: CreateDreamRun, request: Request, app: App,
                  caller: As, response: Response) -> DreamRunView:
    """Admit a run (202 with Location), or replay the run this idempotency key names."""
    with acting_as(caller):
        written = app.request_dream(scope_id, body.to_domain())
    run = written.value.run
    workers = getattr(request.app.state, "workers", None)
    if workers is not None and not run.terminal:
        workers.wake()
    if run.terminal:
        response.status_code = 200
    response.headers["Location"] = f"/v1/scopes/{quote(run.scope_id)}/dream/{run.run_id}"
    return DreamRunView.of(run, written.position)


@router.get("/scopes/{scope_id}/dream", tags=["dream"])
def list_dreams(scope_id: str, request: Request, app: App, caller: As,
                status: Literal["queued", "running", "succeeded", "failed"] | None = None,
                operation: Literal["refine_experience", "derive_skill"] | None = None,
                cursor: str | None = None, limit: int = 20,
                after: Annotated[int | None, Query(
                    description="Wait until the list includes this event position.")] = None,
                ) -> DreamRunPage:
    """Run summaries, newest first (keyset pagination with an opaque cursor)."""
    with acting_as(caller):
        app.get_scope(scope_id)
    if after is not None and not 0 <= after <= app.max_position():
        raise InvalidRequestError("after must be a position this server has recorded",
                                  field="after", head=app.max_position())
    runs = request.app.state.runs
    runs.wait(after)
    summaries, next_cursor = runs.view.list_runs(scope_id, status=status, operation=operation,
                                                 cursor=cursor, limit=limit)
    return DreamRunPage(runs=[DreamRunSummary.from_summary(s) for s in summaries],
                        next_cursor=next_cursor)


@router.get("/scopes/{scope_id}/dream/{run_id}", tags=["dream"])
def get_dream(scope_id: str, run_id: str, app: App, caller: As) -> DreamRunView:
    with acting_as(caller):
        return DreamRunView.of(app.get_dream(scope_id, run_id))


# -- operations --------------------------------------------------------------------------------

@ops.get("/healthz", tags=["ops"])
def healthz(request: Request, app: App) -> Health:
    runs = request.app.state.runs
    runs.raise_if_failed()
    return Health(status="ok", store=app.store_kind, position=app.max_position(),
                  projections={runs.name: ProjectionHealth(position=runs.position(),
                                                           lag=runs.lag())})
