"""The generator port: evidence projection in, a structured plan and its usage out.

A generator makes exactly one provider request per call (SDK retries off): the run counts its
own calls and decides on retries. It never sees the store, the scope's other data, or another
run: everything it may use is in its :class:`GenerationInput`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from domain.evidence.manifest import ModelEvidence


@dataclass(frozen=True)
class GenerationInput:
    run_id: str
    scope_id: str
    operation: str  # refine_experience | derive_skill
    target_evidence_id: str | None  # the request target's evidence id; None: create new
    projection: ModelEvidence  # the only evidence the model may see (untrusted data)
    max_output_tokens: int
    timeout_seconds: float  # for this one call; already capped by the run's deadline


@dataclass(frozen=True)
class GenerationUsage:
    """What the provider reported; ``None`` means unknown (never zero)."""

    requests: int = 1
    input_tokens: int | None = None
    output_tokens: int | None = None


@dataclass(frozen=True)
class GenerationResult:
    plan: dict[str, Any]  # the parsed JSON plan, validated by domain.dream_plan afterwards
    usage: GenerationUsage


class TransientGenerationError(Exception):
    """Timeout, connection failure or a 5xx/429: the run may spend its one extra attempt."""


class GenerationOutputError(Exception):
    """The provider answered, but not with a JSON plan: ``invalid_generation_output``."""

    def __init__(self, message: str, usage: GenerationUsage | None = None) -> None:
        super().__init__(message)
        self.usage = usage


class GenerationFailedError(Exception):
    """The provider refused the request for good (a 4xx other than 408/429).

    Maps to the run error ``generation_failed``: not transient, not the model's output.
    """

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class Generator(Protocol):
    @property
    def config_id(self) -> str:
        """Identity of the model configuration; a run pins it at its first attempt."""
        ...

    def generate(self, request: GenerationInput) -> GenerationResult: ...


class GeneratorLookup(Protocol):
    """The registry of model configurations by id (docs/contract.md#generator-contract)."""

    @property
    def current(self) -> Generator:
        """The configuration a run pins at its first attempt."""
        ...

    def get(self, config_id: str) -> Generator:
        """The pinned configuration; raises ``capability_unavailable`` when it is gone."""
        ...
