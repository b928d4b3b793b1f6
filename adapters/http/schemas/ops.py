"""Bodies of the operations endpoints."""

from __future__ import annotations

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
