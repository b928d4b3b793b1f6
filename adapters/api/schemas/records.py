"""Bodies of scopes, access, Sources, Artifacts and Memory entries."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from adapters.api.schemas.common import (
    ArtifactRefBody,
    IsoDateTime,
    LineageBody,
    MemoryCitationBody,
    ResourceBody,
    SourceRefBody,
    Strict,
    Written,
)
from domain.artifact import Artifact, ArtifactRevision, EntryVersion
from domain.refs import ArtifactFamily, ArtifactRef
from domain.scope import Scope
from domain.source import Source
from projections.scopes import ScopeSummary

# -- requests ----------------------------------------------------------------------------------

class CreateScope(Strict):
    scope_id: str
    settings: dict[str, Any] = Field(default_factory=dict)


class ChangeSettings(Strict):
    settings: dict[str, Any]


class GrantRole(Strict):
    principal: str
    role: str


class ReadGrant(Strict):
    principal: str
    resource: ResourceBody


class RecordSource(Strict):
    source_type: str
    source_id: str
    text: str | None = None
    payload: dict[str, Any] | None = None
    eligibility: str = "eligible"
    attempt_id: str | None = None
    occurred_at: IsoDateTime | None = None
    sub_agent: bool = Field(default=False, description=(
        "Recorded by a sub-agent: stored and citable, never counted by automatic dreaming."))
    subject: str | None = Field(default=None, description=(
        "The data subject this record is about (1-256 printable characters), kept only as a "
        "digest beside the record's data key: erasing the subject erases it (docs/erasure.md)."))


class CreateArtifact(Strict):
    family: str
    artifact_id: str
    content: dict[str, Any]
    lineage: LineageBody = Field(default_factory=LineageBody)


class ReplaceArtifact(Strict):
    content: dict[str, Any]
    expected_revision: int
    lineage: LineageBody = Field(default_factory=LineageBody)


class CreateMemory(Strict):
    memory_id: str
    title: str | None = None


class AddEntry(Strict):
    entry_id: str
    kind: str
    text: str
    sources: list[SourceRefBody] = Field(default_factory=list)
    artifacts: list[ArtifactRefBody] = Field(default_factory=list)
    expected_revision: int | None = None
    subject: str | None = Field(default=None, description=(
        "The data subject this record is about (1-256 printable characters), kept only as a "
        "digest beside the record's data key: erasing the subject erases it (docs/erasure.md)."))


class ReviseEntry(Strict):
    kind: str
    text: str
    sources: list[SourceRefBody] = Field(default_factory=list)
    artifacts: list[ArtifactRefBody] = Field(default_factory=list)
    expected_revision: int | None = None
    expected_entry_version_id: str | None = None


class DeactivateEntry(Strict):
    reason: str = "deactivated"
    expected_revision: int | None = None


class ReactivateEntry(Strict):
    expected_revision: int | None = None


# -- responses ---------------------------------------------------------------------------------

class ScopeView(Written):
    scope_id: str
    settings: dict[str, Any]

    @classmethod
    def of(cls, scope: Scope, position: int | None = None) -> ScopeView:
        return cls(scope_id=scope.scope_id, settings=scope.settings, position=position)


class ScopeSummaryView(BaseModel):
    scope_id: str
    settings: dict[str, Any]
    created_at: datetime
    updated_at: datetime = Field(description="When the settings last changed (or creation).")
    roles: list[str] = Field(description="The caller's own roles in the scope (an "
                                         "administrator of the deployment may hold none).")
    position: int = Field(description="The event that last changed the scope's settings.")

    @classmethod
    def of(cls, scope: ScopeSummary, roles: list[str]) -> ScopeSummaryView:
        return cls(scope_id=scope.scope_id, settings=scope.settings,
                   created_at=scope.created_at, updated_at=scope.updated_at, roles=roles,
                   position=scope.position)


class ScopePage(BaseModel):
    """The scopes the caller may read, in scope id order."""

    scopes: list[ScopeSummaryView]
    next_cursor: str | None


class RolesView(Written):
    scope_id: str
    roles: dict[str, list[str]]
    read_grants: dict[str, dict[str, str]]

    @classmethod
    def of(cls, scope: Scope, position: int | None = None) -> RolesView:
        return cls(scope_id=scope.scope_id, position=position,
                   roles={p: sorted(r) for p, r in sorted(scope.roles.items())},
                   read_grants={p: dict(sorted(g.items()))
                                for p, g in sorted(scope.read_grants.items())})


class SourceView(Written):
    scope_id: str
    source_type: str
    source_id: str
    text: str | None
    payload: dict[str, Any] | None
    content_hash: str
    eligibility: str
    attempt_id: str | None
    occurred_at: datetime | None
    sub_agent: bool
    withdrawn: bool
    erased: bool = Field(description="Erased: its text and payload are gone for good "
                                     "(both read as null); ids and hash remain.")
    version: int

    @classmethod
    def of(cls, source: Source, position: int | None = None) -> SourceView:
        return cls(scope_id=source.scope_id, source_type=source.source_type,
                   source_id=source.source_id, text=source.text, payload=source.payload,
                   content_hash=source.content_hash, eligibility=source.eligibility,
                   attempt_id=source.attempt_id, occurred_at=source.occurred_at,
                   sub_agent=source.sub_agent, withdrawn=source.withdrawn,
                   erased=source.erased, version=source.version, position=position)


class ManifestEntryView(BaseModel):
    entry_version_id: str
    content_hash: str
    status: str


class RevisionView(Written):
    scope_id: str
    ref: ArtifactRefBody
    head_revision: int
    content: dict[str, Any]
    lineage: LineageBody
    provenance: dict[str, Any]
    manifest: dict[str, ManifestEntryView] | None = Field(
        description="Memory only: entry id -> exact version and status at this revision.")

    @classmethod
    def of(cls, artifact: Artifact, revision: ArtifactRevision,
           position: int | None = None) -> RevisionView:
        manifest = None
        if artifact.family == ArtifactFamily.MEMORY:
            manifest = {entry_id: ManifestEntryView(**vars(entry)) for entry_id, entry
                        in artifact.manifest(revision.revision).items()}
        return cls(scope_id=artifact.scope_id, position=position,
                   ref=ArtifactRefBody(**artifact.ref(revision.revision).to_dict()),
                   head_revision=artifact.head_revision, content=revision.content,
                   lineage=LineageBody.model_validate(revision.lineage.to_dict()),
                   provenance=revision.provenance, manifest=manifest)


class EntryVersionView(Written):
    memory_ref: ArtifactRefBody
    entry_id: str
    entry_version_id: str
    version: int
    kind: str
    text: str
    sources: list[SourceRefBody]
    artifacts: list[ArtifactRefBody]
    content_hash: str
    revision: int = Field(description="The Memory revision that introduced this version.")
    citation: MemoryCitationBody

    @classmethod
    def of(cls, memory_ref: ArtifactRef, entry: EntryVersion,
           position: int | None = None) -> EntryVersionView:
        ref = ArtifactRefBody(**memory_ref.to_dict())
        return cls(memory_ref=ref, entry_id=entry.entry_id,
                   entry_version_id=entry.entry_version_id, version=entry.version,
                   kind=entry.kind, text=entry.text,
                   sources=[SourceRefBody(**s.to_dict()) for s in entry.sources],
                   artifacts=[ArtifactRefBody(**a.to_dict()) for a in entry.artifacts],
                   content_hash=entry.content_hash, revision=entry.revision,
                   citation=MemoryCitationBody(memory_ref=ref, entry_id=entry.entry_id,
                                               entry_version_id=entry.entry_version_id),
                   position=position)
