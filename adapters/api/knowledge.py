"""Approved knowledge: the search and Skill packages."""

from __future__ import annotations

from adapters.api.acting import Acting
from adapters.api.schemas import (
    ArtifactRefBody,
    KnowledgeItemView,
    KnowledgePage,
    SkillPackageView,
)
from domain.refs import ArtifactFamily, ArtifactRef
from projections.knowledge import KNOWLEDGE


def search(acting: Acting, scope_id: str, q: str | None, family: str | None,
           limit: int) -> KnowledgePage:
    """Approved Experiences and Skills the caller may read, most relevant first."""
    items = acting.app.queries.search_knowledge(acting.who(), scope_id, acting.view(KNOWLEDGE),
                                                q, family, limit)
    return KnowledgePage(items=[KnowledgeItemView.of(item) for item in items])


def skill_package(acting: Acting, scope_id: str, artifact_id: str,
                  revision: int) -> SkillPackageView:
    """The instruction-only package of one Skill revision: its SKILL.md text and digest."""
    ref = ArtifactRef(ArtifactFamily.SKILL, artifact_id, revision)
    package = acting.app.review.skill_package(acting.who(), scope_id, ref)
    return SkillPackageView(ref=ArtifactRefBody(**ref.to_dict()), **package)
