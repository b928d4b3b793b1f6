"""Dream admission and run reads.

Admission follows the anchor's order: scope read, then idempotent replay (before every other
check), contribute, capability, target head, evidence (with projection limits), capacity. The
run and the scope's queue are committed together, with every aggregate the evidence check
read in the read set, so admission never accepts a run whose evidence moved meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass

from application.access import LOCAL_CALLER, Caller, acting_as
from application.evidence_reader import StoreEvidenceReader
from application.records import Records
from application.write_model import Written, retry_on_write_conflict
from domain.access import CONTRIBUTE, READ
from domain.budget import effective_budget
from domain.dream_queue import DreamQueue
from domain.dream_request import DERIVE_SKILL, DreamRequest
from domain.dream_run import DreamRun, principal_key
from domain.errors import (
    AccessRevokedError,
    ArtifactConflictError,
    CapabilityUnavailableError,
    DreamNotFoundError,
    ForbiddenError,
    IdempotencyConflictError,
    PrincipalNotFoundError,
    ScopeNotFoundError,
)
from domain.evidence import EvidenceManifest, Resolution, resolve
from domain.identity import aggregate_id, dream_run_aggregate_id
from domain.refs import ArtifactRef

PROMPT_VERSION = "artifact-dreaming.dream.v1"
DEFAULT_MAX_PENDING = 32


@dataclass(frozen=True)
class Admission:
    run: DreamRun
    replayed: bool


def dream_run_id(scope_id: str, key_of_principal: str, idempotency_key: str) -> str:
    """Deterministic, so the same (scope, principal, key) always names the same run."""
    return "dr_" + aggregate_id("dream_run_id", scope_id, key_of_principal, idempotency_key).hex


class DreamRuns(Records):
    dream_enabled: bool = True

    @retry_on_write_conflict
    def request_dream(self, scope_id: str, request: DreamRequest) -> Written[Admission]:
        scope = self.scope_for(scope_id, READ)
        caller = self.caller()
        key = principal_key(caller.name)
        run_id = dream_run_id(scope.scope_id, key, request.idempotency_key)
        existing = self.existing_run(scope.scope_id, run_id)
        if existing is not None:
            return Written(Admission(self._replay(existing, request), replayed=True), None)
        self.check_permitted(scope, CONTRIBUTE)  # the scope is loaded once per admission
        if not self.dream_enabled:
            raise CapabilityUnavailableError("Dream runs are disabled in this deployment")
        reader = StoreEvidenceReader(self, scope, caller)
        self._check_target_head(reader, request.target)
        budget = effective_budget(scope.settings)
        resolve(reader, sources=request.sources, artifacts=request.artifacts,
                memory_citations=request.memory_citations, budget=budget,
                include_memory_text=request.operation != DERIVE_SKILL)
        queue = self.queue_of(scope.scope_id)
        queue.admit(run_id, request.operation,
                    scope.settings.get("dream_max_pending_per_scope", DEFAULT_MAX_PENDING))
        run = DreamRun.accept(scope.scope_id, run_id, request.operation, caller.name,
                              request.idempotency_key, request.to_dict(), request.digest,
                              budget, PROMPT_VERSION, self.clock())
        position = self.commit(run, queue, read=reader.read_set)
        return Written(Admission(run, replayed=False), position)

    def resolve_run_evidence(self, run: DreamRun, attempt: int) -> Resolution:
        """Resolve a running run's evidence with its requester's current rights.

        The first resolution freezes the manifest on the run (``ManifestFrozen``); every later
        attempt must reproduce it exactly, or fails ``evidence_unavailable``: a run never
        switches to the latest evidence.
        """
        run.check_attempt(attempt)
        resolution, reader = self.pinned_evidence(run)
        if run.manifest is None:
            manifest = resolution.manifest
            run.freeze_manifest(attempt, manifest.to_dict(), manifest.digest)
            self.commit(run, read=reader.read_set)
        return resolution

    def pinned_evidence(self, run: DreamRun) -> tuple[Resolution, StoreEvidenceReader]:
        """The run's evidence now, against its frozen manifest if it has one; and what was read."""
        scope = self._load_scope(run.scope_id)
        requester = self.requester_of(run)
        with acting_as(requester):
            try:
                self.check_permitted(scope, CONTRIBUTE)
            except (ForbiddenError, ScopeNotFoundError) as refused:
                raise AccessRevokedError("the requester may no longer contribute here",
                                         principal=requester.name) from refused
            reader = StoreEvidenceReader(self, scope, requester)
            request = DreamRequest.from_dict(run.request, run.idempotency_key)
            pinned = None if run.manifest is None else EvidenceManifest.from_dict(run.manifest)
            resolution = resolve(reader, sources=request.sources, artifacts=request.artifacts,
                                 memory_citations=request.memory_citations, budget=run.budget,
                                 include_memory_text=request.operation != DERIVE_SKILL,
                                 pinned=pinned)
            self._check_target_head(reader, request.target)
        return resolution, reader

    def requester_of(self, run: DreamRun) -> Caller:
        """Background work acts as the requester, never as a service identity."""
        if not self.enforce_access:
            return LOCAL_CALLER
        try:
            principal = self.get_principal(run.requester)
        except PrincipalNotFoundError:
            raise AccessRevokedError("the requester no longer exists",
                                     principal=run.requester) from None
        return Caller(principal.name, principal.admin)

    def get_dream(self, scope_id: str, run_id: str) -> DreamRun:
        self.scope_for(scope_id, READ)
        run = self.existing_run(scope_id, run_id)
        if run is None:
            raise DreamNotFoundError(f"no run {run_id!r} in scope {scope_id!r}", run_id=run_id)
        return run

    def existing_run(self, scope_id: str, run_id: str) -> DreamRun | None:
        run: DreamRun | None = self.find(dream_run_aggregate_id(scope_id, run_id))
        return run

    @staticmethod
    def _replay(run: DreamRun, request: DreamRequest) -> DreamRun:
        if run.request_digest != request.digest:
            raise IdempotencyConflictError(
                "this idempotency key was used for a different request", run_id=run.run_id,
                request_digest=run.request_digest)
        return run

    @staticmethod
    def _check_target_head(reader: StoreEvidenceReader, target: ArtifactRef | None) -> None:
        """A replacement names the head revision of its target, else ``artifact_conflict``."""
        if target is None:
            return
        artifact = reader.artifact(target.family, target.artifact_id)
        if artifact is not None and artifact.head_ref != target:
            raise ArtifactConflictError(
                "the target is no longer the head revision", field="target",
                expected=target.to_dict(), current=artifact.head_ref.to_dict())

    def queue_of(self, scope_id: str) -> DreamQueue:
        queue: DreamQueue | None = self.find(DreamQueue.create_id(scope_id))
        return queue if queue is not None else DreamQueue.open(scope_id)

