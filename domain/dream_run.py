"""DreamRun: one background consolidation run, from admission to a terminal outcome.

``queued -> running -> succeeded | failed``, with ``running -> queued`` for a retryable
failure. Each claim appends ``AttemptStarted`` with the next attempt generation; every later
write names its attempt, so a superseded worker is refused (and its save would also collide on
the aggregate version, which is the fencing token in the store). A live attempt renews its
lease (``LeaseRenewed``) while its model call is in flight, fenced the same way.

Events store the request, manifest and proposed Candidate as plain JSON; the run holds them as
value objects (and its words as enums), parsed once when the event is applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from domain.budget import Budget
from domain.canonical import sha256_hex
from domain.dream_request import DreamOperation, DreamRequest
from domain.errors import (
    AttemptConflictError,
    BudgetExceededError,
    InvalidRequestError,
    ManifestFrozenError,
    RunTerminalError,
)
from domain.evidence.manifest import EvidenceManifest
from domain.ids import dream_run_aggregate_id
from domain.text import check_scope_id


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


class RunOutcome(StrEnum):
    """How a succeeded run ended; only ``proposed`` comes with a Candidate."""

    PROPOSED = "proposed"
    NO_CHANGE = "no_change"
    NEEDS_EVIDENCE = "needs_evidence"


class RunTrigger(StrEnum):
    """Who started a run: a caller's request, or automatic dreaming.

    See docs/contract.md#automatic-dreaming.
    """

    REQUEST = "request"
    AUTOMATIC = "automatic"


TERMINAL = (RunStatus.SUCCEEDED, RunStatus.FAILED)
OUTCOMES = tuple(RunOutcome)

# A failed run's human reason, by its error code. Fixed sentences: never provider output or
# evidence text, which a run's viewer may not be allowed to read.
FAILURE_REASONS = {
    "budget_exceeded": "The run used up its budget (model calls, output tokens or time).",
    "invalid_generation_output": "The model's answer was not a valid plan for this operation.",
    "generation_failed": "The model call failed: the provider was unreachable, timed out or "
                         "refused the request.",
    "evidence_unavailable": "Evidence the run was admitted with is no longer available.",
    "memory_entry_inactive": "A cited Memory entry was deactivated while the run was in "
                             "progress.",
    "access_revoked": "The requester can no longer read part of the run's evidence.",
    "evidence_erased": "Part of the run's evidence was erased: its text can no longer be read.",
    "artifact_conflict": "The target was revised while the run was in progress.",
    "capability_unavailable": "The model configuration the run started on is no longer "
                              "available.",
}


def principal_key(principal: str) -> str:
    """How a run records who asked without putting the name in keys and indexes."""
    return sha256_hex(principal)


def failure_reason(error: str) -> str:
    """The human reason recorded beside a failure code (and given to runs that predate it)."""
    return FAILURE_REASONS.get(error, f"The run failed ({error}).")


def _add_known(total: int | None, value: int | None) -> int | None:
    """Unknown stays unknown: a sum with an unknown term is unknown, never zero."""
    return None if total is None or value is None else total + value


@dataclass(frozen=True)
class ProposedCandidate:
    """The Candidate version a run proposed; its ``Succeeded`` event stores ``to_dict()``."""

    candidate_id: str
    version: int

    def to_dict(self) -> dict[str, Any]:
        return {"candidate_id": self.candidate_id, "version": self.version}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProposedCandidate:
        return cls(candidate_id=data["candidate_id"], version=data["version"])


class DreamRun(Aggregate):
    class Accepted(Aggregate.Created):
        scope_id: str
        run_id: str
        operation: str
        requester: str
        principal_key: str
        idempotency_key: str
        request: dict[str, Any]
        request_digest: str
        budget: dict[str, int]
        prompt_version: str
        accepted_at: datetime
        trigger: str = RunTrigger.REQUEST.value  # absent from runs admitted before triggers
        # The admitting request's W3C trace context, so the worker that executes the run
        # continues its trace (None when tracing is off, and in runs admitted before).
        trace_parent: str | None = None

    class AttemptStarted(Aggregate.Event):
        attempt: int
        started_at: datetime
        deadline_at: datetime
        model_config_id: str
        lease_expires_at: datetime

    class LeaseRenewed(Aggregate.Event):
        attempt: int
        lease_expires_at: datetime

    class ManifestFrozen(Aggregate.Event):
        attempt: int
        manifest: dict[str, Any]
        manifest_digest: str

    class UsageRecorded(Aggregate.Event):
        attempt: int
        model_calls: int
        input_tokens: int | None
        output_tokens: int | None
        reported: bool

    class Requeued(Aggregate.Event):
        attempt: int
        code: str

    class Succeeded(Aggregate.Event):
        attempt: int
        outcome: str
        reason: str
        candidate: dict[str, Any] | None
        reused: bool
        completed_at: datetime

    class Failed(Aggregate.Event):
        attempt: int
        error: str
        completed_at: datetime
        reason: str | None = None  # absent from runs failed before reasons were recorded

    @staticmethod
    def create_id(scope_id: str, run_id: str) -> UUID:
        return dream_run_aggregate_id(scope_id, run_id)

    @classmethod
    def accept(cls, scope_id: str, run_id: str, requester: str, request: DreamRequest,
               budget: Budget, prompt_version: str, accepted_at: datetime,
               trigger: RunTrigger = RunTrigger.REQUEST,
               trace_parent: str | None = None) -> DreamRun:
        """A queued run of ``request`` within ``budget``; ``requester`` is the principal
        whose rights the run always uses."""
        if trigger not in tuple(RunTrigger):
            raise InvalidRequestError(f"unknown trigger {trigger!r}", field="trigger")
        return cls(scope_id=check_scope_id(scope_id), run_id=run_id,
                   operation=request.operation.value, requester=requester,
                   principal_key=principal_key(requester),
                   idempotency_key=request.idempotency_key, request=request.to_dict(),
                   request_digest=request.digest, budget=budget.to_dict(),
                   prompt_version=prompt_version, accepted_at=accepted_at,
                   trigger=RunTrigger(trigger).value, trace_parent=trace_parent)

    @event(Accepted)
    def __init__(self, scope_id: str, run_id: str, operation: str, requester: str,
                 principal_key: str, idempotency_key: str, request: dict[str, Any],
                 request_digest: str, budget: dict[str, int], prompt_version: str,
                 accepted_at: datetime, trigger: str = RunTrigger.REQUEST.value,
                 trace_parent: str | None = None) -> None:
        self.scope_id = scope_id
        self.trace_parent = trace_parent
        self.run_id = run_id
        self.operation = DreamOperation(operation)
        self.requester = requester
        self.principal_key = principal_key
        self.idempotency_key = idempotency_key
        # Parsed once here, as admitted (the event keeps the plain dict).
        self.request = DreamRequest.from_dict(request, idempotency_key)
        self.request_digest = request_digest
        self.budget = Budget.as_admitted(budget)
        self.prompt_version = prompt_version
        self.accepted_at = accepted_at
        self.trigger = RunTrigger(trigger)
        self.status = RunStatus.QUEUED
        self.attempt = 0
        self.started_at: datetime | None = None
        self.deadline_at: datetime | None = None
        self.lease_expires_at: datetime | None = None
        self.model_config_id: str | None = None
        self.manifest: EvidenceManifest | None = None
        self.manifest_digest: str | None = None
        self.model_calls = 0
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.usage_reported = False
        self.outcome: RunOutcome | None = None
        self.reason: str | None = None
        self.candidate: ProposedCandidate | None = None
        self.reused = False
        self.error: str | None = None
        self.completed_at: datetime | None = None
        self.last_requeue_code: str | None = None

    @property
    def terminal(self) -> bool:
        return self.status.terminal

    @property
    def attempt_count(self) -> int:
        return self.attempt

    # -- guards ------------------------------------------------------------------------------

    def check_not_terminal(self) -> None:
        if self.terminal:
            raise RunTerminalError(f"run {self.run_id} is {self.status}", status=self.status.value)

    def check_attempt(self, attempt: int) -> None:
        """The fencing check: only the current attempt of a running run may write."""
        self.check_not_terminal()
        if self.status != RunStatus.RUNNING or attempt != self.attempt:
            raise AttemptConflictError(
                f"attempt {attempt} of run {self.run_id} is not current",
                attempt=attempt, current=self.attempt, status=self.status.value,
            )

    def claimable(self, now: datetime) -> bool:
        """Queued, or running with an expired lease (a crashed worker's run)."""
        if self.status == RunStatus.QUEUED:
            return True
        return (self.status == RunStatus.RUNNING and self.lease_expires_at is not None
                and now >= self.lease_expires_at)

    def out_of_budget(self, now: datetime) -> bool:
        """No attempt or time left: the next claim fails the run ``budget_exceeded``."""
        out_of_time = self.deadline_at is not None and now >= self.deadline_at
        return out_of_time or self.attempt >= self.budget.max_model_calls

    # -- attempts ----------------------------------------------------------------------------

    def start_attempt(self, now: datetime, model_config_id: str, lease_seconds: float) -> bool:
        """Claim the run; ``False`` (and a ``budget_exceeded`` failure) when out of budget."""
        self.check_not_terminal()
        if not self.claimable(now):
            raise AttemptConflictError(f"run {self.run_id} is held by attempt {self.attempt}",
                                       attempt=self.attempt, status=self.status.value)
        if self.out_of_budget(now):
            self._failed(attempt=self.attempt, error=BudgetExceededError.code, completed_at=now,
                         reason=failure_reason(BudgetExceededError.code))
            return False
        started_at = self.started_at or now
        self._attempt_started(
            attempt=self.attempt + 1, started_at=started_at,
            deadline_at=self.deadline_at
            or started_at + timedelta(seconds=self.budget.timeout_seconds),
            model_config_id=self.model_config_id or model_config_id,
            lease_expires_at=now + timedelta(seconds=lease_seconds),
        )
        return True

    @event(AttemptStarted)
    def _attempt_started(self, attempt: int, started_at: datetime, deadline_at: datetime,
                         model_config_id: str, lease_expires_at: datetime) -> None:
        self.status = RunStatus.RUNNING
        self.attempt = attempt
        self.started_at = started_at
        self.deadline_at = deadline_at
        self.model_config_id = model_config_id
        self.lease_expires_at = lease_expires_at

    def renew_lease(self, attempt: int, now: datetime, lease_seconds: float) -> None:
        """The heartbeat of a live attempt: hold the run for another lease from ``now``.

        Fenced like every write, so a superseded attempt learns here that it lost the run.
        """
        self.check_attempt(attempt)
        self._lease_renewed(attempt=attempt,
                            lease_expires_at=now + timedelta(seconds=lease_seconds))

    @event(LeaseRenewed)
    def _lease_renewed(self, attempt: int, lease_expires_at: datetime) -> None:
        self.lease_expires_at = lease_expires_at

    def freeze_manifest(self, attempt: int, manifest: Mapping[str, Any], digest: str) -> bool:
        """Pin the evidence manifest once; the same manifest again is a no-op."""
        self.check_attempt(attempt)
        if self.manifest_digest is not None:
            if self.manifest_digest == digest:
                return False
            raise ManifestFrozenError(f"run {self.run_id} already froze its manifest",
                                      manifest_digest=self.manifest_digest)
        self._manifest_frozen(attempt=attempt, manifest=dict(manifest), manifest_digest=digest)
        return True

    @event(ManifestFrozen)
    def _manifest_frozen(self, attempt: int, manifest: dict[str, Any],
                         manifest_digest: str) -> None:
        self.manifest = EvidenceManifest.from_dict(manifest)
        self.manifest_digest = manifest_digest

    def count_model_call(self, attempt: int) -> None:
        """Count the call before making it, so an unconfirmed call still counts."""
        self.check_attempt(attempt)
        if self.model_calls + 1 > self.budget.max_model_calls:
            raise BudgetExceededError(f"run {self.run_id} has no model calls left",
                                      model_calls=self.model_calls)
        self._usage_recorded(attempt=attempt, model_calls=self.model_calls + 1,
                             input_tokens=self.input_tokens, output_tokens=self.output_tokens,
                             reported=self.usage_reported)

    def record_usage(self, attempt: int, requests: int, input_tokens: int | None,
                     output_tokens: int | None) -> None:
        """Merge a provider report: extra provider requests count as extra model calls."""
        self.check_attempt(attempt)
        if requests < 0 or any(n is not None and n < 0 for n in (input_tokens, output_tokens)):
            raise InvalidRequestError("usage counts cannot be negative", field="usage")
        # Only the first call's report is taken as is: a call that never reported (it timed
        # out) makes every total unknown from then on.
        first = not self.usage_reported and self.model_calls <= 1
        self._usage_recorded(
            attempt=attempt, model_calls=self.model_calls + max(0, requests - 1),
            input_tokens=input_tokens if first else _add_known(self.input_tokens, input_tokens),
            output_tokens=output_tokens if first else _add_known(self.output_tokens,
                                                                 output_tokens),
            reported=True,
        )

    @event(UsageRecorded)
    def _usage_recorded(self, attempt: int, model_calls: int, input_tokens: int | None,
                        output_tokens: int | None, reported: bool) -> None:
        self.model_calls = model_calls
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.usage_reported = reported

    def requeue(self, attempt: int, code: str) -> None:
        """Give a transient failure its one more attempt; manifest, usage and pins are kept."""
        self.check_attempt(attempt)
        self._requeued(attempt=attempt, code=code)

    @event(Requeued)
    def _requeued(self, attempt: int, code: str) -> None:
        self.status = RunStatus.QUEUED
        self.lease_expires_at = None
        self.last_requeue_code = code

    # -- terminal ----------------------------------------------------------------------------

    def succeed(self, attempt: int, outcome: str, reason: str,
                candidate: Mapping[str, Any] | None, completed_at: datetime,
                reused: bool = False) -> None:
        self.check_attempt(attempt)
        if outcome not in OUTCOMES:
            raise InvalidRequestError(f"unknown outcome {outcome!r}", field="outcome")
        if (candidate is not None) != (outcome == RunOutcome.PROPOSED):
            raise InvalidRequestError("a candidate accompanies exactly the proposed outcome",
                                      field="candidate")
        self._succeeded(attempt=attempt, outcome=outcome, reason=reason,
                        candidate=None if candidate is None else dict(candidate),
                        reused=reused, completed_at=completed_at)

    @event(Succeeded)
    def _succeeded(self, attempt: int, outcome: str, reason: str,
                   candidate: dict[str, Any] | None, reused: bool,
                   completed_at: datetime) -> None:
        proposed = None if candidate is None else ProposedCandidate.from_dict(candidate)
        self.status = RunStatus.SUCCEEDED
        self.outcome = RunOutcome(outcome)
        self.reason = reason
        self.candidate = proposed
        self.reused = reused
        self.completed_at = completed_at
        self.lease_expires_at = None

    def fail(self, attempt: int, error: str, completed_at: datetime) -> None:
        """End the run with ``error`` and the fixed human reason for that code."""
        self.check_attempt(attempt)
        self._failed(attempt=attempt, error=error, completed_at=completed_at,
                     reason=failure_reason(error))

    @event(Failed)
    def _failed(self, attempt: int, error: str, completed_at: datetime,
                reason: str | None = None) -> None:
        self.status = RunStatus.FAILED
        self.error = error
        self.reason = reason or failure_reason(error)
        self.completed_at = completed_at
        self.lease_expires_at = None
