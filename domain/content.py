"""Family content rules and content hashes.

Each family's content is a plain JSON object validated here, so events store only JSON-native
values and replay never depends on class definitions of value objects.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from domain.canonical import canonical_json, sha256_hex
from domain.errors import InvalidContentError, InvalidTextError
from domain.refs import ArtifactFamily, ArtifactRef, SourceRef, normalise
from domain.text import check_bounded_chars, check_text, is_plain_json

ENTRY_TEXT_MAX_BYTES = 8_192
ENTRY_KIND_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,63}")
EXPERIENCE_FIELD_MAX_CHARS = 8_000
SKILL_NAME_PATTERN = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
SKILL_NAME_MAX = 64
SKILL_DESCRIPTION_MAX = 1_024
SKILL_INSTRUCTIONS_MAX = 32_000
SKILL_VALIDATION_MAX_ITEMS = 32
SKILL_VALIDATION_ITEM_MAX = 2_000
PROMPT_TEMPLATE_MAX_BYTES = 65_536
MEMORY_TITLE_MAX = 256
ENTRY_CONTENT_SEPARATOR = "artifact-dreaming:entry-content:v1\0"


def _only_keys(family: str, content: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(content) - allowed)
    if unknown:
        raise InvalidContentError(
            f"unknown {family} content fields: {', '.join(unknown)}", field="content",
            unknown=unknown,
        )


def _experience(content: Mapping[str, Any]) -> dict[str, Any]:
    required = ("situation", "action", "outcome", "lesson")
    _only_keys(ArtifactFamily.EXPERIENCE, content, {*required, "failure"})
    result = {
        name: check_bounded_chars(f"content.{name}", content.get(name), EXPERIENCE_FIELD_MAX_CHARS)
        for name in required
    }
    if content.get("failure") is not None:
        result["failure"] = check_bounded_chars(
            "content.failure", content["failure"], EXPERIENCE_FIELD_MAX_CHARS
        )
    return result


def _skill(content: Mapping[str, Any]) -> dict[str, Any]:
    _only_keys(ArtifactFamily.SKILL, content, {"name", "description", "instructions", "validation"})
    name = check_bounded_chars("content.name", content.get("name"), SKILL_NAME_MAX)
    if not SKILL_NAME_PATTERN.fullmatch(name):
        raise InvalidContentError(
            "content.name must be lowercase letters, digits and single hyphens",
            field="content.name",
        )
    validation = content.get("validation")
    if (not isinstance(validation, Sequence) or isinstance(validation, str)
            or not 1 <= len(validation) <= SKILL_VALIDATION_MAX_ITEMS):
        raise InvalidContentError(
            f"content.validation must be a list of 1-{SKILL_VALIDATION_MAX_ITEMS} checks",
            field="content.validation",
        )
    return {
        "name": name,
        "description": check_bounded_chars(
            "content.description", content.get("description"), SKILL_DESCRIPTION_MAX
        ),
        "instructions": check_bounded_chars(
            "content.instructions", content.get("instructions"), SKILL_INSTRUCTIONS_MAX
        ),
        "validation": [
            check_bounded_chars(f"content.validation[{i}]", item, SKILL_VALIDATION_ITEM_MAX)
            for i, item in enumerate(validation)
        ],
    }


def _prompt(content: Mapping[str, Any]) -> dict[str, Any]:
    _only_keys(ArtifactFamily.PROMPT, content, {"template", "parameters"})
    parameters = content.get("parameters", {})
    if not isinstance(parameters, Mapping) or not is_plain_json(
        dict(parameters), "content.parameters") or not all(
        isinstance(v, str | int | float | bool) or v is None for v in parameters.values()
    ):
        raise InvalidContentError(
            "content.parameters must map names to scalar values", field="content.parameters"
        )
    return {
        "template": check_text("content.template", content.get("template"),
                               PROMPT_TEMPLATE_MAX_BYTES),
        "parameters": dict(sorted(parameters.items())),
    }


def _memory(content: Mapping[str, Any]) -> dict[str, Any]:
    _only_keys(ArtifactFamily.MEMORY, content, {"title"})
    if content.get("title") is None:
        return {}
    return {"title": check_bounded_chars("content.title", content["title"], MEMORY_TITLE_MAX)}


_VALIDATORS: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    ArtifactFamily.EXPERIENCE: _experience,
    ArtifactFamily.SKILL: _skill,
    ArtifactFamily.PROMPT: _prompt,
    ArtifactFamily.MEMORY: _memory,
}


def validate_content(family: str, content: object) -> dict[str, Any]:
    """Return the family's normalised content, or raise ``invalid_content``."""
    if not isinstance(content, Mapping):
        raise InvalidContentError("content must be a JSON object", field="content")
    return _VALIDATORS[family](content)


def skill_package(content: Mapping[str, Any]) -> dict[str, str]:
    """The instruction-only package: a SKILL.md text and its sha256 digest."""
    checks = "\n".join(f"- {item}" for item in content["validation"])
    text = (
        f"---\nname: {content['name']}\ndescription: {content['description']}\n---\n\n"
        f"{content['instructions']}\n\n## Validation\n\n{checks}\n"
    )
    return {"skill_md": text, "digest": "sha256:" + sha256_hex(text)}


def check_entry_kind(kind: object) -> str:
    if not isinstance(kind, str) or not ENTRY_KIND_PATTERN.fullmatch(kind):
        raise InvalidTextError(
            "kind must be 1-64 characters: a lowercase letter, then lowercase letters, digits, _",
            field="kind",
        )
    return kind


def check_entry_text(text: object) -> str:
    return check_text("text", text, ENTRY_TEXT_MAX_BYTES)


def entry_content_hash(
    kind: str, text: str, sources: Sequence[SourceRef], artifacts: Sequence[ArtifactRef]
) -> str:
    """Raw sha256 hex over a domain separator plus canonical JSON of the entry's content."""
    body = {
        "kind": kind,
        "text": unicodedata.normalize("NFC", text),
        "sources": [ref.to_dict() for ref in normalise(sources)],
        "artifacts": [ref.to_dict() for ref in normalise(artifacts)],
    }
    return sha256_hex(ENTRY_CONTENT_SEPARATOR + canonical_json(body))


def entry_version_id(memory_id: str, entry_id: str, version: int, content_hash: str) -> str:
    """Deterministic, so a replayed or retried command produces the same version id."""
    return "ev_" + sha256_hex(canonical_json([memory_id, entry_id, version, content_hash]))[:32]
