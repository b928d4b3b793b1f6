"""Request and response bodies. Types and shapes only: the domain owns every rule and limit,
so a rule violation surfaces with its own stable code rather than a generic validation error.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from application.review import EvidenceView, Reviewed, Revision
from domain.artifact import Artifact, ArtifactRevision, EntryVersion
from domain.dream_request import DreamRequest
from domain.dream_run import DreamRun, failure_reason
from domain.errors import DomainError
from domain.refs import ArtifactRef, Lineage, MemoryCitation, SourceRef
from domain.scope import Scope
from domain.source import Source
from projections.knowledge import KnowledgeItem
from projections.review_inbox import CandidateSummary
from projections.runs import RunSummary


class Strict(BaseModel):
    """A request body: unknown fields refused, and no coercion between JSON types (``true`` is
    not ``1``, ``"1"`` is not a number, ``1`` is not a string)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _date_time_text(value: object) -> object:
    if isinstance(value, str | datetime):
        return value
    msg = "must be an ISO 8601 date-time string"
    raise ValueError(msg)


# JSON has no date-time type: an ISO 8601 string is the one accepted form (no numbers).
IsoDateTime = Annotated[datetime, Field(strict=False), BeforeValidator(_date_time_text)]


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
    occurred_at: IsoDateTime | None = None


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
        description="Event position of what is shown: the last event a command produced, or "
                    "on a read or an idempotent replay the aggregate's last event (wait for it "
                    "with `after=`); null only for an exact historical version read.")


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
    lag: int | None = Field(description="Events recorded but not yet applied (null: the store "
                                        "cannot be reached).")
    dead_letters: int | None = Field(0, description="Events the read model could not apply "
                                     "(recorded, never skipped silently; null: unknown now).")
    following: bool = Field(True, description="false while its runner retries a store error.")
    reason: str | None = Field(None, description="The error it retries, while not following.")


class WorkerHealth(BaseModel):
    capacity: int = Field(description="Concurrent generations this process runs at most.")
    busy: int = Field(description="Generations running now.")
    completed: int = Field(description="Attempts this process has finished since it started.")


class Health(BaseModel):
    status: Literal["ok", "degraded"] = Field(
        description="degraded while the store cannot be reached, a read model cannot follow "
                    "it (both: HTTP 503) or a read model holds dead letters (HTTP 200)")
    store: str = Field(description="sqlite or postgres")
    position: int | None = Field(description="The store's head (null: cannot be reached).")
    reasons: list[str] = Field(default_factory=list, description="Why it is degraded.")
    projections: dict[str, ProjectionHealth]
    workers: WorkerHealth | None = Field(None, description="null: this process runs no workers")


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
    reason: str | None = Field(description=(
        "Why the run ended as it did: for a failed run, a human sentence for its `error` "
        "code; on a single run also a succeeded run's reason; null while unfinished."))
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
                   candidate=candidate, error=summary.error,
                   reason=None if summary.error is None else failure_reason(summary.error),
                   accepted_at=summary.accepted_at,
                   started_at=summary.started_at, completed_at=summary.completed_at,
                   attempt_count=summary.attempt_count, reused=summary.reused)


class DreamRunView(DreamRunSummary):
    position: int | None = Field(
        description="Event position of what is shown: the admission, or on a read or replay "
                    "the run's last event (a worker's change included; wait for it with "
                    "`after=`).")
    terminal: bool
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


# -- candidates and review ---------------------------------------------------------------------

class ProposeCandidate(Strict):
    candidate_id: str
    family: str = Field(description="experience or skill")
    proposal: dict[str, Any] = Field(description="The content of the proposed revision.")
    reason: str
    sources: list[SourceRefBody] = Field(default_factory=list)
    artifacts: list[ArtifactRefBody] = Field(default_factory=list)
    memory_citations: list[MemoryCitationBody] = Field(default_factory=list)
    target: ArtifactRefBody | None = Field(
        default=None, description="The head revision to replace on approval; null: new.")

    def lineage(self) -> Lineage:
        return Lineage(to_domain_items(self.sources, "sources"),
                       to_domain_items(self.artifacts, "artifacts"),
                       to_domain_items(self.memory_citations, "memory_citations"))

    def target_ref(self) -> ArtifactRef | None:
        return None if self.target is None else to_domain_items([self.target], "target")[0]


_KEEPS = "Omitted or null keeps the current version's value; [] clears it."


class ReviseCandidate(Strict):
    expected_version: int = Field(description="The candidate's current version.")
    proposal: dict[str, Any] | None = Field(default=None, description="Omitted or null keeps.")
    sources: list[SourceRefBody] | None = Field(default=None, description=_KEEPS)
    artifacts: list[ArtifactRefBody] | None = Field(default=None, description=_KEEPS)
    memory_citations: list[MemoryCitationBody] | None = Field(default=None, description=_KEEPS)
    reason: str | None = Field(default=None, description="Omitted or null keeps.")
    target: ArtifactRefBody | None = Field(
        default=None, description="Omitted or null keeps; the target cannot change.")

    def to_domain(self) -> Revision:
        def items(values: list[Any] | None, name: str) -> tuple[Any, ...] | None:
            return None if values is None else to_domain_items(values, name)

        return Revision(
            proposal=self.proposal, sources=items(self.sources, "sources"),
            artifacts=items(self.artifacts, "artifacts"),
            memory_citations=items(self.memory_citations, "memory_citations"),
            reason=self.reason,
            target=None if self.target is None else to_domain_items([self.target], "target")[0])


class ApproveCandidate(Strict):
    expected_version: int = Field(description="The version being approved.")


class RejectCandidate(Strict):
    expected_version: int = Field(description="The version being rejected.")
    reason: str


class CandidatePermissions(BaseModel):
    """What the caller may do now (hints for clients; every command re-checks)."""

    can_revise: bool
    can_approve: bool
    can_reject: bool


class CandidateConflictView(BaseModel):
    version: int
    code: str
    details: dict[str, Any]


CandidateStatus = Literal["pending", "approved", "rejected"]


def _ref_body(ref: ArtifactRef | Mapping[str, Any] | None) -> ArtifactRefBody | None:
    if ref is None:
        return None
    return ArtifactRefBody(**(ref.to_dict() if isinstance(ref, ArtifactRef) else ref))


class CandidateView(Written):
    scope_id: str
    candidate_id: str
    family: str
    status: CandidateStatus
    version: int = Field(description="The current version (revisions add one).")
    target: ArtifactRefBody | None
    proposal: dict[str, Any]
    sources: list[SourceRefBody] = Field(
        description="Including the root Sources of the cited Memory entries.")
    artifacts: list[ArtifactRefBody]
    memory_citations: list[MemoryCitationBody]
    reason: str
    author: str = Field(description="Who wrote the current version.")
    proposer: str
    run_id: str | None = Field(description="The Dream run that proposed it, if any.")
    conflict: CandidateConflictView | None = Field(
        description="The last approval that failed on moved state, until the next change.")
    result: ArtifactRefBody | None = Field(description="Approved: the revision it produced.")
    decided_version: int | None
    decision_reason: str | None
    decided_by: str | None
    permissions: CandidatePermissions

    @classmethod
    def of(cls, reviewed: Reviewed, position: int | None = None) -> CandidateView:
        candidate = reviewed.candidate
        current = candidate.current
        lineage = current.lineage
        conflict = candidate.conflict
        return cls(
            scope_id=candidate.scope_id, candidate_id=candidate.candidate_id,
            family=candidate.family, status=candidate.status,  # type: ignore[arg-type]
            version=current.version,
            target=_ref_body(candidate.target), proposal=current.proposal,
            sources=[SourceRefBody(**s.to_dict()) for s in lineage.sources],
            artifacts=[ArtifactRefBody(**a.to_dict()) for a in lineage.artifacts],
            memory_citations=[MemoryCitationBody.model_validate(c.to_dict())
                              for c in lineage.memory_citations],
            reason=current.reason, author=current.author, proposer=candidate.proposer,
            run_id=candidate.run_id,
            conflict=None if conflict is None else CandidateConflictView(**conflict),
            result=_ref_body(candidate.result), decided_version=candidate.decided_version,
            decision_reason=candidate.decision_reason, decided_by=candidate.decided_by,
            permissions=CandidatePermissions(**vars(reviewed.permissions)), position=position)


class EvidenceNodeView(BaseModel):
    evidence_id: str
    kind: str
    digest: str
    source: SourceRefBody | None
    artifact: ArtifactRefBody | None
    memory_citations: list[MemoryCitationBody]
    role: str
    historical: bool
    current_entry_version_id: str | None


class ReviewedEvidenceView(BaseModel):
    nodes: list[EvidenceNodeView]
    edges: list[list[str]] = Field(description="[from, to] evidence id pairs.")
    citation_roots: list[SourceRefBody] = Field(
        description="Root Sources the direct Memory citations rest on.")


class CandidateEvidenceView(BaseModel):
    """The current version's evidence, re-resolved with the reader's rights now."""

    candidate_id: str
    version: int
    status: Literal["resolved", "unavailable"]
    evidence: ReviewedEvidenceView | None = Field(description="Set when resolved.")
    error: ErrorBody | None = Field(description="Set when unavailable: why, with its code.")

    @classmethod
    def of(cls, view: EvidenceView) -> CandidateEvidenceView:
        evidence = error = None
        if view.evidence is not None:
            evidence = ReviewedEvidenceView.model_validate(view.evidence.to_dict())
        if view.code is not None:
            error = ErrorBody(code=view.code, message=view.message or "",
                              details=dict(view.details or {}))
        return cls(candidate_id=view.candidate_id, version=view.version,
                   status=view.status, evidence=evidence, error=error)  # type: ignore[arg-type]


class CandidateSummaryView(BaseModel):
    scope_id: str
    candidate_id: str
    family: str
    status: CandidateStatus
    version: int
    target: ArtifactRefBody | None
    reason: str
    conflict: bool
    conflict_code: str | None
    proposer: str
    run_id: str | None
    proposed_at: datetime
    updated_at: datetime
    decided_at: datetime | None
    age_seconds: float = Field(description="Seconds since it was proposed.")
    result: ArtifactRefBody | None
    decided_by: str | None
    decision_reason: str | None

    @classmethod
    def of(cls, summary: CandidateSummary, now: datetime) -> CandidateSummaryView:
        return cls(
            scope_id=summary.scope_id, candidate_id=summary.candidate_id,
            family=summary.family, status=summary.status,  # type: ignore[arg-type]
            version=summary.version, target=_ref_body(summary.target), reason=summary.reason,
            conflict=summary.conflict, conflict_code=summary.conflict_code,
            proposer=summary.proposer, run_id=summary.run_id, proposed_at=summary.proposed_at,
            updated_at=summary.updated_at, decided_at=summary.decided_at,
            age_seconds=max(0.0, (now - summary.proposed_at).total_seconds()),
            result=_ref_body(summary.result), decided_by=summary.decided_by,
            decision_reason=summary.decision_reason)


class CandidatePage(BaseModel):
    candidates: list[CandidateSummaryView]
    next_cursor: str | None


class KnowledgeItemView(BaseModel):
    """An Experience or Skill at its latest approved revision."""

    scope_id: str
    family: str
    artifact_id: str
    ref: ArtifactRefBody = Field(description="The approved revision.")
    content: dict[str, Any]
    lineage: LineageBody
    candidate_id: str
    candidate_version: int
    proposer: str
    approver: str
    run_id: str | None
    package_digest: str | None = Field(description="Skills: sha256 of the SKILL.md package.")
    approved_at: datetime
    rank: float | None = Field(description="Text search only: larger is more relevant.")

    @classmethod
    def of(cls, item: KnowledgeItem) -> KnowledgeItemView:
        return cls(scope_id=item.scope_id, family=item.family, artifact_id=item.artifact_id,
                   ref=ArtifactRefBody(family=item.family, artifact_id=item.artifact_id,
                                       revision=item.revision),
                   content=dict(item.content), lineage=LineageBody.model_validate(item.lineage),
                   candidate_id=item.candidate_id, candidate_version=item.candidate_version,
                   proposer=item.proposer, approver=item.approver, run_id=item.run_id,
                   package_digest=item.package_digest, approved_at=item.approved_at,
                   rank=item.rank)


class KnowledgePage(BaseModel):
    items: list[KnowledgeItemView]


class SkillPackageView(BaseModel):
    ref: ArtifactRefBody
    skill_md: str = Field(description="The SKILL.md text.")
    digest: str = Field(description="sha256:<hex> of the UTF-8 SKILL.md text.")


# -- audit -------------------------------------------------------------------------------------

class AuditEventView(BaseModel):
    type: str = Field(description="The event class, e.g. Candidate.Approved.")
    version: int = Field(description="The aggregate's version after this event.")
    time: datetime
    principal: str | None = Field(description="Who issued the command (null: the service "
                                 "itself, e.g. a worker finishing a run).")
    payload: dict[str, Any]


class AuditView(BaseModel):
    aggregate: str
    key: str
    current_version: int
    as_of_version: int | None = Field(
        description="With ?as_of_version=: events up to it, and the state right after it.")
    events: list[AuditEventView]
    state: dict[str, Any] | None


class TraceView(BaseModel):
    """revision -> Candidate version (approval) -> Dream run -> frozen manifest -> exact
    Memory entry versions and Sources, with content hashes and whether each is usable now."""

    revision: dict[str, Any]
    candidate: dict[str, Any] | None
    run: dict[str, Any] | None
    manifest: dict[str, Any] | None
    evidence: dict[str, Any]


class ImpactedView(BaseModel):
    kind: Literal["artifact_revision", "candidate_version", "entry_version", "source"]
    key: str
    depth: int = Field(description="Edges between the queried node and this one (1: direct).")


class ImpactView(BaseModel):
    """What depends on one Source, entry version or revision, transitively through lineage."""

    kind: str
    key: str
    dependents: list[ImpactedView]
    hidden: int = Field(description="Dependents left out because the caller may not read "
                        "them (their Artifact or Memory is read-revoked for the caller).")
