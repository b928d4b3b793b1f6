"""The audit: aggregate histories, provenance traces and the impact of one node."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from adapters.http.dependencies import After, App, Bearing, read_view, reading
from adapters.http.schemas import AuditEventView, AuditView, ImpactedView, ImpactView, TraceView
from adapters.http.schemas.vocabulary import NodeKindQuery
from domain.refs import ArtifactRef, check_family
from projections.provenance import PROVENANCE, guarding_resource

router = APIRouter()


@router.get("/scopes/{scope_id}/audit/trace/{family}/{artifact_id}/{revision}", tags=["audit"])
def trace(scope_id: str, family: str, artifact_id: str, revision: int, app: App,
          bearer: Bearing) -> TraceView:
    """The provenance chain of one Artifact revision, down to exact entry versions."""
    caller = bearer.caller()
    ref = ArtifactRef(check_family(family), artifact_id, revision)
    return TraceView(**app.audit.trace(caller, scope_id, ref))


@router.get("/scopes/{scope_id}/audit/{aggregate}/{key:path}", tags=["audit"])
def audit(scope_id: str, aggregate: str, key: str, app: App, bearer: Bearing,
          as_of_version: Annotated[int | None, Query(ge=1)] = None) -> AuditView:
    """An aggregate's events (type, version, time, who acted, payload); with
    ``as_of_version``, only those up to it and the state right after it. Keys:
    ``scope/<scope_id>``, ``source/<type>/<id>``, ``artifact/<family>/<id>``,
    ``candidate/<id>``, ``dream_run/<run_id>``."""
    caller = bearer.caller()
    events = app.audit.audit_history(caller, scope_id, aggregate, key)
    state = None if as_of_version is None else app.audit.audit_state(
        caller, scope_id, aggregate, key, as_of_version)
    shown = events if as_of_version is None else events[:as_of_version]
    return AuditView(aggregate=aggregate, key=key, current_version=events[-1].version,
                     as_of_version=as_of_version,
                     events=[AuditEventView(**vars(event)) for event in shown],
                     state=None if state is None else state.state)


@router.get("/scopes/{scope_id}/provenance/impact", tags=["audit"],
            dependencies=[reading(PROVENANCE)])
def impact(scope_id: str, request: Request, response: Response, app: App, bearer: Bearing,
           kind: NodeKindQuery,
           key: Annotated[str, Query(min_length=1, max_length=1024)],
           max_depth: Annotated[int, Query(ge=1, le=1000)] = 50,
           after: After = None) -> ImpactView:
    """Everything in the scope that depends on one node, transitively through lineage (the
    query behind erasure): Artifact revisions, Candidate versions and Memory entry versions.
    Keys: ``<source_type>/<source_id>``, ``<memory_id>/<entry_id>@<entry_version_id>``,
    ``<family>/<artifact_id>@<revision>``, ``<candidate_id>@<version>``."""
    caller = bearer.caller()
    found = app.queries.impact(
        caller, scope_id, lambda: read_view(request, response, app, PROVENANCE, after),
        guarding_resource, kind, key, max_depth)
    return ImpactView(kind=kind, key=key, hidden=found.hidden,
                      dependents=[ImpactedView(kind=d.kind, key=d.key,  # type: ignore[arg-type]
                                               depth=d.depth) for d in found.shown])
