"""The embedded default generator: deterministic, no network, labelled offline.

It reads only the projection in its :class:`GenerationInput` and treats every text as data:

* ``refine_experience`` proposes an Experience whose situation, action, outcome and lesson are
  sentences of the task records in the evidence (projected root Sources, and Memory entries of
  kind ``task_record``), and cites the evidence ids it drew them from. It answers
  ``needs_evidence`` when no admissible root support (a projected Source, or a Memory entry that
  rests on at least one root group) shows both an action and a result, and ``no_change`` when
  the evidence holds preferences only. With a target it revises that Experience (``refine``).
* ``derive_skill`` turns the projected Experiences into one instruction-only Skill.

The generator holds no per-call state: everything a call uses is in its arguments, so
concurrent calls cannot mix.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from application.generation import GenerationInput, GenerationResult, GenerationUsage
from domain.canonical import canonical_json
from domain.content import (
    EXPERIENCE_FIELD_MAX_CHARS,
    SKILL_DESCRIPTION_MAX,
    SKILL_NAME_MAX,
    SKILL_VALIDATION_ITEM_MAX,
)
from domain.dream_plan import MAX_PLAN_EVIDENCE_IDS, Intent
from domain.dream_request import DreamOperation
from domain.dream_run import RunOutcome
from domain.evidence.manifest import EXPERIENCE_NODE, MEMORY_NODE, SOURCE_NODE, ProjectedItem

OFFLINE_CONFIG_ID = "offline:artifact-dreaming.offline.v1"

TASK_RECORD = "task_record"
PREFERENCE_KINDS = frozenset({"preference", "counter_example"})
EXPERIENCE_FIELDS = ("situation", "action", "outcome", "lesson")
MAX_ACTIONS = 3
MAX_RESULTS = 2
MAX_LESSONS = 2
MAX_NAME_WORDS = 5
# A Skill is named after what its lesson says to do: "When X happened, pin images by digest
# before every rollout" is named pin-images-by-digest-rollout, without the condition or filler.
_LEADING_CONDITION = re.compile(r"^\s*(when|if|whenever)\b[^,;]*[,;]\s*")
_NAME_FILLER = frozenset({"a", "an", "the", "every", "each", "always", "before", "after",
                          "then", "when", "and", "or", "to", "of", "it", "its"})
FALLBACK_SKILL_NAME = "derived-skill"

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_ACTION = re.compile(
    r"\b(pinned|pin|retried|retry|used|use|fixed|replayed|ran|added|removed|changed|set|"
    r"switched|updated|restarted|reverted|installed|configured|upgraded|downgraded|"
    r"rolled back|applied|patched|cleared|increased|decreased|disabled|enabled|replaced|"
    r"rebuilt|tried|wrote|moved|split|cached|bumped)\b", re.IGNORECASE)
_RESULT = re.compile(
    r"\b(succeeded|succeeds|success|failed|fails|failure|passed|passes|worked|works|"
    r"green|resolved|broke|broken|crashed|timed out|stable|flaky|regressed|recovered)\b",
    re.IGNORECASE)
_LESSON = re.compile(
    r"\b(lesson|learned|learnt|should|always|never|next time|remember|prefer|avoid)\b",
    re.IGNORECASE)
_WORD = re.compile(r"[a-z0-9]+")


# -- reading the projection ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Record:
    """A task record: a projected root Source, or a Memory entry of kind ``task_record``."""

    evidence_id: str
    text: str
    admissible: bool  # a root Source, or Memory resting on at least one root group
    memory: bool
    historical: bool


@dataclass(frozen=True)
class _Evidence:
    records: tuple[_Record, ...] = ()
    preferences: tuple[str, ...] = ()
    experiences: tuple[tuple[str, dict[str, str]], ...] = ()

    def experience(self, evidence_id: str) -> dict[str, str] | None:
        return next((content for eid, content in self.experiences if eid == evidence_id), None)


def _json_object(text: str) -> Mapping[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, Mapping) else None


def _source_text(item: ProjectedItem) -> str:
    body = _json_object(item.text)
    if body is None:
        return item.text
    text = body.get("text")
    if isinstance(text, str) and text.strip():
        return text
    payload = body.get("payload")
    if isinstance(payload, Mapping):
        return "\n".join(v for _, v in sorted(payload.items()) if isinstance(v, str))
    return ""


def _experience_content(item: ProjectedItem) -> dict[str, str] | None:
    body = _json_object(item.text)
    if body is None or not all(isinstance(body.get(name), str) and body[name].strip()
                               for name in EXPERIENCE_FIELDS):
        return None
    return {name: str(body[name]).strip() for name in EXPERIENCE_FIELDS}


@dataclass
class _Reader:
    records: list[_Record] = field(default_factory=list)
    preferences: list[str] = field(default_factory=list)
    experiences: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def add(self, item: ProjectedItem) -> None:
        if item.kind == SOURCE_NODE:
            self.records.append(_Record(item.evidence_id, _source_text(item), True, False,
                                        item.historical))
        elif item.kind == MEMORY_NODE:
            self._add_memory(item)
        elif item.kind == EXPERIENCE_NODE:
            content = _experience_content(item)
            if content is not None:
                self.experiences.append((item.evidence_id, content))

    def _add_memory(self, item: ProjectedItem) -> None:
        body = _json_object(item.text) or {}
        kind, text = body.get("kind"), body.get("text")
        if kind == TASK_RECORD and isinstance(text, str):
            self.records.append(_Record(item.evidence_id, text, bool(item.root_group_ids), True,
                                        item.historical))
        elif kind in PREFERENCE_KINDS:
            self.preferences.append(item.evidence_id)

    def evidence(self) -> _Evidence:
        # Root Sources before Memory task records, current before historical; otherwise the
        # projection's (sorted) order.
        records = sorted(self.records, key=lambda record: (record.memory, record.historical))
        return _Evidence(tuple(records), tuple(self.preferences), tuple(self.experiences))


def _read(items: Iterable[ProjectedItem]) -> _Evidence:
    reader = _Reader()
    for item in items:
        reader.add(item)
    return reader.evidence()


# -- text helpers --------------------------------------------------------------------------------


def _sentences(text: str) -> list[str]:
    return [part.strip() for part in _SENTENCE_END.split(text) if part.strip()]


def _clip(text: str, limit: int) -> str:
    """At most ``limit`` characters, trimmed (generated text obeys the family limits)."""
    return text.strip()[:limit].strip()


def _join(parts: Sequence[str], limit: int = EXPERIENCE_FIELD_MAX_CHARS) -> str:
    return _clip(" ".join(dict.fromkeys(parts)), limit)


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def _without_stop(text: str) -> str:
    return text.rstrip(".!? ")


# -- refine_experience ---------------------------------------------------------------------------


def _keep(kept: list[str], sentence: str, limit: int) -> bool:
    if len(kept) >= limit or sentence in kept:
        return False
    kept.append(sentence)
    return True


@dataclass
class _Support:
    """Sentences drawn from admissible task records, and the records they came from."""

    situation: str | None = None
    actions: list[str] = field(default_factory=list)
    results: list[str] = field(default_factory=list)
    lessons: list[str] = field(default_factory=list)
    used: list[str] = field(default_factory=list)

    def take(self, record: _Record) -> None:
        sentences = _sentences(record.text)
        # The first record's opening sentence sets the scene; it is not also an action/result.
        opening = self.situation is None and len(sentences) > 1
        kept = [self._classify(sentence) for sentence in sentences[1 if opening else 0:]]
        if any(kept):
            if self.situation is None:
                self.situation = sentences[0]
            self.used.append(record.evidence_id)

    def _classify(self, sentence: str) -> bool:
        """File the sentence under the first heading it fits; True when it was kept."""
        if _LESSON.search(sentence):
            return _keep(self.lessons, sentence, MAX_LESSONS)
        if _RESULT.search(sentence):
            return _keep(self.results, sentence, MAX_RESULTS)
        if _ACTION.search(sentence):
            return _keep(self.actions, sentence, MAX_ACTIONS)
        return False

    @property
    def empty(self) -> bool:
        return not (self.actions or self.results or self.lessons)

    @property
    def complete(self) -> bool:
        return self.situation is not None and bool(self.actions) and bool(self.results)


def _support(records: Iterable[_Record]) -> _Support:
    """Read Sources first; Memory task records only while an action or result is missing."""
    support = _Support()
    for record in records:
        if record.admissible and not (record.memory and support.complete):
            support.take(record)
    # A sentence naming both an action and its result (or the opening) may support both.
    opening = [] if support.situation is None else [support.situation]
    if not support.actions:
        support.actions = _matching(_ACTION, [*opening, *support.results], MAX_ACTIONS)
    if not support.results:
        support.results = _matching(_RESULT, [*opening, *support.actions], MAX_RESULTS)
    return support


def _matching(pattern: re.Pattern[str], sentences: Iterable[str], limit: int) -> list[str]:
    return list(dict.fromkeys(s for s in sentences if pattern.search(s)))[:limit]


def _lesson(support: _Support, records: Sequence[_Record],
            target: Mapping[str, str] | None) -> tuple[str, str | None]:
    """The lesson, and the Memory task record it came from (None: from the support or target).

    In order: lesson-like sentences of the support, an admissible Memory task record, the
    target's own lesson, and last a summary of the action and its result.
    """
    if support.lessons:
        return _join(support.lessons), None
    memory = next((r for r in records if r.memory and r.admissible and r.text.strip()
                   and r.evidence_id not in support.used), None)
    if memory is not None:
        return _clip(memory.text, EXPERIENCE_FIELD_MAX_CHARS), memory.evidence_id
    if target is not None:
        return target["lesson"], None
    situation = _lower_first(_without_stop(support.situation or "this situation recurs"))
    summary = (f"When {situation}, {_lower_first(_without_stop(support.actions[0]))}; "
               f"observed result: {_lower_first(_without_stop(support.results[0]))}.")
    return _clip(summary, EXPERIENCE_FIELD_MAX_CHARS), None


def _experience(support: _Support, lesson: str,
                target: Mapping[str, str] | None) -> dict[str, str]:
    situation = support.situation or ""
    if target is not None:
        situation = target["situation"]
    return {
        "situation": _clip(situation, EXPERIENCE_FIELD_MAX_CHARS),
        "action": _join(support.actions),
        "outcome": _join(support.results),
        "lesson": lesson,
    }


def _cited(*groups: Iterable[str | None]) -> list[str]:
    ids = [eid for group in groups for eid in group if eid is not None]
    return list(dict.fromkeys(ids))[:MAX_PLAN_EVIDENCE_IDS]


def _refine_experience(request: GenerationInput, evidence: _Evidence) -> dict[str, Any]:
    target_id = request.target_evidence_id
    target = None if target_id is None else evidence.experience(target_id)
    if target_id is not None and target is None:
        return _unchanged(
            RunOutcome.NEEDS_EVIDENCE, "The target Experience is not in the evidence."
        )
    support = _support(evidence.records)
    if not support.complete:
        return _not_supported(evidence, support)
    lesson, lesson_id = _lesson(support, evidence.records, target)
    proposal = _experience(support, lesson, target)
    cited = _cited([target_id], support.used, [lesson_id])
    verb = "Revises the target Experience" if target_id else "Proposes an Experience"
    reason = f"{verb} from {len(support.used)} task record(s) showing an action and its result."
    return _proposed(Intent.REFINE if target_id else Intent.CREATE, reason, proposal, cited)


def _not_supported(evidence: _Evidence, support: _Support) -> dict[str, Any]:
    """``no_change`` for preferences alone; ``needs_evidence`` for a task without support.

    Preferences alone: preference entries, and at most the Sources they were recorded from
    when those show no task action, result or lesson at all.
    """
    memory_records = any(record.memory for record in evidence.records)
    if evidence.preferences and support.empty and not memory_records:
        return _unchanged(
            RunOutcome.NO_CHANGE,
            "The evidence holds preferences only; there is no observed "
            "task action and result to learn from.",
        )
    if not evidence.records:
        return _unchanged(RunOutcome.NEEDS_EVIDENCE, "The evidence holds no task record.")
    return _unchanged(
        RunOutcome.NEEDS_EVIDENCE,
        "No admissible root Source supports both a task action and its result.",
    )


# -- derive_skill --------------------------------------------------------------------------------


def _skill_name(lesson: str) -> str:
    """A short kebab-case name from what the lesson tells the agent to do."""
    advice = _LEADING_CONDITION.sub("", lesson.lower())
    words = [word for word in _WORD.findall(advice) if word not in _NAME_FILLER]
    name = ""
    for word in words[:MAX_NAME_WORDS]:
        candidate = f"{name}-{word}" if name else word
        if len(candidate) > SKILL_NAME_MAX:
            break
        name = candidate
    return name or FALLBACK_SKILL_NAME


def _instructions(experiences: Sequence[Mapping[str, str]]) -> str:
    blocks = [
        f"## Case {index}\n\n- When: {content['situation']}\n- Do: {content['action']}\n"
        f"- Expect: {content['outcome']}\n- Lesson: {content['lesson']}"
        for index, content in enumerate(experiences, start=1)
    ]
    return "Apply the lessons below when their situation matches.\n\n" + "\n\n".join(blocks)


def _skill(experiences: Sequence[Mapping[str, str]]) -> dict[str, Any]:
    primary = experiences[0]
    description = f"Use when {_without_stop(primary['situation'])}. {primary['lesson']}"
    checks = [_clip(f"Confirm the expected outcome: {content['outcome']}",
                    SKILL_VALIDATION_ITEM_MAX) for content in experiences]
    return {
        "name": _skill_name(primary["lesson"]),
        "description": _clip(description, SKILL_DESCRIPTION_MAX),
        "instructions": _instructions(experiences).strip(),
        "validation": list(dict.fromkeys(checks)),
    }


def _derive_skill(evidence: _Evidence) -> dict[str, Any]:
    chosen = evidence.experiences[:MAX_PLAN_EVIDENCE_IDS]
    if not chosen:
        return _unchanged(
            RunOutcome.NEEDS_EVIDENCE, "The evidence holds no Experience to derive a Skill from."
        )
    proposal = _skill([content for _, content in chosen])
    reason = f"Derives an instruction-only Skill from {len(chosen)} Experience(s)."
    return _proposed(Intent.DERIVE, reason, proposal, [eid for eid, _ in chosen])


# -- plans, usage, the generator -----------------------------------------------------------------


def _unchanged(outcome: str, reason: str) -> dict[str, Any]:
    return {"outcome": outcome, "reason": reason, "intent": None, "proposal": None,
            "evidence_ids": []}


def _proposed(intent: str, reason: str, proposal: dict[str, Any],
              evidence_ids: list[str]) -> dict[str, Any]:
    return {
        "outcome": RunOutcome.PROPOSED,
        "reason": reason,
        "intent": intent,
        "proposal": proposal,
        "evidence_ids": evidence_ids,
    }


def _tokens(value: Any) -> int:
    """A deterministic estimate: four UTF-8 bytes per token."""
    return len(canonical_json(value).encode("utf-8")) // 4


class OfflineGenerator:
    """Deterministic and network-free; the same input always gives the same plan and usage."""

    @property
    def config_id(self) -> str:
        return OFFLINE_CONFIG_ID

    def generate(self, request: GenerationInput) -> GenerationResult:
        evidence = _read(request.projection.items)
        if request.operation == DreamOperation.DERIVE_SKILL:
            plan = _derive_skill(evidence)
        else:
            plan = _refine_experience(request, evidence)
        seen = {"operation": request.operation, "target_evidence_id": request.target_evidence_id,
                "evidence": request.projection.to_dict()}
        usage = GenerationUsage(requests=1, input_tokens=_tokens(seen), output_tokens=_tokens(plan))
        return GenerationResult(plan=plan, usage=usage)
