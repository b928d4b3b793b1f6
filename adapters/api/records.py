"""Scopes and their access, Sources, Artifacts and Memory entries."""

from __future__ import annotations

from adapters.api import rendered_pages
from adapters.api.acting import Acting, Recorded
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
    ScopeSummaryView,
    ScopeView,
    SourceView,
)
from application.records import EntryWritten
from application.store import Written
from domain.access import Resource
from domain.artifact import Artifact
from domain.refs import ArtifactFamily, ArtifactRef, MemoryCitation
from domain.scope import Scope
from projections.scopes import SCOPES


def _entry(written: Written[EntryWritten]) -> EntryVersionView:
    return EntryVersionView.of(written.value.memory, written.value.entry, written.position)


def _head(written: Written[Artifact]) -> RevisionView:
    artifact = written.value
    return RevisionView.of(artifact, artifact.revision(artifact.head_revision), written.position)


def _roles(acting: Acting, written: Written[Scope]) -> RolesView:
    return RolesView.of(written.value, acting.shown(written, written.value))


def _resource(body: ReadGrant) -> Resource:
    return Resource.from_dict(body.resource.model_dump(exclude_none=True))


# -- scopes ------------------------------------------------------------------------------------

def create_scope(acting: Acting, body: CreateScope) -> ScopeView:
    written = acting.app.records.create_scope(acting.who(), body.scope_id, body.settings)
    return ScopeView.of(written.value, acting.shown(written, written.value))


def list_scopes(acting: Acting, cursor: str | None, limit: int) -> ScopePage:
    listing = acting.app.queries.list_scopes(acting.who(), acting.view(SCOPES), cursor,
                                             limit)
    return ScopePage(scopes=[ScopeSummaryView.of(scope, listing.roles.get(scope.scope_id, []))
                             for scope in listing.scopes], next_cursor=listing.next_cursor)


def list_scopes_body(acting: Acting, cursor: str | None, limit: int) -> bytes:
    """The page ``list_scopes`` answers, as the JSON body the store renders (ADR-0041)."""
    caller, holders_of = acting.app.queries.readable_scopes(acting.who())
    view = acting.view(SCOPES)()
    documents, next_cursor = view.list_documents(
        rendered_pages.scope_summary(view.dialect), caller, holders_of=holders_of,
        cursor=cursor, limit=limit)
    return rendered_pages.page_body("scopes", documents, next_cursor)


def get_scope(acting: Acting, scope_id: str) -> ScopeView:
    app = acting.app
    scope = app.records.get_scope(acting.who(), scope_id)
    return ScopeView.of(scope, app.store.position_of(scope))


def change_settings(acting: Acting, scope_id: str, body: ChangeSettings) -> ScopeView:
    written = acting.app.records.change_scope_settings(acting.who(), scope_id, body.settings)
    return ScopeView.of(written.value, acting.shown(written, written.value))


def get_roles(acting: Acting, scope_id: str) -> RolesView:
    app = acting.app
    scope = app.records.administered_scope(acting.who(), scope_id)
    return RolesView.of(scope, app.store.position_of(scope))


def grant_role(acting: Acting, scope_id: str, body: GrantRole) -> RolesView:
    return _roles(acting, acting.app.records.grant_role(acting.who(), scope_id,
                                                        body.principal, body.role))


def revoke_role(acting: Acting, scope_id: str, principal: str, role: str) -> RolesView:
    return _roles(acting, acting.app.records.revoke_role(acting.who(), scope_id, principal,
                                                         role))


def grant_read(acting: Acting, scope_id: str, body: ReadGrant) -> RolesView:
    who, resource = acting.who(), _resource(body)
    return _roles(acting, acting.app.records.grant_read(who, scope_id, body.principal,
                                                        resource))


def revoke_read(acting: Acting, scope_id: str, body: ReadGrant) -> RolesView:
    who, resource = acting.who(), _resource(body)
    return _roles(acting, acting.app.records.revoke_read(who, scope_id, body.principal,
                                                         resource))


# -- sources -----------------------------------------------------------------------------------

def record_source(acting: Acting, scope_id: str, body: RecordSource) -> Recorded[SourceView]:
    written = acting.app.records.record_source(
        acting.who(), scope_id, body.source_type, body.source_id, text=body.text,
        payload=body.payload, eligibility=body.eligibility, attempt_id=body.attempt_id,
        occurred_at=body.occurred_at, sub_agent=body.sub_agent, subject=body.subject)
    return Recorded(SourceView.of(written.value, acting.shown(written, written.value)),
                    new=written.position is not None)


def get_source(acting: Acting, scope_id: str, source_type: str, source_id: str) -> SourceView:
    app = acting.app
    source = app.records.get_source(acting.who(), scope_id, source_type, source_id)
    return SourceView.of(source, app.store.position_of(source))


# -- artifacts ---------------------------------------------------------------------------------

def create_artifact(acting: Acting, scope_id: str, body: CreateArtifact) -> RevisionView:
    caller = acting.caller()
    return _head(acting.app.records.create_artifact(
        caller, scope_id, body.family, body.artifact_id, body.content, principal=caller.name,
        lineage=body.lineage.to_domain()))


def replace_artifact(acting: Acting, scope_id: str, family: str, artifact_id: str,
                     body: ReplaceArtifact) -> RevisionView:
    caller = acting.caller()
    return _head(acting.app.records.replace_artifact(
        caller, scope_id, family, artifact_id, body.content, principal=caller.name,
        expected_revision=body.expected_revision, lineage=body.lineage.to_domain()))


def get_revision(acting: Acting, scope_id: str, family: str, artifact_id: str,
                 revision: int | None = None) -> RevisionView:
    """One revision of an Artifact; without ``revision``, its head."""
    app = acting.app
    artifact = app.records.get_artifact(acting.who(), scope_id, family, artifact_id)
    return RevisionView.of(artifact, artifact.revision(
        artifact.head_revision if revision is None else revision),
        app.store.position_of(artifact))


# -- memory ------------------------------------------------------------------------------------

def create_memory(acting: Acting, scope_id: str, body: CreateMemory) -> RevisionView:
    caller = acting.caller()
    return _head(acting.app.records.create_memory(caller, scope_id, body.memory_id,
                                                  principal=caller.name, title=body.title))


def add_entry(acting: Acting, scope_id: str, memory_id: str, body: AddEntry) -> EntryVersionView:
    return _entry(acting.app.records.add_entry(
        acting.who(), scope_id, memory_id, body.entry_id, body.kind, body.text,
        sources=[s.to_domain() for s in body.sources],
        artifacts=[a.to_domain() for a in body.artifacts],
        expected_revision=body.expected_revision, subject=body.subject))


def revise_entry(acting: Acting, scope_id: str, memory_id: str, entry_id: str,
                 body: ReviseEntry) -> EntryVersionView:
    return _entry(acting.app.records.revise_entry(
        acting.who(), scope_id, memory_id, entry_id, body.kind, body.text,
        sources=[s.to_domain() for s in body.sources],
        artifacts=[a.to_domain() for a in body.artifacts],
        expected_revision=body.expected_revision,
        expected_entry_version_id=body.expected_entry_version_id))


def deactivate_entry(acting: Acting, scope_id: str, memory_id: str, entry_id: str,
                     body: DeactivateEntry) -> EntryVersionView:
    return _entry(acting.app.records.deactivate_entry(acting.who(), scope_id, memory_id,
                                                      entry_id, body.reason,
                                                      body.expected_revision))


def reactivate_entry(acting: Acting, scope_id: str, memory_id: str, entry_id: str,
                     body: ReactivateEntry) -> EntryVersionView:
    return _entry(acting.app.records.reactivate_entry(acting.who(), scope_id, memory_id,
                                                      entry_id, body.expected_revision))


def read_entry_version(acting: Acting, scope_id: str, memory_id: str, revision: int,
                       entry_id: str, entry_version_id: str) -> EntryVersionView:
    """The exact entry version a MemoryCitation names."""
    memory_ref = ArtifactRef(ArtifactFamily.MEMORY, memory_id, revision)
    entry = acting.app.records.read_entry_version(
        acting.who(), scope_id, MemoryCitation(memory_ref, entry_id, entry_version_id))
    return EntryVersionView.of(memory_ref, entry)


def get_memory(acting: Acting, scope_id: str, memory_id: str) -> RevisionView:
    return get_revision(acting, scope_id, ArtifactFamily.MEMORY, memory_id)
