"""Shared scenario support for Dream tests: a scripted stand-in for a hosted model."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from application.generation import GenerationInput, GenerationResult, GenerationUsage

CONFIG = "test-dream-v1"
EXPERIENCE = {"situation": "Retried a write", "action": "Used key K",
              "outcome": "One charge", "lesson": "Use idempotency keys"}


@dataclass
class ScriptedModel:
    """Stands in for a hosted model: proposes from the first source item it is shown."""

    config_id: str = CONFIG
    calls: list[GenerationInput] = field(default_factory=list)
    failures: list[Exception] = field(default_factory=list)  # raised by the next calls
    gate: threading.Event | None = None  # when set, each call waits for it
    entered: threading.Event = field(default_factory=threading.Event)
    plan_override: dict[str, Any] | None = None
    output_tokens: int = 45

    def generate(self, request: GenerationInput) -> GenerationResult:
        self.calls.append(request)
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(10)
        if self.failures:
            raise self.failures.pop(0)
        return GenerationResult(self.plan_override or self.plan(request),
                                GenerationUsage(1, 80, self.output_tokens))

    @staticmethod
    def plan(request: GenerationInput) -> dict[str, Any]:
        sources = [item.evidence_id for item in request.projection.items
                   if item.kind == "source"]
        skill = request.operation == "derive_skill"
        if skill:
            used = [i.evidence_id for i in request.projection.items if i.kind == "experience"]
            proposal: dict[str, Any] = {"name": "check-retries", "description": "Check retries",
                                        "instructions": "Use keys.", "validation": ["keyed"]}
        else:
            used = sources[:1]
            proposal = EXPERIENCE
        intent = "derive" if skill else ("refine" if request.target_evidence_id else "create")
        return {"outcome": "proposed", "reason": "Supported by the task record.",
                "intent": intent, "proposal": proposal, "evidence_ids": used}
