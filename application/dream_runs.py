"""Dream admission and run reads.

Admission follows docs/contract.md#admission: scope read, then idempotent replay (before every other
check), contribute, capability, target head, evidence (with projection limits), capacity. The
run and the scope's queue are committed together, with every aggregate the evidence check
read in the read set, so admission never accepts a run whose evidence moved meanwhile.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from uuid import UUID

from eventsourcing.domain import Aggregate

from application.access import Acting, ScopeGate
from application.credentials import Who
from application.evidence_reader import StoreEvidenceReader, addresses
from application.ports import Clock, TraceContext, no_trace_context
from application.read_hints import ReadHints
from application.retry import retry_on_write_conflict
from application.run_queues import Admitting, RunQueues
from application.store import Written
from domain.access import Action
from domain.budget import Budget
from domain.dream_queue import DreamQueue
from domain.dream_request import DreamOperation, DreamRequest
from domain.dream_run import DreamRun, RunTrigger, principal_key
from domain.errors import (
    AccessRevokedError,
    CapabilityUnavailableError,
    DreamNotFoundError,
    ForbiddenError,
    IdempotencyConflictError,
    ScopeNotFoundError,
)
from domain.evidence.resolution import Resolution, resolve
from domain.ids import EvidenceRef, dream_run_aggregate_id, dream_run_id
from domain.policy import LOCAL, Caller
from domain.principal import SERVICE_PREFIX, Principal
from domain.run_lifecycle import QueuedRun
from domain.scope import Scope

PROMPT_VERSION = "artifact-dreaming.dream.v1"
DEFAULT_MAX_PENDING = 32
# Who automatic runs act as and are proposed by: the service, for the scope. A run knows it is
# automatic by its trigger, never by this name (ADR-0015).
AUTOMATIC = Caller(f"{SERVICE_PREFIX}automatic", admin=True)


def max_pending(scope: Scope) -> int:
    """How many unfinished runs the scope's queue may count."""
    limit: int = scope.settings.get("dream_max_pending_per_scope", DEFAULT_MAX_PENDING)
    return limit


@dataclass(frozen=True)
class CheckedEvidence:
    """What checking a request's evidence found: the budget it was checked within, and the
    aggregates it read (the admission's commit fails if any of them moved meanwhile)."""

    budget: Budget
    read: list[Aggregate]


@dataclass(frozen=True)
class Admission:
    run: DreamRun
    replayed: bool


class DreamRuns:
    """Admitting Dream runs, reading them, and resolving a run's evidence for its worker."""

    def __init__(self, gate: ScopeGate, clock: Clock, queues: RunQueues,
                 dream_enabled: bool = True,
                 trace_context: TraceContext = no_trace_context) -> None:
        self.gate = gate
        self.trace_context = trace_context
        self.store = gate.store
        self.policy = gate.policy
        self.clock = clock
        self.dream_enabled = dream_enabled
        # Admissions to one scope all write its queue: they take the scope's turn.
        self.queues = queues
        self.read_hints = ReadHints()

    @retry_on_write_conflict
    def request_dream(self, who: Who, scope_id: str,
                      request: DreamRequest) -> Written[Admission]:
        # One round trip authenticates and reads the scope, the run this key names, and the
        # evidence: what the request names, and what its lineage named the time before.
        direct = addresses(scope_id, direct_references(request))
        run_key, existing, acting = self._run_named(who, scope_id, request,
                                                    self.with_hints(direct))
        if existing is not None:
            return self._replayed(existing, request)
        caller, scope = acting.caller, acting.scope
        self.policy.check(caller, scope, Action.CONTRIBUTE)
        evidence = self.check_evidence(caller, scope, request,
                                       self._reader(caller, scope, direct, acting.found))
        trace = self.trace_context()  # this caller's, read here: another thread may commit
        run, position = self.queues.admit(scope.scope_id, Admitting(
            run_key, evidence.read, caller,
            lambda queue: self.admit_checked(caller, scope, queue, request, evidence,
                                             trace_parent=trace)))
        assert isinstance(run, DreamRun)
        return Written(Admission(run, replayed=False), position)

    def replayed(self, who: Who, scope_id: str,
                 request: DreamRequest) -> Written[Admission] | None:
        """The run this request's idempotency key already names, replayed (None when there is
        none yet): the read-only start of :meth:`request_dream`, with its checks, for a caller
        that expects a replay."""
        _, existing, _ = self._run_named(who, scope_id, request, {})
        return None if existing is None else self._replayed(existing, request)

    def _replayed(self, existing: DreamRun, request: DreamRequest) -> Written[Admission]:
        return Written(Admission(self.replay(existing, request), replayed=True), None)

    def _run_named(self, who: Who, scope_id: str, request: DreamRequest,
                   also: Mapping[UUID, type[Aggregate]]
                   ) -> tuple[UUID, DreamRun | None, Acting]:
        """The run the request's key names: its aggregate id and the run (or None), with the
        caller acting in the scope and ``also`` read, in one round trip. The run's id derives
        from the principal, so a token this process has not read before is read first."""
        principal = who.principal
        if principal is None:
            who = self.gate.authenticate(who)
            principal = who.name
        run_key = dream_run_aggregate_id(scope_id, self.run_id_for(principal, scope_id, request))
        acting = self.gate.acting_in(who, scope_id, Action.READ, {**also, run_key: DreamRun})
        existing: DreamRun | None = acting.found.pop(run_key)
        return run_key, existing, acting

    @staticmethod
    def run_id_for(principal: str, scope_id: str, request: DreamRequest) -> str:
        return dream_run_id(scope_id, principal_key(principal), request.idempotency_key)

    def admit_into(self, caller: Caller, scope: Scope, queue: DreamQueue, request: DreamRequest,
                   trigger: RunTrigger = RunTrigger.REQUEST) -> tuple[DreamRun, list[Aggregate]]:
        """Check a new run's evidence and count it in ``queue``: the run, and what the check
        read (the caller commits run, queue and read set together)."""
        evidence = self.check_evidence(caller, scope, request)
        return self.admit_checked(caller, scope, queue, request, evidence, trigger), evidence.read

    def check_evidence(self, caller: Caller, scope: Scope, request: DreamRequest,
                       reader: StoreEvidenceReader | None = None) -> CheckedEvidence:
        """Resolve a new run's evidence as its requester, within the scope's budget (``reader``:
        one holding what was read for it with the scope, see :meth:`_reader`)."""
        if not self.dream_enabled:
            raise CapabilityUnavailableError("Dream runs are disabled in this deployment")
        if reader is None:
            reader = StoreEvidenceReader(self.store, self.policy, scope, caller)
            reader.read_ahead(direct_references(request))
        reader.check_target_head(request.target)
        budget = Budget.of(scope.settings)
        resolve(reader, sources=request.sources, artifacts=request.artifacts,
                memory_citations=request.memory_citations, budget=budget,
                include_memory_text=request.operation != DreamOperation.DERIVE_SKILL)
        self._learn(reader)
        return CheckedEvidence(budget, list(reader.read_set))

    def with_hints(self, direct: Mapping[UUID, type[Aggregate]]
                   ) -> dict[UUID, type[Aggregate]]:
        """The aggregates a request names, and those their lineage named last time (ADR-0049):
        what to read with the scope."""
        return {**self.read_hints.after(direct), **direct}

    def _reader(self, caller: Caller, scope: Scope, direct: Mapping[UUID, type[Aggregate]],
                found: Mapping[UUID, Aggregate | None]) -> StoreEvidenceReader:
        """A reader of what was read with the scope (:meth:`with_hints`): what the request
        names counts as read; what a hint fetched, only once the resolution asks for it."""
        read = {aggregate_id: found[aggregate_id] for aggregate_id in direct}
        hinted = {aggregate_id: aggregate for aggregate_id, aggregate in found.items()
                  if aggregate_id not in read}
        return StoreEvidenceReader(self.store, self.policy, scope, caller, read, hinted,
                                   named=direct)

    def _learn(self, reader: StoreEvidenceReader) -> None:
        if reader.named is not None:
            self.read_hints.learn(reader.named, reader.read_besides_named())

    def admit_checked(self, caller: Caller, scope: Scope, queue: DreamQueue,
                      request: DreamRequest, evidence: CheckedEvidence,
                      trigger: RunTrigger = RunTrigger.REQUEST,
                      trace_parent: str | None = None) -> DreamRun:
        """Count a run whose evidence was checked in ``queue`` (``capacity_exceeded`` when
        full); the commit's read set makes the check hold at the commit."""
        return QueuedRun.admit(
            queue, run_id=self.run_id_for(caller.name, scope.scope_id, request),
            requester=caller.name, request=request, budget=evidence.budget,
            prompt_version=PROMPT_VERSION, now=self.clock(), max_pending=max_pending(scope),
            trigger=trigger, trace_parent=trace_parent).run

    def get_dream(self, who: Who, scope_id: str, run_id: str) -> DreamRun:
        run_key = dream_run_aggregate_id(scope_id, run_id)
        run: DreamRun | None = self.gate.acting_in(who, scope_id, Action.READ,
                                                   {run_key: DreamRun}).found[run_key]
        if run is None:
            raise DreamNotFoundError(f"no run {run_id!r} in scope {scope_id!r}", run_id=run_id)
        return run

    def existing_run(self, scope_id: str, run_id: str) -> DreamRun | None:
        run: DreamRun | None = self.store.find(dream_run_aggregate_id(scope_id, run_id), DreamRun)
        return run

    def queue_of(self, scope_id: str) -> DreamQueue:
        """The scope's queue from the store (an admission takes it with the scope's turn)."""
        return self.queues.load(scope_id)

    # -- a run's evidence, for its worker ------------------------------------------------------

    def resolve_run_evidence(self, run: DreamRun, attempt: int) -> Resolution:
        """Resolve a running run's evidence with its requester's current rights, and commit
        the manifest the first resolution freezes (see ``freeze_run_evidence``)."""
        resolution, read = self.freeze_run_evidence(run, attempt)
        if read is not None:
            self.store.commit(run, read=read)
        return resolution

    def freeze_run_evidence(self, run: DreamRun, attempt: int
                            ) -> tuple[Resolution, list[Aggregate] | None]:
        """Resolve a running run's evidence with its requester's current rights.

        The first resolution freezes the manifest on the run (``ManifestFrozen``), not yet
        committed: the evidence read, which the commit must find unmoved, comes with it
        (``None``: nothing was frozen). Every later attempt must reproduce the manifest
        exactly, or fails ``evidence_unavailable``: a run never switches to the latest evidence.
        """
        run.check_attempt(attempt)
        resolution, reader = self.pinned_evidence(run)
        if run.manifest is not None:
            return resolution, None
        manifest = resolution.manifest
        run.freeze_manifest(attempt, manifest.to_dict(), manifest.digest)
        return resolution, reader.read_set

    def pinned_evidence(self, run: DreamRun) -> tuple[Resolution, StoreEvidenceReader]:
        """The run's evidence now, against its frozen manifest if it has one; and what was
        read. Background work acts as the requester, with the requester's current rights."""
        request = run.request
        direct = addresses(run.scope_id, direct_references(request))
        scope, found = self.gate.load_with(run.scope_id, self.with_hints(direct))  # one read
        requester = self.requester_of(run)
        try:
            self.policy.check(requester, scope, Action.CONTRIBUTE)
        except (ForbiddenError, ScopeNotFoundError) as refused:
            raise AccessRevokedError("the requester may no longer contribute here",
                                     principal=requester.name) from refused
        reader = self._reader(requester, scope, direct, found)
        pinned = run.manifest
        resolution = resolve(reader, sources=request.sources, artifacts=request.artifacts,
                             memory_citations=request.memory_citations, budget=run.budget,
                             include_memory_text=request.operation != DreamOperation.DERIVE_SKILL,
                             pinned=pinned)
        reader.check_target_head(request.target)
        self._learn(reader)
        return resolution, reader

    def requester_of(self, run: DreamRun) -> Caller:
        """Background work acts as the requester, never as a service identity."""
        if run.trigger == RunTrigger.AUTOMATIC:
            return AUTOMATIC
        if not self.policy.enforced:
            return LOCAL
        principal: Principal | None = self.store.find(Principal.create_id(run.requester), Principal)
        if principal is None:
            raise AccessRevokedError("the requester no longer exists", principal=run.requester)
        return Caller(principal.name, principal.admin)

    @staticmethod
    def replay(run: DreamRun, request: DreamRequest) -> DreamRun:
        if run.request_digest != request.digest:
            raise IdempotencyConflictError(
                "this idempotency key was used for a different request", run_id=run.run_id,
                request_digest=run.request_digest)
        return run


def direct_references(request: DreamRequest) -> list[EvidenceRef | None]:
    """What an admission reads first: its target, then every reference it names."""
    return [request.target, *request.artifacts, *request.memory_citations, *request.sources]
