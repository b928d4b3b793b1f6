"""Audit: an aggregate's event history, its state as of any version, and the provenance trace of
an approved Artifact revision down to the exact Memory entry versions and Sources.

Everything here reads the event store, never a read model, so an auditor sees what was
recorded rather than what a projection made of it. Reads are authorised like the aggregate
itself: a Source or Artifact needs read access to it, a scope's own history (roles and grants)
needs its administrators.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from datetime import datetime
from enum import Enum
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, AggregateEvent

from application.access import ScopeGate
from application.audit_keys import AUDITABLE
from application.credentials import Who
from application.dream_runs import DreamRuns
from application.records import Records
from application.review import REVIEW_PROVENANCE, Reviews
from application.store import ACTED_BY
from domain.access import Action, Resource
from domain.artifact import Artifact, EntryStatus
from domain.candidate import Candidate
from domain.errors import (
    AuditNotFoundError,
    InvalidRequestError,
)
from domain.evidence.manifest import EvidenceManifest
from domain.ids import (
    artifact_aggregate_id,
    candidate_aggregate_id,
    dream_run_aggregate_id,
    scope_aggregate_id,
    source_aggregate_id,
)
from domain.refs import ArtifactFamily, ArtifactRef, MemoryCitation, SourceRef, check_family
from domain.source import Source

_BASE_ATTRIBUTES = {"_id": "id", "_version": "version", "_created_on": "created_on",
                    "_modified_on": "modified_on"}


def plain(value: Any) -> Any:
    """JSON-native rendering of event and aggregate values (refs, datetimes, dataclasses)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, Enum):
        return plain(value.value)
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return plain(to_dict())
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, set | frozenset):
        return sorted((plain(item) for item in value), key=repr)
    if isinstance(value, Sequence) and not isinstance(value, bytes):
        return [plain(item) for item in value]
    return repr(value)


@dataclass(frozen=True)
class AuditEvent:
    type: str
    version: int
    time: datetime
    principal: str | None  # who issued the command (stored as ``acted_by``)
    payload: dict[str, Any]

    @classmethod
    def of(cls, event: AggregateEvent) -> AuditEvent:
        state = {key: value for key, value in vars(event).items()
                 if key not in ("originator_id", "originator_version", "timestamp", ACTED_BY)}
        return cls(type=type(event).__qualname__, version=event.originator_version,
                   time=event.timestamp, principal=getattr(event, ACTED_BY, None),
                   payload=plain(state))


@dataclass(frozen=True)
class AuditedState:
    kind: str
    key: str
    version: int
    current_version: int
    state: dict[str, Any]


def state_of(aggregate: Aggregate) -> dict[str, Any]:
    """An aggregate's attributes, with the library's private base attributes renamed."""
    return {_BASE_ATTRIBUTES.get(name, name): plain(value)
            for name, value in sorted(vars(aggregate).items()) if name != "_pending_events"}


def replay(events: Sequence[AggregateEvent]) -> Aggregate | None:
    """Fold events from nothing, without snapshots or caches: the definition of state."""
    aggregate: Any = None
    for domain_event in events:
        aggregate = domain_event.mutate(aggregate)
    result: Aggregate | None = aggregate
    return result


class Audit:
    """What was recorded, as it was: histories, states as of a version, provenance traces."""

    def __init__(self, gate: ScopeGate, records: Records, runs: DreamRuns,
                 reviews: Reviews) -> None:
        self.gate = gate
        self.store = gate.store
        self.records = records
        self.runs = runs
        self.reviews = reviews

    # -- history and time travel ---------------------------------------------------------------

    def audit_history(self, who: Who, scope_id: str, kind: str, key: str) -> list[AuditEvent]:
        aggregate_id = self._audited(who, scope_id, kind, key)
        events = self.store.history(aggregate_id)
        if not events:
            raise self._not_found(kind, key)
        return [AuditEvent.of(domain_event) for domain_event in events]

    def audit_state(self, who: Who, scope_id: str, kind: str, key: str,
                    version: int) -> AuditedState:
        """The aggregate as it was right after its event number ``version``."""
        aggregate_id = self._audited(who, scope_id, kind, key)
        current = self.store.find(aggregate_id)
        if current is None:
            raise self._not_found(kind, key)
        if type(version) is not int or not 1 <= version <= current.version:
            raise InvalidRequestError(
                f"as_of_version must be an integer in [1, {current.version}]",
                field="as_of_version", current_version=current.version)
        aggregate: Aggregate = self.store.repository.get(aggregate_id, version=version)
        return AuditedState(kind, key, version, current.version, state_of(aggregate))

    def _audited(self, who: Who, scope_id: str, kind: str, key: str) -> UUID:
        """The aggregate's id, once the caller may read it like the aggregate itself."""
        parse = _KEYS.get(kind)
        if parse is None:
            raise InvalidRequestError(f"aggregate must be one of {', '.join(AUDITABLE)}",
                                      field="aggregate", value=kind)
        aggregate_id, action, resource = parse(scope_id, key)
        self.gate.scope_for(who, scope_id, action, resource)
        return aggregate_id

    @staticmethod
    def _not_found(kind: str, key: str) -> AuditNotFoundError:
        return AuditNotFoundError(f"no {kind} {key!r} in this scope", aggregate=kind, key=key)

    # -- trace ---------------------------------------------------------------------------------

    def trace(self, who: Who, scope_id: str, ref: ArtifactRef) -> dict[str, Any]:
        """revision -> Candidate version (approval) -> Dream run -> frozen manifest -> exact
        Memory entry versions and Sources, each with its content hash and its status now."""
        revision = self.records.read_revision(who, scope_id, ref)
        trace: dict[str, Any] = {
            "revision": {"ref": ref.to_dict(), "content": revision.content,
                         "lineage": revision.lineage.to_dict(),
                         "provenance": revision.provenance},
            "candidate": None, "run": None, "manifest": None,
            "evidence": self._evidence_now(scope_id, revision.lineage.sources,
                                           revision.lineage.memory_citations),
        }
        if revision.provenance.get("kind") != REVIEW_PROVENANCE:
            return trace
        candidate = self.reviews.candidate_in(self.gate.load(scope_id),
                                    revision.provenance["candidate_id"])
        trace["candidate"] = self._candidate_trace(candidate,
                                                   revision.provenance["candidate_version"])
        if candidate.run_id is not None:
            run = self.runs.get_dream(who, scope_id, candidate.run_id)
            trace["run"] = {
                "run_id": run.run_id, "operation": run.operation, "requester": run.requester,
                "model_config_id": run.model_config_id, "prompt_version": run.prompt_version,
                "usage": {"model_calls": run.model_calls, "input_tokens": run.input_tokens,
                          "output_tokens": run.output_tokens},
                "accepted_at": run.accepted_at.isoformat(),
                "completed_at": None if run.completed_at is None
                else run.completed_at.isoformat(),
                "manifest_digest": run.manifest_digest}
            if run.manifest is not None:
                trace["manifest"] = self._manifest_trace(
                    scope_id, run.manifest)
        return trace

    def _candidate_trace(self, candidate: Candidate, version: int) -> dict[str, Any]:
        approval = next((e for e in self.store.history(candidate.id)
                         if isinstance(e, Candidate.Approved)), None)
        return {"candidate_id": candidate.candidate_id, "version": version,
                "family": candidate.family, "proposer": candidate.proposer,
                "author": candidate.versions[version - 1].author,
                "approved_by": None if approval is None else approval.approver,
                "approved_at": None if approval is None else approval.timestamp.isoformat(),
                "versions": candidate.candidate_version}

    def _manifest_trace(self, scope_id: str, manifest: EvidenceManifest) -> dict[str, Any]:
        citations = [c for node in manifest.nodes for c in node.memory_citations]
        sources = [node.source for node in manifest.nodes if node.source is not None]
        return {"digest": manifest.digest, "transform_version": manifest.transform_version,
                "incomplete": manifest.incomplete,
                "nodes": [{"evidence_id": node.evidence_id, "kind": node.kind,
                           "role": node.role, "digest": node.digest} for node in manifest.nodes],
                "evidence": self._evidence_now(scope_id, sources, citations)}

    def _evidence_now(self, scope_id: str, sources: Sequence[SourceRef],
                      citations: Sequence[MemoryCitation]) -> dict[str, Any]:
        return {"memory_entries": [self._entry_now(scope_id, c) for c in citations],
                "sources": [self._source_now(scope_id, s) for s in sources]}

    def _entry_now(self, scope_id: str, citation: MemoryCitation) -> dict[str, Any]:
        memory: Artifact | None = self.store.find(
            artifact_aggregate_id(scope_id, ArtifactFamily.MEMORY, citation.memory_ref.artifact_id))
        row: dict[str, Any] = {**citation.to_dict(), "content_hash": None, "status_now": None,
                               "current_version_now": None}
        if memory is None:
            return {**row, "status_now": "missing"}
        version = memory.entry_version(citation.entry_id, citation.entry_version_id)
        head = memory.manifest().get(citation.entry_id)
        return {**row, "content_hash": version.content_hash,
                "status_now": "missing" if head is None else head.status,
                "current_version_now": None if head is None else head.entry_version_id,
                "active_now": head is not None and head.status == EntryStatus.ACTIVE}

    def _source_now(self, scope_id: str, ref: SourceRef) -> dict[str, Any]:
        source: Source | None = self.store.find(
            source_aggregate_id(scope_id, ref.source_type, ref.source_id))
        if source is None:
            return {**ref.to_dict(), "content_hash": None, "available_now": False}
        return {**ref.to_dict(), "content_hash": source.content_hash,
                "eligibility": source.eligibility,
                "available_now": not (source.withdrawn or source.erased),
                "erased": source.erased}


# -- keys ------------------------------------------------------------------------------------------

Parsed = tuple[UUID, Action, Resource | None]


def _pair(key: str, what: str) -> tuple[str, str]:
    first, slash, rest = key.partition("/")
    if not slash or not first or not rest:
        raise InvalidRequestError(f"the key of a {what} is {AUDITABLE[what]}", field="key")
    return first, rest


def _scope_key(scope_id: str, key: str) -> Parsed:
    if key != scope_id:
        raise InvalidRequestError("a scope's audit key is its own id", field="key")
    return scope_aggregate_id(scope_id), Action.ADMINISTER, None


def _source_key(scope_id: str, key: str) -> Parsed:
    source_type, source_id = _pair(key, "source")
    return (source_aggregate_id(scope_id, source_type, source_id), Action.READ,
            Resource.source(source_type, source_id))


def _artifact_key(scope_id: str, key: str) -> Parsed:
    family, artifact_id = _pair(key, "artifact")
    check_family(family)
    return (artifact_aggregate_id(scope_id, family, artifact_id), Action.READ,
            Resource.artifact(family, artifact_id))


def _candidate_key(scope_id: str, key: str) -> Parsed:
    return candidate_aggregate_id(scope_id, key), Action.READ, None


def _run_key(scope_id: str, key: str) -> Parsed:
    return dream_run_aggregate_id(scope_id, key), Action.READ, None


_KEYS: dict[str, Callable[[str, str], Parsed]] = {
    "scope": _scope_key, "source": _source_key, "artifact": _artifact_key,
    "candidate": _candidate_key, "dream_run": _run_key,
}
