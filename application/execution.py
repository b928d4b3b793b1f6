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
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType

from application.dreaming import Dreaming
from application.generation import (
    GenerationFailedError,
    GenerationInput,
    GenerationOutputError,
    GenerationResult,
    Generator,
    GeneratorLookup,
    TransientGenerationError,
)
from application.write_model import OUTAGE_ERRORS
from domain.candidate import APPROVED, PENDING, Candidate
from domain.dream_plan import DreamPlan, parse_plan
from domain.dream_queue import DreamQueue
from domain.dream_request import DERIVE_SKILL
from domain.dream_run import NEEDS_EVIDENCE, NO_CHANGE, PROPOSED, DreamRun
from domain.errors import (
    AttemptConflictError,
    BudgetExceededError,
    DomainError,
    InvalidGenerationOutputError,
    RunTerminalError,
    ScopeBusyError,
    WriteConflictError,
)
from domain.evidence import NeedsEvidence, Resolution, evidence_id, select_evidence
from domain.proposal_record import ProposalRecord, proposal_fingerprint
from domain.refs import EXPERIENCE, SKILL, ArtifactRef, Lineage

log = logging.getLogger("dream.execution")

DEFAULT_LEASE_SECONDS = 60.0
# A run records "evidence_unavailable" when evidence it was admitted with has since gone away
# (anchor §6.5), and "invalid_generation_output" when the plan cannot form a valid Candidate.
_RECORDED_AS = {"reference_not_found": "evidence_unavailable",
                "invalid_memory_citation": "evidence_unavailable",
                "invalid_candidate": "invalid_generation_output"}
# A live attempt renews its lease this many times per lease, so one lost beat costs nothing.
HEARTBEATS_PER_LEASE = 3
# How often a finishing write is retried when only the scope's queue moved under it.
FINISH_TRIES = 40
CLAIM_TRIES = 3


def _pause_after_conflict() -> None:
    """A short random pause, so writers that collided on a busy scope queue spread out."""
    time.sleep(random.uniform(0, 0.01))


@dataclass(frozen=True)
class Attempt:
    """One claimed attempt of one run: everything an execution needs, passed along."""

    run: DreamRun
    number: int

    @property
    def deadline(self) -> datetime:
        assert self.run.deadline_at is not None
        return self.run.deadline_at


class CandidateId:
    """Dream Candidates have a deterministic id, so a run has at most one."""

    @staticmethod
    def of(run_id: str) -> str:
        return f"cand_dream_{run_id}"


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
    def __init__(self, app: Dreaming, generators: GeneratorLookup,
                 lease_seconds: float = DEFAULT_LEASE_SECONDS,
                 before_commit: Callable[[Attempt], None] | None = None,
                 heartbeat_seconds: float | None = None) -> None:
        self.app = app
        self.generators = generators
        self.lease_seconds = lease_seconds
        self.heartbeat_seconds = (lease_seconds / HEARTBEATS_PER_LEASE
                                  if heartbeat_seconds is None else heartbeat_seconds)
        # A test seam: an injected failure here must leave neither a Candidate nor a result.
        self.before_commit = before_commit

    # -- claiming ------------------------------------------------------------------------------

    def claim(self, scope_id: str, run_id: str) -> Attempt | None:
        """Start the next attempt, or ``None`` when the run is not ours to take now."""
        for _ in range(CLAIM_TRIES):
            try:
                return self._try_claim(scope_id, run_id)
            except WriteConflictError:
                continue  # another claim or admission in the scope moved the queue: look again
            except (ScopeBusyError, AttemptConflictError):
                return None
        return None

    def _try_claim(self, scope_id: str, run_id: str) -> Attempt | None:
        app = self.app
        run = app.existing_run(scope_id, run_id)
        now = app.clock()
        if run is None or run.terminal or not run.claimable(now):
            return None
        queue = app.queue_of(scope_id)
        started = run.start_attempt(now, self.generators.current.config_id, self.lease_seconds)
        if started:
            assert run.lease_expires_at is not None
            queue.start(run_id, now, run.lease_expires_at)
        else:
            queue.finish(run_id)  # out of attempts or time: failed budget_exceeded
        app.commit(run, queue)
        return Attempt(run, run.attempt) if started else None

    # -- executing -----------------------------------------------------------------------------

    def execute(self, attempt: Attempt) -> DreamRun | None:
        """Run one claimed attempt to a terminal state or a requeue; ``None`` if superseded."""
        try:
            self._attempt(attempt)
        except (AttemptConflictError, RunTerminalError, WriteConflictError):
            # Worth an operator's eye: a worker stalled past its lease and its work was redone.
            log.warning("attempt %s of run %s was superseded; its outcome is discarded",
                        attempt.number, attempt.run.run_id)
            return None
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
        return self.app.existing_run(attempt.run.scope_id, attempt.run.run_id)

    def _attempt(self, attempt: Attempt) -> None:
        run, number = attempt.run, attempt.number
        generator = self._pinned_generator(run)
        resolution = self.app.resolve_run_evidence(run, number)
        if self._reuse_earlier_proposal(attempt):
            return
        run.count_model_call(number)  # counted before the call: an unconfirmed call counts
        self.app.commit(run)
        with self._heartbeat(attempt) as heartbeat:
            result = generator.generate(self._input(attempt, resolution))
        if heartbeat.lost:
            raise AttemptConflictError("a newer attempt took the run over during the model call",
                                       attempt=number)
        attempt = self._still_current(attempt)  # the heartbeat moved the stored run on
        self._record_usage(attempt, result)
        plan = parse_plan(result.plan, operation=run.operation,
                          has_target=run.request.get("target") is not None)
        for _ in range(FINISH_TRIES - 1):
            try:
                self._finish(attempt, plan, resolution)
                return
            except WriteConflictError:
                # Usually the scope's queue moved (another admission or run): still ours?
                _pause_after_conflict()
                attempt = self._still_current(attempt)
        self._finish(attempt, plan, resolution)

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
        for _ in range(FINISH_TRIES):
            run = self.app.existing_run(attempt.run.scope_id, attempt.run.run_id)
            if run is None:
                return False
            try:
                run.renew_lease(attempt.number, self.app.clock(), self.lease_seconds)
            except (AttemptConflictError, RunTerminalError):
                log.warning("run %s: attempt %s lost its lease to attempt %s; its answer will "
                            "be discarded", run.run_id, attempt.number, run.attempt)
                return False
            assert run.lease_expires_at is not None
            queue = self.app.queue_of(run.scope_id)
            queue.renew(run.run_id, run.lease_expires_at)
            try:
                self.app.commit(run, queue)
                return True
            except WriteConflictError:
                _pause_after_conflict()  # usually an admission moved the queue: look again
        return True  # still ours as far as we know; the next beat tries again

    def _pinned_generator(self, run: DreamRun) -> Generator:
        """A run keeps the model configuration it started on while it is registered."""
        assert run.model_config_id is not None
        return self.generators.get(run.model_config_id)

    def _input(self, attempt: Attempt, resolution: Resolution) -> GenerationInput:
        run = attempt.run
        remaining = (attempt.deadline - self.app.clock()).total_seconds()
        if remaining <= 0:
            raise BudgetExceededError("the run's deadline passed before the model call")
        # The heartbeat holds the lease, so only the deadline bounds the call here (the
        # generator applies its own configured timeout below this).
        timeout = remaining
        target = run.request.get("target")
        return GenerationInput(
            run_id=run.run_id, scope_id=run.scope_id, operation=run.operation,
            target_evidence_id=None if target is None
            else evidence_id(ArtifactRef.from_dict(target)),
            projection=resolution.projection,
            max_output_tokens=run.budget["max_output_tokens"], timeout_seconds=timeout)

    def _record_usage(self, attempt: Attempt, result: GenerationResult) -> None:
        run, usage = attempt.run, result.usage
        run.record_usage(attempt.number, usage.requests, usage.input_tokens, usage.output_tokens)
        self.app.commit(run)
        over_tokens = (usage.output_tokens or 0) > run.budget["max_output_tokens"]
        if usage.requests > 1 or over_tokens:
            raise BudgetExceededError("the provider exceeded the run's budget",
                                      requests=usage.requests,
                                      output_tokens=usage.output_tokens)

    # -- outcomes ------------------------------------------------------------------------------

    def _finish(self, attempt: Attempt, plan: DreamPlan, resolution: Resolution) -> None:
        if plan.outcome in (NO_CHANGE, NEEDS_EVIDENCE):
            self._succeed(attempt, plan.outcome, plan.reason)
            return
        family = SKILL if attempt.run.operation == DERIVE_SKILL else EXPERIENCE
        target_dict = attempt.run.request.get("target")
        target = None if target_dict is None else ArtifactRef.from_dict(target_dict)
        selection = select_evidence(resolution.manifest, plan.evidence_ids, family=family,
                                    target=target)
        if isinstance(selection, NeedsEvidence):
            self._succeed(attempt, NEEDS_EVIDENCE, selection.reason)
            return
        self._propose(attempt, plan, family, target, selection)

    def _reuse_earlier_proposal(self, attempt: Attempt) -> bool:
        """Answer from this principal's earlier Candidate over the same evidence, if unedited."""
        run, app = attempt.run, self.app
        _, record = self._proposal_record(run)
        if record is None:  # never proposed over these inputs
            return False
        candidate: Candidate = app.repository.get(
            Candidate.create_id(run.scope_id, record.candidate_id))
        if candidate.candidate_version != 1 or candidate.status == APPROVED:
            return False  # edited or approved: a fresh proposal is worth a model call
        if candidate.status == PENDING:
            run.succeed(attempt.number, PROPOSED, candidate.current.reason,
                        {"candidate_id": candidate.candidate_id, "version": 1}, app.clock(),
                        reused=True)
        else:
            run.succeed(attempt.number, NO_CHANGE,
                        "An unchanged proposal over the same evidence was already rejected.",
                        None, app.clock(), reused=True)
        queue = app.queue_of(run.scope_id)
        queue.finish(run.run_id)
        app.commit(run, queue, read=[record, candidate])
        return True

    def _proposal_record(self, run: DreamRun) -> tuple[str, ProposalRecord | None]:
        """This run's fingerprint, and the record its principal left for it, if any."""
        assert run.manifest is not None
        fingerprint = proposal_fingerprint(run.operation, run.request.get("target"),
                                           run.manifest, run.prompt_version)
        record_id = ProposalRecord.create_id(run.scope_id, run.principal_key, fingerprint)
        record: ProposalRecord | None = self.app.find(record_id)
        return fingerprint, record

    def _propose(self, attempt: Attempt, plan: DreamPlan, family: str,
                 target: ArtifactRef | None, lineage: Lineage) -> None:
        """The run's success and its Candidate are one save, checked against everything read."""
        run, app = attempt.run, self.app
        _, reader = app.pinned_evidence(run)  # re-validate with current rights and state
        assert plan.proposal is not None
        candidate = Candidate.propose(run.scope_id, CandidateId.of(run.run_id), family, target,
                                      plan.proposal, lineage, plan.reason,
                                      proposer=run.requester, run_id=run.run_id)
        run.succeed(attempt.number, PROPOSED, plan.reason,
                    {"candidate_id": candidate.candidate_id, "version": 1}, app.clock())
        queue = app.queue_of(run.scope_id)
        queue.finish(run.run_id)
        fingerprint, record = self._proposal_record(run)
        if record is None:
            record = ProposalRecord(scope_id=run.scope_id, principal_key=run.principal_key,
                                    fingerprint=fingerprint, candidate_id=candidate.candidate_id)
        record.replace(candidate.candidate_id)
        if self.before_commit is not None:
            self.before_commit(attempt)
        app.commit(run, candidate, queue, record, read=reader.read_set)

    def _succeed(self, attempt: Attempt, outcome: str, reason: str) -> None:
        number, now = attempt.number, self.app.clock()
        attempt.run.succeed(number, outcome, reason, None, now)
        queue = self.app.queue_of(attempt.run.scope_id)
        queue.finish(attempt.run.run_id)
        self.app.commit(attempt.run, queue)  # a conflict here is retried by the caller

    def _fail(self, attempt: Attempt, code: str, why: str) -> None:
        log.info("run %s failed %s: %s", attempt.run.run_id, code, why)
        now = self.app.clock()

        def fail(run: DreamRun, queue: DreamQueue) -> None:
            run.fail(attempt.number, code, now)
            queue.finish(run.run_id)

        self._write_from_stored_run(attempt, fail)

    def _retry_or_fail(self, attempt: Attempt, code: str, why: str) -> None:
        """A transient failure gets one more attempt if calls and time are left."""
        stored = self._current(attempt)
        if stored is None:
            return
        now = self.app.clock()
        if stored.attempt < stored.budget["max_model_calls"] and now < attempt.deadline:
            def requeue(run: DreamRun, queue: DreamQueue) -> None:
                run.requeue(attempt.number, code)
                queue.requeue(run.run_id)

            self._write_from_stored_run(attempt, requeue)
            return
        self._fail(attempt, code, why)

    def _write_from_stored_run(self, attempt: Attempt,
                               change: Callable[[DreamRun, DreamQueue], None]) -> None:
        """Apply ``change`` to the stored run and its queue, retrying when only the queue
        moved; stop quietly once a newer attempt owns the run."""
        for _ in range(FINISH_TRIES):
            run = self._current(attempt)
            if run is None:
                log.info("a newer attempt owns run %s; this one stops", attempt.run.run_id)
                return
            queue = self.app.queue_of(run.scope_id)
            change(run, queue)
            try:
                self.app.commit(run, queue)
                return
            except WriteConflictError:
                _pause_after_conflict()
        log.warning("run %s: gave up writing after %s conflicts; its lease will expire",
                    attempt.run.run_id, FINISH_TRIES)

    def resume(self, attempt: Attempt) -> Attempt | None:
        """This attempt afresh from the store, to execute again after a store outage cut it
        short; ``None`` once it is no longer current (it ended, or a newer attempt took over)."""
        run = self._current(attempt)
        return None if run is None else Attempt(run, attempt.number)

    def _current(self, attempt: Attempt) -> DreamRun | None:
        """The run as stored, if this attempt is still the current one."""
        run = self.app.existing_run(attempt.run.scope_id, attempt.run.run_id)
        if run is None or run.terminal or run.attempt != attempt.number or run.status != "running":
            return None
        return run
