"""Callers, principals, tokens and the permission check every command performs.

The caller travels with the call in a ``ContextVar`` set per request (or per run), never in
shared state, so concurrent requests cannot see each other's identity.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime

from eventsourcing.domain import Aggregate
from eventsourcing.utils import get_topic

from application.write_model import WriteModel, Written
from domain.access import Resource
from domain.errors import (
    ForbiddenError,
    PrincipalExistsError,
    PrincipalNotFoundError,
    ScopeNotFoundError,
    TokenNotFoundError,
    UnauthorizedError,
    UnknownPrincipalError,
)
from domain.identity import check_scope_id, scope_aggregate_id
from domain.principal import (
    PRINCIPAL_MAX,
    AccessToken,
    Principal,
    token_aggregate_id,
    token_expiry,
)
from domain.scope import Scope
from domain.text import check_identifier

BOOTSTRAP_ADMIN = "admin"
ACTED_BY = "acted_by"
TOKEN_PREFIX = "dream_"
_TOKENS_PAGE = 500


@dataclass(frozen=True)
class IssuedToken:
    """A freshly issued token: the secret (shown once, never stored) and its record."""

    secret: str
    record: AccessToken


@dataclass(frozen=True)
class Caller:
    name: str
    admin: bool = False


LOCAL_CALLER = Caller("local", admin=True)
_current_caller: ContextVar[Caller | None] = ContextVar("dream_caller", default=None)


@contextmanager
def acting_as(caller: Caller) -> Iterator[Caller]:
    """Run the enclosed commands on behalf of ``caller``."""
    token = _current_caller.set(caller)
    try:
        yield caller
    finally:
        _current_caller.reset(token)


def current_caller() -> Caller | None:
    return _current_caller.get()


def token_hash(token: str) -> str:
    # Tokens are 256-bit random strings, so a fast hash is not brute-forceable.
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class Access(WriteModel):
    """Authentication and authorisation on top of the event store."""

    def commit(self, *changed: Aggregate, read: Iterable[Aggregate] = ()) -> int | None:
        """Save as :meth:`WriteModel.commit`, each new event stamped with who acted.

        ``acted_by`` is audit metadata, not domain state: event handlers never read it, and
        ``None`` means the service itself (a worker finishing a run, say).
        """
        caller = current_caller() or (None if self.enforce_access else LOCAL_CALLER)
        for aggregate in changed:
            for pending in aggregate.pending_events:
                if not hasattr(pending, ACTED_BY):
                    object.__setattr__(pending, ACTED_BY, None if caller is None else caller.name)
        return super().commit(*changed, read=read)

    # -- checks ------------------------------------------------------------------------------

    def caller(self) -> Caller:
        if not self.enforce_access:
            return current_caller() or LOCAL_CALLER
        caller = current_caller()
        if caller is None:
            raise UnauthorizedError("this command needs an authenticated caller")
        return caller

    def require_admin(self) -> Caller:
        caller = self.caller()
        if not caller.admin:
            raise ForbiddenError("only a deployment administrator may do this",
                                 principal=caller.name)
        return caller

    def scope_for(self, scope_id: str, action: str, resource: Resource | None = None) -> Scope:
        """Load the scope and check the caller's current rights in it.

        A scope the caller has no access to at all is reported as absent, so scopes cannot
        be discovered by probing.
        """
        scope = self._load_scope(scope_id)
        self.check_permitted(scope, action, resource)
        return scope

    def check_permitted(self, scope: Scope, action: str, resource: Resource | None = None,
                        ) -> None:
        caller = self.caller()
        if caller.admin:
            return
        if not scope.acknowledges(caller.name):
            raise self._scope_not_found(scope.scope_id)
        if not scope.permits(caller.name, action, resource):
            raise ForbiddenError(f"{caller.name} may not {action} here", action=action,
                                 principal=caller.name,
                                 resource=None if resource is None else resource.to_dict())

    def _load_scope(self, scope_id: str) -> Scope:
        scope: Scope = self.load(scope_aggregate_id(check_scope_id(scope_id)),
                                 lambda: self._scope_not_found(scope_id))
        return scope

    @staticmethod
    def _scope_not_found(scope_id: str) -> ScopeNotFoundError:
        return ScopeNotFoundError(f"scope {scope_id!r} does not exist", scope_id=scope_id)

    # -- principals and tokens ---------------------------------------------------------------

    def register_principal(self, name: str, admin: bool = False) -> Written[Principal]:
        self.require_admin()
        principal = Principal.register(name, admin)
        if self.exists(principal.id):
            raise PrincipalExistsError(f"principal {name!r} already exists", principal=name)
        return Written(principal, self.commit(principal))

    def issue_token(self, principal: str, label: str = "token",
                    expires_at: datetime | None = None) -> Written[str]:
        """A new bearer token for ``principal``; only its hash is stored."""
        self.require_admin()
        self.get_principal(principal)
        written = self._issue(principal, label, token_expiry(self.clock(), expires_at=expires_at))
        return Written(written.value.secret, written.position)

    def issue_token_for(self, principal: str, label: str, *, admin: bool = False,
                        expires_in_seconds: int | None = None,
                        expires_at: datetime | None = None) -> Written[IssuedToken]:
        """Issue a token, registering ``principal`` first when it is new (in one save).

        ``admin`` must match an existing principal: a token never silently carries more, or
        fewer, rights than the administrator asked for.
        """
        self.require_admin()
        expiry = token_expiry(self.clock(), expires_in_seconds, expires_at)
        existing: Principal | None = self.find(Principal.create_id(principal))
        if existing is not None and existing.admin != admin:
            raise PrincipalExistsError(
                f"principal {principal!r} exists with admin={existing.admin}; a token cannot "
                "change that", principal=principal, admin=existing.admin)
        new = [] if existing is not None else [Principal.register(principal, admin)]
        return self._issue(principal, label, expiry, *new)

    def _issue(self, principal: str, label: str, expires_at: datetime | None,
               *also: Aggregate) -> Written[IssuedToken]:
        secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
        issued = AccessToken.issue(token_hash(secret), principal, label, expires_at)
        return Written(IssuedToken(secret, issued), self.commit(*also, issued))

    def list_tokens(self, principal: str | None = None) -> list[AccessToken]:
        """Every token ever issued (revoked and expired ones included), oldest first.

        Tokens are found by their ``Issued`` events, so tokens issued before this listing
        existed appear too; each is then loaded for its current state.
        """
        self.require_admin()
        if principal is not None:  # a name that could be registered, as registration checks
            check_identifier("principal", principal, PRINCIPAL_MAX)
        topics = [get_topic(AccessToken.Issued)]
        tokens: list[AccessToken] = []
        start = 1
        while True:
            page = self.recorder.select_notifications(start, _TOKENS_PAGE, topics=topics)
            for notification in page:
                issued = self.mapper.to_domain_event(notification)
                if principal is None or getattr(issued, "principal", None) == principal:
                    tokens.append(self.repository.get(issued.originator_id))
            if len(page) < _TOKENS_PAGE:
                return tokens
            start = page[-1].id + 1

    def get_token(self, token_id: str) -> AccessToken:
        self.require_admin()
        found = self.find(token_aggregate_id(token_id))
        if not isinstance(found, AccessToken):  # absent, or the id of another aggregate
            raise TokenNotFoundError("no such token", token_id=token_id)
        return found

    def revoke_token_by_id(self, token_id: str, reason: str = "revoked") -> Written[AccessToken]:
        """Revoke by the public token id; every process refuses it from its next request on
        (authentication reads the token per request). Revoking again changes nothing."""
        issued = self.get_token(token_id)
        changed = issued.revoke(reason)
        return Written(issued, self.commit(issued) if changed else None)

    def revoke_token(self, token: str, reason: str = "revoked") -> Written[None]:
        self.require_admin()
        issued = self._token(token)
        issued.revoke(reason)
        return Written(None, self.commit(issued))

    def get_principal(self, name: str) -> Principal:
        principal: Principal = self.load(Principal.create_id(name), lambda: PrincipalNotFoundError(
            f"principal {name!r} does not exist", principal=name))
        return principal

    def check_principal_known(self, name: str) -> None:
        """Roles and grants name registered principals only (a typo would grant nothing)."""
        if not self.exists(Principal.create_id(name)):
            raise UnknownPrincipalError(f"principal {name!r} is not registered",
                                        principal=name)

    def authenticate(self, token: str) -> Caller:
        """Read per request, never cached: a revocation or an expiry applies at once."""
        issued = self._token(token)
        issued.check_usable(self.clock())
        return Caller(issued.principal, self.get_principal(issued.principal).admin)

    def _token(self, token: str) -> AccessToken:
        issued: AccessToken = self.load(AccessToken.create_id(token_hash(token)),
                                        lambda: UnauthorizedError("unknown bearer token"))
        return issued

    def bootstrap_admin(self) -> str | None:
        """On first start, create the ``admin`` principal and return its only token."""
        admin = Principal.register(BOOTSTRAP_ADMIN, admin=True)
        if self.exists(admin.id):
            return None
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        self.commit(admin, AccessToken.issue(token_hash(token), BOOTSTRAP_ADMIN, "bootstrap"))
        return token
