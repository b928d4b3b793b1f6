"""Principals and tokens, and the gate every use case passes to reach a scope.

Who calls is an argument of every command and query (``application.credentials.Who``), proved
by the command's first read; whether the caller may act is decided by the one ``AccessPolicy``.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.domain import Aggregate
from eventsourcing.utils import get_topic

from application.credentials import Who, proved
from application.ports import Clock
from application.store import EventStore, Written
from domain.access import Action, Resource
from domain.errors import (
    DomainError,
    PrincipalExistsError,
    PrincipalNotFoundError,
    TokenNotFoundError,
    UnauthorizedError,
    UnknownPrincipalError,
)
from domain.ids import scope_aggregate_id, token_aggregate_id
from domain.policy import AccessPolicy, Caller, scope_not_found
from domain.principal import PRINCIPAL_MAX, AccessToken, Principal, token_expiry
from domain.scope import Scope
from domain.text import check_identifier, check_scope_id

BOOTSTRAP_ADMIN = "admin"
MAX_REMEMBERED_PRINCIPALS = 10_000
TOKEN_PREFIX = "dream_"
_TOKENS_PAGE = 500
K = TypeVar("K")
T = TypeVar("T")
V = TypeVar("V")


@dataclass(frozen=True)
class IssuedToken:
    """A freshly issued token: the secret (shown once, never stored) and its record."""

    secret: str
    record: AccessToken


def token_hash(token: str) -> str:
    # Tokens are 256-bit random strings, so a fast hash is not brute-forceable.
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Acting:
    """What the gate answers a command: who acts, the scope, and the other aggregates of the
    scope read with it (``None``: no events)."""

    caller: Caller
    scope: Scope
    found: dict[UUID, Any]


class ScopeGate:
    """Loads a scope and asks the policy: the one way a use case reaches a scope."""

    def __init__(self, store: EventStore, policy: AccessPolicy) -> None:
        self.store = store
        self.policy = policy

    def load(self, scope_id: str) -> Scope:
        scope: Scope = self.store.load(scope_aggregate_id(check_scope_id(scope_id)),
                                       lambda: scope_not_found(scope_id), kind=Scope)
        return scope

    def scope_for(self, who: Who, scope_id: str, action: Action,
                  resource: Resource | None = None) -> Scope:
        """The scope, once ``who`` is authenticated and its current rights in the scope allow
        ``action``."""
        return self.enter(who, scope_id, action, resource)[1]

    def enter(self, who: Who, scope_id: str, action: Action,
              resource: Resource | None = None) -> tuple[Caller, Scope]:
        """``who`` authenticated, and the scope once the caller may ``action`` in it (on
        ``resource``), read in one round trip."""
        acting = self.acting_in(who, scope_id, action, {}, resource)
        return acting.caller, acting.scope

    def may(self, who: Who, scope_id: str | None, action: Action) -> bool:
        """Whether the caller may ``action`` in the scope now (``None``: no scope named, so
        only where the policy does not ask which). An unknown scope permits nothing."""
        caller = self.authenticate(who)
        if not self.policy.enforced or caller.admin:
            return True
        if scope_id is None:
            return False
        try:
            self.scope_for(caller, scope_id, action)
        except DomainError:
            return False
        return True

    def acting_in(self, who: Who, scope_id: str, action: Action,
                  also: Mapping[UUID, type[Aggregate]],
                  resource: Resource | None = None) -> Acting:
        """``who`` authenticated, the scope once the caller may ``action`` in it, and other
        aggregates of the scope, all read in one round trip. Authentication comes first: a
        caller without valid credentials is told so, not whether the scope exists or what is
        wrong with its id."""
        scope_key = self.checked(who, lambda: scope_aggregate_id(check_scope_id(scope_id)))
        proof = who.proof()
        found = self.store.find_many({**also, **proof, scope_key: Scope})
        caller = who.caller(found)
        for key in proof:
            del found[key]
        scope: Scope | None = found.pop(scope_key)
        if scope is None:
            raise scope_not_found(scope_id)
        self.policy.check(caller, scope, action, resource)
        return Acting(caller, scope, found)

    def authenticate(self, who: Who) -> Caller:
        """``who`` authenticated on its own (a read of its proof, if it has one)."""
        return proved(who, self.store.find_many)

    def checked(self, who: Who, check: Callable[[], T]) -> T:
        """``check()`` of a request; when it refuses, ``who`` is authenticated first, so a
        caller without valid credentials is told so, not what is wrong with the request."""
        try:
            return check()
        except DomainError:
            self.authenticate(who)
            raise

    def load_with(self, scope_id: str, also: Mapping[UUID, type[Aggregate]]
                  ) -> tuple[Scope, dict[UUID, Any]]:
        """The scope, as :meth:`load` answers it, and other aggregates read with it."""
        scope_key = scope_aggregate_id(check_scope_id(scope_id))
        found = self.store.find_many({**also, scope_key: Scope})
        scope: Scope | None = found.pop(scope_key)
        if scope is None:
            raise scope_not_found(scope_id)
        return scope, found

    def check_principal_known(self, name: str) -> None:
        """Roles and grants name registered principals only (a typo would grant nothing)."""
        if not self.store.exists(Principal.create_id(name)):
            raise UnknownPrincipalError(f"principal {name!r} is not registered",
                                        principal=name)


class Principals:
    """Principals, bearer tokens and authentication."""

    def __init__(self, store: EventStore, policy: AccessPolicy, clock: Clock) -> None:
        self.store = store
        self.policy = policy
        self.clock = clock
        # A principal's admin flag is fixed at registration (no event changes it), so it is
        # read once per process; tokens are still read per request. Nor does a token ever
        # name another principal: which one it names is remembered, so that a command whose
        # keys derive from the principal reads them together with the token.
        self._admin: dict[str, bool] = {}
        self._named: dict[UUID, str] = {}

    def register_principal(self, who: Who, name: str,
                           admin: bool = False) -> Written[Principal]:
        caller = self.administrator(who)
        principal = Principal.register(name, admin)
        if self.store.exists(principal.id):
            raise PrincipalExistsError(f"principal {name!r} already exists", principal=name)
        return Written(principal, self.store.commit(principal, acted_by=caller))

    def issue_token(self, who: Who, principal: str, label: str = "token",
                    expires_at: datetime | None = None) -> Written[str]:
        """A new bearer token for ``principal``; only its hash is stored."""
        caller = self.administrator(who)
        self.get_principal(principal)
        written = self._issue(caller, principal, label,
                              token_expiry(self.clock(), expires_at=expires_at))
        return Written(written.value.secret, written.position)

    def issue_token_for(self, who: Who, principal: str, label: str, *,
                        admin: bool = False, expires_in_seconds: int | None = None,
                        expires_at: datetime | None = None) -> Written[IssuedToken]:
        """Issue a token, registering ``principal`` first when it is new (in one save).

        ``admin`` must match an existing principal: a token never silently carries more, or
        fewer, rights than the administrator asked for.
        """
        caller = self.administrator(who)
        expiry = token_expiry(self.clock(), expires_in_seconds, expires_at)
        existing: Principal | None = self.store.find(Principal.create_id(principal), Principal)
        if existing is not None and existing.admin != admin:
            raise PrincipalExistsError(
                f"principal {principal!r} exists with admin={existing.admin}; a token cannot "
                "change that", principal=principal, admin=existing.admin)
        new = [] if existing is not None else [Principal.register(principal, admin)]
        return self._issue(caller, principal, label, expiry, *new)

    def _issue(self, caller: Caller, principal: str, label: str, expires_at: datetime | None,
               *also: Aggregate) -> Written[IssuedToken]:
        secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
        issued = AccessToken.issue(token_hash(secret), principal, label, expires_at)
        return Written(IssuedToken(secret, issued),
                       self.store.commit(*also, issued, acted_by=caller))

    def list_tokens(self, who: Who, principal: str | None = None) -> list[AccessToken]:
        """Every token ever issued (revoked and expired ones included), oldest first.

        Tokens are found by their ``Issued`` events, so tokens issued before this listing
        existed appear too; each is then loaded for its current state.
        """
        self.administrator(who)
        if principal is not None:  # a name that could be registered, as registration checks
            check_identifier("principal", principal, PRINCIPAL_MAX)
        store = self.store
        topics = [get_topic(AccessToken.Issued)]
        tokens: list[AccessToken] = []
        start = 1
        while True:
            page = store.recorder.select_notifications(start, _TOKENS_PAGE, topics=topics)
            for notification in page:
                issued = store.mapper.to_domain_event(notification)
                if principal is None or getattr(issued, "principal", None) == principal:
                    tokens.append(store.repository.get(issued.originator_id))
            if len(page) < _TOKENS_PAGE:
                return tokens
            start = page[-1].id + 1

    def get_token(self, who: Who, token_id: str) -> AccessToken:
        self.administrator(who)
        found = self.store.find(token_aggregate_id(token_id))
        if not isinstance(found, AccessToken):  # absent, or the id of another aggregate
            raise TokenNotFoundError("no such token", token_id=token_id)
        return found

    def revoke_token_by_id(self, who: Who, token_id: str,
                           reason: str = "revoked") -> Written[AccessToken]:
        """Revoke by the public token id; every process refuses it from its next request on
        (authentication reads the token per request). Revoking again changes nothing."""
        caller = self.administrator(who)
        issued = self.get_token(caller, token_id)
        changed = issued.revoke(reason)
        return Written(issued, self.store.commit(issued, acted_by=caller) if changed else None)

    def revoke_token(self, who: Who, token: str,
                     reason: str = "revoked") -> Written[None]:
        caller = self.administrator(who)
        issued = self._token(token)
        issued.revoke(reason)
        return Written(None, self.store.commit(issued, acted_by=caller))

    def administrator(self, who: Who) -> Caller:
        """``who`` authenticated, once a deployment administrator."""
        caller = proved(who, self.store.find_many)
        self.policy.require_admin(caller)
        return caller

    def get_principal(self, name: str) -> Principal:
        principal: Principal = self.store.load(
            Principal.create_id(name),
            lambda: PrincipalNotFoundError(f"principal {name!r} does not exist",
                                           principal=name), kind=Principal)
        return principal

    def authenticate(self, token: str) -> Caller:
        """Read per request, never cached: a revocation or an expiry applies at once."""
        return proved(self.credentials(token), self.store.find_many)

    def credentials(self, token: str) -> TokenCredentials:
        """A bearer token, to be proved by a command's first read."""
        key = AccessToken.create_id(token_hash(token))
        return TokenCredentials(self, key, self._named.get(key))

    def caller_of_token(self, credentials: TokenCredentials, found: Mapping[UUID, Any]) -> Caller:
        issued = found.get(credentials.key)
        if not isinstance(issued, AccessToken):
            raise UnauthorizedError("unknown bearer token")
        issued.check_usable(self.clock())
        if credentials.principal not in (None, issued.principal):  # a token never changes hands
            raise UnauthorizedError("the bearer token names another principal")
        remember(self._named, credentials.key, issued.principal)
        return Caller(issued.principal, self._is_admin(issued.principal))

    def _is_admin(self, name: str) -> bool:
        admin = self._admin.get(name)
        if admin is None:
            admin = self.get_principal(name).admin
            remember(self._admin, name, admin)
        return admin

    def _token(self, token: str) -> AccessToken:
        issued: AccessToken = self.store.load(AccessToken.create_id(token_hash(token)),
                                              lambda: UnauthorizedError("unknown bearer token"),
                                              kind=AccessToken)
        return issued

    def bootstrap_admin(self) -> str | None:
        """On first start, create the ``admin`` principal and return its only token."""
        admin = Principal.register(BOOTSTRAP_ADMIN, admin=True)
        if self.store.exists(admin.id):
            return None
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        self.store.commit(admin, AccessToken.issue(token_hash(token), BOOTSTRAP_ADMIN,
                                                   "bootstrap"))
        return token


@dataclass(frozen=True)
class TokenCredentials:
    """A bearer token, read with a command's first read (see
    :mod:`application.credentials`); ``principal``: the one it named when this process last
    read it."""

    principals: Principals
    key: UUID
    principal: str | None

    def proof(self) -> Mapping[UUID, type[Aggregate]]:
        return {self.key: AccessToken}

    def caller(self, found: Mapping[UUID, Any]) -> Caller:
        return self.principals.caller_of_token(self, found)


def remember(known: dict[K, V], key: K, value: V) -> None:
    """Remember ``key``'s value, forgetting everything once ``MAX_REMEMBERED_PRINCIPALS`` are
    held (bounded: learnt afresh)."""
    if key not in known and len(known) >= MAX_REMEMBERED_PRINCIPALS:
        known.clear()
    known[key] = value
