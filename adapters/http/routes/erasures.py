"""``/v1/scopes/{scope_id}/erasures``: forgetting a Source, a Memory entry or a data subject
(deployment administrators), and the queue of knowledge derived from what was forgotten
(the scope's reviewers). docs/erasure.md."""

from __future__ import annotations

from adapters.api import erasures
from adapters.api.schemas.erasure import DerivedQueue, EraseRequest, ErasureList, ErasureView
from adapters.http.dependencies import Calling, read_first, reading, v1_router
from projections.provenance import PROVENANCE

router = v1_router("/scopes/{scope_id}/erasures", tags=["erasure"])


@router.post("", status_code=201, dependencies=[reading(PROVENANCE)])
def erase(scope_id: str, body: EraseRequest, acting: Calling) -> ErasureView:
    """Destroy the data keys of what ``body`` names (one Source; one Memory entry, every
    version; or every record of a data subject) and record the erasure: who, when, why, and
    what by ids and hashes. Its text can never be read again; the knowledge derived from it
    is listed in ``derived`` and in the queue ``…/erasures/derived``."""
    return erasures.erase(acting, scope_id, body)


@router.get("", dependencies=[reading(PROVENANCE)])
def list_erasures(scope_id: str, acting: Calling) -> ErasureList:
    """The scope's erasures, the latest first."""
    return erasures.list_erasures(acting, scope_id)


@router.get("/derived", dependencies=[reading(PROVENANCE)])
def derived(scope_id: str, acting: Calling) -> DerivedQueue:
    """Derived from erased evidence and still in use: pending Candidates, head revisions of
    Experiences and Skills, current versions of active Memory entries. Revise or retire
    them; each leaves the queue when it is no longer current."""
    return erasures.derived_queue(acting, scope_id)


@router.get("/{erasure_id}")
async def get_erasure(scope_id: str, erasure_id: str, acting: Calling) -> ErasureView:
    return await read_first(erasures.get_erasure, acting, scope_id, erasure_id)
