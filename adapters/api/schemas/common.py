"""What every request and response body is built of: the strictness of request bodies, the
reference bodies, the position a response shows and the error envelope."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from adapters.api.schemas.vocabulary import ResourceKindName
from domain.errors import DomainError
from domain.refs import ArtifactRef, Lineage, MemoryCitation, SourceRef, check_family


class Strict(BaseModel):
    """A request body: unknown fields refused, and no coercion between JSON types (``true`` is
    not ``1``, ``"1"`` is not a number, ``1`` is not a string)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _date_time_text(value: object) -> object:
    if isinstance(value, str | datetime):
        return value
    msg = "must be an ISO 8601 date-time string"
    raise ValueError(msg)


# JSON has no date-time type: an ISO 8601 string is the one accepted form (no numbers).
IsoDateTime = Annotated[datetime, Field(strict=False), BeforeValidator(_date_time_text)]


# -- references --------------------------------------------------------------------------------

class SourceRefBody(Strict):
    source_type: str
    source_id: str

    def to_domain(self) -> SourceRef:
        return SourceRef(self.source_type, self.source_id)


class ArtifactRefBody(Strict):
    family: str
    artifact_id: str
    revision: int

    def to_domain(self) -> ArtifactRef:
        return ArtifactRef(check_family(self.family), self.artifact_id, self.revision)


class MemoryCitationBody(Strict):
    memory_ref: ArtifactRefBody
    entry_id: str
    entry_version_id: str

    def to_domain(self) -> MemoryCitation:
        return MemoryCitation(self.memory_ref.to_domain(), self.entry_id, self.entry_version_id)


class LineageBody(Strict):
    sources: list[SourceRefBody] = Field(default_factory=list)
    artifacts: list[ArtifactRefBody] = Field(default_factory=list)
    memory_citations: list[MemoryCitationBody] = Field(default_factory=list)

    def to_domain(self) -> Lineage:
        return Lineage(tuple(s.to_domain() for s in self.sources),
                       tuple(a.to_domain() for a in self.artifacts),
                       tuple(c.to_domain() for c in self.memory_citations))


class ResourceBody(Strict):
    kind: ResourceKindName
    family: str | None = None
    artifact_id: str | None = None
    source_type: str | None = None
    source_id: str | None = None


class Written(BaseModel):
    position: int | None = Field(
        description="Event position of what is shown: the last event a command produced, or "
                    "on a read or an idempotent replay the aggregate's last event (wait for it "
                    "with `after=`); null only for an exact historical version read.")


class ErrorBody(BaseModel):
    code: str
    message: str
    details: dict[str, Any]


class ErrorResponse(BaseModel):
    error: ErrorBody


# -- conversions -------------------------------------------------------------------------------

def to_domain_items(items: list[Any], name: str) -> tuple[Any, ...]:
    """Convert request items, naming the offending item in the error's field path."""
    converted = []
    for index, item in enumerate(items):
        try:
            converted.append(item.to_domain())
        except DomainError as error:
            inner = error.details.get("field")
            error.details["field"] = f"{name}[{index}]" + (f".{inner}" if inner else "")
            raise
    return tuple(converted)


def ref_body(ref: ArtifactRef | Mapping[str, Any] | None) -> ArtifactRefBody | None:
    if ref is None:
        return None
    return ArtifactRefBody(**(ref.to_dict() if isinstance(ref, ArtifactRef) else ref))
