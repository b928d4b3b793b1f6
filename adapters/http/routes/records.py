"""Scopes and their access, Sources, Artifacts and Memory entries."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query, Response

from adapters.api import records, scopes
from adapters.api.schemas import (
    AddEntry,
    ChangeSettings,
    CreateArtifact,
    CreateMemory,
    CreateScope,
    DeactivateEntry,
    EntryVersionView,
    GrantRole,
    ReactivateEntry,
    ReadGrant,
    RecordSource,
    ReplaceArtifact,
    ReviseEntry,
    RevisionView,
    RolesView,
    ScopePage,
    ScopeStatusView,
    ScopeView,
    SourceView,
)
from adapters.http.dependencies import After, Calling, read_first, reading, rendered, v1_router
from domain.refs import ArtifactFamily
from projections.auto_records import AUTO_RECORDS
from projections.review_inbox import REVIEW_INBOX
from projections.runs import RUNS
from projections.scopes import DEFAULT_LIMIT as SCOPES_PER_PAGE
from projections.scopes import SCOPES

router = v1_router()


# -- scopes ------------------------------------------------------------------------------------

@router.post("/scopes", status_code=201, tags=["scopes"])
def create_scope(body: CreateScope, acting: Calling) -> ScopeView:
    return records.create_scope(acting, body)


@router.get("/scopes", tags=["scopes"], dependencies=[reading(SCOPES)],
            response_model=ScopePage)
async def list_scopes(acting: Calling, response: Response, cursor: str | None = None,
                      limit: Annotated[int, Query(description="Scopes per page, 1-100.")]
                      = SCOPES_PER_PAGE, after: After = None) -> Response:
    """The scopes the caller may read (every scope, for a deployment administrator), in
    scope id order, each with the caller's roles in it (keyset pages, opaque cursor)."""
    return rendered(await read_first(records.list_scopes_body, acting.including(after), cursor,
                                     limit), response)


@router.get("/scopes/{scope_id}", tags=["scopes"])
async def get_scope(scope_id: str, acting: Calling) -> ScopeView:
    return await read_first(records.get_scope, acting, scope_id)


@router.get("/scopes/{scope_id}/status", tags=["scopes"],
            dependencies=[reading(RUNS), reading(REVIEW_INBOX), reading(AUTO_RECORDS)])
def scope_status(scope_id: str, acting: Calling, after: After = None) -> ScopeStatusView:
    """A scope at a glance: whether automatic dreaming is due and each of its gates, how many
    Candidates await review, how many Dream runs are queued or running."""
    return scopes.status(acting.including(after), scope_id)


@router.patch("/scopes/{scope_id}/settings", tags=["scopes"])
def change_settings(scope_id: str, body: ChangeSettings, acting: Calling) -> ScopeView:
    return records.change_settings(acting, scope_id, body)


@router.get("/scopes/{scope_id}/roles", tags=["access"])
async def get_roles(scope_id: str, acting: Calling) -> RolesView:
    return await read_first(records.get_roles, acting, scope_id)


@router.post("/scopes/{scope_id}/roles", tags=["access"])
def grant_role(scope_id: str, body: GrantRole, acting: Calling) -> RolesView:
    return records.grant_role(acting, scope_id, body)


@router.delete("/scopes/{scope_id}/roles/{principal}/{role}", tags=["access"])
def revoke_role(scope_id: str, principal: str, role: str, acting: Calling) -> RolesView:
    return records.revoke_role(acting, scope_id, principal, role)


@router.post("/scopes/{scope_id}/read-grants", tags=["access"])
def grant_read(scope_id: str, body: ReadGrant, acting: Calling) -> RolesView:
    return records.grant_read(acting, scope_id, body)


@router.post("/scopes/{scope_id}/read-revocations", tags=["access"])
def revoke_read(scope_id: str, body: ReadGrant, acting: Calling) -> RolesView:
    return records.revoke_read(acting, scope_id, body)


# -- sources -----------------------------------------------------------------------------------

@router.post("/scopes/{scope_id}/sources", status_code=201, tags=["sources"],
             responses={200: {"model": SourceView,
                              "description": "The identical Source was already recorded"}})
def record_source(scope_id: str, body: RecordSource, acting: Calling,
                  response: Response) -> SourceView:
    recorded = records.record_source(acting, scope_id, body)
    if not recorded.new:
        response.status_code = 200
    return recorded.answer


@router.get("/scopes/{scope_id}/sources/{source_type}/{source_id:path}", tags=["sources"])
async def get_source(scope_id: str, source_type: str, source_id: str,
                     acting: Calling) -> SourceView:
    return await read_first(records.get_source, acting, scope_id, source_type, source_id)


# -- artifacts ---------------------------------------------------------------------------------

@router.post("/scopes/{scope_id}/artifacts", status_code=201, tags=["artifacts"])
def create_artifact(scope_id: str, body: CreateArtifact, acting: Calling) -> RevisionView:
    return records.create_artifact(acting, scope_id, body)


@router.put("/scopes/{scope_id}/artifacts/{family}/{artifact_id}", tags=["artifacts"])
def replace_artifact(scope_id: str, family: str, artifact_id: str, body: ReplaceArtifact,
                     acting: Calling) -> RevisionView:
    return records.replace_artifact(acting, scope_id, family, artifact_id, body)


@router.get("/scopes/{scope_id}/artifacts/{family}/{artifact_id}", tags=["artifacts"])
async def get_head(scope_id: str, family: str, artifact_id: str, acting: Calling) -> RevisionView:
    return await read_first(records.get_revision, acting, scope_id, family, artifact_id)


@router.get("/scopes/{scope_id}/artifacts/{family}/{artifact_id}/revisions/{revision}",
            tags=["artifacts"])
async def get_revision(scope_id: str, family: str, artifact_id: str, revision: int,
                 acting: Calling) -> RevisionView:
    return await read_first(records.get_revision, acting, scope_id, family, artifact_id,
                            revision)


# -- memory ------------------------------------------------------------------------------------

@router.post("/scopes/{scope_id}/memories", status_code=201, tags=["memory"])
def create_memory(scope_id: str, body: CreateMemory, acting: Calling) -> RevisionView:
    return records.create_memory(acting, scope_id, body)


@router.post("/scopes/{scope_id}/memories/{memory_id}/entries", status_code=201,
             tags=["memory"])
def add_entry(scope_id: str, memory_id: str, body: AddEntry, acting: Calling) -> EntryVersionView:
    return records.add_entry(acting, scope_id, memory_id, body)


@router.put("/scopes/{scope_id}/memories/{memory_id}/entries/{entry_id}", tags=["memory"])
def revise_entry(scope_id: str, memory_id: str, entry_id: str, body: ReviseEntry,
                 acting: Calling) -> EntryVersionView:
    return records.revise_entry(acting, scope_id, memory_id, entry_id, body)


@router.post("/scopes/{scope_id}/memories/{memory_id}/entries/{entry_id}/deactivate",
             tags=["memory"])
def deactivate_entry(scope_id: str, memory_id: str, entry_id: str, body: DeactivateEntry,
                     acting: Calling) -> EntryVersionView:
    return records.deactivate_entry(acting, scope_id, memory_id, entry_id, body)


@router.post("/scopes/{scope_id}/memories/{memory_id}/entries/{entry_id}/reactivate",
             tags=["memory"])
def reactivate_entry(scope_id: str, memory_id: str, entry_id: str, body: ReactivateEntry,
                     acting: Calling) -> EntryVersionView:
    return records.reactivate_entry(acting, scope_id, memory_id, entry_id, body)


@router.get("/scopes/{scope_id}/memories/{memory_id}/revisions/{revision}/entries/{entry_id}"
            "/versions/{entry_version_id}", tags=["memory"])
async def read_entry_version(scope_id: str, memory_id: str, revision: int, entry_id: str,
                       entry_version_id: str, acting: Calling) -> EntryVersionView:
    """The exact entry version a MemoryCitation names."""
    return await read_first(records.read_entry_version, acting, scope_id, memory_id,
                            revision, entry_id, entry_version_id)


@router.get("/scopes/{scope_id}/memories/{memory_id}", tags=["memory"])
async def get_memory(scope_id: str, memory_id: str, acting: Calling) -> RevisionView:
    return await read_first(records.get_revision, acting, scope_id, ArtifactFamily.MEMORY,
                            memory_id)
