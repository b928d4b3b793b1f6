"""Forgetting a Source, a Memory entry or a data subject, and the knowledge derived from it
(docs/erasure.md)."""

from __future__ import annotations

from dream_client.connection import SubClient, api_path, without_none
from dream_client.models import DerivedQueue, ErasureList, ErasureView


class ErasuresClient(SubClient):
    """``client.erasures``: erase (deployment administrators), list and show erasures, and the
    reviewers' queue of knowledge derived from erased evidence."""

    def erase(self, scope_id: str, *, reason: str, source_type: str | None = None,
              source_id: str | None = None, memory_id: str | None = None,
              entry_id: str | None = None, subject: str | None = None) -> ErasureView:
        """Erase one Source (``source_type`` and ``source_id``), one Memory entry
        (``memory_id`` and ``entry_id``: every version) or every record of a ``subject``."""
        source = (None if source_type is None and source_id is None
                  else {"source_type": source_type, "source_id": source_id})
        entry = (None if memory_id is None and entry_id is None
                 else {"memory_id": memory_id, "entry_id": entry_id})
        return self._api.call(ErasureView, "POST", api_path("scopes", scope_id, "erasures"),
                              without_none(source=source, memory_entry=entry, subject=subject,
                                           reason=reason))

    def list(self, scope_id: str) -> ErasureList:
        return self._api.call(ErasureList, "GET", api_path("scopes", scope_id, "erasures"))

    def get(self, scope_id: str, erasure_id: str) -> ErasureView:
        return self._api.call(ErasureView, "GET",
                              api_path("scopes", scope_id, "erasures", erasure_id))

    def derived(self, scope_id: str) -> DerivedQueue:
        """Knowledge derived from erased evidence that is still in use: to revise or retire."""
        return self._api.call(DerivedQueue, "GET",
                              api_path("scopes", scope_id, "erasures", "derived"))
