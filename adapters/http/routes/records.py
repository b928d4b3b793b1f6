"""Scopes and their access, Sources, Artifacts and Memory entries."""

from __future__ import annotations

from fastapi import APIRouter, Response

from adapters.http.dependencies import App, Bearing, shown
from adapters.http.schemas import (
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
    ScopeView,
    SourceView,
)
from application.bootstrap import Dreaming
from application.records import EntryWritten
from application.store import Written
from domain.access import Resource
from domain.artifact import Artifact
from domain.refs import ArtifactFamily, ArtifactRef, MemoryCitation
from domain.scope import Scope

router = APIRouter()


def _entry(written: Written[EntryWritten]) -> EntryVersionView:
    return EntryVersionView.of(written.value.memory, written.value.entry, written.position)


def _head(written: Written[Artifact]) -> RevisionView:
    artifact = written.value
    return RevisionView.of(artifact, artifact.revision(artifact.head_revision), written.position)


def _roles(app: Dreaming, written: Written[Scope]) -> RolesView:
    return RolesView.of(written.value, shown(app, written, written.value))


def _resource(body: ReadGrant) -> Resource:
    return Resource.from_dict(body.resource.model_dump(exclude_none=True))


# -- scopes ------------------------------------------------------------------------------------

@router.post("/scopes", status_code=201, tags=["scopes"])
def create_scope(body: CreateScope, app: App, bearer: Bearing) -> ScopeView:
    caller = bearer.caller()
    written = app.records.create_scope(caller, body.scope_id, body.settings)
    return ScopeView.of(written.value, shown(app, written, written.value))


@router.get("/scopes/{scope_id}", tags=["scopes"])
def get_scope(scope_id: str, app: App, bearer: Bearing) -> ScopeView:
    caller = bearer.caller()
    scope = app.records.get_scope(caller, scope_id)
    return ScopeView.of(scope, app.store.position_of(scope))


@router.patch("/scopes/{scope_id}/settings", tags=["scopes"])
def change_settings(scope_id: str, body: ChangeSettings, app: App, bearer: Bearing) -> ScopeView:
    caller = bearer.caller()
    written = app.records.change_scope_settings(caller, scope_id, body.settings)
    return ScopeView.of(written.value, shown(app, written, written.value))


@router.get("/scopes/{scope_id}/roles", tags=["access"])
def get_roles(scope_id: str, app: App, bearer: Bearing) -> RolesView:
    caller = bearer.caller()
    scope = app.records.administered_scope(caller, scope_id)
    return RolesView.of(scope, app.store.position_of(scope))


@router.post("/scopes/{scope_id}/roles", tags=["access"])
def grant_role(scope_id: str, body: GrantRole, app: App, bearer: Bearing) -> RolesView:
    caller = bearer.caller()
    return _roles(app, app.records.grant_role(caller, scope_id, body.principal, body.role))


@router.delete("/scopes/{scope_id}/roles/{principal}/{role}", tags=["access"])
def revoke_role(scope_id: str, principal: str, role: str, app: App, bearer: Bearing) -> RolesView:
    caller = bearer.caller()
    return _roles(app, app.records.revoke_role(caller, scope_id, principal, role))


@router.post("/scopes/{scope_id}/read-grants", tags=["access"])
def grant_read(scope_id: str, body: ReadGrant, app: App, bearer: Bearing) -> RolesView:
    caller = bearer.caller()
    resource = _resource(body)
    return _roles(app, app.records.grant_read(caller, scope_id, body.principal, resource))


@router.post("/scopes/{scope_id}/read-revocations", tags=["access"])
def revoke_read(scope_id: str, body: ReadGrant, app: App, bearer: Bearing) -> RolesView:
    caller = bearer.caller()
    resource = _resource(body)
    return _roles(app, app.records.revoke_read(caller, scope_id, body.principal, resource))


# -- sources -----------------------------------------------------------------------------------

@router.post("/scopes/{scope_id}/sources", status_code=201, tags=["sources"],
             responses={200: {"model": SourceView,
                              "description": "The identical Source was already recorded"}})
def record_source(scope_id: str, body: RecordSource, app: App, bearer: Bearing,
                  response: Response) -> SourceView:
    caller = bearer.caller()
    written = app.records.record_source(
        caller, scope_id, body.source_type, body.source_id, text=body.text,
        payload=body.payload, eligibility=body.eligibility, attempt_id=body.attempt_id,
        occurred_at=body.occurred_at, sub_agent=body.sub_agent)
    if written.position is None:
        response.status_code = 200
    return SourceView.of(written.value, shown(app, written, written.value))


@router.get("/scopes/{scope_id}/sources/{source_type}/{source_id:path}", tags=["sources"])
def get_source(scope_id: str, source_type: str, source_id: str, app: App,
               bearer: Bearing) -> SourceView:
    caller = bearer.caller()
    source = app.records.get_source(caller, scope_id, source_type, source_id)
    return SourceView.of(source, app.store.position_of(source))


# -- artifacts ---------------------------------------------------------------------------------

@router.post("/scopes/{scope_id}/artifacts", status_code=201, tags=["artifacts"])
def create_artifact(scope_id: str, body: CreateArtifact, app: App, bearer: Bearing) -> RevisionView:
    caller = bearer.caller()
    return _head(app.records.create_artifact(caller, scope_id, body.family, body.artifact_id,
                                             body.content, principal=caller.name,
                                             lineage=body.lineage.to_domain()))


@router.put("/scopes/{scope_id}/artifacts/{family}/{artifact_id}", tags=["artifacts"])
def replace_artifact(scope_id: str, family: str, artifact_id: str, body: ReplaceArtifact,
                     app: App, bearer: Bearing) -> RevisionView:
    caller = bearer.caller()
    return _head(app.records.replace_artifact(caller, scope_id, family, artifact_id,
                                              body.content, principal=caller.name,
                                              expected_revision=body.expected_revision,
                                              lineage=body.lineage.to_domain()))


@router.get("/scopes/{scope_id}/artifacts/{family}/{artifact_id}", tags=["artifacts"])
def get_head(scope_id: str, family: str, artifact_id: str, app: App,
             bearer: Bearing) -> RevisionView:
    caller = bearer.caller()
    artifact = app.records.get_artifact(caller, scope_id, family, artifact_id)
    return RevisionView.of(artifact, artifact.revision(artifact.head_revision),
                           app.store.position_of(artifact))


@router.get("/scopes/{scope_id}/artifacts/{family}/{artifact_id}/revisions/{revision}",
            tags=["artifacts"])
def get_revision(scope_id: str, family: str, artifact_id: str, revision: int, app: App,
                 bearer: Bearing) -> RevisionView:
    caller = bearer.caller()
    artifact = app.records.get_artifact(caller, scope_id, family, artifact_id)
    return RevisionView.of(artifact, artifact.revision(revision),
                           app.store.position_of(artifact))


# -- memory ------------------------------------------------------------------------------------

@router.post("/scopes/{scope_id}/memories", status_code=201, tags=["memory"])
def create_memory(scope_id: str, body: CreateMemory, app: App, bearer: Bearing) -> RevisionView:
    caller = bearer.caller()
    return _head(app.records.create_memory(caller, scope_id, body.memory_id,
                                           principal=caller.name, title=body.title))


@router.post("/scopes/{scope_id}/memories/{memory_id}/entries", status_code=201,
             tags=["memory"])
def add_entry(scope_id: str, memory_id: str, body: AddEntry, app: App,
              bearer: Bearing) -> EntryVersionView:
    caller = bearer.caller()
    return _entry(app.records.add_entry(
        caller, scope_id, memory_id, body.entry_id, body.kind, body.text,
        sources=[s.to_domain() for s in body.sources],
        artifacts=[a.to_domain() for a in body.artifacts],
        expected_revision=body.expected_revision))


@router.put("/scopes/{scope_id}/memories/{memory_id}/entries/{entry_id}", tags=["memory"])
def revise_entry(scope_id: str, memory_id: str, entry_id: str, body: ReviseEntry, app: App,
                 bearer: Bearing) -> EntryVersionView:
    caller = bearer.caller()
    return _entry(app.records.revise_entry(
        caller, scope_id, memory_id, entry_id, body.kind, body.text,
        sources=[s.to_domain() for s in body.sources],
        artifacts=[a.to_domain() for a in body.artifacts],
        expected_revision=body.expected_revision,
        expected_entry_version_id=body.expected_entry_version_id))


@router.post("/scopes/{scope_id}/memories/{memory_id}/entries/{entry_id}/deactivate",
             tags=["memory"])
def deactivate_entry(scope_id: str, memory_id: str, entry_id: str, body: DeactivateEntry,
                     app: App, bearer: Bearing) -> EntryVersionView:
    caller = bearer.caller()
    return _entry(app.records.deactivate_entry(caller, scope_id, memory_id, entry_id,
                                               body.reason, body.expected_revision))


@router.post("/scopes/{scope_id}/memories/{memory_id}/entries/{entry_id}/reactivate",
             tags=["memory"])
def reactivate_entry(scope_id: str, memory_id: str, entry_id: str, body: ReactivateEntry,
                     app: App, bearer: Bearing) -> EntryVersionView:
    caller = bearer.caller()
    return _entry(app.records.reactivate_entry(caller, scope_id, memory_id, entry_id,
                                               body.expected_revision))


@router.get("/scopes/{scope_id}/memories/{memory_id}/revisions/{revision}/entries/{entry_id}"
            "/versions/{entry_version_id}", tags=["memory"])
def read_entry_version(scope_id: str, memory_id: str, revision: int, entry_id: str,
                       entry_version_id: str, app: App, bearer: Bearing) -> EntryVersionView:
    """The exact entry version a MemoryCitation names."""
    caller = bearer.caller()
    memory_ref = ArtifactRef(ArtifactFamily.MEMORY, memory_id, revision)
    entry = app.records.read_entry_version(
        caller, scope_id, MemoryCitation(memory_ref, entry_id, entry_version_id))
    return EntryVersionView.of(memory_ref, entry)


@router.get("/scopes/{scope_id}/memories/{memory_id}", tags=["memory"])
def get_memory(scope_id: str, memory_id: str, app: App, bearer: Bearing) -> RevisionView:
    return get_head(scope_id, ArtifactFamily.MEMORY, memory_id, app, bearer)
