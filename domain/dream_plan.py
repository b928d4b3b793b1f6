"""The model's plan for a Dream run, and the checks it must pass before anything uses it.

``parse_plan`` is the validation chain for model output (docs/contract.md#generator-contract):
the plan's shape, including its own rules, and its operation/intent compatibility. The usage
and budget check comes before it and belongs to the caller, which has the usage; evidence
selection needs the manifest and is ``domain.evidence.selection.select_evidence``. Every
violation is ``invalid_generation_output`` with the offending field in ``details.field``.

``plan_json_schema`` is the same shape as a strict JSON schema for structured outputs: every
property required, optional values nullable, no additional properties anywhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from domain.content import (
    EXPERIENCE_FIELD_MAX_CHARS,
    SKILL_DESCRIPTION_MAX,
    SKILL_NAME_MAX,
    SKILL_VALIDATION_MAX_ITEMS,
    validate_content,
)
from domain.dream_request import OPERATIONS, DreamOperation
from domain.dream_run import OUTCOMES, RunOutcome
from domain.errors import DomainError, InvalidGenerationOutputError
from domain.refs import ArtifactFamily
from domain.text import check_bounded_chars

REASON_MAX_CHARS = 2_000
MAX_PLAN_EVIDENCE_IDS = 32


class Intent(StrEnum):
    """What a proposal does to its target (or that it creates one)."""

    CREATE = "create"
    CORROBORATE = "corroborate"
    REFINE = "refine"
    CORRECT = "correct"
    DERIVE = "derive"


INTENTS = tuple(Intent)
REPLACEMENT_INTENTS = (Intent.CORROBORATE, Intent.REFINE, Intent.CORRECT)

PLAN_FIELDS = ("outcome", "reason", "intent", "proposal", "evidence_ids")
_REQUIRED_FIELDS = ("outcome", "reason")

__all__ = [
    "INTENTS",
    "MAX_PLAN_EVIDENCE_IDS",
    "PLAN_JSON_SCHEMA",
    "DreamPlan",
    "Intent",
    "allowed_intents",
    "parse_plan",
    "plan_json_schema",
]


@dataclass(frozen=True)
class DreamPlan:
    """A validated plan. ``proposal`` is the family's normalised content (or None)."""

    outcome: RunOutcome
    reason: str
    intent: Intent | None
    proposal: dict[str, Any] | None
    evidence_ids: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome.value, "reason": self.reason,
                "intent": None if self.intent is None else self.intent.value,
                "proposal": self.proposal, "evidence_ids": list(self.evidence_ids)}


def _invalid(message: str, field: str, **details: Any) -> InvalidGenerationOutputError:
    return InvalidGenerationOutputError(message, field=field, **details)


def _family(operation: str) -> ArtifactFamily:
    if operation == DreamOperation.REFINE_EXPERIENCE:
        return ArtifactFamily.EXPERIENCE
    if operation == DreamOperation.DERIVE_SKILL:
        return ArtifactFamily.SKILL
    expected = tuple(map(str, OPERATIONS))
    raise ValueError(f"unknown Dream operation {operation!r}; expected one of {expected}")


def allowed_intents(operation: str, *, has_target: bool) -> tuple[Intent, ...]:
    """Intents compatible with the operation (docs/contract.md#generator-contract)."""
    if _family(operation) == ArtifactFamily.SKILL:
        return (Intent.DERIVE,)
    return REPLACEMENT_INTENTS if has_target else (Intent.CREATE,)


# -- item 1: structured parse --------------------------------------------------------------------


def _object(raw: object, field: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping) or not all(isinstance(key, str) for key in raw):
        raise _invalid(f"{field} must be a JSON object", field)
    return raw


def _check_fields(plan: Mapping[str, Any]) -> None:
    unknown = sorted(set(plan) - set(PLAN_FIELDS))
    if unknown:
        # The field is the unknown name itself (an empty name is reported on the plan).
        raise _invalid(f"unknown plan field {unknown[0]!r}", unknown[0] or "plan",
                       unknown=unknown)
    for name in _REQUIRED_FIELDS:
        if name not in plan:
            raise _invalid(f"{name} is required", name)


def _outcome(value: object) -> RunOutcome:
    if not isinstance(value, str) or value not in OUTCOMES:
        raise _invalid(f"outcome must be one of {', '.join(OUTCOMES)}", "outcome")
    return RunOutcome(value)


def _reason(value: object) -> str:
    try:
        return check_bounded_chars("reason", value, REASON_MAX_CHARS)
    except DomainError as error:
        raise _invalid(error.message, "reason", cause=error.code) from error


def _intent(value: object) -> Intent | None:
    if value is None:
        return None
    if not isinstance(value, str) or value not in INTENTS:
        raise _invalid(f"intent must be null or one of {', '.join(INTENTS)}", "intent")
    return Intent(value)


def _evidence_ids(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        raise _invalid("evidence_ids must be a list of evidence ids", "evidence_ids")
    if len(value) > MAX_PLAN_EVIDENCE_IDS:
        raise _invalid(f"evidence_ids holds at most {MAX_PLAN_EVIDENCE_IDS} ids", "evidence_ids",
                       limit=MAX_PLAN_EVIDENCE_IDS, actual=len(value))
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise _invalid("an evidence id must be a non-empty string", f"evidence_ids[{index}]")
    return tuple(value)


def _check_outcome_shape(outcome: RunOutcome, intent: Intent | None, proposal: object,
                         evidence_ids: tuple[str, ...]) -> None:
    """Proposal, intent and at least one evidence id iff proposed; nothing else otherwise."""
    if outcome == RunOutcome.PROPOSED:
        if intent is None:
            raise _invalid("a proposed plan needs an intent", "intent")
        if proposal is None:
            raise _invalid("a proposed plan needs a proposal", "proposal")
        if not evidence_ids:
            raise _invalid("a proposed plan cites at least one evidence id", "evidence_ids")
        return
    if intent is not None:
        raise _invalid(f"a {outcome} plan has no intent", "intent")
    if proposal is not None:
        raise _invalid(f"a {outcome} plan has no proposal", "proposal")
    if evidence_ids:
        raise _invalid(f"a {outcome} plan cites no evidence", "evidence_ids")


# -- item 3: operation compatibility -------------------------------------------------------------


def _check_intent(intent: Intent, operation: str, has_target: bool) -> None:
    allowed = allowed_intents(operation, has_target=has_target)
    if intent not in allowed:
        where = "with a target" if has_target else "without a target"
        raise _invalid(f"{operation} {where} allows intent {' or '.join(allowed)}, not {intent}",
                       "intent", allowed=[allowed_intent.value for allowed_intent in allowed])


def _proposal(raw: object, operation: str) -> dict[str, Any]:
    proposal = _object(raw, "proposal")
    family = _family(operation)
    if family == ArtifactFamily.SKILL and "package" in proposal:
        raise _invalid("a Dream Skill is instruction-only: proposal.package must be absent",
                       "proposal.package")
    try:
        return validate_content(family, proposal)
    except DomainError as error:
        field = str(error.details.get("field", "content"))
        field = "proposal" + field.removeprefix("content")
        extra = {k: v for k, v in error.details.items() if k != "field"}
        raise _invalid(error.message.replace("content", "proposal", 1), field,
                       cause=error.code, **extra) from error


def parse_plan(raw: object, *, operation: str, has_target: bool) -> DreamPlan:
    """Validate a model's plan for ``operation`` or raise ``invalid_generation_output``."""
    _family(operation)  # an unknown operation is a caller bug: ValueError, not model output
    plan = _object(raw, "plan")
    _check_fields(plan)
    outcome = _outcome(plan["outcome"])
    reason = _reason(plan["reason"])
    intent = _intent(plan.get("intent"))
    evidence_ids = _evidence_ids(plan.get("evidence_ids"))
    raw_proposal = plan.get("proposal")
    _check_outcome_shape(outcome, intent, raw_proposal, evidence_ids)
    if outcome != RunOutcome.PROPOSED:
        return DreamPlan(outcome, reason, None, None, ())
    assert intent is not None  # _check_outcome_shape: a proposed plan has an intent
    _check_intent(intent, operation, has_target)
    return DreamPlan(outcome, reason, intent, _proposal(raw_proposal, operation), evidence_ids)


# -- strict JSON schema --------------------------------------------------------------------------


def _strict_object(properties: dict[str, Any], description: str) -> dict[str, Any]:
    return {"type": "object", "description": description, "properties": properties,
            "required": list(properties), "additionalProperties": False}


def _text(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _experience_schema() -> dict[str, Any]:
    limit = f"Trimmed, non-blank, at most {EXPERIENCE_FIELD_MAX_CHARS} characters."
    return _strict_object({
        "situation": _text(f"When this applies, including preconditions. {limit}"),
        "action": _text(f"What was done, as observed in the evidence. {limit}"),
        "outcome": _text(f"The observed result of the action. {limit}"),
        "lesson": _text(f"What to do (or avoid) next time. {limit}"),
        "failure": {"type": ["string", "null"],
                    "description": "Recurrence signature of an observed failure, or null."},
    }, "ExperienceContent")


def _skill_schema() -> dict[str, Any]:
    return _strict_object({
        "name": _text(f"At most {SKILL_NAME_MAX} characters: lowercase letters, digits and "
                      "single hyphens."),
        "description": _text(f"When to use the Skill; at most {SKILL_DESCRIPTION_MAX} "
                             "characters."),
        "instructions": _text("The instruction-only Skill body."),
        "validation": {"type": "array", "items": {"type": "string"},
                       "description": f"1 to {SKILL_VALIDATION_MAX_ITEMS} checks that show "
                                      "the Skill was applied correctly."},
    }, "SkillContent (instruction-only; there is no package)")


def plan_json_schema(operation: str) -> dict[str, Any]:
    """A fresh strict schema for ``operation``'s plan (OpenAI strict structured outputs)."""
    family = _family(operation)
    family_schema = _experience_schema() if family == ArtifactFamily.EXPERIENCE else _skill_schema()
    intents = ([Intent.DERIVE] if family == ArtifactFamily.SKILL
               else [Intent.CREATE, *REPLACEMENT_INTENTS])
    return _strict_object({
        "outcome": {"type": "string", "enum": [outcome.value for outcome in RunOutcome]},
        "reason": _text(f"Concise, trimmed, at most {REASON_MAX_CHARS} characters."),
        "intent": {"anyOf": [{"type": "string", "enum": [intent.value for intent in intents]},
                             {"type": "null"}],
                   "description": "Required when proposed; null otherwise."},
        "proposal": {"anyOf": [family_schema, {"type": "null"}],
                     "description": "Required when proposed; null otherwise."},
        "evidence_ids": {"type": "array", "items": {"type": "string"},
                         "description": f"The evidence ids used (1 to {MAX_PLAN_EVIDENCE_IDS}) "
                                        "when proposed; empty otherwise."},
    }, "DreamPlan")


PLAN_JSON_SCHEMA = plan_json_schema
