"""Principals and their bearer tokens. Only token hashes are ever stored."""

from __future__ import annotations

from uuid import UUID

from eventsourcing.domain import Aggregate, event

from domain.errors import UnauthorizedError
from domain.identity import aggregate_id
from domain.text import check_identifier

PRINCIPAL_MAX = 256
TOKEN_LABEL_MAX = 128
# Principals and tokens are deployment-wide; "*" can never be a scope id.
GLOBAL = "*"


class Principal(Aggregate):
    class Registered(Aggregate.Created):
        name: str
        admin: bool

    @staticmethod
    def create_id(name: str) -> UUID:
        return aggregate_id("principal", GLOBAL, name)

    @classmethod
    def register(cls, name: str, admin: bool = False) -> Principal:
        return cls(name=check_identifier("principal", name, PRINCIPAL_MAX), admin=admin)

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

    class Revoked(Aggregate.Event):
        reason: str

    @staticmethod
    def create_id(token_hash: str) -> UUID:
        return aggregate_id("token", GLOBAL, token_hash)

    @classmethod
    def issue(cls, token_hash: str, principal: str, label: str) -> AccessToken:
        return cls(token_hash=token_hash, principal=principal,
                   label=check_identifier("label", label, TOKEN_LABEL_MAX))

    @event(Issued)
    def __init__(self, token_hash: str, principal: str, label: str) -> None:
        self.token_hash = token_hash
        self.principal = principal
        self.label = label
        self.revoked = False

    def check_usable(self) -> None:
        if self.revoked:
            raise UnauthorizedError("the token was revoked")

    def revoke(self, reason: str) -> None:
        if not self.revoked:
            self._revoked(reason=reason)

    @event(Revoked)
    def _revoked(self, reason: str) -> None:
        self.revoked = True
