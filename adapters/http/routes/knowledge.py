"""Approved knowledge: the knowledge search and Skill packages."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from adapters.http.dependencies import After, App, Bearing, read_view, reading
from adapters.http.schemas import (
    ArtifactRefBody,
    KnowledgeItemView,
    KnowledgePage,
    SkillPackageView,
)
from adapters.http.schemas.vocabulary import ReviewedFamilyName
from application.bootstrap import Dreaming
from domain.policy import Caller
from domain.refs import ArtifactFamily, ArtifactRef
from projections.knowledge import KNOWLEDGE, KnowledgeView

router = APIRouter()


@router.get("/scopes/{scope_id}/knowledge", tags=["knowledge"],
            dependencies=[reading(KNOWLEDGE)])
def search_knowledge(scope_id: str, request: Request, response: Response, app: App,
                     bearer: Bearing,
                     q: Annotated[str | None, Query(
                         description="Words that must all match; omit for the newest.")] = None,
                     family: ReviewedFamilyName | None = None, limit: int = 20,
                     after: After = None) -> KnowledgePage:
    """Approved Experiences and Skills (latest approved revision each) the caller may read,
    most relevant first (without ``q``: newest approvals first)."""
    caller = bearer.caller()
    return knowledge_page(app, caller, scope_id,
                          lambda: read_view(request, response, app, KNOWLEDGE, after), q,
                          family, limit)


def knowledge_page(app: Dreaming, caller: Caller, scope_id: str,
                   view: Callable[[], KnowledgeView], q: str | None, family: str | None,
                   limit: int) -> KnowledgePage:
    """The search, filtered by the caller's rights (``view`` may wait)."""
    items = app.queries.search_knowledge(caller, scope_id, view, q, family, limit)
    return KnowledgePage(items=[KnowledgeItemView.of(item) for item in items])


# -- skill packages ----------------------------------------------------------------------------

def _skill_package(app: Dreaming, caller: Caller, scope_id: str, artifact_id: str,
                   revision: int) -> tuple[ArtifactRef, dict[str, str]]:
    ref = ArtifactRef(ArtifactFamily.SKILL, artifact_id, revision)
    return ref, app.review.skill_package(caller, scope_id, ref)


@router.get("/scopes/{scope_id}/artifacts/skill/{artifact_id}/revisions/{revision}/package",
            tags=["artifacts"])
def skill_package(scope_id: str, artifact_id: str, revision: int, app: App,
                  bearer: Bearing) -> SkillPackageView:
    """The instruction-only package of one Skill revision: its SKILL.md text and digest."""
    caller = bearer.caller()
    ref, package = _skill_package(app, caller, scope_id, artifact_id, revision)
    return SkillPackageView(ref=ArtifactRefBody(**ref.to_dict()), **package)


@router.get("/scopes/{scope_id}/artifacts/skill/{artifact_id}/revisions/{revision}/package"
            "/SKILL.md", tags=["artifacts"], response_class=Response, responses={
                200: {"content": {"text/markdown": {"schema": {"type": "string"}}},
                      "description": "SKILL.md; ETag and Digest carry its sha256"}})
def download_skill_md(scope_id: str, artifact_id: str, revision: int, app: App,
                      bearer: Bearing) -> Response:
    """The SKILL.md file itself, as a download."""
    caller = bearer.caller()
    _, package = _skill_package(app, caller, scope_id, artifact_id, revision)
    body = package["skill_md"].encode("utf-8")
    hex_digest = package["digest"].removeprefix("sha256:")
    return Response(body, media_type="text/markdown; charset=utf-8", headers={
        "Content-Disposition": 'attachment; filename="SKILL.md"',
        "ETag": f'"{package["digest"]}"',
        "Digest": "sha-256=" + base64.b64encode(bytes.fromhex(hex_digest)).decode("ascii"),
    })
