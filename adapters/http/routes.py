"""Routes: translate, delegate to the write model on behalf of the caller, translate back."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, Depends, Query, Request, Response, Security
from fastapi.responses import PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from adapters.http.metrics import prometheus_text
from adapters.http.params import plain_parameters
from adapters.http.schemas import (
    AddEntry,
    ApproveCandidate,
    ArtifactRefBody,
    AuditEventView,
    AuditView,
    CandidateEvidenceView,
    CandidatePage,
    CandidateSummaryView,
    CandidateView,
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
    ImpactedView,
    ImpactView,
    KnowledgeItemView,
    KnowledgePage,
    ProjectionHealth,
    ProposeCandidate,
    ReactivateEntry,
    ReadGrant,
    RecordSource,
    RejectCandidate,
    ReplaceArtifact,
    ReviseCandidate,
    ReviseEntry,
    RevisionView,
    RolesView,
    ScopeView,
    SkillPackageView,
    SourceView,
    TraceView,
    WorkerHealth,
)
from application.access import LOCAL_CALLER, Caller, acting_as
from application.dreaming import Dreaming, EntryWritten
from application.write_model import Written
from domain.access import Resource
from domain.errors import InvalidRequestError, UnauthorizedError
from domain.refs import MEMORY, SKILL, ArtifactRef, MemoryCitation
from projections.provenance import guarding_resource
from projections.runs import MAX_LIMIT

ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": description}
    for status, description in [(401, "No valid bearer token"),
                                (403, "The caller lacks the permission"),
                                (404, "Not found, or not visible to the caller"),
                                (409, "Conflict with the current state"),
                                (413, "Request body over 1 MiB"),
                                (422, "Invalid request or a domain rule violated")]
}
router = APIRouter(prefix="/v1", responses=ERRORS, dependencies=[Depends(plain_parameters)])
ops = APIRouter()
# The read models the app runs, by their attribute on ``app.state`` (see adapters.http.app).
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


After = Annotated[int | None, Query(
    description="An event position the answer must include. Every read-model read already "
                "waits for every event recorded before the request arrived; `after` is "
                "checked to be a recorded position.")]
VIEW_POSITION_HEADER = "X-Dream-View-Position"


def _read_model(request: Request, response: Response, app: Dreaming, name: str,
                after: int | None) -> Any:
    """A running read model once it has applied every event recorded before this request
    (read-your-writes, by default), waiting at most ``DREAM_READ_WAIT_SECONDS``; the position
    it answers from goes back in the ``X-Dream-View-Position`` header."""
    head = app.max_position()
    if after is not None and not 0 <= after <= head:
        raise InvalidRequestError("after must be a position this server has recorded",
                                  field="after", head=head)
    projection = request.app.state.read_models[name]
    projection.wait(head or None, timeout=request.app.state.read_wait_seconds)
    response.headers[VIEW_POSITION_HEADER] = str(projection.position())
    return projection


def _shown(app: Dreaming, written: Written[Any], aggregate: Any) -> int | None:
    """The position a response shows: the event the command produced, or (replay) the
    aggregate's last event."""
    return written.position if written.position is not None else app.position_of(aggregate)


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
    return ScopeView.of(written.value, _shown(app, written, written.value))


@router.get("/scopes/{scope_id}", tags=["scopes"])
def get_scope(scope_id: str, app: App, caller: As) -> ScopeView:
    with acting_as(caller):
        scope = app.get_scope(scope_id)
    return ScopeView.of(scope, app.position_of(scope))


@router.patch("/scopes/{scope_id}/settings", tags=["scopes"])
def change_settings(scope_id: str, body: ChangeSettings, app: App, caller: As) -> ScopeView:
    with acting_as(caller):
        written = app.change_scope_settings(scope_id, body.settings)
    return ScopeView.of(written.value, _shown(app, written, written.value))


@router.get("/scopes/{scope_id}/roles", tags=["access"])
def get_roles(scope_id: str, app: App, caller: As) -> RolesView:
    with acting_as(caller):
        scope = app.administered_scope(scope_id)
    return RolesView.of(scope, app.position_of(scope))


@router.post("/scopes/{scope_id}/roles", tags=["access"])
def grant_role(scope_id: str, body: GrantRole, app: App, caller: As) -> RolesView:
    with acting_as(caller):
        written = app.grant_role(scope_id, body.principal, body.role)
    return RolesView.of(written.value, _shown(app, written, written.value))


@router.delete("/scopes/{scope_id}/roles/{principal}/{role}", tags=["access"])
def revoke_role(scope_id: str, principal: str, role: str, app: App, caller: As) -> RolesView:
    with acting_as(caller):
        written = app.revoke_role(scope_id, principal, role)
    return RolesView.of(written.value, _shown(app, written, written.value))


@router.post("/scopes/{scope_id}/read-grants", tags=["access"])
def grant_read(scope_id: str, body: ReadGrant, app: App, caller: As) -> RolesView:
    resource = Resource.from_dict(body.resource.model_dump(exclude_none=True))
    with acting_as(caller):
        written = app.grant_read(scope_id, body.principal, resource)
    return RolesView.of(written.value, _shown(app, written, written.value))


@router.post("/scopes/{scope_id}/read-revocations", tags=["access"])
def revoke_read(scope_id: str, body: ReadGrant, app: App, caller: As) -> RolesView:
    resource = Resource.from_dict(body.resource.model_dump(exclude_none=True))
    with acting_as(caller):
        written = app.revoke_read(scope_id, body.principal, resource)
    return RolesView.of(written.value, _shown(app, written, written.value))


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
    return SourceView.of(written.value, _shown(app, written, written.value))


@router.get("/scopes/{scope_id}/sources/{source_type}/{source_id:path}", tags=["sources"])
def get_source(scope_id: str, source_type: str, source_id: str, app: App,
               caller: As) -> SourceView:
    with acting_as(caller):
        source = app.get_source(scope_id, source_type, source_id)
    return SourceView.of(source, app.position_of(source))


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
    return RevisionView.of(artifact, artifact.revision(artifact.head_revision),
                           app.position_of(artifact))


@router.get("/scopes/{scope_id}/artifacts/{family}/{artifact_id}/revisions/{revision}",
            tags=["artifacts"])
def get_revision(scope_id: str, family: str, artifact_id: str, revision: int, app: App,
                 caller: As) -> RevisionView:
    with acting_as(caller):
        artifact = app.get_artifact(scope_id, family, artifact_id)
    return RevisionView.of(artifact, artifact.revision(revision), app.position_of(artifact))


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
    return DreamRunView.of(run, _shown(app, written, run))


@router.get("/scopes/{scope_id}/dream", tags=["dream"])
def list_dreams(scope_id: str, request: Request, response: Response, app: App, caller: As,
                status: Literal["queued", "running", "succeeded", "failed"] | None = None,
                operation: Literal["refine_experience", "derive_skill"] | None = None,
                cursor: str | None = None, limit: int = 20,
                after: After = None) -> DreamRunPage:
    """Run summaries, newest first (keyset pagination with an opaque cursor)."""
    with acting_as(caller):
        app.get_scope(scope_id)
    runs = _read_model(request, response, app, "runs", after)
    summaries, next_cursor = runs.view.list_runs(scope_id, status=status, operation=operation,
                                                 cursor=cursor, limit=limit)
    return DreamRunPage(runs=[DreamRunSummary.from_summary(s) for s in summaries],
                        next_cursor=next_cursor)


@router.get("/scopes/{scope_id}/dream/{run_id}", tags=["dream"])
def get_dream(scope_id: str, run_id: str, app: App, caller: As) -> DreamRunView:
    with acting_as(caller):
        run = app.get_dream(scope_id, run_id)
    return DreamRunView.of(run, app.position_of(run))


# -- candidates --------------------------------------------------------------------------------

def _candidate_path(scope_id: str, candidate_id: str) -> str:
    return f"/v1/scopes/{quote(scope_id, safe='')}/candidates/{quote(candidate_id, safe='')}"


@router.post("/scopes/{scope_id}/candidates", status_code=201, tags=["review"],
             responses={200: {"model": CandidateView,
                              "description": "The identical Candidate was already proposed"}})
def propose_candidate(scope_id: str, body: ProposeCandidate, app: App, caller: As,
                      response: Response) -> CandidateView:
    """A new pending Candidate (201 with Location); an identical proposal replays (200)."""
    lineage, target = body.lineage(), body.target_ref()
    with acting_as(caller):
        written = app.propose_candidate(scope_id, body.candidate_id, body.family,
                                        body.proposal, lineage, body.reason, target)
    if written.position is None:
        response.status_code = 200
    candidate = written.value.candidate
    response.headers["Location"] = _candidate_path(candidate.scope_id, candidate.candidate_id)
    return CandidateView.of(written.value, _shown(app, written, candidate))


@router.get("/scopes/{scope_id}/candidates", tags=["review"])
def list_candidates(scope_id: str, request: Request, response: Response, app: App,
                    caller: As,
                    status: Literal["pending", "approved", "rejected", "all"] = "pending",
                    family: Literal["experience", "skill"] | None = None,
                    cursor: str | None = None, limit: int = 50,
                    after: After = None) -> CandidatePage:
    """The review inbox, in candidate id order (keyset pagination with an opaque cursor);
    ``status=all`` lists every status."""
    with acting_as(caller):
        app.get_scope(scope_id)
    inbox = _read_model(request, response, app, "review_inbox", after)
    summaries, next_cursor = inbox.view.list_candidates(
        scope_id, status=None if status == "all" else status, family=family, cursor=cursor,
        limit=limit)
    now = datetime.now(UTC)
    return CandidatePage(candidates=[CandidateSummaryView.of(s, now) for s in summaries],
                         next_cursor=next_cursor)


@router.get("/scopes/{scope_id}/candidates/{candidate_id}", tags=["review"])
def get_candidate(scope_id: str, candidate_id: str, app: App, caller: As) -> CandidateView:
    with acting_as(caller):
        reviewed = app.get_candidate(scope_id, candidate_id)
    return CandidateView.of(reviewed, app.position_of(reviewed.candidate))


@router.get("/scopes/{scope_id}/candidates/{candidate_id}/evidence", tags=["review"])
def candidate_evidence(scope_id: str, candidate_id: str, app: App,
                       caller: As) -> CandidateEvidenceView:
    """The current version's evidence re-resolved with the caller's rights now: ``resolved``,
    or ``unavailable`` with the code a review step would fail with."""
    with acting_as(caller):
        return CandidateEvidenceView.of(app.candidate_evidence(scope_id, candidate_id))


@router.post("/scopes/{scope_id}/candidates/{candidate_id}/revise", tags=["review"])
def revise_candidate(scope_id: str, candidate_id: str, body: ReviseCandidate, app: App,
                     caller: As) -> CandidateView:
    """A new version; every field but ``expected_version`` may be omitted (or null) to keep
    it, and a list sent as ``[]`` clears it."""
    revision = body.to_domain()
    with acting_as(caller):
        written = app.revise_candidate(scope_id, candidate_id, body.expected_version, revision)
    return CandidateView.of(written.value, _shown(app, written, written.value.candidate))


@router.post("/scopes/{scope_id}/candidates/{candidate_id}/approve", tags=["review"])
def approve_candidate(scope_id: str, candidate_id: str, body: ApproveCandidate, app: App,
                      caller: As) -> CandidateView:
    """Approve ``expected_version``: writes the new or revised Artifact (``result``). Approving
    the approved version again answers the same result."""
    with acting_as(caller):
        written = app.approve_candidate(scope_id, candidate_id, body.expected_version)
    return CandidateView.of(written.value, _shown(app, written, written.value.candidate))


@router.post("/scopes/{scope_id}/candidates/{candidate_id}/reject", tags=["review"])
def reject_candidate(scope_id: str, candidate_id: str, body: RejectCandidate, app: App,
                     caller: As) -> CandidateView:
    with acting_as(caller):
        written = app.reject_candidate(scope_id, candidate_id, body.expected_version,
                                       body.reason)
    return CandidateView.of(written.value, _shown(app, written, written.value.candidate))


# -- knowledge ---------------------------------------------------------------------------------

@router.get("/scopes/{scope_id}/knowledge", tags=["knowledge"])
def search_knowledge(scope_id: str, request: Request, response: Response, app: App,
                     caller: As,
                     q: Annotated[str | None, Query(
                         description="Words that must all match; omit for the newest.")] = None,
                     family: Literal["experience", "skill"] | None = None, limit: int = 20,
                     after: After = None) -> KnowledgePage:
    """Approved Experiences and Skills (latest approved revision each) the caller may read,
    most relevant first (without ``q``: newest approvals first)."""
    with acting_as(caller):
        app.get_scope(scope_id)
    knowledge = _read_model(request, response, app, "knowledge", after)
    items = knowledge.view.search(scope_id, q, family=family, limit=limit)
    with acting_as(caller):
        readable = app.readable_artifacts(scope_id, [(i.family, i.artifact_id) for i in items])
    if len(readable) < len(items) == limit < MAX_LIMIT:
        # Some rows are hidden from this caller: look further so the page can still fill.
        items = knowledge.view.search(scope_id, q, family=family, limit=MAX_LIMIT)
        with acting_as(caller):
            readable = app.readable_artifacts(scope_id,
                                              [(i.family, i.artifact_id) for i in items])
    shown = [i for i in items if (i.family, i.artifact_id) in readable][:limit]
    return KnowledgePage(items=[KnowledgeItemView.of(item) for item in shown])


# -- skill packages ----------------------------------------------------------------------------

def _skill_package(app: Dreaming, caller: Caller, scope_id: str, artifact_id: str,
                   revision: int) -> tuple[ArtifactRef, dict[str, str]]:
    with acting_as(caller):
        ref = ArtifactRef(SKILL, artifact_id, revision)
        return ref, app.skill_package(scope_id, ref)


@router.get("/scopes/{scope_id}/artifacts/skill/{artifact_id}/revisions/{revision}/package",
            tags=["artifacts"])
def skill_package(scope_id: str, artifact_id: str, revision: int, app: App,
                  caller: As) -> SkillPackageView:
    """The instruction-only package of one Skill revision: its SKILL.md text and digest."""
    ref, package = _skill_package(app, caller, scope_id, artifact_id, revision)
    return SkillPackageView(ref=ArtifactRefBody(**ref.to_dict()), **package)


@router.get("/scopes/{scope_id}/artifacts/skill/{artifact_id}/revisions/{revision}/package"
            "/SKILL.md", tags=["artifacts"], response_class=Response, responses={
                200: {"content": {"text/markdown": {"schema": {"type": "string"}}},
                      "description": "SKILL.md; ETag and Digest carry its sha256"}})
def download_skill_md(scope_id: str, artifact_id: str, revision: int, app: App,
                      caller: As) -> Response:
    """The SKILL.md file itself, as a download."""
    _, package = _skill_package(app, caller, scope_id, artifact_id, revision)
    body = package["skill_md"].encode("utf-8")
    hex_digest = package["digest"].removeprefix("sha256:")
    return Response(body, media_type="text/markdown; charset=utf-8", headers={
        "Content-Disposition": 'attachment; filename="SKILL.md"',
        "ETag": f'"{package["digest"]}"',
        "Digest": "sha-256=" + base64.b64encode(bytes.fromhex(hex_digest)).decode("ascii"),
    })


# -- audit -------------------------------------------------------------------------------------

@router.get("/scopes/{scope_id}/audit/trace/{family}/{artifact_id}/{revision}", tags=["audit"])
def trace(scope_id: str, family: str, artifact_id: str, revision: int, app: App,
          caller: As) -> TraceView:
    """The provenance chain of one Artifact revision, down to exact entry versions."""
    with acting_as(caller):
        return TraceView(**app.trace(scope_id, ArtifactRef(family, artifact_id, revision)))


@router.get("/scopes/{scope_id}/audit/{aggregate}/{key:path}", tags=["audit"])
def audit(scope_id: str, aggregate: str, key: str, app: App, caller: As,
          as_of_version: Annotated[int | None, Query(ge=1)] = None) -> AuditView:
    """An aggregate's events (type, version, time, who acted, payload); with
    ``as_of_version``, only those up to it and the state right after it. Keys:
    ``scope/<scope_id>``, ``source/<type>/<id>``, ``artifact/<family>/<id>``,
    ``candidate/<id>``, ``dream_run/<run_id>``."""
    with acting_as(caller):
        events = app.audit_history(scope_id, aggregate, key)
        state = None if as_of_version is None else app.audit_state(
            scope_id, aggregate, key, as_of_version)
    shown = events if as_of_version is None else events[:as_of_version]
    return AuditView(aggregate=aggregate, key=key, current_version=events[-1].version,
                     as_of_version=as_of_version,
                     events=[AuditEventView(**vars(event)) for event in shown],
                     state=None if state is None else state.state)


@router.get("/scopes/{scope_id}/provenance/impact", tags=["audit"])
def impact(scope_id: str, request: Request, response: Response, app: App, caller: As,
           kind: Literal["source", "entry_version", "artifact_revision", "candidate_version"],
           key: Annotated[str, Query(min_length=1, max_length=1024)],
           max_depth: Annotated[int, Query(ge=1, le=1000)] = 50,
           after: After = None) -> ImpactView:
    """Everything in the scope that depends on one node, transitively through lineage (the
    query behind erasure): Artifact revisions, Candidate versions and Memory entry versions.
    Keys: ``<source_type>/<source_id>``, ``<memory_id>/<entry_id>@<entry_version_id>``,
    ``<family>/<artifact_id>@<revision>``, ``<candidate_id>@<version>``."""
    with acting_as(caller):
        app.check_readable(scope_id, guarding_resource(kind, key))
        provenance = _read_model(request, response, app, "provenance", after)
        found = provenance.view.impact(scope_id, kind, key, max_depth=max_depth)
        guards = {(d.kind, d.key): guarding_resource(d.kind, d.key) for d in found}
        readable = app.readable_artifacts(scope_id, {
            (g.family, g.artifact_id) for g in guards.values()
            if g is not None and g.family is not None and g.artifact_id is not None})
    shown = [d for d in found if (guard := guards[(d.kind, d.key)]) is None
             or (guard.family, guard.artifact_id) in readable]
    return ImpactView(kind=kind, key=key, hidden=len(found) - len(shown),
                      dependents=[ImpactedView(kind=d.kind, key=d.key,
                                               depth=d.depth) for d in shown])


# -- operations --------------------------------------------------------------------------------

@ops.get("/healthz", tags=["ops"], responses={
    503: {"model": Health, "description": "The store cannot be reached, or a read model "
                                          "cannot follow it (it retries by itself)"}})
def healthz(request: Request, response: Response, app: App) -> Health:
    """``ok``; ``degraded`` with HTTP 200 while a read model holds dead letters (events it
    could not apply); ``degraded`` with HTTP 503 while the store cannot be reached or a read
    model retries a store error. ``reasons`` says why; it heals by itself."""
    reasons: list[str] = []
    head = _store_head(app, reasons)
    views = {p.name: _projection_health(p, head, reasons)
             for p in request.app.state.read_models.values()}
    if reasons:
        response.status_code = 503
    reasons += [f"{name}: {view.dead_letters} dead letter(s)" for name, view in views.items()
                if view.dead_letters]
    pool = request.app.state.workers
    return Health(status="degraded" if reasons else "ok", store=app.store_kind,
                  position=head, reasons=reasons, projections=views,
                  workers=None if pool is None else WorkerHealth(
                      capacity=pool.capacity, busy=pool.busy, completed=pool.completed))


def _store_head(app: Dreaming, reasons: list[str]) -> int | None:
    try:
        return app.max_position()
    except Exception as error:  # reported, not raised: this is what /healthz is for
        reasons.append(f"store: {type(error).__name__}")
        return None


def _projection_health(projection: Any, head: int | None,
                       reasons: list[str]) -> ProjectionHealth:
    status, position = projection.status(), projection.position()
    if not status.healthy:
        reasons.append(f"{projection.name}: {status.reason} "
                       f"(retrying for {status.failing_for:.1f} s)")
    dead_letters: int | None = None  # unknown while the store cannot be reached: not asked,
    if head is not None:             # so /healthz answers at once instead of timing out 5x
        try:
            dead_letters = projection.view.dead_letter_count()
        except Exception:  # the view's store is down; the runner's status already says so
            dead_letters = None
    return ProjectionHealth(position=position,
                            lag=None if head is None else max(0, head - position),
                            dead_letters=dead_letters, following=status.healthy,
                            reason=status.reason)


@ops.get("/metrics", tags=["ops"], response_class=PlainTextResponse)
def metrics(request: Request, app: App) -> PlainTextResponse:
    """Prometheus text exposition: store head, read-model positions, lag and dead letters,
    worker load."""
    return PlainTextResponse(prometheus_text(app.max_position(),
                                             request.app.state.read_models.values(),
                                             request.app.state.workers),
                             media_type="text/plain; version=0.0.4; charset=utf-8")
