"""The audit: aggregate histories, provenance traces and the impact of one node."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

from adapters.api import audit as audits
from adapters.api.schemas import AuditView, ImpactView, TraceView
from adapters.api.schemas.vocabulary import NodeKindQuery
from adapters.http.dependencies import After, Calling, reading, v1_router
from projections.provenance import PROVENANCE

router = v1_router()


@router.get("/scopes/{scope_id}/audit/trace/{family}/{artifact_id}/{revision}", tags=["audit"])
def trace(scope_id: str, family: str, artifact_id: str, revision: int,
          acting: Calling) -> TraceView:
    """The provenance chain of one Artifact revision, down to exact entry versions."""
    return audits.trace(acting, scope_id, family, artifact_id, revision)


@router.get("/scopes/{scope_id}/audit/{aggregate}/{key:path}", tags=["audit"])
def audit(scope_id: str, aggregate: str, key: str, acting: Calling,
          as_of_version: Annotated[int | None, Query(ge=1)] = None) -> AuditView:
    """An aggregate's events (type, version, time, who acted, payload); with
    ``as_of_version``, only those up to it and the state right after it. Keys:
    ``scope/<scope_id>``, ``source/<type>/<id>``, ``artifact/<family>/<id>``,
    ``candidate/<id>``, ``dream_run/<run_id>``."""
    return audits.history(acting, scope_id, aggregate, key, as_of_version)


@router.get("/scopes/{scope_id}/provenance/impact", tags=["audit"],
            dependencies=[reading(PROVENANCE)])
def impact(scope_id: str, acting: Calling, kind: NodeKindQuery,
           key: Annotated[str, Query(min_length=1, max_length=1024)],
           max_depth: Annotated[int, Query(ge=1, le=1000)] = 50,
           after: After = None) -> ImpactView:
    """Everything in the scope that depends on one node, transitively through lineage (the
    query behind erasure): Artifact revisions, Candidate versions and Memory entry versions.
    Keys: ``<source_type>/<source_id>``, ``<memory_id>/<entry_id>@<entry_version_id>``,
    ``<family>/<artifact_id>@<revision>``, ``<candidate_id>@<version>``."""
    return audits.impact(acting.including(after), scope_id, kind, key, max_depth)
