"""Erasure: what an administrator asks to forget, what was forgotten, what came of it."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from adapters.api.schemas.common import SourceRefBody, Strict, Written

NodeKind = Literal["artifact_revision", "candidate_version", "entry_version", "source"]


class MemoryEntryBody(Strict):
    memory_id: str
    entry_id: str


class EraseRequest(Strict):
    """Exactly one of ``source``, ``memory_entry``, ``subject``, and why."""

    source: SourceRefBody | None = Field(default=None, description="One Source.")
    memory_entry: MemoryEntryBody | None = Field(
        default=None, description="One Memory entry: every version of it.")
    subject: str | None = Field(
        default=None,
        description="Every Source and Memory entry recorded for this data subject in the "
                    "scope (`subject` at recording) whose key still exists.")
    reason: str = Field(description="Why (kept in the history; 1-2000 bytes).")

    @model_validator(mode="after")
    def _one_target(self) -> EraseRequest:
        named = [name for name in ("source", "memory_entry", "subject")
                 if getattr(self, name) is not None]
        if len(named) != 1:
            msg = "name exactly one of source, memory_entry, subject"
            raise ValueError(msg)
        return self


class ErasedNode(BaseModel):
    kind: NodeKind
    key: str


class ErasureView(Written):
    erasure_id: str
    scope_id: str
    kind: Literal["source", "memory_entry", "subject"]
    target: dict[str, Any] = Field(description="What was named: a Source or Memory entry by "
                                               "its ids, a subject by its digest only.")
    reason: str
    erased_by: str | None
    erased_at: datetime
    records: list[dict[str, Any]] = Field(description="Each erased record by its ids and "
                                                      "content hashes, never its text.")
    derived: list[ErasedNode] = Field(description="The Candidate versions, Artifact revisions "
                                                  "and Memory entry versions derived from "
                                                  "them when the erasure was made.")
    scrubbed: dict[str, Any] | None = Field(
        default=None, description="What the store did to leave no byte of the destroyed keys "
                                  "in its files (only in the answer to the erasure).")


class ErasureSummary(BaseModel):
    erasure_id: str
    kind: Literal["source", "memory_entry", "subject"]
    erased_at: datetime
    records: int
    derived: int
    position: int


class ErasureList(BaseModel):
    scope_id: str
    erasures: list[ErasureSummary]


class DerivedItem(BaseModel):
    kind: NodeKind
    key: str
    erasure_id: str
    status: Literal["pending", "head", "current"] = Field(
        description="`pending`: a Candidate awaiting review; `head`: the latest revision of an "
                    "Experience or Skill; `current`: the current version of an active Memory "
                    "entry.")


class DerivedQueue(BaseModel):
    """What reviewers revise or retire: knowledge still derived from erased evidence."""

    scope_id: str
    items: list[DerivedItem]
