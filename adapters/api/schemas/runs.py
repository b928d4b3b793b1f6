"""Bodies of Dream runs: the admission request, the run and the runs list."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from adapters.api.schemas.common import (
    ArtifactRefBody,
    MemoryCitationBody,
    SourceRefBody,
    Strict,
    ref_body,
    to_domain_items,
)
from adapters.api.schemas.vocabulary import (
    AutoGateName,
    RunOutcomeName,
    RunStatusName,
    RunTriggerName,
)
from application.auto_dreaming import AutoStatus
from domain.dream_request import DreamRequest
from domain.dream_run import DreamRun, failure_reason
from projections.runs import RunSummary


class CreateDreamRun(Strict):
    operation: str
    idempotency_key: str
    artifacts: list[ArtifactRefBody] = Field(default_factory=list)
    memory_citations: list[MemoryCitationBody] = Field(default_factory=list)
    sources: list[SourceRefBody] = Field(default_factory=list)
    target: ArtifactRefBody | None = None

    def to_domain(self) -> DreamRequest:
        target = None
        if self.target is not None:
            target = to_domain_items([self.target], "target")[0]
        return DreamRequest.create(
            self.operation, self.idempotency_key,
            to_domain_items(self.artifacts, "artifacts"),
            to_domain_items(self.memory_citations, "memory_citations"),
            to_domain_items(self.sources, "sources"), target)


class Usage(BaseModel):
    model_calls: int
    input_tokens: int | None = Field(description="null means unknown, never zero")
    output_tokens: int | None = Field(description="null means unknown, never zero")


class CandidateRef(BaseModel):
    candidate_id: str
    version: int


class DreamRunSummary(BaseModel):
    scope_id: str
    run_id: str
    operation: str
    status: RunStatusName
    outcome: RunOutcomeName | None
    target: ArtifactRefBody | None
    candidate: CandidateRef | None
    error: str | None
    reason: str | None = Field(description=(
        "Why the run ended as it did: for a failed run, a human sentence for its `error` "
        "code; on a single run also a succeeded run's reason; null while unfinished."))
    accepted_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    attempt_count: int
    reused: bool
    trigger: RunTriggerName = Field(description=(
        "Who started the run: `request` (a caller) or `automatic` (automatic dreaming)."))

    @classmethod
    def from_summary(cls, summary: RunSummary) -> DreamRunSummary:
        candidate = None
        if summary.candidate_id is not None and summary.candidate_version is not None:
            candidate = CandidateRef(candidate_id=summary.candidate_id,
                                     version=summary.candidate_version)
        return cls(scope_id=summary.scope_id, run_id=summary.run_id,
                   operation=summary.operation, status=summary.status,  # type: ignore[arg-type]
                   outcome=summary.outcome,  # type: ignore[arg-type]
                   target=ref_body(summary.target),
                   candidate=candidate, error=summary.error,
                   reason=None if summary.error is None else failure_reason(summary.error),
                   accepted_at=summary.accepted_at,
                   started_at=summary.started_at, completed_at=summary.completed_at,
                   attempt_count=summary.attempt_count, reused=summary.reused,
                   trigger=summary.trigger)  # type: ignore[arg-type]


class DreamRunView(DreamRunSummary):
    position: int | None = Field(
        description="Event position of what is shown: the admission, or on a read or replay "
                    "the run's last event (a worker's change included; wait for it with "
                    "`after=`).")
    terminal: bool
    input_manifest: dict[str, Any] | None
    usage: Usage
    budget: dict[str, int]
    prompt_version: str
    model_config_id: str | None

    @classmethod
    def of(cls, run: DreamRun, position: int | None = None) -> DreamRunView:
        return cls(
            scope_id=run.scope_id, run_id=run.run_id, operation=run.operation,
            status=run.status, outcome=run.outcome,  # type: ignore[arg-type]
            target=ref_body(run.request.target),
            candidate=None if run.candidate is None else CandidateRef(**run.candidate.to_dict()),
            error=run.error, accepted_at=run.accepted_at, started_at=run.started_at,
            completed_at=run.completed_at, attempt_count=run.attempt_count, reused=run.reused,
            trigger=run.trigger.value, position=position, terminal=run.terminal, reason=run.reason,
            input_manifest=None if run.manifest is None else run.manifest.to_dict(),
            usage=Usage(model_calls=run.model_calls, input_tokens=run.input_tokens,
                        output_tokens=run.output_tokens),
            budget=run.budget.to_dict(), prompt_version=run.prompt_version,
            model_config_id=run.model_config_id)


class DreamRunPage(BaseModel):
    runs: list[DreamRunSummary]
    next_cursor: str | None


class AutoGateView(BaseModel):
    name: AutoGateName
    open: bool
    value: Any = Field(description="What the gate measured now (null: nothing yet).")
    threshold: Any = Field(description="What it must reach to open.")
    reason: str


class AutoWindowView(BaseModel):
    work_key: str = Field(description="The window's idempotency key: its runs' keys.")
    run_ids: list[str]
    after: int = Field(description="The cursor the window starts after.")
    end: int = Field(description="The position of its last record: the cursor on success.")
    records: int
    opened_at: datetime


class AutoDreamStatusView(BaseModel):
    scope_id: str
    due: bool
    reason: str = Field(description="Why the scope is or is not due now: the first closed "
                                    "gate's reason.")
    gates: list[AutoGateView] = Field(description="Every gate, cheapest first.")
    cursor: int = Field(description="The store position of the last record consolidated by a "
                                    "successful automatic window (0: none yet).")
    window: AutoWindowView | None
    last_success_at: datetime | None = Field(description="When the last successful automatic "
                                                         "window ended: the time gate counts "
                                                         "from here.")
    last_ended_at: datetime | None = Field(description="When the last window ended, succeeded "
                                                       "or released.")
    retries: int = Field(description="Windows released since the last success; each doubles "
                                     "the retry backoff (15 min, capped by auto_min_hours).")

    @classmethod
    def of(cls, status: AutoStatus) -> AutoDreamStatusView:
        window = status.window
        return cls(
            scope_id=status.scope_id, due=status.due, reason=status.report.reason,
            gates=[AutoGateView(name=gate.name.value,
                                open=gate.open, value=gate.value, threshold=gate.threshold,
                                reason=gate.reason) for gate in status.report.gates],
            cursor=status.cursor,
            window=None if window is None else AutoWindowView(
                work_key=window.work_key, run_ids=list(window.run_ids), after=window.after,
                end=window.end, records=window.records, opened_at=window.opened_at),
            last_success_at=status.last_success_at, last_ended_at=status.last_ended_at,
            retries=status.retries)


class ScopeStatusView(BaseModel):
    """A scope at a glance: automatic dreaming's gates, the review inbox, the run queue."""

    scope_id: str
    auto: AutoDreamStatusView = Field(description="Automatic dreaming, as `dream auto status`.")
    pending_candidates: int = Field(description="Candidates awaiting review.")
    queued_runs: int
    running_runs: int
