"""The model's plan: every rule of docs/contract.md#generator-contract, each naming its field.

Also the strict JSON schema handed to the model: strict-mode shaped (every object closed, every
property required, optional values nullable) and in agreement with ``parse_plan``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import hypothesis
import pytest
from hypothesis import strategies as st

from domain.dream_plan import (
    INTENTS,
    PLAN_JSON_SCHEMA,
    DreamPlan,
    allowed_intents,
    parse_plan,
    plan_json_schema,
)
from domain.errors import InvalidGenerationOutputError

REFINE = "refine_experience"
DERIVE = "derive_skill"
PROPERTIES = hypothesis.settings(max_examples=300, deadline=None, database=None)

EXPERIENCE = {"situation": "A release build broke on the new CI runner.",
              "action": "Pinned the compiler and retried.",
              "outcome": "The build succeeded.",
              "lesson": "Pin the toolchain before moving runners."}
SKILL = {"name": "pin-the-toolchain", "description": "Use when moving CI runners.",
         "instructions": "Pin the compiler version first.", "validation": ["the build passes"]}


def experience_plan(**changes: Any) -> dict[str, Any]:
    plan = {"outcome": "proposed", "reason": "Two runs show the pin fixed the build.",
            "intent": "create", "proposal": dict(EXPERIENCE), "evidence_ids": ["e_1", "e_2"]}
    plan.update(changes)
    return plan


def skill_plan(**changes: Any) -> dict[str, Any]:
    plan = {"outcome": "proposed", "reason": "Derived from one Experience.", "intent": "derive",
            "proposal": dict(SKILL), "evidence_ids": ["e_x"]}
    plan.update(changes)
    return plan


def refused(raw: object, *, operation: str = REFINE,
            has_target: bool = False) -> InvalidGenerationOutputError:
    with pytest.raises(InvalidGenerationOutputError) as caught:
        parse_plan(raw, operation=operation, has_target=has_target)
    assert caught.value.code == "invalid_generation_output"
    return caught.value


# -- valid plans ---------------------------------------------------------------------------------


def test_a_proposed_experience_without_a_target_is_a_create() -> None:
    plan = parse_plan(experience_plan(), operation=REFINE, has_target=False)

    assert plan == DreamPlan("proposed", "Two runs show the pin fixed the build.", "create",
                             EXPERIENCE, ("e_1", "e_2"))
    assert plan.to_dict()["evidence_ids"] == ["e_1", "e_2"]


@pytest.mark.parametrize("intent", ["corroborate", "refine", "correct"])
def test_a_replacement_of_the_target_takes_a_replacement_intent(intent: str) -> None:
    plan = parse_plan(experience_plan(intent=intent), operation=REFINE, has_target=True)
    assert plan.intent == intent


def test_a_strict_mode_null_failure_is_dropped_and_a_failure_is_kept() -> None:
    with_null = parse_plan(experience_plan(proposal={**EXPERIENCE, "failure": None}),
                           operation=REFINE, has_target=False)
    with_failure = parse_plan(experience_plan(proposal={**EXPERIENCE, "failure": "E0425"}),
                              operation=REFINE, has_target=False)

    assert with_null.proposal == EXPERIENCE
    assert with_failure.proposal == {**EXPERIENCE, "failure": "E0425"}


def test_a_derived_skill() -> None:
    plan = parse_plan(skill_plan(), operation=DERIVE, has_target=False)
    assert (plan.intent, plan.proposal, plan.evidence_ids) == ("derive", SKILL, ("e_x",))


@pytest.mark.parametrize("outcome", ["no_change", "needs_evidence"])
@pytest.mark.parametrize("operation", [REFINE, DERIVE])
def test_non_proposals_carry_a_reason_only(outcome: str, operation: str) -> None:
    explicit: dict[str, Any] = {"outcome": outcome, "reason": "Preferences only.",
                                "intent": None, "proposal": None, "evidence_ids": []}
    omitted = {"outcome": outcome, "reason": "Preferences only."}

    for raw in (explicit, omitted):
        assert parse_plan(raw, operation=operation, has_target=False) == DreamPlan(
            outcome, "Preferences only.", None, None, ())


def test_the_limits_themselves_are_accepted() -> None:
    plan = parse_plan(experience_plan(reason="r" * 2000, evidence_ids=[f"e_{i}" for i in
                                                                       range(32)]),
                      operation=REFINE, has_target=False)
    assert len(plan.reason) == 2000
    assert len(plan.evidence_ids) == 32


# -- every rule names its field ------------------------------------------------------------------


def without(key: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def change(plan: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in plan.items() if k != key}
    return change


def with_(**changes: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def change(plan: dict[str, Any]) -> dict[str, Any]:
        return {**plan, **changes}
    return change


def proposal_with(**changes: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def change(plan: dict[str, Any]) -> dict[str, Any]:
        return {**plan, "proposal": {**plan["proposal"], **changes}}
    return change


NOT_PROPOSED = {"outcome": "no_change", "reason": "Nothing new."}

RULES: list[tuple[str, Callable[[dict[str, Any]], dict[str, Any]], str, bool, str]] = [
    # (case, change to a valid plan, operation, has_target, field)
    ("extra field", with_(confidence=0.9), REFINE, False, "confidence"),
    ("outcome missing", without("outcome"), REFINE, False, "outcome"),
    ("outcome unknown", with_(outcome="maybe"), REFINE, False, "outcome"),
    ("outcome not a string", with_(outcome=1), REFINE, False, "outcome"),
    ("reason missing", without("reason"), REFINE, False, "reason"),
    ("reason empty", with_(reason=""), REFINE, False, "reason"),
    ("reason blank", with_(reason="   "), REFINE, False, "reason"),
    ("reason untrimmed", with_(reason=" padded"), REFINE, False, "reason"),
    ("reason trailing newline", with_(reason="done\n"), REFINE, False, "reason"),
    ("reason too long", with_(reason="r" * 2001), REFINE, False, "reason"),
    ("reason not a string", with_(reason=["r"]), REFINE, False, "reason"),
    ("intent unknown", with_(intent="delete"), REFINE, False, "intent"),
    ("intent missing when proposed", without("intent"), REFINE, False, "intent"),
    ("intent null when proposed", with_(intent=None), REFINE, False, "intent"),
    ("proposal missing when proposed", without("proposal"), REFINE, False, "proposal"),
    ("proposal null when proposed", with_(proposal=None), REFINE, False, "proposal"),
    ("no evidence when proposed", with_(evidence_ids=[]), REFINE, False, "evidence_ids"),
    ("evidence ids missing", without("evidence_ids"), REFINE, False, "evidence_ids"),
    ("33 evidence ids", with_(evidence_ids=[f"e_{i}" for i in range(33)]), REFINE, False,
     "evidence_ids"),
    ("evidence ids a string", with_(evidence_ids="e_1"), REFINE, False, "evidence_ids"),
    ("evidence id not a string", with_(evidence_ids=["e_1", 2]), REFINE, False,
     "evidence_ids[1]"),
    ("evidence id empty", with_(evidence_ids=[""]), REFINE, False, "evidence_ids[0]"),
    # Operation compatibility (item 3).
    ("create with a target", with_(intent="create"), REFINE, True, "intent"),
    ("refine without a target", with_(intent="refine"), REFINE, False, "intent"),
    ("correct without a target", with_(intent="correct"), REFINE, False, "intent"),
    ("derive for an Experience", with_(intent="derive"), REFINE, False, "intent"),
    ("a Skill for refine_experience", with_(proposal=dict(SKILL)), REFINE, False,
     "proposal"),
    ("proposal not an object", with_(proposal="text"), REFINE, False, "proposal"),
    ("experience field missing", with_(proposal={k: v for k, v in EXPERIENCE.items()
                                                 if k != "lesson"}), REFINE, False,
     "proposal.lesson"),
    ("experience field blank", proposal_with(action=" "), REFINE, False, "proposal.action"),
    ("experience field untrimmed", proposal_with(outcome="ok "), REFINE, False,
     "proposal.outcome"),
    ("experience field too long", proposal_with(situation="s" * 8001), REFINE, False,
     "proposal.situation"),
    ("experience blank failure", proposal_with(failure=" "), REFINE, False, "proposal.failure"),
]

SKILL_RULES: list[tuple[str, Callable[[dict[str, Any]], dict[str, Any]], str, bool, str]] = [
    ("skill intent create", with_(intent="create"), DERIVE, False, "intent"),
    ("skill intent refine", with_(intent="refine"), DERIVE, True, "intent"),
    ("an Experience for derive_skill", with_(proposal=dict(EXPERIENCE)), DERIVE, False,
     "proposal"),
    ("skill package null", proposal_with(package=None), DERIVE, False, "proposal.package"),
    ("skill package claimed", proposal_with(package={"digest": "sha256:" + "0" * 64}), DERIVE,
     False, "proposal.package"),
    ("skill name upper case", proposal_with(name="Pin-Toolchain"), DERIVE, False,
     "proposal.name"),
    ("skill name double hyphen", proposal_with(name="pin--toolchain"), DERIVE, False,
     "proposal.name"),
    ("skill name too long", proposal_with(name="a" * 65), DERIVE, False, "proposal.name"),
    ("skill description too long", proposal_with(description="d" * 1025), DERIVE, False,
     "proposal.description"),
    ("skill without validation", proposal_with(validation=[]), DERIVE, False,
     "proposal.validation"),
    ("skill 33 checks", proposal_with(validation=["c"] * 33), DERIVE, False,
     "proposal.validation"),
    ("skill blank check", proposal_with(validation=["ok", " "]), DERIVE, False,
     "proposal.validation[1]"),
    ("skill unknown field", proposal_with(version="1"), DERIVE, False, "proposal"),
]

NON_PROPOSAL_RULES: list[tuple[str, dict[str, Any], str]] = [
    ("intent on no_change", {**NOT_PROPOSED, "intent": "create"}, "intent"),
    ("proposal on no_change", {**NOT_PROPOSED, "proposal": dict(EXPERIENCE)}, "proposal"),
    ("evidence on no_change", {**NOT_PROPOSED, "evidence_ids": ["e_1"]}, "evidence_ids"),
    ("evidence on needs_evidence", {**NOT_PROPOSED, "outcome": "needs_evidence",
                                    "evidence_ids": ["e_1"]}, "evidence_ids"),
]


@pytest.mark.parametrize(("change", "operation", "has_target", "field"),
                         [pytest.param(*rule[1:], id=rule[0]) for rule in RULES])
def test_each_experience_rule_names_its_field(change: Callable[[dict[str, Any]], dict[str, Any]],
                                              operation: str, has_target: bool,
                                              field: str) -> None:
    base = experience_plan(intent="refine") if has_target else experience_plan()
    error = refused(change(base), operation=operation, has_target=has_target)
    assert error.details["field"] == field, error


@pytest.mark.parametrize(("change", "operation", "has_target", "field"),
                         [pytest.param(*rule[1:], id=rule[0]) for rule in SKILL_RULES])
def test_each_skill_rule_names_its_field(change: Callable[[dict[str, Any]], dict[str, Any]],
                                         operation: str, has_target: bool, field: str) -> None:
    error = refused(change(skill_plan()), operation=operation, has_target=has_target)
    assert error.details["field"] == field, error


@pytest.mark.parametrize(("raw", "field"),
                         [pytest.param(raw, field, id=case)
                          for case, raw, field in NON_PROPOSAL_RULES])
def test_no_change_and_needs_evidence_carry_nothing_else(raw: dict[str, Any], field: str) -> None:
    assert refused(raw).details["field"] == field


@pytest.mark.parametrize("raw", [None, [], "plan", 3, ["outcome"], {1: "x"}])
def test_a_plan_that_is_not_a_json_object_is_refused(raw: object) -> None:
    assert refused(raw).details["field"] == "plan"


def test_an_unknown_operation_is_a_caller_bug_not_model_output() -> None:
    with pytest.raises(ValueError, match="unknown Dream operation"):
        parse_plan(experience_plan(), operation="summarise", has_target=False)


def test_allowed_intents_by_operation_and_target() -> None:
    assert allowed_intents(REFINE, has_target=False) == ("create",)
    assert allowed_intents(REFINE, has_target=True) == ("corroborate", "refine", "correct")
    assert allowed_intents(DERIVE, has_target=False) == ("derive",)
    assert set(INTENTS) == {"create", "corroborate", "refine", "correct", "derive"}


# -- random input: only ever a plan or invalid_generation_output -----------------------------

JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(
    max_size=12)
JSON = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.text(max_size=8), inner, max_size=4), max_leaves=12)
FIELD_VALUES = {
    "outcome": st.sampled_from(["proposed", "no_change", "needs_evidence", "other", ""]) | JSON,
    "reason": st.sampled_from(["Because.", " x", "", "r" * 2001]) | st.text(max_size=30) | JSON,
    "intent": st.sampled_from([*INTENTS, None, "other"]) | JSON,
    "proposal": st.sampled_from([None, EXPERIENCE, SKILL, {**SKILL, "package": None},
                                 {**EXPERIENCE, "failure": None}])
    | st.dictionaries(st.sampled_from([*EXPERIENCE, *SKILL, "failure", "package", "x"]), JSON,
                      max_size=6) | JSON,
    "evidence_ids": st.lists(st.sampled_from(["e_1", "e_2", ""]) | JSON, max_size=34) | JSON,
}
PLANS = st.fixed_dictionaries({}, optional=dict(FIELD_VALUES.items()))
RAW = PLANS | st.dictionaries(st.text(max_size=10), JSON, max_size=6) | JSON


@PROPERTIES
@hypothesis.given(raw=RAW, operation=st.sampled_from([REFINE, DERIVE]), has_target=st.booleans())
def test_random_input_is_a_plan_or_invalid_generation_output(raw: object, operation: str,
                                                             has_target: bool) -> None:
    before = copy.deepcopy(raw)
    outcome: DreamPlan | InvalidGenerationOutputError
    try:
        outcome = parse_plan(raw, operation=operation, has_target=has_target)
    except InvalidGenerationOutputError as error:  # anything else fails the property
        outcome = error
    assert raw == before  # parsing never mutates the model's answer
    if isinstance(outcome, InvalidGenerationOutputError):
        field = outcome.details.get("field")
        assert isinstance(field, str)
        assert field
        return
    assert outcome.outcome in ("proposed", "no_change", "needs_evidence")
    assert (outcome.outcome == "proposed") == (outcome.proposal is not None) == (
        outcome.intent is not None) == bool(outcome.evidence_ids)
    if outcome.intent is not None:
        assert outcome.intent in allowed_intents(operation, has_target=has_target)


# -- the strict JSON schema ----------------------------------------------------------------------


def objects_in(schema: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(schema, dict):
        if schema.get("type") == "object":
            found.append(schema)
        for value in schema.values():
            found.extend(objects_in(value))
    elif isinstance(schema, list):
        for value in schema:
            found.extend(objects_in(value))
    return found


@pytest.mark.parametrize("operation", [REFINE, DERIVE])
def test_the_schema_is_strict_mode_shaped(operation: str) -> None:
    schema = PLAN_JSON_SCHEMA(operation)
    objects = objects_in(schema)

    assert len(objects) == 2  # the plan and the family proposal
    for obj in objects:
        assert obj["additionalProperties"] is False
        assert obj["required"] == list(obj["properties"])
    assert schema["required"] == ["outcome", "reason", "intent", "proposal", "evidence_ids"]
    nullable = schema["properties"]
    assert {"type": "null"} in nullable["intent"]["anyOf"]
    assert {"type": "null"} in nullable["proposal"]["anyOf"]
    assert PLAN_JSON_SCHEMA is plan_json_schema


def test_each_operation_offers_only_its_family_and_intents() -> None:
    refine = plan_json_schema(REFINE)["properties"]
    derive = plan_json_schema(DERIVE)["properties"]

    assert refine["intent"]["anyOf"][0]["enum"] == ["create", "corroborate", "refine", "correct"]
    assert derive["intent"]["anyOf"][0]["enum"] == ["derive"]
    assert set(refine["proposal"]["anyOf"][0]["properties"]) == {*EXPERIENCE, "failure"}
    # No package: the model cannot claim one, and any package key is refused.
    assert set(derive["proposal"]["anyOf"][0]["properties"]) == set(SKILL)


def test_the_schema_is_a_fresh_copy_each_time() -> None:
    first = plan_json_schema(REFINE)
    first["properties"].clear()
    assert plan_json_schema(REFINE)["properties"]
