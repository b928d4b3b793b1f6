"""The one access policy: may this caller do this in this scope, now?

Every command, query and background run asks here; nothing else decides a permission. The
caller is a plain value passed with each call, never ambient state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID

from eventsourcing.domain import Aggregate

from domain.access import ROLE_PERMISSIONS, Action, Resource, Role
from domain.errors import DomainError, ForbiddenError, ScopeNotFoundError

if TYPE_CHECKING:
    from domain.scope import Scope


@dataclass(frozen=True)
class Caller:
    """Who a command or query acts for, authenticated; ``admin`` administers the whole
    deployment. It is its own proof (``application.credentials.Who``): nothing to read."""

    name: str
    admin: bool = False

    @property
    def principal(self) -> str:
        return self.name

    def proof(self) -> Mapping[UUID, type[Aggregate]]:
        return {}

    def caller(self, found: Mapping[UUID, Any]) -> Caller:
        return self


# The caller of a deployment that does not enforce access (a laptop, a test).
LOCAL = Caller("local", admin=True)


@dataclass(frozen=True)
class Permissions:
    """What a caller may do with a pending Candidate now (hints for clients; commands
    re-check)."""

    can_revise: bool
    can_approve: bool
    can_reject: bool


def scope_not_found(scope_id: str) -> ScopeNotFoundError:
    return ScopeNotFoundError(f"scope {scope_id!r} does not exist", scope_id=scope_id)


@dataclass(frozen=True)
class AccessPolicy:
    """Roles and read grants recorded on the scope decide; administrators may do anything;
    with ``enforced`` off every caller may do anything."""

    enforced: bool = True

    def permits(self, caller: Caller, scope: Scope, action: Action,
                resource: Resource | None = None) -> bool:
        return (not self.enforced or caller.admin
                or scope.permits(caller.name, action, resource))

    def check(self, caller: Caller, scope: Scope, action: Action,
              resource: Resource | None = None) -> None:
        """Refuse unless permitted. A scope the caller has no access to at all is reported as
        absent, so scopes cannot be discovered by probing."""
        if self.permits(caller, scope, action, resource):
            return
        if not scope.acknowledges(caller.name):
            raise scope_not_found(scope.scope_id)
        raise ForbiddenError(f"{caller.name} may not {action} here", action=action,
                             principal=caller.name,
                             resource=None if resource is None else resource.to_dict())

    def check_any(self, caller: Caller, scope: Scope, *actions: Action) -> None:
        """Permitted if any of ``actions`` is; otherwise the first refusal is reported."""
        refusal: DomainError | None = None
        for action in actions:
            try:
                self.check(caller, scope, action)
                return
            except ForbiddenError as error:
                refusal = refusal or error
        assert refusal is not None
        raise refusal

    @staticmethod
    def roles_permitting(action: Action) -> frozenset[Role]:
        """The roles that allow ``action`` on a whole scope (not one resource)."""
        return frozenset(role for role, actions in ROLE_PERMISSIONS.items() if action in actions)

    def require_admin(self, caller: Caller) -> None:
        if self.enforced and not caller.admin:
            raise ForbiddenError("only a deployment administrator may do this",
                                 principal=caller.name)

    def may_revise(self, caller: Caller, scope: Scope, proposer: str) -> bool:
        """A reviewer may revise any pending Candidate, a contributor the ones they proposed."""
        return self.permits(caller, scope, Action.REVIEW) or (
            proposer == caller.name and self.permits(caller, scope, Action.CONTRIBUTE))

    def candidate_permissions(self, caller: Caller, scope: Scope, proposer: str,
                              pending: bool) -> Permissions:
        reviewer = pending and self.permits(caller, scope, Action.REVIEW)
        return Permissions(can_revise=pending and self.may_revise(caller, scope, proposer),
                           can_approve=reviewer, can_reject=reviewer)

    def readable(self, caller: Caller, scope: Scope,
                 resources: Iterable[Resource]) -> set[Resource]:
        """Those of ``resources`` the caller may read now: read models are shared by the whole
        scope, so their rows are filtered per caller."""
        return {resource for resource in resources
                if self.permits(caller, scope, Action.READ, resource)}
