"""Principals and their bearer tokens. Only token hashes are ever stored."""

from __future__ import annotations

from datetime import datetime, timedelta
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from domain.errors import (
    InvalidExpiryError,
    PrincipalReservedError,
    TokenExpiredError,
    UnauthorizedError,
)
from domain.ids import TOKEN_ID_PREFIX, aggregate_id
from domain.text import check_identifier, check_label

PRINCIPAL_MAX = 256
TOKEN_LABEL_MAX = 128
# Principals and tokens are deployment-wide; "*" can never be a scope id.
GLOBAL = "*"
MAX_TOKEN_LIFETIME = timedelta(days=3660)  # ten years: beyond that, leave it unset
# The service's own principals (``dream:automatic`` admits automatic runs) are named here;
# nobody can register one, so no token ever acts as the service.
SERVICE_PREFIX = "dream:"


def token_expiry(now: datetime, expires_in_seconds: int | None = None,
                 expires_at: datetime | None = None) -> datetime | None:
    """When a token issued ``now`` expires: after ``expires_in_seconds``, at ``expires_at``
    (one of them, or neither for a token that lives until revoked)."""
    if expires_in_seconds is not None and expires_at is not None:
        raise InvalidExpiryError("give expires_in_seconds or expires_at, not both",
                                 field="expires_at")
    if expires_in_seconds is not None:
        if not 0 < expires_in_seconds <= MAX_TOKEN_LIFETIME.total_seconds():
            raise InvalidExpiryError(
                "expires_in_seconds must be positive and at most ten years",
                field="expires_in_seconds", limit=int(MAX_TOKEN_LIFETIME.total_seconds()))
        return now + timedelta(seconds=expires_in_seconds)
    if expires_at is None:
        return None
    if expires_at.tzinfo is None:
        raise InvalidExpiryError("expires_at needs a time zone offset (e.g. Z)",
                                 field="expires_at")
    if not now < expires_at <= now + MAX_TOKEN_LIFETIME:
        raise InvalidExpiryError("expires_at must be in the future and within ten years",
                                 field="expires_at")
    return expires_at


class Principal(Aggregate):
    class Registered(Aggregate.Created):
        name: str
        admin: bool

    @staticmethod
    def create_id(name: str) -> UUID:
        return aggregate_id("principal", GLOBAL, name)

    @classmethod
    def register(cls, name: str, admin: bool = False) -> Principal:
        checked = check_identifier("principal", name, PRINCIPAL_MAX)
        if checked.lower().startswith(SERVICE_PREFIX):
            raise PrincipalReservedError(
                f"principal names starting with {SERVICE_PREFIX!r} are the service's own",
                field="principal", reserved_prefix=SERVICE_PREFIX)
        return cls(name=checked, admin=admin)

    @event(Registered)
    def __init__(self, name: str, admin: bool) -> None:
        self.name = name
        self.admin = admin


class AccessToken(Aggregate):
    """Found by the hash of the presented token, so authentication is one exact read."""

    class Issued(Aggregate.Created):
        token_hash: str
        principal: str
        label: str
        expires_at: datetime | None = None  # absent from tokens issued before expiry existed

    class Revoked(Aggregate.Event):
        reason: str

    @staticmethod
    def create_id(token_hash: str) -> UUID:
        return aggregate_id("token", GLOBAL, token_hash)

    @classmethod
    def issue(cls, token_hash: str, principal: str, label: str,
              expires_at: datetime | None = None) -> AccessToken:
        """A token for ``principal``; ``expires_at`` comes from :func:`token_expiry`."""
        return cls(token_hash=token_hash, principal=principal,
                   label=check_label("label", label, TOKEN_LABEL_MAX), expires_at=expires_at)

    @event(Issued)
    def __init__(self, token_hash: str, principal: str, label: str,
                 expires_at: datetime | None = None) -> None:
        self.token_hash = token_hash
        self.principal = principal
        self.label = label
        self.expires_at = expires_at
        self.revoked = False

    @property
    def token_id(self) -> str:
        return TOKEN_ID_PREFIX + self.id.hex

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def check_usable(self, now: datetime) -> None:
        if self.revoked:
            raise UnauthorizedError("the token was revoked")
        if self.expired(now):
            raise TokenExpiredError("the token expired", expired_at=self.expires_at)

    def revoke(self, reason: str) -> bool:
        """Refuse the token from now on; ``False`` when it was already revoked."""
        if self.revoked:
            return False
        self._revoked(reason=reason)
        return True

    @event(Revoked)
    def _revoked(self, reason: str) -> None:
        self.revoked = True
