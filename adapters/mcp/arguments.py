"""The tools' arguments: the REST request bodies (``adapters/api/schemas``) with the path and
query parameters of the same route beside them, so a tool's JSON schema is its route's."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from adapters.api.params import check_plain
from adapters.api.schemas import (
    AddEntry,
    ApproveCandidate,
    CreateDreamRun,
    CreateMemory,
    CreateScope,
    DeactivateEntry,
    RecordSource,
    RejectCandidate,
    ReviseEntry,
    Strict,
)
from adapters.api.schemas.vocabulary import (
    DreamOperationName,
    InboxStatusQuery,
    ReviewedFamilyName,
    RunStatusName,
)
from domain.errors import InvalidRequestError

SCOPE_HELP = ("The scope to act in. May be omitted when the server was started for one scope "
              "(`dream mcp --scope`, or the `X-Dream-Scope` header over HTTP).")


class Arguments(Strict):
    # Which fields are path and which query parameters of the route: a control character in
    # one is refused with the code REST gives it.
    PATH: ClassVar[tuple[str, ...]] = ()
    QUERY: ClassVar[tuple[str, ...]] = ()

    def check_plain(self) -> None:
        for place, names in (("path", self.PATH), ("query", self.QUERY)):
            for name in names:
                value = getattr(self, name)
                if isinstance(value, str):
                    check_plain(place, name, value)

    def scope(self, default: str | None) -> str:
        """The scope the call acts in: none, for a tool across scopes."""
        return ""


class InScope(Arguments):
    PATH: ClassVar[tuple[str, ...]] = ("scope_id",)

    scope_id: str | None = Field(default=None, description=SCOPE_HELP)

    def scope(self, default: str | None) -> str:
        scope_id = self.scope_id or default
        if scope_id is None:
            raise InvalidRequestError("scope_id is required: this server has no default scope",
                                      field="scope_id")
        check_plain("path", "scope_id", scope_id)
        return scope_id


class RecordSourceArguments(RecordSource, InScope):
    pass


class CreateMemoryArguments(CreateMemory, InScope):
    pass


class InMemory(InScope):
    PATH: ClassVar[tuple[str, ...]] = ("scope_id", "memory_id")

    memory_id: str = Field(description="The Memory (create it once with create_memory).")


class AddEntryArguments(AddEntry, InMemory):
    pass


class OfEntry(InMemory):
    PATH: ClassVar[tuple[str, ...]] = ("scope_id", "memory_id", "entry_id")

    entry_id: str


class ReviseEntryArguments(ReviseEntry, OfEntry):
    pass


class DeactivateEntryArguments(DeactivateEntry, OfEntry):
    pass


class RequestDreamArguments(CreateDreamRun, InScope):
    pass


class DreamRunArguments(InScope):
    PATH = ("scope_id", "run_id")

    run_id: str = Field(description="The run_id request_dream answered.")


class InboxArguments(InScope):
    QUERY = ("status", "family", "cursor")

    status: InboxStatusQuery = "pending"
    family: ReviewedFamilyName | None = None
    cursor: str | None = Field(default=None, description="next_cursor of the previous page.")
    limit: int = Field(default=50, description="1 to 100.")


class SearchArguments(InScope):
    QUERY = ("q", "family")

    q: str | None = Field(default=None,
                          description="Words that must all match; omit for the newest.")
    family: ReviewedFamilyName | None = None
    limit: int = Field(default=20, description="1 to 100.")


class RunsArguments(InScope):
    QUERY = ("status", "operation", "cursor")

    status: RunStatusName | None = Field(default=None, description="Only runs in this status.")
    operation: DreamOperationName | None = None
    cursor: str | None = Field(default=None, description="next_cursor of the previous page.")
    limit: int = Field(default=20, description="1 to 100.")


class MemoryArguments(InScope):
    PATH = ("scope_id", "memory_id")

    memory_id: str


class EntryVersionArguments(InScope):
    PATH = ("scope_id", "memory_id", "entry_id", "entry_version_id")

    memory_id: str
    revision: int = Field(description="The Memory revision the citation names.")
    entry_id: str
    entry_version_id: str


class RevisionArguments(InScope):
    PATH = ("scope_id", "family", "artifact_id")

    family: str = Field(description="experience, skill, memory or prompt.")
    artifact_id: str
    revision: int


class OfCandidate(InScope):
    PATH = ("scope_id", "candidate_id")

    candidate_id: str


class ApproveArguments(ApproveCandidate, OfCandidate):
    pass


class RejectArguments(RejectCandidate, OfCandidate):
    pass


class ScopeStatusArguments(InScope):
    pass


class CreateScopeArguments(CreateScope, InScope):  # type: ignore[misc]
    """The scope to create is ``scope_id`` itself (no default applies)."""


class ScopesArguments(Arguments):
    QUERY = ("cursor",)

    cursor: str | None = Field(default=None, description="next_cursor of the previous page.")
    limit: int = Field(default=20, description="1 to 100.")
