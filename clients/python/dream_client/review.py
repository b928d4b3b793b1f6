"""Dream runs, and the Candidates they propose, reviewed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dream_client.connection import (
    ArtifactRefLike,
    CitationLike,
    DreamRequestLike,
    SourceRefLike,
    SubClient,
    api_path,
    as_json_object,
    optional_dict,
    optional_json_object,
    optional_ref_list,
    ref_list,
    with_query,
    without_none,
)
from dream_client.models import (
    AutoDreamStatusView,
    CandidateEvidenceView,
    CandidatePage,
    CandidateView,
    DreamRunPage,
    DreamRunView,
)


class RunsClient(SubClient):
    """``client.runs``: request Dream runs and follow them."""

    def request(self, scope_id: str, request: DreamRequestLike) -> DreamRunView:
        """Admit a run, or replay the run its idempotency key names (202 and 200 both decode).

        ``request``: a ``CreateDreamRun`` model, a mapping, or any object with ``to_dict()``;
        an ``idempotency_key`` attribute is added because such objects may keep it apart."""
        body = as_json_object(request)
        key = getattr(request, "idempotency_key", None)
        if isinstance(key, str):
            body.setdefault("idempotency_key", key)
        return self._api.call(DreamRunView, "POST", api_path("scopes", scope_id, "dream"), body)

    def get(self, scope_id: str, run_id: str) -> DreamRunView:
        return self._api.call(DreamRunView, "GET", api_path("scopes", scope_id, "dream", run_id))

    def list(self, scope_id: str, *, status: str | None = None, operation: str | None = None,
             cursor: str | None = None, limit: int | None = None,
             after: int | None = None) -> DreamRunPage:
        """Newest first; pass ``next_cursor`` back as ``cursor`` for the next page."""
        return self._api.call(DreamRunPage, "GET", with_query(
            api_path("scopes", scope_id, "dream"), status=status, operation=operation,
            cursor=cursor, limit=limit, after=after))

    def auto_status(self, scope_id: str, *, after: int | None = None) -> AutoDreamStatusView:
        """Automatic dreaming in the scope: every gate, and why it is or is not due now."""
        return self._api.call(AutoDreamStatusView, "GET", with_query(
            api_path("scopes", scope_id, "dream", "auto"), after=after))


class CandidatesClient(SubClient):
    """``client.candidates``: propose, revise and decide Candidates, and read the inbox."""

    def propose(self, scope_id: str, *, candidate_id: str, family: str,
                proposal: Mapping[str, Any], reason: str,
                sources: Iterable[SourceRefLike] = (),
                artifacts: Iterable[ArtifactRefLike] = (),
                memory_citations: Iterable[CitationLike] = (),
                target: ArtifactRefLike | None = None) -> CandidateView:
        """A new pending Candidate; proposing the identical one again answers
        ``position=None``."""
        return self._api.call(CandidateView, "POST", api_path("scopes", scope_id, "candidates"),
                              without_none(candidate_id=candidate_id, family=family,
                                           proposal=dict(proposal), reason=reason,
                                           sources=ref_list(sources),
                                           artifacts=ref_list(artifacts),
                                           memory_citations=ref_list(memory_citations),
                                           target=optional_json_object(target)))

    def list(self, scope_id: str, *, status: str | None = None, family: str | None = None,
             cursor: str | None = None, limit: int | None = None,
             after: int | None = None) -> CandidatePage:
        """The review inbox (default: pending; ``status="all"`` for every status), in
        candidate id order; pass ``next_cursor`` back as ``cursor`` for the next page."""
        return self._api.call(CandidatePage, "GET", with_query(
            api_path("scopes", scope_id, "candidates"), status=status, family=family,
            cursor=cursor, limit=limit, after=after))

    def get(self, scope_id: str, candidate_id: str) -> CandidateView:
        return self._api.call(CandidateView, "GET",
                              api_path("scopes", scope_id, "candidates", candidate_id))

    def evidence(self, scope_id: str, candidate_id: str) -> CandidateEvidenceView:
        """The current version's evidence re-resolved with this caller's rights now."""
        return self._api.call(CandidateEvidenceView, "GET",
                              api_path("scopes", scope_id, "candidates", candidate_id,
                                       "evidence"))

    def revise(self, scope_id: str, candidate_id: str, *, expected_version: int,
               proposal: Mapping[str, Any] | None = None,
               sources: Iterable[SourceRefLike] | None = None,
               artifacts: Iterable[ArtifactRefLike] | None = None,
               memory_citations: Iterable[CitationLike] | None = None,
               reason: str | None = None,
               target: ArtifactRefLike | None = None) -> CandidateView:
        """A new version. ``None`` (the default) keeps a field's current value; an empty
        sequence clears a list."""
        return self._api.call(CandidateView, "POST", api_path(
            "scopes", scope_id, "candidates", candidate_id, "revise"), without_none(
                expected_version=expected_version, proposal=optional_dict(proposal),
                sources=optional_ref_list(sources), artifacts=optional_ref_list(artifacts),
                memory_citations=optional_ref_list(memory_citations), reason=reason,
                target=optional_json_object(target)))

    def approve(self, scope_id: str, candidate_id: str, *,
                expected_version: int) -> CandidateView:
        """Approve that version; ``result`` names the Artifact revision it wrote."""
        return self._api.call(CandidateView, "POST", api_path(
            "scopes", scope_id, "candidates", candidate_id, "approve"),
            {"expected_version": expected_version})

    def reject(self, scope_id: str, candidate_id: str, *, expected_version: int,
               reason: str) -> CandidateView:
        return self._api.call(CandidateView, "POST", api_path(
            "scopes", scope_id, "candidates", candidate_id, "reject"),
            {"expected_version": expected_version, "reason": reason})
