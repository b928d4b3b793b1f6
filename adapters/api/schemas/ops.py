"""Bodies of the operations endpoints."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field


class ProjectionHealth(BaseModel):
    position: int = Field(description="Last event position the read model applied.")
    lag: int | None = Field(description="Events recorded but not yet applied (null: the store "
                                        "cannot be reached).")
    dead_letters: int | None = Field(0, description="Events the read model could not apply "
                                     "(recorded, never skipped silently; null: unknown now).")
    following: bool = Field(True, description="false while its runner retries a store error.")
    reason: str | None = Field(None, description="The error it retries, while not following.")


class WorkerHealth(BaseModel):
    capacity: int = Field(description="Concurrent generations this process runs at most.")
    busy: int = Field(description="Generations running now.")
    completed: int = Field(description="Attempts this process has finished since it started.")


class Health(BaseModel):
    status: Literal["ok", "degraded"] = Field(
        description="degraded while the store cannot be reached, a read model cannot follow "
                    "it (both: HTTP 503) or a read model holds dead letters (HTTP 200)")
    store: str = Field(description="sqlite or postgres")
    position: int | None = Field(description="The store's head (null: cannot be reached).")
    reasons: list[str] = Field(default_factory=list, description="Why it is degraded.")
    projections: dict[str, ProjectionHealth]
    workers: WorkerHealth | None = Field(None, description="null: this process runs no workers")


class SlotUse(BaseModel):
    pool: str = Field(description="generation (every run) or automatic (automatic runs).")
    cap: int = Field(description="Slots of the pool, across the deployment.")
    in_use: int = Field(description="Slots whose lease runs now.")


class RunCountView(BaseModel):
    status: str = Field(description="queued, running, succeeded or failed")
    trigger: str = Field(description="request or automatic")
    runs: int


class RunMinuteView(BaseModel):
    minute: datetime = Field(description="The minute's start, UTC.")
    event: Literal["accepted", "succeeded", "failed"] = Field(
        description="accepted: admitted in that minute; succeeded, failed: ended in it.")
    trigger: str = Field(description="request or automatic")
    runs: int


class ScopeQueueView(BaseModel):
    scope_id: str
    queued: int = Field(description="Runs admitted and not claimed yet.")
    oldest_accepted_at: datetime
    oldest_wait_seconds: float = Field(description="How long the oldest has waited.")


class ScopeInboxView(BaseModel):
    scope_id: str
    pending: int = Field(description="Candidates waiting for review.")


class DueScopeView(BaseModel):
    scope_id: str
    pending: int = Field(description="Records automatic dreaming counts after the cursor.")
    first_pending: int = Field(description="The oldest one's event position: the order in "
                                           "which the scheduler checks due scopes.")


class LatencyBucket(BaseModel):
    le: float | None = Field(description="Upper bound in seconds (null: +Inf).")
    calls: int = Field(description="Calls that took at most le (cumulative).")


class ModelCallsView(BaseModel):
    generator: str = Field(description="The generator kind (DREAM_GENERATOR).")
    outcomes: dict[str, int] = Field(description="Calls by outcome: ok, or the error code.")
    count: int = Field(description="Calls timed.")
    sum_seconds: float = Field(description="Their total time.")
    p50_seconds: float | None = Field(description="Upper bound of the median (its bucket).")
    p95_seconds: float | None = Field(description="Upper bound of the 95th percentile.")
    buckets: list[LatencyBucket]


class OpsOverview(BaseModel):
    """The operations page's numbers, read now from the read models, the store, the host's
    metrics and this process's workers."""

    generated_at: datetime
    position: int = Field(description="The store's head.")
    minutes: int = Field(description="The window of `activity`, in minutes.")
    since: datetime = Field(description="The first minute of `activity`.")
    runs: list[RunCountView] = Field(description="Every run of the deployment, by status and "
                                                 "trigger (the runs read model).")
    activity: list[RunMinuteView] = Field(description="Runs admitted and ended per minute "
                                                      "since `since`, oldest first.")
    queues: list[ScopeQueueView] = Field(description="Scopes with queued runs, the longest "
                                                     "wait first.")
    inboxes: list[ScopeInboxView] = Field(description="Scopes with pending Candidates, the "
                                                      "fullest inbox first.")
    due: list[DueScopeView] = Field(description="Scopes automatic dreaming may find due now.")
    projections: dict[str, ProjectionHealth] = Field(description="Each read model's position, "
                                                     "lag behind the store and dead letters.")
    model_calls: list[ModelCallsView] = Field(description="Model calls by generator kind, "
                                              "counted on this host since its processes "
                                              "started (as /metrics counts them).")
    workers: WorkerHealth | None = Field(description="null: this process runs no workers")
    slots: list[SlotUse] = Field(description="Generation slots of the deployment (empty: "
                                             "this process runs no workers).")
