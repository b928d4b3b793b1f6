# Generated from docs/openapi.json by datamodel-code-generator: do not edit.
# Regenerate: .venv/bin/python clients/python/scripts/generate_models.py

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field


class ApproveCandidate(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    expected_version: int = Field(
        ..., description='The version being approved.', title='Expected Version'
    )


class ArtifactRefBody(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    artifact_id: str = Field(..., title='Artifact Id')
    family: str = Field(..., title='Family')
    revision: int = Field(..., title='Revision')


class AuditEventView(BaseModel):
    payload: dict[str, Any] = Field(..., title='Payload')
    principal: str | None = Field(
        ...,
        description='Who issued the command (null: the service itself, e.g. a worker finishing a run).',
        title='Principal',
    )
    time: AwareDatetime = Field(..., title='Time')
    type: str = Field(
        ..., description='The event class, e.g. Candidate.Approved.', title='Type'
    )
    version: int = Field(
        ..., description="The aggregate's version after this event.", title='Version'
    )


class AuditView(BaseModel):
    aggregate: str = Field(..., title='Aggregate')
    as_of_version: int | None = Field(
        ...,
        description='With ?as_of_version=: events up to it, and the state right after it.',
        title='As Of Version',
    )
    current_version: int = Field(..., title='Current Version')
    events: list[AuditEventView] = Field(..., title='Events')
    key: str = Field(..., title='Key')
    state: dict[str, Any] | None = Field(..., title='State')


class Name(StrEnum):
    enabled = 'enabled'
    idle = 'idle'
    time = 'time'
    records = 'records'
    capacity = 'capacity'


class AutoGateView(BaseModel):
    name: Name = Field(..., title='Name')
    open: bool = Field(..., title='Open')
    reason: str = Field(..., title='Reason')
    threshold: Any = Field(
        ..., description='What it must reach to open.', title='Threshold'
    )
    value: Any = Field(
        ...,
        description='What the gate measured now (null: nothing yet).',
        title='Value',
    )


class AutoWindowView(BaseModel):
    after: int = Field(
        ..., description='The cursor the window starts after.', title='After'
    )
    end: int = Field(
        ...,
        description='The position of its last record: the cursor on success.',
        title='End',
    )
    opened_at: AwareDatetime = Field(..., title='Opened At')
    records: int = Field(..., title='Records')
    run_ids: list[str] = Field(..., title='Run Ids')
    work_key: str = Field(
        ...,
        description="The window's idempotency key: its runs' keys.",
        title='Work Key',
    )


class CandidateConflictView(BaseModel):
    code: str = Field(..., title='Code')
    details: dict[str, Any] = Field(..., title='Details')
    version: int = Field(..., title='Version')


class Status(StrEnum):
    resolved = 'resolved'
    unavailable = 'unavailable'


class CandidatePermissions(BaseModel):
    """
    What the caller may do now (hints for clients; every command re-checks).
    """

    can_approve: bool = Field(..., title='Can Approve')
    can_reject: bool = Field(..., title='Can Reject')
    can_revise: bool = Field(..., title='Can Revise')


class CandidateRef(BaseModel):
    candidate_id: str = Field(..., title='Candidate Id')
    version: int = Field(..., title='Version')


class Status1(StrEnum):
    pending = 'pending'
    approved = 'approved'
    rejected = 'rejected'


class CandidateSummaryView(BaseModel):
    age_seconds: float = Field(
        ..., description='Seconds since it was proposed.', title='Age Seconds'
    )
    candidate_id: str = Field(..., title='Candidate Id')
    conflict: bool = Field(..., title='Conflict')
    conflict_code: str | None = Field(..., title='Conflict Code')
    decided_at: AwareDatetime | None = Field(..., title='Decided At')
    decided_by: str | None = Field(..., title='Decided By')
    decision_reason: str | None = Field(..., title='Decision Reason')
    evidence_erased: bool | None = Field(
        False,
        description='Evidence of one of its versions was erased (ids and hashes remain): review it with that in mind (docs/erasure.md).',
        title='Evidence Erased',
    )
    family: str = Field(..., title='Family')
    proposed_at: AwareDatetime = Field(..., title='Proposed At')
    proposer: str = Field(..., title='Proposer')
    reason: str = Field(..., title='Reason')
    result: ArtifactRefBody | None
    run_id: str | None = Field(..., title='Run Id')
    scope_id: str = Field(..., title='Scope Id')
    status: Status1 = Field(..., title='Status')
    target: ArtifactRefBody | None
    updated_at: AwareDatetime = Field(..., title='Updated At')
    version: int = Field(..., title='Version')


class ChangeSettings(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    settings: dict[str, Any] = Field(..., title='Settings')


class CreateMemory(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    memory_id: str = Field(..., title='Memory Id')
    title: str | None = Field(None, title='Title')


class CreateScope(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    scope_id: str = Field(..., title='Scope Id')
    settings: dict[str, Any] | None = Field(None, title='Settings')


class CreateWebhook(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    event_types: list[str] | None = Field(
        None,
        description='Feed event names (`Candidate.Approved`) or whole aggregates (`Candidate.*`); empty: every event of the scope.',
        max_length=64,
        title='Event Types',
    )
    secret: str | None = Field(
        None,
        description='The HMAC-SHA256 key (16..256 printable ASCII characters); omitted: the server generates one. Answered only now.',
        title='Secret',
    )
    url: str = Field(
        ...,
        description='Where events are POSTed: an absolute http:// or https:// URL.',
        title='Url',
    )


class Status3(StrEnum):
    """
    `needs_secret`: this deployment's outbox has no secret for `secret_fingerprint` (an imported subscription: bundles carry no secret), so nothing is delivered until one is set with `POST …/secret`.
    """

    active = 'active'
    needs_secret = 'needs_secret'
    revoked = 'revoked'


class CreatedWebhookView(BaseModel):
    delivered_position: int = Field(
        ...,
        description='The feed position delivered up to.',
        title='Delivered Position',
    )
    event_types: list[str] = Field(..., title='Event Types')
    position: int | None = Field(
        ..., description='The event position of this state.', title='Position'
    )
    scope_id: str = Field(..., title='Scope Id')
    secret: str = Field(
        ...,
        description='The signing secret: shown this once, never again.',
        title='Secret',
    )
    secret_fingerprint: str = Field(
        ...,
        description="`sha256:` and the first 16 hex digits of the secret's SHA-256; never the secret.",
        title='Secret Fingerprint',
    )
    status: Status3 = Field(
        ...,
        description="`needs_secret`: this deployment's outbox has no secret for `secret_fingerprint` (an imported subscription: bundles carry no secret), so nothing is delivered until one is set with `POST …/secret`.",
        title='Status',
    )
    url: str = Field(..., title='Url')
    webhook_id: str = Field(..., title='Webhook Id')


class DeactivateEntry(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    expected_revision: int | None = Field(None, title='Expected Revision')
    reason: str | None = Field('deactivated', title='Reason')


class Outcome(StrEnum):
    delivered = 'delivered'
    failed = 'failed'
    dead_letter = 'dead_letter'


class DeliveryView(BaseModel):
    attempt: int = Field(..., title='Attempt')
    attempted_at: AwareDatetime = Field(..., title='Attempted At')
    duration_ms: int = Field(..., title='Duration Ms')
    error: str | None = Field(..., title='Error')
    event: str = Field(..., title='Event')
    outcome: Outcome = Field(..., title='Outcome')
    position: int = Field(
        ...,
        description="The event's feed position (the Dream-Event-Id header).",
        title='Position',
    )
    status_code: int | None = Field(
        ..., description="The receiver's answer; null: none.", title='Status Code'
    )


class Kind(StrEnum):
    artifact_revision = 'artifact_revision'
    candidate_version = 'candidate_version'
    entry_version = 'entry_version'
    source = 'source'


class Status4(StrEnum):
    """
    `pending`: a Candidate awaiting review; `head`: the latest revision of an Experience or Skill; `current`: the current version of an active Memory entry.
    """

    pending = 'pending'
    head = 'head'
    current = 'current'


class DerivedItem(BaseModel):
    erasure_id: str = Field(..., title='Erasure Id')
    key: str = Field(..., title='Key')
    kind: Kind = Field(..., title='Kind')
    status: Status4 = Field(
        ...,
        description='`pending`: a Candidate awaiting review; `head`: the latest revision of an Experience or Skill; `current`: the current version of an active Memory entry.',
        title='Status',
    )


class DerivedQueue(BaseModel):
    """
    What reviewers revise or retire: knowledge still derived from erased evidence.
    """

    items: list[DerivedItem] = Field(..., title='Items')
    scope_id: str = Field(..., title='Scope Id')


class Outcome1(StrEnum):
    proposed = 'proposed'
    no_change = 'no_change'
    needs_evidence = 'needs_evidence'


class Status5(StrEnum):
    queued = 'queued'
    running = 'running'
    succeeded = 'succeeded'
    failed = 'failed'


class Trigger(StrEnum):
    """
    Who started the run: `request` (a caller) or `automatic` (automatic dreaming).
    """

    request = 'request'
    automatic = 'automatic'


class DreamRunSummary(BaseModel):
    accepted_at: AwareDatetime = Field(..., title='Accepted At')
    attempt_count: int = Field(..., title='Attempt Count')
    candidate: CandidateRef | None
    completed_at: AwareDatetime | None = Field(..., title='Completed At')
    error: str | None = Field(..., title='Error')
    operation: str = Field(..., title='Operation')
    outcome: Outcome1 | None = Field(..., title='Outcome')
    reason: str | None = Field(
        ...,
        description="Why the run ended as it did: for a failed run, a human sentence for its `error` code; on a single run also a succeeded run's reason; null while unfinished.",
        title='Reason',
    )
    reused: bool = Field(..., title='Reused')
    run_id: str = Field(..., title='Run Id')
    scope_id: str = Field(..., title='Scope Id')
    started_at: AwareDatetime | None = Field(..., title='Started At')
    status: Status5 = Field(..., title='Status')
    target: ArtifactRefBody | None
    trigger: Trigger = Field(
        ...,
        description='Who started the run: `request` (a caller) or `automatic` (automatic dreaming).',
        title='Trigger',
    )


class DueScopeView(BaseModel):
    first_pending: int = Field(
        ...,
        description="The oldest one's event position: the order in which the scheduler checks due scopes.",
        title='First Pending',
    )
    pending: int = Field(
        ...,
        description='Records automatic dreaming counts after the cursor.',
        title='Pending',
    )
    scope_id: str = Field(..., title='Scope Id')


class ErasedNode(BaseModel):
    key: str = Field(..., title='Key')
    kind: Kind = Field(..., title='Kind')


class Kind2(StrEnum):
    source = 'source'
    memory_entry = 'memory_entry'
    subject = 'subject'


class ErasureSummary(BaseModel):
    derived: int = Field(..., title='Derived')
    erased_at: AwareDatetime = Field(..., title='Erased At')
    erasure_id: str = Field(..., title='Erasure Id')
    kind: Kind2 = Field(..., title='Kind')
    position: int = Field(..., title='Position')
    records: int = Field(..., title='Records')


class ErasureView(BaseModel):
    derived: list[ErasedNode] = Field(
        ...,
        description='The Candidate versions, Artifact revisions and Memory entry versions derived from them when the erasure was made.',
        title='Derived',
    )
    erased_at: AwareDatetime = Field(..., title='Erased At')
    erased_by: str | None = Field(..., title='Erased By')
    erasure_id: str = Field(..., title='Erasure Id')
    kind: Kind2 = Field(..., title='Kind')
    position: int | None = Field(
        ...,
        description="Event position of what is shown: the last event a command produced, or on a read or an idempotent replay the aggregate's last event (wait for it with `after=`); null only for an exact historical version read.",
        title='Position',
    )
    reason: str = Field(..., title='Reason')
    records: list[dict[str, Any]] = Field(
        ...,
        description='Each erased record by its ids and content hashes, never its text.',
        title='Records',
    )
    scope_id: str = Field(..., title='Scope Id')
    scrubbed: dict[str, Any] | None = Field(
        None,
        description='What the store did to leave no byte of the destroyed keys in its files (only in the answer to the erasure).',
        title='Scrubbed',
    )
    target: dict[str, Any] = Field(
        ...,
        description='What was named: a Source or Memory entry by its ids, a subject by its digest only.',
        title='Target',
    )


class ErrorBody(BaseModel):
    code: str = Field(..., title='Code')
    details: dict[str, Any] = Field(..., title='Details')
    message: str = Field(..., title='Message')


class ErrorResponse(BaseModel):
    error: ErrorBody


class FeedEventView(BaseModel):
    aggregate_id: str = Field(..., title='Aggregate Id')
    aggregate_version: int = Field(..., title='Aggregate Version')
    event: str = Field(
        ...,
        description='The aggregate and event, e.g. Candidate.Approved.',
        title='Event',
    )
    fields: dict[str, Any] = Field(
        ...,
        description='Ids, families, revisions, statuses, outcomes and hashes; never free text.',
        title='Fields',
    )
    position: int = Field(
        ...,
        description="The event's position in the store: resume after it.",
        title='Position',
    )
    recorded_at: AwareDatetime = Field(..., title='Recorded At')


class FeedPage(BaseModel):
    events: list[FeedEventView] = Field(..., title='Events')
    next_after: int = Field(
        ...,
        description='Pass as `after` for the next page (the last position shown, or the `after` asked).',
        title='Next After',
    )
    scope_id: str = Field(..., title='Scope Id')


class GrantRole(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    principal: str = Field(..., title='Principal')
    role: str = Field(..., title='Role')


class Status7(StrEnum):
    """
    degraded while the store cannot be reached, a read model cannot follow it (both: HTTP 503) or a read model holds dead letters (HTTP 200)
    """

    ok = 'ok'
    degraded = 'degraded'


class Kind4(StrEnum):
    artifact_revision = 'artifact_revision'
    candidate_version = 'candidate_version'
    entry_version = 'entry_version'
    source = 'source'


class ImpactedView(BaseModel):
    depth: int = Field(
        ...,
        description='Edges between the queried node and this one (1: direct).',
        title='Depth',
    )
    key: str = Field(..., title='Key')
    kind: Kind4 = Field(..., title='Kind')


class IssueToken(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    admin: bool | None = Field(
        False,
        description='A deployment administrator. Used when the principal is registered; for an existing principal it must match (`principal_exists` otherwise).',
        title='Admin',
    )
    expires_at: AwareDatetime | None = Field(
        None,
        description='Expiry instant with a time zone offset, in the future and within ten years.',
        title='Expires At',
    )
    expires_in_seconds: int | None = Field(
        None,
        description='Lifetime from now, at most ten years; or give `expires_at`; neither: until revoked.',
        title='Expires In Seconds',
    )
    label: str | None = Field(
        'api', description='What the token is for (not secret).', title='Label'
    )
    principal: str = Field(
        ..., description='Registered on first use.', title='Principal'
    )


class IssuedTokenView(BaseModel):
    created_at: AwareDatetime = Field(..., title='Created At')
    expired: bool = Field(..., title='Expired')
    expires_at: AwareDatetime | None = Field(
        ..., description='Null: valid until revoked.', title='Expires At'
    )
    label: str = Field(..., title='Label')
    position: int | None = Field(
        ...,
        description="Event position of the change; on a repeated revocation the token's last event.",
        title='Position',
    )
    principal: str = Field(..., title='Principal')
    revoked: bool = Field(..., title='Revoked')
    token: str = Field(
        ...,
        description='The bearer secret: shown in this answer only, never again.',
        title='Token',
    )
    token_id: str = Field(
        ...,
        description='Public id, used to revoke; not usable as a token.',
        title='Token Id',
    )


class LatencyBucket(BaseModel):
    calls: int = Field(
        ..., description='Calls that took at most le (cumulative).', title='Calls'
    )
    le: float | None = Field(
        ..., description='Upper bound in seconds (null: +Inf).', title='Le'
    )


class ManifestEntryView(BaseModel):
    content_hash: str = Field(..., title='Content Hash')
    entry_version_id: str = Field(..., title='Entry Version Id')
    status: str = Field(..., title='Status')


class MemoryCitationBody(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    entry_id: str = Field(..., title='Entry Id')
    entry_version_id: str = Field(..., title='Entry Version Id')
    memory_ref: ArtifactRefBody


class MemoryEntryBody(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    entry_id: str = Field(..., title='Entry Id')
    memory_id: str = Field(..., title='Memory Id')


class ModelCallsView(BaseModel):
    buckets: list[LatencyBucket] = Field(..., title='Buckets')
    count: int = Field(..., description='Calls timed.', title='Count')
    generator: str = Field(
        ..., description='The generator kind (DREAM_GENERATOR).', title='Generator'
    )
    outcomes: dict[str, int] = Field(
        ..., description='Calls by outcome: ok, or the error code.', title='Outcomes'
    )
    p50_seconds: float | None = Field(
        ..., description='Upper bound of the median (its bucket).', title='P50 Seconds'
    )
    p95_seconds: float | None = Field(
        ..., description='Upper bound of the 95th percentile.', title='P95 Seconds'
    )
    sum_seconds: float = Field(
        ..., description='Their total time.', title='Sum Seconds'
    )


class ProjectionHealth(BaseModel):
    dead_letters: int | None = Field(
        0,
        description='Events the read model could not apply (recorded, never skipped silently; null: unknown now).',
        title='Dead Letters',
    )
    following: bool | None = Field(
        True,
        description='false while its runner retries a store error.',
        title='Following',
    )
    lag: int | None = Field(
        ...,
        description='Events recorded but not yet applied (null: the store cannot be reached).',
        title='Lag',
    )
    position: int = Field(
        ..., description='Last event position the read model applied.', title='Position'
    )
    reason: str | None = Field(
        None, description='The error it retries, while not following.', title='Reason'
    )


class ReactivateEntry(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    expected_revision: int | None = Field(None, title='Expected Revision')


class RecordSource(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    attempt_id: str | None = Field(None, title='Attempt Id')
    eligibility: str | None = Field('eligible', title='Eligibility')
    occurred_at: AwareDatetime | None = Field(None, title='Occurred At')
    payload: dict[str, Any] | None = Field(None, title='Payload')
    source_id: str = Field(..., title='Source Id')
    source_type: str = Field(..., title='Source Type')
    sub_agent: bool | None = Field(
        False,
        description='Recorded by a sub-agent: stored and citable, never counted by automatic dreaming.',
        title='Sub Agent',
    )
    subject: str | None = Field(
        None,
        description="The data subject this record is about (1-256 printable characters), kept only as a digest beside the record's data key: erasing the subject erases it (docs/erasure.md).",
        title='Subject',
    )
    text: str | None = Field(None, title='Text')


class RejectCandidate(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    expected_version: int = Field(
        ..., description='The version being rejected.', title='Expected Version'
    )
    reason: str = Field(..., title='Reason')


class Kind5(StrEnum):
    artifact = 'artifact'
    source = 'source'


class ResourceBody(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    artifact_id: str | None = Field(None, title='Artifact Id')
    family: str | None = Field(None, title='Family')
    kind: Kind5 = Field(..., title='Kind')
    source_id: str | None = Field(None, title='Source Id')
    source_type: str | None = Field(None, title='Source Type')


class RolesView(BaseModel):
    position: int | None = Field(
        ...,
        description="Event position of what is shown: the last event a command produced, or on a read or an idempotent replay the aggregate's last event (wait for it with `after=`); null only for an exact historical version read.",
        title='Position',
    )
    read_grants: dict[str, dict[str, str]] = Field(..., title='Read Grants')
    roles: dict[str, list[str]] = Field(..., title='Roles')
    scope_id: str = Field(..., title='Scope Id')


class RotateSecret(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    secret: str | None = Field(
        None,
        description='The new HMAC-SHA256 key (16..256 printable ASCII characters); omitted: the server generates one. Answered only now.',
        title='Secret',
    )


class RunCountView(BaseModel):
    runs: int = Field(..., title='Runs')
    status: str = Field(
        ..., description='queued, running, succeeded or failed', title='Status'
    )
    trigger: str = Field(..., description='request or automatic', title='Trigger')


class Event(StrEnum):
    """
    accepted: admitted in that minute; succeeded, failed: ended in it.
    """

    accepted = 'accepted'
    succeeded = 'succeeded'
    failed = 'failed'


class RunMinuteView(BaseModel):
    event: Event = Field(
        ...,
        description='accepted: admitted in that minute; succeeded, failed: ended in it.',
        title='Event',
    )
    minute: AwareDatetime = Field(
        ..., description="The minute's start, UTC.", title='Minute'
    )
    runs: int = Field(..., title='Runs')
    trigger: str = Field(..., description='request or automatic', title='Trigger')


class ScopeInboxView(BaseModel):
    pending: int = Field(
        ..., description='Candidates waiting for review.', title='Pending'
    )
    scope_id: str = Field(..., title='Scope Id')


class ScopeQueueView(BaseModel):
    oldest_accepted_at: AwareDatetime = Field(..., title='Oldest Accepted At')
    oldest_wait_seconds: float = Field(
        ..., description='How long the oldest has waited.', title='Oldest Wait Seconds'
    )
    queued: int = Field(
        ..., description='Runs admitted and not claimed yet.', title='Queued'
    )
    scope_id: str = Field(..., title='Scope Id')


class ScopeSummaryView(BaseModel):
    created_at: AwareDatetime = Field(..., title='Created At')
    position: int = Field(
        ...,
        description="The event that last changed the scope's settings.",
        title='Position',
    )
    roles: list[str] = Field(
        ...,
        description="The caller's own roles in the scope (an administrator of the deployment may hold none).",
        title='Roles',
    )
    scope_id: str = Field(..., title='Scope Id')
    settings: dict[str, Any] = Field(..., title='Settings')
    updated_at: AwareDatetime = Field(
        ...,
        description='When the settings last changed (or creation).',
        title='Updated At',
    )


class ScopeView(BaseModel):
    position: int | None = Field(
        ...,
        description="Event position of what is shown: the last event a command produced, or on a read or an idempotent replay the aggregate's last event (wait for it with `after=`); null only for an exact historical version read.",
        title='Position',
    )
    scope_id: str = Field(..., title='Scope Id')
    settings: dict[str, Any] = Field(..., title='Settings')


class SkillPackageView(BaseModel):
    digest: str = Field(
        ..., description='sha256:<hex> of the UTF-8 SKILL.md text.', title='Digest'
    )
    ref: ArtifactRefBody
    skill_md: str = Field(..., description='The SKILL.md text.', title='Skill Md')


class SlotUse(BaseModel):
    cap: int = Field(
        ..., description='Slots of the pool, across the deployment.', title='Cap'
    )
    in_use: int = Field(..., description='Slots whose lease runs now.', title='In Use')
    pool: str = Field(
        ...,
        description='generation (every run) or automatic (automatic runs).',
        title='Pool',
    )


class SourceRefBody(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    source_id: str = Field(..., title='Source Id')
    source_type: str = Field(..., title='Source Type')


class SourceView(BaseModel):
    attempt_id: str | None = Field(..., title='Attempt Id')
    content_hash: str = Field(..., title='Content Hash')
    eligibility: str = Field(..., title='Eligibility')
    erased: bool = Field(
        ...,
        description='Erased: its text and payload are gone for good (both read as null); ids and hash remain.',
        title='Erased',
    )
    occurred_at: AwareDatetime | None = Field(..., title='Occurred At')
    payload: dict[str, Any] | None = Field(..., title='Payload')
    position: int | None = Field(
        ...,
        description="Event position of what is shown: the last event a command produced, or on a read or an idempotent replay the aggregate's last event (wait for it with `after=`); null only for an exact historical version read.",
        title='Position',
    )
    scope_id: str = Field(..., title='Scope Id')
    source_id: str = Field(..., title='Source Id')
    source_type: str = Field(..., title='Source Type')
    sub_agent: bool = Field(..., title='Sub Agent')
    text: str | None = Field(..., title='Text')
    version: int = Field(..., title='Version')
    withdrawn: bool = Field(..., title='Withdrawn')


class TokenChange(BaseModel):
    created_at: AwareDatetime = Field(..., title='Created At')
    expired: bool = Field(..., title='Expired')
    expires_at: AwareDatetime | None = Field(
        ..., description='Null: valid until revoked.', title='Expires At'
    )
    label: str = Field(..., title='Label')
    position: int | None = Field(
        ...,
        description="Event position of the change; on a repeated revocation the token's last event.",
        title='Position',
    )
    principal: str = Field(..., title='Principal')
    revoked: bool = Field(..., title='Revoked')
    token_id: str = Field(
        ...,
        description='Public id, used to revoke; not usable as a token.',
        title='Token Id',
    )


class TokenView(BaseModel):
    """
    A token's public record. The secret is never stored, so it is never shown here.
    """

    created_at: AwareDatetime = Field(..., title='Created At')
    expired: bool = Field(..., title='Expired')
    expires_at: AwareDatetime | None = Field(
        ..., description='Null: valid until revoked.', title='Expires At'
    )
    label: str = Field(..., title='Label')
    principal: str = Field(..., title='Principal')
    revoked: bool = Field(..., title='Revoked')
    token_id: str = Field(
        ...,
        description='Public id, used to revoke; not usable as a token.',
        title='Token Id',
    )


class TraceView(BaseModel):
    """
    revision -> Candidate version (approval) -> Dream run -> frozen manifest -> exact
    Memory entry versions and Sources, with content hashes and whether each is usable now.
    """

    candidate: dict[str, Any] | None = Field(..., title='Candidate')
    evidence: dict[str, Any] = Field(..., title='Evidence')
    manifest: dict[str, Any] | None = Field(..., title='Manifest')
    revision: dict[str, Any] = Field(..., title='Revision')
    run: dict[str, Any] | None = Field(..., title='Run')


class Usage(BaseModel):
    input_tokens: int | None = Field(
        ..., description='null means unknown, never zero', title='Input Tokens'
    )
    model_calls: int = Field(..., title='Model Calls')
    output_tokens: int | None = Field(
        ..., description='null means unknown, never zero', title='Output Tokens'
    )


class Status8(StrEnum):
    """
    `needs_secret`: this deployment's outbox has no secret for `secret_fingerprint` (an imported subscription: bundles carry no secret), so nothing is delivered until one is set with `POST …/secret`.
    """

    active = 'active'
    needs_secret = 'needs_secret'
    revoked = 'revoked'


class WebhookView(BaseModel):
    delivered_position: int = Field(
        ...,
        description='The feed position delivered up to.',
        title='Delivered Position',
    )
    event_types: list[str] = Field(..., title='Event Types')
    position: int | None = Field(
        ..., description='The event position of this state.', title='Position'
    )
    scope_id: str = Field(..., title='Scope Id')
    secret_fingerprint: str = Field(
        ...,
        description="`sha256:` and the first 16 hex digits of the secret's SHA-256; never the secret.",
        title='Secret Fingerprint',
    )
    status: Status8 = Field(
        ...,
        description="`needs_secret`: this deployment's outbox has no secret for `secret_fingerprint` (an imported subscription: bundles carry no secret), so nothing is delivered until one is set with `POST …/secret`.",
        title='Status',
    )
    url: str = Field(..., title='Url')
    webhook_id: str = Field(..., title='Webhook Id')


class WorkerHealth(BaseModel):
    busy: int = Field(..., description='Generations running now.', title='Busy')
    capacity: int = Field(
        ...,
        description='Concurrent generations this process runs at most.',
        title='Capacity',
    )
    completed: int = Field(
        ...,
        description='Attempts this process has finished since it started.',
        title='Completed',
    )


class AddEntry(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    artifacts: list[ArtifactRefBody] | None = Field(None, title='Artifacts')
    entry_id: str = Field(..., title='Entry Id')
    expected_revision: int | None = Field(None, title='Expected Revision')
    kind: str = Field(..., title='Kind')
    sources: list[SourceRefBody] | None = Field(None, title='Sources')
    subject: str | None = Field(
        None,
        description="The data subject this record is about (1-256 printable characters), kept only as a digest beside the record's data key: erasing the subject erases it (docs/erasure.md).",
        title='Subject',
    )
    text: str = Field(..., title='Text')


class AutoDreamStatusView(BaseModel):
    cursor: int = Field(
        ...,
        description='The store position of the last record consolidated by a successful automatic window (0: none yet).',
        title='Cursor',
    )
    due: bool = Field(..., title='Due')
    gates: list[AutoGateView] = Field(
        ..., description='Every gate, cheapest first.', title='Gates'
    )
    last_ended_at: AwareDatetime | None = Field(
        ...,
        description='When the last window ended, succeeded or released.',
        title='Last Ended At',
    )
    last_success_at: AwareDatetime | None = Field(
        ...,
        description='When the last successful automatic window ended: the time gate counts from here.',
        title='Last Success At',
    )
    reason: str = Field(
        ...,
        description="Why the scope is or is not due now: the first closed gate's reason.",
        title='Reason',
    )
    retries: int = Field(
        ...,
        description='Windows released since the last success; each doubles the retry backoff (15 min, capped by auto_min_hours).',
        title='Retries',
    )
    scope_id: str = Field(..., title='Scope Id')
    window: AutoWindowView | None


class CandidatePage(BaseModel):
    candidates: list[CandidateSummaryView] = Field(..., title='Candidates')
    next_cursor: str | None = Field(..., title='Next Cursor')


class CandidateView(BaseModel):
    artifacts: list[ArtifactRefBody] = Field(..., title='Artifacts')
    author: str = Field(
        ..., description='Who wrote the current version.', title='Author'
    )
    candidate_id: str = Field(..., title='Candidate Id')
    conflict: CandidateConflictView | None = Field(
        ...,
        description='The last approval that failed on moved state, until the next change.',
    )
    decided_by: str | None = Field(..., title='Decided By')
    decided_version: int | None = Field(..., title='Decided Version')
    decision_reason: str | None = Field(..., title='Decision Reason')
    family: str = Field(..., title='Family')
    memory_citations: list[MemoryCitationBody] = Field(..., title='Memory Citations')
    permissions: CandidatePermissions
    position: int | None = Field(
        ...,
        description="Event position of what is shown: the last event a command produced, or on a read or an idempotent replay the aggregate's last event (wait for it with `after=`); null only for an exact historical version read.",
        title='Position',
    )
    proposal: dict[str, Any] = Field(..., title='Proposal')
    proposer: str = Field(..., title='Proposer')
    reason: str = Field(..., title='Reason')
    result: ArtifactRefBody | None = Field(
        ..., description='Approved: the revision it produced.'
    )
    run_id: str | None = Field(
        ..., description='The Dream run that proposed it, if any.', title='Run Id'
    )
    scope_id: str = Field(..., title='Scope Id')
    sources: list[SourceRefBody] = Field(
        ...,
        description='Including the root Sources of the cited Memory entries.',
        title='Sources',
    )
    status: Status1 = Field(..., title='Status')
    target: ArtifactRefBody | None
    version: int = Field(
        ..., description='The current version (revisions add one).', title='Version'
    )


class CreateDreamRun(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    artifacts: list[ArtifactRefBody] | None = Field(None, title='Artifacts')
    idempotency_key: str = Field(..., title='Idempotency Key')
    memory_citations: list[MemoryCitationBody] | None = Field(
        None, title='Memory Citations'
    )
    operation: str = Field(..., title='Operation')
    sources: list[SourceRefBody] | None = Field(None, title='Sources')
    target: ArtifactRefBody | None = None


class DeliveryList(BaseModel):
    delivered_position: int = Field(..., title='Delivered Position')
    deliveries: list[DeliveryView] = Field(..., title='Deliveries')
    scope_id: str = Field(..., title='Scope Id')
    webhook_id: str = Field(..., title='Webhook Id')


class DreamRunPage(BaseModel):
    next_cursor: str | None = Field(..., title='Next Cursor')
    runs: list[DreamRunSummary] = Field(..., title='Runs')


class DreamRunView(BaseModel):
    accepted_at: AwareDatetime = Field(..., title='Accepted At')
    attempt_count: int = Field(..., title='Attempt Count')
    budget: dict[str, int] = Field(..., title='Budget')
    candidate: CandidateRef | None
    completed_at: AwareDatetime | None = Field(..., title='Completed At')
    error: str | None = Field(..., title='Error')
    input_manifest: dict[str, Any] | None = Field(..., title='Input Manifest')
    model_config_id: str | None = Field(..., title='Model Config Id')
    operation: str = Field(..., title='Operation')
    outcome: Outcome1 | None = Field(..., title='Outcome')
    position: int | None = Field(
        ...,
        description="Event position of what is shown: the admission, or on a read or replay the run's last event (a worker's change included; wait for it with `after=`).",
        title='Position',
    )
    prompt_version: str = Field(..., title='Prompt Version')
    reason: str | None = Field(
        ...,
        description="Why the run ended as it did: for a failed run, a human sentence for its `error` code; on a single run also a succeeded run's reason; null while unfinished.",
        title='Reason',
    )
    reused: bool = Field(..., title='Reused')
    run_id: str = Field(..., title='Run Id')
    scope_id: str = Field(..., title='Scope Id')
    started_at: AwareDatetime | None = Field(..., title='Started At')
    status: Status5 = Field(..., title='Status')
    target: ArtifactRefBody | None
    terminal: bool = Field(..., title='Terminal')
    trigger: Trigger = Field(
        ...,
        description='Who started the run: `request` (a caller) or `automatic` (automatic dreaming).',
        title='Trigger',
    )
    usage: Usage


class EntryVersionView(BaseModel):
    artifacts: list[ArtifactRefBody] = Field(..., title='Artifacts')
    citation: MemoryCitationBody
    content_hash: str = Field(..., title='Content Hash')
    entry_id: str = Field(..., title='Entry Id')
    entry_version_id: str = Field(..., title='Entry Version Id')
    kind: str = Field(..., title='Kind')
    memory_ref: ArtifactRefBody
    position: int | None = Field(
        ...,
        description="Event position of what is shown: the last event a command produced, or on a read or an idempotent replay the aggregate's last event (wait for it with `after=`); null only for an exact historical version read.",
        title='Position',
    )
    revision: int = Field(
        ...,
        description='The Memory revision that introduced this version.',
        title='Revision',
    )
    sources: list[SourceRefBody] = Field(..., title='Sources')
    text: str = Field(..., title='Text')
    version: int = Field(..., title='Version')


class EraseRequest(BaseModel):
    """
    Exactly one of ``source``, ``memory_entry``, ``subject``, and why.
    """

    model_config = ConfigDict(
        extra='forbid',
    )
    memory_entry: MemoryEntryBody | None = Field(
        None, description='One Memory entry: every version of it.'
    )
    reason: str = Field(
        ..., description='Why (kept in the history; 1-2000 bytes).', title='Reason'
    )
    source: SourceRefBody | None = Field(None, description='One Source.')
    subject: str | None = Field(
        None,
        description='Every Source and Memory entry recorded for this data subject in the scope (`subject` at recording) whose key still exists.',
        title='Subject',
    )


class ErasureList(BaseModel):
    erasures: list[ErasureSummary] = Field(..., title='Erasures')
    scope_id: str = Field(..., title='Scope Id')


class EvidenceNodeView(BaseModel):
    artifact: ArtifactRefBody | None
    current_entry_version_id: str | None = Field(..., title='Current Entry Version Id')
    digest: str = Field(..., title='Digest')
    evidence_id: str = Field(..., title='Evidence Id')
    historical: bool = Field(..., title='Historical')
    kind: str = Field(..., title='Kind')
    memory_citations: list[MemoryCitationBody] = Field(..., title='Memory Citations')
    role: str = Field(..., title='Role')
    source: SourceRefBody | None


class Health(BaseModel):
    position: int | None = Field(
        ..., description="The store's head (null: cannot be reached).", title='Position'
    )
    projections: dict[str, ProjectionHealth] = Field(..., title='Projections')
    reasons: list[str] | None = Field(
        None, description='Why it is degraded.', title='Reasons'
    )
    status: Status7 = Field(
        ...,
        description='degraded while the store cannot be reached, a read model cannot follow it (both: HTTP 503) or a read model holds dead letters (HTTP 200)',
        title='Status',
    )
    store: str = Field(..., description='sqlite or postgres', title='Store')
    workers: WorkerHealth | None = Field(
        None, description='null: this process runs no workers'
    )


class ImpactView(BaseModel):
    """
    What depends on one Source, entry version or revision, transitively through lineage.
    """

    dependents: list[ImpactedView] = Field(..., title='Dependents')
    hidden: int = Field(
        ...,
        description='Dependents left out because the caller may not read them (their Artifact or Memory is read-revoked for the caller).',
        title='Hidden',
    )
    key: str = Field(..., title='Key')
    kind: str = Field(..., title='Kind')


class LineageBody(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    artifacts: list[ArtifactRefBody] | None = Field(None, title='Artifacts')
    memory_citations: list[MemoryCitationBody] | None = Field(
        None, title='Memory Citations'
    )
    sources: list[SourceRefBody] | None = Field(None, title='Sources')


class OpsOverview(BaseModel):
    """
    The operations page's numbers, read now from the read models, the store, the host's
    metrics and this process's workers.
    """

    activity: list[RunMinuteView] = Field(
        ...,
        description='Runs admitted and ended per minute since `since`, oldest first.',
        title='Activity',
    )
    due: list[DueScopeView] = Field(
        ..., description='Scopes automatic dreaming may find due now.', title='Due'
    )
    generated_at: AwareDatetime = Field(..., title='Generated At')
    inboxes: list[ScopeInboxView] = Field(
        ...,
        description='Scopes with pending Candidates, the fullest inbox first.',
        title='Inboxes',
    )
    minutes: int = Field(
        ..., description='The window of `activity`, in minutes.', title='Minutes'
    )
    model_calls: list[ModelCallsView] = Field(
        ...,
        description='Model calls by generator kind, counted on this host since its processes started (as /metrics counts them).',
        title='Model Calls',
    )
    position: int = Field(..., description="The store's head.", title='Position')
    projections: dict[str, ProjectionHealth] = Field(
        ...,
        description="Each read model's position, lag behind the store and dead letters.",
        title='Projections',
    )
    queues: list[ScopeQueueView] = Field(
        ...,
        description='Scopes with queued runs, the longest wait first.',
        title='Queues',
    )
    runs: list[RunCountView] = Field(
        ...,
        description='Every run of the deployment, by status and trigger (the runs read model).',
        title='Runs',
    )
    since: AwareDatetime = Field(
        ..., description='The first minute of `activity`.', title='Since'
    )
    slots: list[SlotUse] = Field(
        ...,
        description='Generation slots of the deployment (empty: this process runs no workers).',
        title='Slots',
    )
    workers: WorkerHealth | None = Field(
        ..., description='null: this process runs no workers'
    )


class ProposeCandidate(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    artifacts: list[ArtifactRefBody] | None = Field(None, title='Artifacts')
    candidate_id: str = Field(..., title='Candidate Id')
    family: str = Field(..., description='experience or skill', title='Family')
    memory_citations: list[MemoryCitationBody] | None = Field(
        None, title='Memory Citations'
    )
    proposal: dict[str, Any] = Field(
        ..., description='The content of the proposed revision.', title='Proposal'
    )
    reason: str = Field(..., title='Reason')
    sources: list[SourceRefBody] | None = Field(None, title='Sources')
    target: ArtifactRefBody | None = Field(
        None, description='The head revision to replace on approval; null: new.'
    )


class ReadGrant(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    principal: str = Field(..., title='Principal')
    resource: ResourceBody


class ReplaceArtifact(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    content: dict[str, Any] = Field(..., title='Content')
    expected_revision: int = Field(..., title='Expected Revision')
    lineage: LineageBody | None = None


class ReviewedEvidenceView(BaseModel):
    citation_roots: list[SourceRefBody] = Field(
        ...,
        description='Root Sources the direct Memory citations rest on.',
        title='Citation Roots',
    )
    edges: list[list[str]] = Field(
        ..., description='[from, to] evidence id pairs.', title='Edges'
    )
    nodes: list[EvidenceNodeView] = Field(..., title='Nodes')


class ReviseCandidate(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    artifacts: list[ArtifactRefBody] | None = Field(
        None,
        description="Omitted or null keeps the current version's value; [] clears it.",
        title='Artifacts',
    )
    expected_version: int = Field(
        ..., description="The candidate's current version.", title='Expected Version'
    )
    memory_citations: list[MemoryCitationBody] | None = Field(
        None,
        description="Omitted or null keeps the current version's value; [] clears it.",
        title='Memory Citations',
    )
    proposal: dict[str, Any] | None = Field(
        None, description='Omitted or null keeps.', title='Proposal'
    )
    reason: str | None = Field(
        None, description='Omitted or null keeps.', title='Reason'
    )
    sources: list[SourceRefBody] | None = Field(
        None,
        description="Omitted or null keeps the current version's value; [] clears it.",
        title='Sources',
    )
    target: ArtifactRefBody | None = Field(
        None, description='Omitted or null keeps; the target cannot change.'
    )


class ReviseEntry(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    artifacts: list[ArtifactRefBody] | None = Field(None, title='Artifacts')
    expected_entry_version_id: str | None = Field(
        None, title='Expected Entry Version Id'
    )
    expected_revision: int | None = Field(None, title='Expected Revision')
    kind: str = Field(..., title='Kind')
    sources: list[SourceRefBody] | None = Field(None, title='Sources')
    text: str = Field(..., title='Text')


class RevisionView(BaseModel):
    content: dict[str, Any] = Field(..., title='Content')
    head_revision: int = Field(..., title='Head Revision')
    lineage: LineageBody
    manifest: dict[str, ManifestEntryView] | None = Field(
        ...,
        description='Memory only: entry id -> exact version and status at this revision.',
        title='Manifest',
    )
    position: int | None = Field(
        ...,
        description="Event position of what is shown: the last event a command produced, or on a read or an idempotent replay the aggregate's last event (wait for it with `after=`); null only for an exact historical version read.",
        title='Position',
    )
    provenance: dict[str, Any] = Field(..., title='Provenance')
    ref: ArtifactRefBody
    scope_id: str = Field(..., title='Scope Id')


class ScopePage(BaseModel):
    """
    The scopes the caller may read, in scope id order.
    """

    next_cursor: str | None = Field(..., title='Next Cursor')
    scopes: list[ScopeSummaryView] = Field(..., title='Scopes')


class ScopeStatusView(BaseModel):
    """
    A scope at a glance: automatic dreaming's gates, the review inbox, the run queue.
    """

    auto: AutoDreamStatusView = Field(
        ..., description='Automatic dreaming, as `dream auto status`.'
    )
    pending_candidates: int = Field(
        ..., description='Candidates awaiting review.', title='Pending Candidates'
    )
    queued_runs: int = Field(..., title='Queued Runs')
    running_runs: int = Field(..., title='Running Runs')
    scope_id: str = Field(..., title='Scope Id')


class TokenPage(BaseModel):
    tokens: list[TokenView] = Field(
        ..., description='Oldest first, revoked and expired included.', title='Tokens'
    )


class WebhookList(BaseModel):
    scope_id: str = Field(..., title='Scope Id')
    webhooks: list[WebhookView] = Field(..., title='Webhooks')


class CandidateEvidenceView(BaseModel):
    """
    The current version's evidence, re-resolved with the reader's rights now.
    """

    candidate_id: str = Field(..., title='Candidate Id')
    error: ErrorBody | None = Field(
        ..., description='Set when unavailable: why, with its code.'
    )
    evidence: ReviewedEvidenceView | None = Field(..., description='Set when resolved.')
    status: Status = Field(..., title='Status')
    version: int = Field(..., title='Version')


class CreateArtifact(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    artifact_id: str = Field(..., title='Artifact Id')
    content: dict[str, Any] = Field(..., title='Content')
    family: str = Field(..., title='Family')
    lineage: LineageBody | None = None


class KnowledgeItemView(BaseModel):
    """
    An Experience or Skill at its latest approved revision.
    """

    approved_at: AwareDatetime = Field(..., title='Approved At')
    approver: str = Field(..., title='Approver')
    artifact_id: str = Field(..., title='Artifact Id')
    candidate_id: str = Field(..., title='Candidate Id')
    candidate_version: int = Field(..., title='Candidate Version')
    content: dict[str, Any] = Field(..., title='Content')
    family: str = Field(..., title='Family')
    lineage: LineageBody
    package_digest: str | None = Field(
        ...,
        description='Skills: sha256 of the SKILL.md package.',
        title='Package Digest',
    )
    proposer: str = Field(..., title='Proposer')
    rank: float | None = Field(
        ..., description='Text search only: larger is more relevant.', title='Rank'
    )
    ref: ArtifactRefBody = Field(..., description='The approved revision.')
    run_id: str | None = Field(..., title='Run Id')
    scope_id: str = Field(..., title='Scope Id')


class KnowledgePage(BaseModel):
    items: list[KnowledgeItemView] = Field(..., title='Items')
