"""Approved knowledge: the knowledge search and Skill packages."""

from __future__ import annotations

import base64
from typing import Annotated

from fastapi import Query, Response

from adapters.api import knowledge
from adapters.api.schemas import KnowledgePage, SkillPackageView
from adapters.api.schemas.vocabulary import ReviewedFamilyName
from adapters.http.dependencies import After, Calling, reading, v1_router
from projections.knowledge import KNOWLEDGE

router = v1_router()


@router.get("/scopes/{scope_id}/knowledge", tags=["knowledge"],
            dependencies=[reading(KNOWLEDGE)])
def search_knowledge(scope_id: str, acting: Calling,
                     q: Annotated[str | None, Query(
                         description="Words that must all match; omit for the newest.")] = None,
                     family: ReviewedFamilyName | None = None, limit: int = 20,
                     after: After = None) -> KnowledgePage:
    """Approved Experiences and Skills (latest approved revision each) the caller may read,
    most relevant first (without ``q``: newest approvals first)."""
    return knowledge.search(acting.including(after), scope_id, q, family, limit)


# -- skill packages ----------------------------------------------------------------------------

@router.get("/scopes/{scope_id}/artifacts/skill/{artifact_id}/revisions/{revision}/package",
            tags=["artifacts"])
def skill_package(scope_id: str, artifact_id: str, revision: int,
                  acting: Calling) -> SkillPackageView:
    """The instruction-only package of one Skill revision: its SKILL.md text and digest."""
    return knowledge.skill_package(acting, scope_id, artifact_id, revision)


@router.get("/scopes/{scope_id}/artifacts/skill/{artifact_id}/revisions/{revision}/package"
            "/SKILL.md", tags=["artifacts"], response_class=Response, responses={
                200: {"content": {"text/markdown": {"schema": {"type": "string"}}},
                      "description": "SKILL.md; ETag and Digest carry its sha256"}})
def download_skill_md(scope_id: str, artifact_id: str, revision: int,
                      acting: Calling) -> Response:
    """The SKILL.md file itself, as a download."""
    package = knowledge.skill_package(acting, scope_id, artifact_id, revision)
    hex_digest = package.digest.removeprefix("sha256:")
    return Response(package.skill_md.encode("utf-8"), media_type="text/markdown; charset=utf-8",
                    headers={
        "Content-Disposition": 'attachment; filename="SKILL.md"',
        "ETag": f'"{package.digest}"',
        "Digest": "sha-256=" + base64.b64encode(bytes.fromhex(hex_digest)).decode("ascii"),
    })
