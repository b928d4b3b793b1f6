"""Erasure: forget a Source, a Memory entry or a data subject, and follow what came of it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from adapters.api.acting import Acting
from adapters.api.schemas.erasure import (
    DerivedItem,
    DerivedQueue,
    ErasedNode,
    EraseRequest,
    ErasureList,
    ErasureSummary,
    ErasureView,
)
from application.erasure import ErasureTarget
from application.store import ACTED_BY
from domain.access import Action
from domain.artifact import Artifact, EntryStatus
from domain.candidate import CandidateStatus
from domain.erasure import Erasure
from domain.errors import DomainError
from domain.ids import artifact_aggregate_id, candidate_aggregate_id
from domain.refs import ArtifactFamily
from projections.provenance import DERIVED, PROVENANCE, ProvenanceView
from projections.provenance_nodes import (
    ARTIFACT_REVISION,
    CANDIDATE_VERSION,
    DEFAULT_MAX_DEPTH,
    ENTRY_VERSION,
    Node,
    erased_nodes,
)
from projections.times import from_micros


def erase(acting: Acting, scope_id: str, body: EraseRequest) -> ErasureView:
    """Erase what ``body`` names; the derived knowledge is found in the provenance view as
    it stands after every event recorded before this call."""
    caller = acting.caller()
    provenance = acting.view(PROVENANCE)
    written = acting.app.erasures.erase(caller, scope_id, _target(body), body.reason,
                                        lambda scope, records: derived_from(provenance(), scope,
                                                                            records))
    return _view(written.value.erasure, written.position, caller.name, written.value.scrubbed)


def get_erasure(acting: Acting, scope_id: str, erasure_id: str) -> ErasureView:
    app = acting.app
    erasure = app.erasures.get(acting.who(), scope_id, erasure_id)
    recorded = app.store.history(erasure.id)[0]
    return _view(erasure, app.store.position_of(erasure), getattr(recorded, ACTED_BY, None))


def list_erasures(acting: Acting, scope_id: str) -> ErasureList:
    """The scope's erasures, the latest first (deployment administrators)."""
    acting.app.erasures.check_may_list(acting.who(), scope_id)
    rows = acting.view(PROVENANCE)().erasures(scope_id)
    return ErasureList(scope_id=scope_id, erasures=[
        ErasureSummary(erasure_id=row["erasure_id"], kind=row["kind"],
                       erased_at=from_micros(row["erased_at"]), records=row["records"],
                       derived=row["derived"], position=row["position"]) for row in rows])


def derived_queue(acting: Acting, scope_id: str) -> DerivedQueue:
    """Knowledge derived from erased evidence that is still in use: pending Candidates, the
    head revisions of Experiences and Skills, current versions of active Memory entries. An
    item leaves the queue when a reviewer decides the Candidate or revises the artifact or
    entry (reviewers of the scope)."""
    app = acting.app
    scope = app.gate.scope_for(acting.who(), scope_id, Action.REVIEW)
    derived = acting.view(PROVENANCE)().erased(scope.scope_id, DERIVED)
    items = []
    for node, erasure_id in derived.items():
        status = _still_in_use(acting, scope.scope_id, node)
        if status is not None:
            items.append(DerivedItem(kind=node.kind, key=node.key,  # type: ignore[arg-type]
                                     erasure_id=erasure_id, status=status))  # type: ignore[arg-type]
    return DerivedQueue(scope_id=scope.scope_id, items=items)


# -- helpers -------------------------------------------------------------------------------------

def derived_from(view: ProvenanceView, scope_id: str,
                 records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every node depending on an erased record, transitively, each once (least depth)."""
    erased = set(erased_nodes(records))
    found: dict[Node, int] = {}
    for start in erased:
        for dependent in view.impact(scope_id, start.kind, start.key,
                                     max_depth=DEFAULT_MAX_DEPTH):
            if dependent.node not in erased:
                found[dependent.node] = min(dependent.depth, found.get(dependent.node, 10**9))
    return [{"kind": node.kind, "key": node.key, "depth": depth}
            for node, depth in sorted(found.items(), key=lambda item: (item[1], item[0]))]


def _target(body: EraseRequest) -> ErasureTarget:
    if body.source is not None:
        return ErasureTarget.of_source(body.source.source_type, body.source.source_id)
    if body.memory_entry is not None:
        return ErasureTarget.of_entry(body.memory_entry.memory_id, body.memory_entry.entry_id)
    assert body.subject is not None  # the request names exactly one
    return ErasureTarget.of_subject(body.subject)


def _view(erasure: Erasure, position: int | None, erased_by: str | None,
          scrubbed: dict[str, Any] | None = None) -> ErasureView:
    return ErasureView(
        erasure_id=erasure.erasure_id, scope_id=erasure.scope_id,
        kind=erasure.kind.value,
        target=erasure.target, reason=erasure.reason,
        erased_by=erased_by, erased_at=erasure.created_on,
        records=erasure.records,
        derived=[ErasedNode(kind=item["kind"], key=item["key"]) for item in erasure.derived],
        scrubbed=scrubbed, position=position)


def _still_in_use(acting: Acting, scope_id: str, node: Node) -> str | None:
    store = acting.app.store
    name, _, version = node.key.rpartition("@")
    finders: dict[str, Callable[[], str | None]] = {
        CANDIDATE_VERSION: lambda: _pending(store.find(candidate_aggregate_id(scope_id, name))),
        ARTIFACT_REVISION: lambda: _head(
            store.find(artifact_aggregate_id(scope_id, *name.split("/", 1))), int(version)
        ),
        ENTRY_VERSION: lambda: _current(
            store.find(
                artifact_aggregate_id(scope_id, ArtifactFamily.MEMORY, name.split("/", 1)[0])
            ),
            name.split("/", 1)[1],
            version,
        ),
    }
    try:
        return finders[node.kind]()
    except (KeyError, ValueError, TypeError, DomainError):
        return None  # a node this queue does not follow, or one gone


def _pending(candidate: Any) -> str | None:
    return "pending" if candidate is not None and candidate.status == CandidateStatus.PENDING \
        else None


def _head(artifact: Artifact | None, revision: int) -> str | None:
    return "head" if artifact is not None and artifact.head_revision == revision else None


def _current(memory: Artifact | None, entry_id: str, version_id: str) -> str | None:
    if memory is None or memory.entry_status(entry_id) != EntryStatus.ACTIVE:
        return None
    return "current" if memory.current_entry(entry_id).entry_version_id == version_id else None
