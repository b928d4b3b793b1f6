"""Approved knowledge, and where it came from: search, Skill packages, history and provenance."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from dream_client.connection import (
    ArtifactRefLike,
    SubClient,
    api_path,
    as_json_object,
    path_segment,
    with_query,
)
from dream_client.errors import HttpError
from dream_client.models import AuditView, ImpactView, KnowledgePage, SkillPackageView, TraceView


@dataclass(frozen=True)
class SkillFile:
    """A downloaded SKILL.md: its text and the sha256 digest of its bytes."""

    text: str
    digest: str
    content_type: str


class KnowledgeClient(SubClient):
    """``client.knowledge``: search approved Experiences and Skills, fetch Skill packages."""

    def search(self, scope_id: str, q: str | None = None, *, family: str | None = None,
               limit: int | None = None, after: int | None = None) -> KnowledgePage:
        """Approved Experiences and Skills this caller may read, most relevant first
        (without ``q``: the newest approvals)."""
        return self._api.call(KnowledgePage, "GET", with_query(
            api_path("scopes", scope_id, "knowledge"), q=q, family=family, limit=limit,
            after=after))

    def skill_package(self, scope_id: str, *, artifact_id: str,
                      revision: int) -> SkillPackageView:
        """One Skill revision's package: the SKILL.md text and its digest."""
        return self._api.call(SkillPackageView, "GET",
                              _package_path(scope_id, artifact_id, revision))

    def download_skill_md(self, scope_id: str, *, artifact_id: str,
                          revision: int) -> SkillFile:
        """The SKILL.md file itself; its digest is checked against the server's ``ETag``."""
        response = self._api.send("GET", _package_path(scope_id, artifact_id, revision,
                                                       "SKILL.md"), accept="text/markdown")
        content = response.content
        digest = "sha256:" + hashlib.sha256(content).hexdigest()
        etag = response.headers.get("etag", "").strip('"')
        if etag and etag != digest:
            raise HttpError("the SKILL.md received does not match its ETag digest",
                            status=response.status_code,
                            details={"etag": etag, "digest": digest},
                            response_headers=response.headers)
        return SkillFile(text=content.decode("utf-8"), digest=digest,
                         content_type=response.headers.get("content-type", ""))


class AuditClient(SubClient):
    """``client.audit``: an aggregate's history, a revision's provenance, what depends on what."""

    def history(self, scope_id: str, aggregate: str, key: str, *,
                as_of_version: int | None = None) -> AuditView:
        """An aggregate's events (who acted, when, what); with ``as_of_version``, those up to
        it and the state right after it. ``key``: see :data:`application.audit_keys.AUDITABLE`."""
        path = api_path("scopes", scope_id, "audit", aggregate) + "/" + path_segment(
            key, keep_slashes=True)
        return self._api.call(AuditView, "GET", with_query(path, as_of_version=as_of_version))

    def trace(self, scope_id: str, ref: ArtifactRefLike) -> TraceView:
        """The provenance chain of one Artifact revision, down to exact entry versions."""
        cited = as_json_object(ref)
        return self._api.call(TraceView, "GET", api_path(
            "scopes", scope_id, "audit", "trace", cited["family"], cited["artifact_id"],
            cited["revision"]))

    def impact(self, scope_id: str, kind: str, key: str, *, max_depth: int | None = None,
               after: int | None = None) -> ImpactView:
        """What depends on one node, transitively (see ``GET …/provenance/impact``)."""
        return self._api.call(ImpactView, "GET", with_query(
            api_path("scopes", scope_id, "provenance", "impact"), kind=kind, key=key,
            max_depth=max_depth, after=after))


def _package_path(scope_id: str, artifact_id: str, revision: int, *tail: str) -> str:
    return api_path("scopes", scope_id, "artifacts", "skill", artifact_id,
                    "revisions", revision, "package", *tail)
