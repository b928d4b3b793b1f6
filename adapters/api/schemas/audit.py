"""Bodies of the audit: aggregate histories, provenance traces and impact."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from adapters.api.schemas.vocabulary import NodeKindName


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
    kind: NodeKindName
    key: str
    depth: int = Field(description="Edges between the queried node and this one (1: direct).")


class ImpactView(BaseModel):
    """What depends on one Source, entry version or revision, transitively through lineage."""

    kind: str
    key: str
    dependents: list[ImpactedView]
    hidden: int = Field(description="Dependents left out because the caller may not read "
                        "them (their Artifact or Memory is read-revoked for the caller).")
