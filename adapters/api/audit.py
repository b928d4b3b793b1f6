"""The audit: aggregate histories, provenance traces and the impact of one node."""

from __future__ import annotations

from adapters.api.acting import Acting
from adapters.api.schemas import AuditEventView, AuditView, ImpactedView, ImpactView, TraceView
from domain.refs import ArtifactRef, check_family
from projections.provenance import PROVENANCE
from projections.provenance_nodes import guarding_resource


def trace(acting: Acting, scope_id: str, family: str, artifact_id: str,
          revision: int) -> TraceView:
    """The provenance chain of one Artifact revision, down to exact entry versions."""
    ref = ArtifactRef(check_family(family), artifact_id, revision)
    return TraceView(**acting.app.audit.trace(acting.who(), scope_id, ref))


def history(acting: Acting, scope_id: str, aggregate: str, key: str,
            as_of_version: int | None) -> AuditView:
    """An aggregate's events; with ``as_of_version``, those up to it and the state then."""
    app, who = acting.app, acting.who()
    events = app.audit.audit_history(who, scope_id, aggregate, key)
    state = None if as_of_version is None else app.audit.audit_state(
        who, scope_id, aggregate, key, as_of_version)
    shown = events if as_of_version is None else events[:as_of_version]
    return AuditView(aggregate=aggregate, key=key, current_version=events[-1].version,
                     as_of_version=as_of_version,
                     events=[AuditEventView(**vars(event)) for event in shown],
                     state=None if state is None else state.state)


def impact(acting: Acting, scope_id: str, kind: str, key: str, max_depth: int) -> ImpactView:
    """Everything in the scope that depends on one node, that the caller may read."""
    found = acting.app.queries.impact(acting.who(), scope_id, acting.view(PROVENANCE),
                                      guarding_resource, kind, key, max_depth)
    return ImpactView(kind=kind, key=key, hidden=found.hidden,
                      dependents=[ImpactedView(kind=d.kind, key=d.key,  # type: ignore[arg-type]
                                               depth=d.depth) for d in found.shown])
