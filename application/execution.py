"""Executing Dream runs: claim an attempt, resolve pinned evidence, call the model outside every
transaction, validate, and commit the outcome and its Candidate together.

Per-run values (run, attempt, requester, deadline) travel as arguments in an ``Attempt``; nothing
about a run is kept on the executor, so one executor serves any number of concurrent runs.
Every write names its attempt: a worker whose attempt was superseded is refused by the run
(``attempt_conflict``) and by the store (the run's version moved), and stops silently. While the
model call is in flight a heartbeat renews the attempt's lease, so a call may outlast the lease;
the call is bounded by the model timeout and the run's deadline alone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType

from eventsourcing.domain import Aggregate

from application.dream_runs import DreamRuns
from application.generation import (
    GenerationFailedError,
    GenerationInput,
    GenerationOutputError,
    GenerationResult,
    Generator,
    GeneratorLookup,
    TransientGenerationError,
)
from application.ports import UNOBSERVED, Clock, ExecutionObserver
from application.retry import (
    RUN_WRITE_PAUSE_CAP_SECONDS,
    RUN_WRITE_TRIES,
    retry_conflicts,
)
from application.run_queues import RunQueues
from application.store import OUTAGE_ERRORS, EventStore
from domain.candidate import Candidate, CandidateStatus
from domain.dream_plan import DreamPlan, parse_plan
from domain.dream_request import DreamOperation
from domain.dream_run import DreamRun, RunOutcome, RunStatus
from domain.errors import (
    AttemptConflictError,
    BudgetExceededError,
    DomainError,
    InvalidGenerationOutputError,
    RunTerminalError,
    ScopeBusyError,
    WriteConflictError,
)
from domain.evidence.resolution import Resolution
from domain.evidence.selection import NeedsEvidence, select_evidence
from domain.ids import dream_candidate_id, evidence_id
from domain.proposal_record import ProposalRecord, proposal_fingerprint
from domain.refs import ArtifactFamily, ArtifactRef, Lineage
from domain.run_lifecycle import QueuedRun

log = logging.getLogger("dream.execution")

DEFAULT_LEASE_SECONDS = 60.0
# A run records "evidence_unavailable" when evidence it was admitted with has since gone away
# (docs/contract.md#run-states), and "invalid_generation_output" when the plan cannot form a valid
# Candidate.
_RECORDED_AS = {"reference_not_found": "evidence_unavailable",
                "invalid_memory_citation": "evidence_unavailable",
                "invalid_candidate": "invalid_generation_output"}
# A live attempt renews its lease this many times per lease, so one lost beat costs nothing.
HEARTBEATS_PER_LEASE = 3
# A claim that lost a race looks again a few times; past that another worker has the run.
CLAIM_TRIES = 3


@dataclass(frozen=True)
class Attempt:
    """One claimed attempt of one run: everything an execution needs, passed along."""

    run: DreamRun
    number: int

    @property
    def deadline(self) -> datetime:
        assert self.run.deadline_at is not None
        return self.run.deadline_at


class Heartbeat:
    """Calls ``renew`` every ``interval`` seconds until stopped, or until it answers ``False``:
    then the attempt is ``lost`` (a newer attempt owns the run) and must not record anything."""

    def __init__(self, renew: Callable[[], bool], interval: float, name: str) -> None:
        self._renew = renew
        self._interval = interval
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=name, daemon=True)
        self.lost = False

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._stopped.set()
        self._thread.join()  # no renewal may land after the attempt moves on

    def _beat(self) -> None:
        while not self._stopped.wait(self._interval):
            try:
                if not self._renew():
                    self.lost = True
                    return
            except Exception as error:
                # The store is unreachable: try again next beat; if the lease runs out
                # meanwhile, fencing keeps a late outcome of this attempt out.
                log.warning("a lease renewal failed (%s); retrying at the next heartbeat",
                            type(error).__name__)


class DreamExecutor:
    """Claims and executes attempts of Dream runs; holds no per-run state."""

    def __init__(self, runs: DreamRuns, queues: RunQueues, generators: GeneratorLookup,
                 lease_seconds: float = DEFAULT_LEASE_SECONDS,
                 before_commit: Callable[[Attempt], None] | None = None,
                 heartbeat_seconds: float | None = None,
                 observer: ExecutionObserver = UNOBSERVED) -> None:
        self.runs = runs
        self.queues = queues  # a run's claim, renewal and finish move it in its scope's queue
        self.observer = observer
        self.store: EventStore = runs.store
        self.clock: Clock = runs.clock
        self.generators = generators
        self.lease_seconds = lease_seconds
        self.heartbeat_seconds = (lease_seconds / HEARTBEATS_PER_LEASE
                                  if heartbeat_seconds is None else heartbeat_seconds)
        # A test seam: an injected failure here must leave neither a Candidate nor a result.
        self.before_commit = before_commit

    # -- claiming ------------------------------------------------------------------------------

    def claim(self, scope_id: str, run_id: str) -> Attempt | None:
        """Start the next attempt, or ``None`` when the run is not ours to take now."""
        try:
            return retry_conflicts(lambda: self._try_claim(scope_id, run_id), CLAIM_TRIES,
                                   RUN_WRITE_PAUSE_CAP_SECONDS)
        except (WriteConflictError, ScopeBusyError, AttemptConflictError):
            return None  # another claim or admission keeps moving the queue, or it is taken

    def _try_claim(self, scope_id: str, run_id: str) -> Attempt | None:
        run = self.runs.existing_run(scope_id, run_id)
        now = self.clock()
        if run is None or run.terminal or not run.claimable(now):
            return None
        with self.queues.changing(run) as pair:
            started = pair.claim(now, self.generators.current.config_id, self.lease_seconds)
        if started and run.attempt == 1:
            self.observer.waited((now - run.accepted_at).total_seconds(), run.operation,
                                 run.trigger)
        return Attempt(run, run.attempt) if started else None

    # -- executing -----------------------------------------------------------------------------

    def execute(self, attempt: Attempt) -> DreamRun | None:
        """Run one claimed attempt to a terminal state or a requeue, and read the run back;
        ``None`` if superseded."""
        if not self.run_attempt(attempt):
            return None
        return self.runs.existing_run(attempt.run.scope_id, attempt.run.run_id)

    def run_attempt(self, attempt: Attempt) -> bool:
        """``execute`` without reading the run back (a worker does not need it); ``False`` if
        superseded."""
        try:
            self._attempt(attempt)
        except (AttemptConflictError, RunTerminalError, WriteConflictError):
            # Worth an operator's eye: a worker stalled past its lease and its work was redone.
            log.warning("attempt %s of run %s was superseded; its outcome is discarded",
                        attempt.number, attempt.run.run_id)
            return False
        except TransientGenerationError as error:
            self._retry_or_fail(attempt, "generation_failed", str(error))
        except (GenerationOutputError, InvalidGenerationOutputError) as error:
            self._fail(attempt, "invalid_generation_output", str(error))
        except GenerationFailedError as error:
            self._fail(attempt, "generation_failed", str(error))
        except DomainError as error:
            self._fail(attempt, _RECORDED_AS.get(error.code, error.code), error.message)
        except OUTAGE_ERRORS:
            # Not the run's failure: the attempt stays as stored (running, leased) and the
            # caller resumes it once the store answers again (see ``resume``).
            raise
        except Exception as error:
            log.exception("run %s failed unexpectedly", attempt.run.run_id)
            self._fail(attempt, "generation_failed", type(error).__name__)
        return True

    def _attempt(self, attempt: Attempt) -> None:
        run, number = attempt.run, attempt.number
        generator = self._pinned_generator(run)
        # A first attempt's manifest is committed with what follows it, checked against the
        # evidence read: one write fewer per run.
        with self._phase("evidence", run):
            resolution, read = self.runs.freeze_run_evidence(run, number)
        if self._reuse_earlier_proposal(attempt, read or []):
            return
        run.count_model_call(number)  # counted before the call: an unconfirmed call counts
        self.store.commit(run, read=read or [])
        with self._heartbeat(attempt) as heartbeat, self._phase("model_call", run):
            result = generator.generate(self._input(attempt, resolution))
        if heartbeat.lost:
            raise AttemptConflictError("a newer attempt took the run over during the model call",
                                       attempt=number)
        attempt = self._still_current(attempt)  # the heartbeat moved the stored run on
        self._record_usage(attempt, result)
        plan = parse_plan(result.plan, operation=run.operation,
                          has_target=run.request.target is not None)
        # A conflict here usually means the scope's queue moved (another admission or run):
        # look again whether the attempt is still ours, and finish on the fresh run.
        with self._phase("commit", run):
            self._retrying_on_fresh_run(attempt,
                                        lambda fresh: self._finish(fresh, plan, resolution))

    def _phase(self, name: str, run: DreamRun) -> AbstractContextManager[None]:
        return self.observer.phase(name, run.operation, run.trigger)

    def _ended(self, run: DreamRun, status: str, outcome: str) -> None:
        self.observer.ended(run.operation, run.trigger, status, outcome)

    def _retrying_on_fresh_run(self, attempt: Attempt,
                               write: Callable[[Attempt], None]) -> None:
        first = True

        def once() -> None:
            nonlocal first, attempt
            if not first:
                attempt = self._still_current(attempt)
            first = False
            write(attempt)

        retry_conflicts(once, RUN_WRITE_TRIES, RUN_WRITE_PAUSE_CAP_SECONDS)

    def _still_current(self, attempt: Attempt) -> Attempt:
        """A fresh copy of this attempt, or ``attempt_conflict`` when it was superseded."""
        run = self._current(attempt)
        if run is None:
            raise AttemptConflictError("the attempt was superseded while finishing",
                                       attempt=attempt.number)
        return Attempt(run, attempt.number)

    def _heartbeat(self, attempt: Attempt) -> Heartbeat:
        return Heartbeat(lambda: self._renew_lease(attempt), self.heartbeat_seconds,
                         f"dream-heartbeat-{attempt.run.run_id}")

    def _renew_lease(self, attempt: Attempt) -> bool:
        """One heartbeat: hold the run and its single-flight slot for another lease.

        ``False`` once the run refuses (a newer attempt owns it, or it ended): the lost
        attempt stops renewing and never records its outcome.
        """
        def renew() -> bool:
            run = self.runs.existing_run(attempt.run.scope_id, attempt.run.run_id)
            if run is None:
                return False
            try:
                with self.queues.changing(run) as pair:
                    pair.renew(attempt.number, self.clock(), self.lease_seconds)
            except (AttemptConflictError, RunTerminalError):
                log.warning("run %s: attempt %s lost its lease to attempt %s; its answer will "
                            "be discarded", run.run_id, attempt.number, run.attempt)
                return False
            return True

        try:
            return retry_conflicts(renew, RUN_WRITE_TRIES, RUN_WRITE_PAUSE_CAP_SECONDS)
        except WriteConflictError:
            return True  # still ours as far as we know; the next beat tries again

    def _pinned_generator(self, run: DreamRun) -> Generator:
        """A run keeps the model configuration it started on while it is registered."""
        assert run.model_config_id is not None
        return self.generators.get(run.model_config_id)

    def _input(self, attempt: Attempt, resolution: Resolution) -> GenerationInput:
        run = attempt.run
        remaining = (attempt.deadline - self.clock()).total_seconds()
        if remaining <= 0:
            raise BudgetExceededError("the run's deadline passed before the model call")
        # The heartbeat holds the lease, so only the deadline bounds the call here (the
        # generator applies its own configured timeout below this).
        target = run.request.target
        return GenerationInput(
            run_id=run.run_id, scope_id=run.scope_id, operation=run.operation,
            target_evidence_id=None if target is None else evidence_id(target),
            projection=resolution.projection,
            max_output_tokens=run.budget.max_output_tokens, timeout_seconds=remaining)

    def _record_usage(self, attempt: Attempt, result: GenerationResult) -> None:
        run, usage = attempt.run, result.usage
        run.record_usage(attempt.number, usage.requests, usage.input_tokens, usage.output_tokens)
        self.store.commit(run)
        over_tokens = (usage.output_tokens or 0) > run.budget.max_output_tokens
        if usage.requests > 1 or over_tokens:
            raise BudgetExceededError("the provider exceeded the run's budget",
                                      requests=usage.requests,
                                      output_tokens=usage.output_tokens)

    # -- outcomes: one short function each -----------------------------------------------------

    def _finish(self, attempt: Attempt, plan: DreamPlan, resolution: Resolution) -> None:
        if plan.outcome in (RunOutcome.NO_CHANGE, RunOutcome.NEEDS_EVIDENCE):
            self._conclude(attempt, plan.outcome, plan.reason)
            return
        family = (ArtifactFamily.SKILL if attempt.run.operation == DreamOperation.DERIVE_SKILL
                  else ArtifactFamily.EXPERIENCE)
        target = attempt.run.request.target
        selection = select_evidence(resolution.manifest, plan.evidence_ids, family=family,
                                    target=target)
        if isinstance(selection, NeedsEvidence):
            self._conclude(attempt, RunOutcome.NEEDS_EVIDENCE, selection.reason)
            return
        self._propose(attempt, plan, family, target, selection)

    def _reuse_earlier_proposal(self, attempt: Attempt, evidence: list[Aggregate]) -> bool:
        """Answer from this principal's earlier Candidate over the same evidence, if unedited
        (``evidence``: what a manifest frozen just now was read from)."""
        run = attempt.run
        _, record = self._proposal_record(run)
        if record is None:  # never proposed over these inputs
            return False
        candidate: Candidate = self.store.find(
            Candidate.create_id(run.scope_id, record.candidate_id), Candidate)
        if candidate.candidate_version != 1 or candidate.status == CandidateStatus.APPROVED:
            return False  # edited or approved: a fresh proposal is worth a model call
        with self.queues.changing(run, read=[record, candidate, *evidence]) as pair:
            if candidate.status == CandidateStatus.PENDING:
                pair.propose(attempt.number, candidate.current.reason, candidate.candidate_id,
                             self.clock(), reused=True)
            else:
                pair.conclude(
                    attempt.number, RunOutcome.NO_CHANGE,
                    "An unchanged proposal over the same evidence was already rejected.",
                    self.clock(), reused=True)
        self._ended(run, RunStatus.SUCCEEDED, run.outcome or RunOutcome.NO_CHANGE)
        return True

    def _proposal_record(self, run: DreamRun) -> tuple[str, ProposalRecord | None]:
        """This run's fingerprint, and the record its principal left for it, if any."""
        assert run.manifest is not None
        target = run.request.target
        fingerprint = proposal_fingerprint(run.operation,
                                           None if target is None else target.to_dict(),
                                           run.manifest.to_dict(), run.prompt_version)
        record_id = ProposalRecord.create_id(run.scope_id, run.principal_key, fingerprint)
        record: ProposalRecord | None = self.store.find(record_id, ProposalRecord)
        return fingerprint, record

    def _propose(self, attempt: Attempt, plan: DreamPlan, family: str,
                 target: ArtifactRef | None, lineage: Lineage) -> None:
        """The run's success and its Candidate are one save, checked against everything read."""
        run = attempt.run
        _, reader = self.runs.pinned_evidence(run)  # re-validate with current rights and state
        assert plan.proposal is not None
        candidate = Candidate.propose(run.scope_id, dream_candidate_id(run.run_id), family,
                                      target, plan.proposal, lineage, plan.reason,
                                      proposer=run.requester, run_id=run.run_id)
        fingerprint, record = self._proposal_record(run)
        if record is None:
            record = ProposalRecord(scope_id=run.scope_id, principal_key=run.principal_key,
                                    fingerprint=fingerprint, candidate_id=candidate.candidate_id)
        record.replace(candidate.candidate_id)
        if self.before_commit is not None:
            self.before_commit(attempt)
        with self.queues.changing(run, also=(candidate, record), read=reader.read_set) as pair:
            pair.propose(attempt.number, plan.reason, candidate.candidate_id, self.clock())
        self._ended(run, RunStatus.SUCCEEDED, RunOutcome.PROPOSED)

    def _conclude(self, attempt: Attempt, outcome: str, reason: str) -> None:
        with self.queues.changing(attempt.run) as pair:  # a conflict is retried by the caller
            pair.conclude(attempt.number, outcome, reason, self.clock())
        self._ended(attempt.run, RunStatus.SUCCEEDED, outcome)

    def _fail(self, attempt: Attempt, code: str, why: str) -> None:
        log.info("run %s failed %s: %s", attempt.run.run_id, code, why)
        now = self.clock()
        self._write_on_stored_run(attempt, lambda pair: pair.fail(attempt.number, code, now))
        self._ended(attempt.run, RunStatus.FAILED, code)

    def _retry_or_fail(self, attempt: Attempt, code: str, why: str) -> None:
        """A transient failure gets one more attempt if calls and time are left."""
        stored = self._current(attempt)
        if stored is None:
            return
        if (stored.attempt < stored.budget.max_model_calls
                and self.clock() < attempt.deadline):
            self._write_on_stored_run(attempt, lambda pair: pair.requeue(attempt.number, code))
            self._ended(attempt.run, RunStatus.QUEUED, code)
            return
        self._fail(attempt, code, why)

    def _write_on_stored_run(self, attempt: Attempt,
                             change: Callable[[QueuedRun], None]) -> None:
        """Apply ``change`` to the stored run and its queue, retrying when only the queue
        moved; stop quietly once a newer attempt owns the run."""
        def write() -> None:
            run = self._current(attempt)
            if run is None:
                log.info("a newer attempt owns run %s; this one stops", attempt.run.run_id)
                return
            with self.queues.changing(run) as pair:
                change(pair)

        try:
            retry_conflicts(write, RUN_WRITE_TRIES, RUN_WRITE_PAUSE_CAP_SECONDS)
        except WriteConflictError:
            log.warning("run %s: gave up writing after %s conflicts; its lease will expire",
                        attempt.run.run_id, RUN_WRITE_TRIES)

    def resume(self, attempt: Attempt) -> Attempt | None:
        """This attempt afresh from the store, to execute again after a store outage cut it
        short; ``None`` once it is no longer current (it ended, or a newer attempt took over)."""
        run = self._current(attempt)
        return None if run is None else Attempt(run, attempt.number)

    def _current(self, attempt: Attempt) -> DreamRun | None:
        """The run as stored, if this attempt is still the current one."""
        run = self.runs.existing_run(attempt.run.scope_id, attempt.run.run_id)
        if (run is None or run.terminal or run.attempt != attempt.number
                or run.status != RunStatus.RUNNING):
            return None
        return run
