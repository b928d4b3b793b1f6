"""Reads served by the read models, filtered by the caller's rights.

Read models are shared by the whole scope, so a row a caller may not read is dropped here,
by the one access policy, and never in an adapter. Each query checks the scope first, then
asks for the view (``view()`` may wait for it to catch up), then filters.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from application.access import ScopeGate
from application.credentials import Who
from domain.access import Action, Resource

# The largest page a read model answers (``projections.paging`` enforces it on every view).
MAX_PAGE = 100
K = TypeVar("K", bound="KnowledgeRow")
D = TypeVar("D", bound="DependentRow")
K_co = TypeVar("K_co", bound="KnowledgeRow", covariant=True)
D_co = TypeVar("D_co", bound="DependentRow", covariant=True)
F = TypeVar("F")
F_co = TypeVar("F_co", covariant=True)


class KnowledgeRow(Protocol):
    @property
    def family(self) -> str: ...
    @property
    def artifact_id(self) -> str: ...


class KnowledgeSearch(Protocol[K_co]):
    def search(self, scope_id: str, text: str | None, *, family: str | None,
               limit: int) -> Sequence[K_co]: ...


class DependentRow(Protocol):
    @property
    def kind(self) -> str: ...
    @property
    def key(self) -> str: ...


class ImpactSearch(Protocol[D_co]):
    def impact(self, scope_id: str, kind: str, key: str, *,
               max_depth: int) -> Sequence[D_co]: ...


# What a reader needs read access to in order to see a provenance node (None: the scope).
Guard = Callable[[str, str], "Resource | None"]


@dataclass(frozen=True)
class Impact(Generic[D]):
    shown: list[D]
    hidden: int


class ScopeRow(Protocol):
    @property
    def scope_id(self) -> str: ...


S = TypeVar("S", bound=ScopeRow)


class ScopeCatalogue(Protocol[S]):
    def list_scopes(self, *, holders_of: tuple[str, Collection[str]] | None = ...,
                    cursor: str | None = ..., limit: int = ...
                    ) -> tuple[list[S], str | None]: ...

    def roles_in(self, principal: str, scope_ids: Sequence[str]) -> dict[str, list[str]]: ...


@dataclass(frozen=True)
class ScopeListing(Generic[S]):
    """A page of the scopes a caller may read, the caller's roles in each, the next cursor."""

    scopes: list[S]
    roles: dict[str, list[str]]
    next_cursor: str | None


class EventFeed(Protocol[F_co]):
    def events_after(self, scope_id: str, after: int, limit: int = ...) -> Sequence[F_co]: ...


class ReadModelQueries:
    def __init__(self, gate: ScopeGate) -> None:
        self.gate = gate
        self.policy = gate.policy

    def search_knowledge(self, who: Who, scope_id: str,
                         view: Callable[[], KnowledgeSearch[K]], text: str | None,
                         family: str | None, limit: int) -> list[K]:
        """Approved Experiences and Skills the caller may read, most relevant first."""
        caller, scope = self.gate.enter(who, scope_id, Action.READ)
        knowledge = view()
        items = knowledge.search(scope_id, text, family=family, limit=limit)
        readable = self.policy.readable(caller, scope, _artifacts(items))
        if len(readable) < len(items) == limit < MAX_PAGE:
            # Some rows are hidden from this caller: look further so the page can still fill.
            items = knowledge.search(scope_id, text, family=family, limit=MAX_PAGE)
            readable = self.policy.readable(caller, scope, _artifacts(items))
        return [item for item in items
                if Resource.artifact(item.family, item.artifact_id) in readable][:limit]

    def list_scopes(self, who: Who, view: Callable[[], ScopeCatalogue[S]],
                    cursor: str | None, limit: int) -> ScopeListing[S]:
        """The scopes the caller may read, in scope id order (see :meth:`readable_scopes`)."""
        caller, holders_of = self.readable_scopes(who)
        catalogue = view()
        scopes, next_cursor = catalogue.list_scopes(holders_of=holders_of, cursor=cursor,
                                                    limit=limit)
        roles = catalogue.roles_in(caller, [scope.scope_id for scope in scopes])
        return ScopeListing(scopes, roles, next_cursor)

    def readable_scopes(self, who: Who) -> tuple[str, tuple[str, Collection[str]] | None]:
        """The caller's name, and which scopes it may read: all of them (``None``) for an
        administrator (or where access is not enforced), else those where it holds one of
        the roles that let it read (``holders_of`` of a scope catalogue)."""
        caller = self.gate.authenticate(who)
        if not self.policy.enforced or caller.admin:
            return caller.name, None
        return caller.name, (caller.name, self.policy.roles_permitting(Action.READ))

    def event_feed(self, who: Who, scope_id: str, view: Callable[[], EventFeed[F]],
                   after: int, limit: int) -> list[F]:
        """The scope's events after ``after`` (public fields only), for a reader of the scope."""
        self.gate.scope_for(who, scope_id, Action.READ)
        return list(view().events_after(scope_id, after, limit))

    def impact(self, who: Who, scope_id: str, view: Callable[[], ImpactSearch[D]],
               guard: Guard, kind: str, key: str, max_depth: int) -> Impact[D]:
        """Everything depending on one node that the caller may read, and how many are not."""
        caller, scope = self.gate.enter(who, scope_id, Action.READ, guard(kind, key))
        found = view().impact(scope_id, kind, key, max_depth=max_depth)
        guards = {(d.kind, d.key): guard(d.kind, d.key) for d in found}
        readable = self.policy.readable(
            caller, scope, {g for g in guards.values() if g is not None})
        shown = [d for d in found if (g := guards[(d.kind, d.key)]) is None or g in readable]
        return Impact(shown, len(found) - len(shown))


def _artifacts(items: Sequence[KnowledgeRow]) -> set[Resource]:
    return {Resource.artifact(item.family, item.artifact_id) for item in items}
