"""Request and response bodies. Types and shapes only: the domain owns every rule and limit,
so a rule violation surfaces with its own stable code rather than a generic validation error.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from domain.artifact import Artifact, ArtifactRevision, EntryVersion
from domain.dream_request import DreamRequest
from domain.dream_run import DreamRun
from domain.errors import DomainError
from domain.refs import ArtifactRef, Lineage, MemoryCitation, SourceRef
from domain.scope import Scope
from domain.source import Source
from projections.runs import RunSummary


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# -- references --------------------------------------------------------------------------------

class SourceRefBody(Strict):
    source_type: str
    source_id: str

    def to_domain(self) -> SourceRef:
        return SourceRef(self.source_type, self.source_id)


class ArtifactRefBody(Strict):
    family: str
    artifact_id: str
    revision: int

    def to_domain(self) -> ArtifactRef:
        return ArtifactRef(self.family, self.artifact_id, self.revision)


class MemoryCitationBody(Strict):
    memory_ref: ArtifactRefBody
    entry_id: str
    entry_version_id: str

    def to_domain(self) -> MemoryCitation:
        return MemoryCitation(self.memory_ref.to_domain(), self.entry_id, self.entry_version_id)


class LineageBody(Strict):
    sources: list[SourceRefBody] = Field(default_factory=list)
    artifacts: list[ArtifactRefBody] = Field(default_factory=list)
    memory_citations: list[MemoryCitationBody] = Field(default_factory=list)

    def to_domain(self) -> Lineage:
        return Lineage(tuple(s.to_domain() for s in self.sources),
                       tuple(a.to_domain() for a in self.artifacts),
                       tuple(c.to_domain() for c in self.memory_citations))


class ResourceBody(Strict):
    kind: Literal["artifact", "source"]
    family: str | None = None
    artifact_id: str | None = None
    source_type: str | None = None
    source_id: str | None = None


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
    occurred_at: datetime | None = None


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

class Written(BaseModel):
    position: int | None = Field(
        description="Event position this command produced; null when nothing changed.")


class ScopeView(Written):
    scope_id: str
    settings: dict[str, Any]

    @classmethod
    def of(cls, scope: Scope, position: int | None = None) -> ScopeView:
        return cls(scope_id=scope.scope_id, settings=scope.settings, position=position)


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
    withdrawn: bool
    version: int

    @classmethod
    def of(cls, source: Source, position: int | None = None) -> SourceView:
        return cls(scope_id=source.scope_id, source_type=source.source_type,
                   source_id=source.source_id, text=source.text, payload=source.payload,
                   content_hash=source.content_hash, eligibility=source.eligibility,
                   attempt_id=source.attempt_id, occurred_at=source.occurred_at,
                   withdrawn=source.withdrawn, version=source.version, position=position)


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
        if artifact.family == "memory":
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


class ErrorBody(BaseModel):
    code: str
    message: str
    details: dict[str, Any]


class ErrorResponse(BaseModel):
    error: ErrorBody


class ProjectionHealth(BaseModel):
    position: int = Field(description="Last event position the read model applied.")
    lag: int = Field(description="Events recorded but not yet applied.")


class Health(BaseModel):
    status: Literal["ok"]
    store: str = Field(description="sqlite or postgres")
    position: int
    projections: dict[str, ProjectionHealth]


# -- dream runs --------------------------------------------------------------------------------

def to_domain_items(items: list[Any], name: str) -> tuple[Any, ...]:
    """Convert request items, naming the offending item in the error's field path."""
    converted = []
    for index, item in enumerate(items):
        try:
            converted.append(item.to_domain())
        except DomainError as error:
            inner = error.details.get("field")
            error.details["field"] = f"{name}[{index}]" + (f".{inner}" if inner else "")
            raise
    return tuple(converted)


class CreateDreamRun(Strict):
    operation: str
    idempotency_key: str
    artifacts: list[ArtifactRefBody] = Field(default_factory=list)
    memory_citations: list[MemoryCitationBody] = Field(default_factory=list)
    sources: list[SourceRefBody] = Field(default_factory=list)
    target: ArtifactRefBody | None = None

    def to_domain(self) -> DreamRequest:
        target = None
        if self.target is not None:
            target = to_domain_items([self.target], "target")[0]
        return DreamRequest.create(
            self.operation, self.idempotency_key,
            to_domain_items(self.artifacts, "artifacts"),
            to_domain_items(self.memory_citations, "memory_citations"),
            to_domain_items(self.sources, "sources"), target)


class Usage(BaseModel):
    model_calls: int
    input_tokens: int | None = Field(description="null means unknown, never zero")
    output_tokens: int | None = Field(description="null means unknown, never zero")


class CandidateRef(BaseModel):
    candidate_id: str
    version: int


class DreamRunSummary(BaseModel):
    scope_id: str
    run_id: str
    operation: str
    status: Literal["queued", "running", "succeeded", "failed"]
    outcome: Literal["proposed", "no_change", "needs_evidence"] | None
    target: ArtifactRefBody | None
    candidate: CandidateRef | None
    error: str | None
    accepted_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    attempt_count: int
    reused: bool


    @classmethod
    def from_summary(cls, summary: RunSummary) -> DreamRunSummary:
        candidate = None
        if summary.candidate_id is not None and summary.candidate_version is not None:
            candidate = CandidateRef(candidate_id=summary.candidate_id,
                                     version=summary.candidate_version)
        target = summary.target
        return cls(scope_id=summary.scope_id, run_id=summary.run_id,
                   operation=summary.operation, status=summary.status,  # type: ignore[arg-type]
                   outcome=summary.outcome,  # type: ignore[arg-type]
                   target=None if target is None else ArtifactRefBody(**target),
                   candidate=candidate, error=summary.error, accepted_at=summary.accepted_at,
                   started_at=summary.started_at, completed_at=summary.completed_at,
                   attempt_count=summary.attempt_count, reused=summary.reused)


class DreamRunView(DreamRunSummary):
    position: int | None = Field(description="Event position of the admission (null: replay).")
    terminal: bool
    reason: str | None
    input_manifest: dict[str, Any] | None
    usage: Usage
    budget: dict[str, int]
    prompt_version: str
    model_config_id: str | None

    @classmethod
    def of(cls, run: DreamRun, position: int | None = None) -> DreamRunView:
        target = run.request.get("target")
        return cls(
            scope_id=run.scope_id, run_id=run.run_id, operation=run.operation,
            status=run.status, outcome=run.outcome,  # type: ignore[arg-type]
            target=None if target is None else ArtifactRefBody(**target),
            candidate=None if run.candidate is None else CandidateRef(**run.candidate),
            error=run.error, accepted_at=run.accepted_at, started_at=run.started_at,
            completed_at=run.completed_at, attempt_count=run.attempt_count, reused=run.reused,
            position=position, terminal=run.terminal, reason=run.reason,
            input_manifest=run.manifest,
            usage=Usage(model_calls=run.model_calls, input_tokens=run.input_tokens,
                        output_tokens=run.output_tokens),
            budget=run.budget, prompt_version=run.prompt_version,
            model_config_id=run.model_config_id)


class DreamRunPage(BaseModel):
    runs: list[DreamRunSummary]
    next_cursor: str | None
