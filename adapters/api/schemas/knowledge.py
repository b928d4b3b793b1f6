"""Bodies of approved knowledge: the knowledge search and Skill packages."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from adapters.api.schemas.common import ArtifactRefBody, LineageBody
from projections.knowledge import KnowledgeItem


class KnowledgeItemView(BaseModel):
    """An Experience or Skill at its latest approved revision."""

    scope_id: str
    family: str
    artifact_id: str
    ref: ArtifactRefBody = Field(description="The approved revision.")
    content: dict[str, Any]
    lineage: LineageBody
    candidate_id: str
    candidate_version: int
    proposer: str
    approver: str
    run_id: str | None
    package_digest: str | None = Field(description="Skills: sha256 of the SKILL.md package.")
    approved_at: datetime
    rank: float | None = Field(description="Text search only: larger is more relevant.")

    @classmethod
    def of(cls, item: KnowledgeItem) -> KnowledgeItemView:
        return cls(scope_id=item.scope_id, family=item.family, artifact_id=item.artifact_id,
                   ref=ArtifactRefBody(family=item.family, artifact_id=item.artifact_id,
                                       revision=item.revision),
                   content=dict(item.content), lineage=LineageBody.model_validate(item.lineage),
                   candidate_id=item.candidate_id, candidate_version=item.candidate_version,
                   proposer=item.proposer, approver=item.approver, run_id=item.run_id,
                   package_digest=item.package_digest, approved_at=item.approved_at,
                   rank=item.rank)


class KnowledgePage(BaseModel):
    items: list[KnowledgeItemView]


class SkillPackageView(BaseModel):
    ref: ArtifactRefBody
    skill_md: str = Field(description="The SKILL.md text.")
    digest: str = Field(description="sha256:<hex> of the UTF-8 SKILL.md text.")
