"""Resources: every approved Skill as its ``SKILL.md`` (with its sha256), every approved
Experience as text, read with the caller's rights like the REST reads."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from mcp_types import Resource, ResourceTemplate, TextResourceContents

from adapters.api import knowledge
from adapters.api.schemas import KnowledgeItemView
from adapters.mcp.deployment import Deployment
from application.queries import MAX_PAGE
from domain.errors import ReferenceNotFoundError
from domain.policy import Caller
from domain.refs import ArtifactFamily, ArtifactRef

MARKDOWN = "text/markdown"
SKILL_URI = "dream://scopes/{scope_id}/skills/{artifact_id}/revisions/{revision}/SKILL.md"
EXPERIENCE_URI = "dream://scopes/{scope_id}/experiences/{artifact_id}/revisions/{revision}"
_SEGMENT = r"([^/]+)"
_URIS = {family: re.compile("^" + re.escape(uri).replace(re.escape("{scope_id}"), _SEGMENT)
                            .replace(re.escape("{artifact_id}"), _SEGMENT)
                            .replace(re.escape("{revision}"), r"([0-9]{1,9})") + "$")
         for family, uri in ((ArtifactFamily.SKILL, SKILL_URI),
                             (ArtifactFamily.EXPERIENCE, EXPERIENCE_URI))}

TEMPLATES = [
    ResourceTemplate(name="skill", title="An approved Skill's SKILL.md", uri_template=SKILL_URI,
                     mime_type=MARKDOWN,
                     description="The instruction-only package of one Skill revision."),
    ResourceTemplate(name="experience", title="An approved Experience",
                     uri_template=EXPERIENCE_URI, mime_type=MARKDOWN,
                     description="One Experience revision: situation, action, outcome, "
                                 "lesson."),
]


def uri_of(family: str, scope_id: str, artifact_id: str, revision: int) -> str:
    template = SKILL_URI if family == ArtifactFamily.SKILL else EXPERIENCE_URI
    return template.format(scope_id=scope_id, artifact_id=artifact_id, revision=revision)


def list_resources(deployment: Deployment, caller: Caller, scope_id: str | None
                   ) -> list[Resource]:
    """The scope's approved knowledge the caller may read (the newest 100 of each family)."""
    if scope_id is None:
        return []
    acting = deployment.acting(caller)
    items = [item for family in (ArtifactFamily.SKILL, ArtifactFamily.EXPERIENCE)
             for item in knowledge.search(acting, scope_id, None, family, MAX_PAGE).items]
    return [_resource(item) for item in items]


def _resource(item: KnowledgeItemView) -> Resource:
    uri = uri_of(item.family, item.scope_id, item.artifact_id, item.ref.revision)
    content = item.content
    if item.family == ArtifactFamily.SKILL:
        sha256 = (item.package_digest or "").removeprefix("sha256:")
        return Resource(uri=uri, name=f"{item.artifact_id}/SKILL.md",
                        title=str(content.get("name", item.artifact_id)), mime_type=MARKDOWN,
                        description=f"{content.get('description', '')} (sha256 {sha256})",
                        _meta={"sha256": sha256, "approved_at": item.approved_at.isoformat()})
    return Resource(uri=uri, name=item.artifact_id, title=str(content.get("lesson", "")),
                    mime_type=MARKDOWN, description=str(content.get("situation", "")),
                    _meta={"approved_at": item.approved_at.isoformat()})


def read_resource(deployment: Deployment, caller: Caller, uri: str) -> TextResourceContents:
    """A Skill's SKILL.md or an Experience's text, as the caller may read it now."""
    family, ref, scope_id = _parse(uri)
    app = deployment.dreaming
    if family == ArtifactFamily.SKILL:
        package = app.review.skill_package(caller, scope_id, ref)
        sha256 = package["digest"].removeprefix("sha256:")
        return TextResourceContents(uri=uri, mime_type=MARKDOWN, text=package["skill_md"],
                                    _meta={"sha256": sha256})
    revision = app.records.read_revision(caller, scope_id, ref)
    return TextResourceContents(uri=uri, mime_type=MARKDOWN,
                                text=experience_text(ref, revision.content))


def _parse(uri: str) -> tuple[ArtifactFamily, ArtifactRef, str]:
    for family, pattern in _URIS.items():
        match = pattern.match(uri)
        if match is not None:
            scope_id, artifact_id, revision = match.groups()
            return family, ArtifactRef(family, artifact_id, int(revision)), scope_id
    raise ReferenceNotFoundError("no such resource: expected " + " or ".join(
        (SKILL_URI, EXPERIENCE_URI)), uri=uri)


def experience_text(ref: ArtifactRef, content: Mapping[str, Any]) -> str:
    """An Experience as Markdown: one section per field, in the content's order."""
    sections = [f"# Experience {ref.artifact_id} (revision {ref.revision})"]
    for name, value in content.items():
        text = value if isinstance(value, str) else json.dumps(value, indent=2)
        sections.append(f"## {name.capitalize()}\n\n{text}")
    return "\n\n".join(sections) + "\n"
