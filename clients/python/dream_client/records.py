"""What agents record: Sources, Artifacts written directly, and Memory with its entries."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from dream_client.connection import (
    ArtifactRefLike,
    CitationLike,
    LineageLike,
    SourceRefLike,
    SubClient,
    api_path,
    as_json_object,
    iso_text,
    optional_dict,
    optional_json_object,
    path_segment,
    ref_list,
    without_none,
)
from dream_client.models import EntryVersionView, RevisionView, SourceView


class SourcesClient(SubClient):
    """``client.sources``: the work records Dream runs cite."""

    def record(self, scope_id: str, *, source_type: str, source_id: str,
               text: str | None = None, payload: Mapping[str, Any] | None = None,
               eligibility: str | None = None, attempt_id: str | None = None,
               occurred_at: datetime | str | None = None,
               sub_agent: bool | None = None, subject: str | None = None) -> SourceView:
        """Record a Source; recording an identical one again answers ``position=None``.
        ``sub_agent=True``: a sub-agent's Source, never counted by automatic dreaming.
        ``subject``: the data subject it is about; erasing the subject erases it."""
        return self._api.call(SourceView, "POST", api_path("scopes", scope_id, "sources"),
                              without_none(source_type=source_type, source_id=source_id,
                                           text=text, payload=optional_dict(payload),
                                           eligibility=eligibility, attempt_id=attempt_id,
                                           occurred_at=iso_text(occurred_at),
                                           sub_agent=sub_agent, subject=subject))

    def get(self, scope_id: str, *, source_type: str, source_id: str) -> SourceView:
        path = (api_path("scopes", scope_id, "sources", source_type) + "/"
                + path_segment(source_id, keep_slashes=True))
        return self._api.call(SourceView, "GET", path)


class ArtifactsClient(SubClient):
    """``client.artifacts``: Experiences and Skills written directly, revision by revision."""

    def create(self, scope_id: str, *, family: str, artifact_id: str,
               content: Mapping[str, Any], lineage: LineageLike | None = None) -> RevisionView:
        return self._api.call(RevisionView, "POST", api_path("scopes", scope_id, "artifacts"),
                              without_none(family=family, artifact_id=artifact_id,
                                           content=dict(content),
                                           lineage=optional_json_object(lineage)))

    def replace(self, scope_id: str, *, family: str, artifact_id: str,
                content: Mapping[str, Any], expected_revision: int,
                lineage: LineageLike | None = None) -> RevisionView:
        """A new head revision, only if the head is still ``expected_revision``."""
        return self._api.call(
            RevisionView, "PUT", api_path("scopes", scope_id, "artifacts", family, artifact_id),
            without_none(content=dict(content), expected_revision=expected_revision,
                         lineage=optional_json_object(lineage)))

    def get(self, scope_id: str, *, family: str, artifact_id: str) -> RevisionView:
        """The head revision."""
        return self._api.call(RevisionView, "GET",
                              api_path("scopes", scope_id, "artifacts", family, artifact_id))

    def get_revision(self, scope_id: str, *, family: str, artifact_id: str,
                     revision: int) -> RevisionView:
        """One exact revision."""
        return self._api.call(RevisionView, "GET", api_path(
            "scopes", scope_id, "artifacts", family, artifact_id, "revisions", revision))


class MemoriesClient(SubClient):
    """``client.memories``: Memory artifacts and their entries, each version kept."""

    def create(self, scope_id: str, *, memory_id: str, title: str | None = None) -> RevisionView:
        return self._api.call(RevisionView, "POST", api_path("scopes", scope_id, "memories"),
                              without_none(memory_id=memory_id, title=title))

    def get(self, scope_id: str, *, memory_id: str) -> RevisionView:
        """The head revision, with its manifest of exact entry versions."""
        return self._api.call(RevisionView, "GET",
                              api_path("scopes", scope_id, "memories", memory_id))

    def add_entry(self, scope_id: str, *, memory_id: str, entry_id: str, kind: str, text: str,
                  sources: Iterable[SourceRefLike] = (),
                  artifacts: Iterable[ArtifactRefLike] = (),
                  expected_revision: int | None = None,
                  subject: str | None = None) -> EntryVersionView:
        """A new entry; ``subject``: the data subject its text is about (every version is
        erased with the subject)."""
        return self._api.call(EntryVersionView, "POST",
                              api_path("scopes", scope_id, "memories", memory_id, "entries"),
                              without_none(entry_id=entry_id, kind=kind, text=text,
                                           sources=ref_list(sources),
                                           artifacts=ref_list(artifacts),
                                           expected_revision=expected_revision,
                                           subject=subject))

    def revise_entry(self, scope_id: str, *, memory_id: str, entry_id: str, kind: str,
                     text: str, sources: Iterable[SourceRefLike] = (),
                     artifacts: Iterable[ArtifactRefLike] = (),
                     expected_revision: int | None = None,
                     expected_entry_version_id: str | None = None) -> EntryVersionView:
        return self._api.call(EntryVersionView, "PUT", api_path(
            "scopes", scope_id, "memories", memory_id, "entries", entry_id),
            without_none(kind=kind, text=text, sources=ref_list(sources),
                         artifacts=ref_list(artifacts), expected_revision=expected_revision,
                         expected_entry_version_id=expected_entry_version_id))

    def deactivate_entry(self, scope_id: str, *, memory_id: str, entry_id: str,
                         reason: str | None = None,
                         expected_revision: int | None = None) -> EntryVersionView:
        return self._api.call(EntryVersionView, "POST", api_path(
            "scopes", scope_id, "memories", memory_id, "entries", entry_id, "deactivate"),
            without_none(reason=reason, expected_revision=expected_revision))

    def reactivate_entry(self, scope_id: str, *, memory_id: str, entry_id: str,
                         expected_revision: int | None = None) -> EntryVersionView:
        return self._api.call(EntryVersionView, "POST", api_path(
            "scopes", scope_id, "memories", memory_id, "entries", entry_id, "reactivate"),
            without_none(expected_revision=expected_revision))

    def read_entry_version(self, scope_id: str, citation: CitationLike | None = None, *,
                           memory_id: str | None = None, revision: int | None = None,
                           entry_id: str | None = None,
                           entry_version_id: str | None = None) -> EntryVersionView:
        """The exact entry version a citation names: pass the citation, or all four ids."""
        ids = (memory_id, revision, entry_id, entry_version_id)
        if citation is not None:
            if any(part is not None for part in ids):
                raise TypeError("pass either a citation or the explicit ids, not both")
            cited = as_json_object(citation)
            ref = cited["memory_ref"]
            if ref.get("family", "memory") != "memory":
                raise ValueError("a memory citation's memory_ref.family must be memory")
            memory_id, revision = ref["artifact_id"], ref["revision"]
            entry_id, entry_version_id = cited["entry_id"], cited["entry_version_id"]
        if memory_id is None or revision is None or entry_id is None or entry_version_id is None:
            raise TypeError("pass a citation, or memory_id, revision, entry_id and "
                            "entry_version_id")
        return self._api.call(EntryVersionView, "GET", api_path(
            "scopes", scope_id, "memories", memory_id, "revisions", revision, "entries",
            entry_id, "versions", entry_version_id))
