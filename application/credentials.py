"""Who a command acts for: a ``Caller`` authenticated already, or ``Credentials`` proved by an
aggregate that the command's first read fetches along with the scope, so that authenticating
costs no round trip to the store of its own.

The proof is read fresh with every command (a revoked or expired token is refused at once), and
is checked before anything else the read found is looked at: a caller without valid
credentials learns nothing of the scope.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeAlias
from uuid import UUID

from eventsourcing.domain import Aggregate

from domain.policy import Caller


class Credentials(Protocol):
    """Credentials a command proves with its first read."""

    @property
    def principal(self) -> str | None:
        """The principal they name, when this process knows it before reading (a command
        whose keys derive from the principal then reads them in the same round trip)."""

    def proof(self) -> Mapping[UUID, type[Aggregate]]:
        """The aggregates to read with the command's first read."""

    def caller(self, found: Mapping[UUID, Any]) -> Caller:
        """The caller, from what that read found (``UnauthorizedError`` if they do not hold)."""


Who: TypeAlias = "Caller | Credentials"


def proof_of(who: Who) -> Mapping[UUID, type[Aggregate]]:
    return {} if isinstance(who, Caller) else who.proof()


def caller_from(who: Who, found: Mapping[UUID, Any]) -> Caller:
    return who if isinstance(who, Caller) else who.caller(found)


def proved(who: Who, read: Callable[[Mapping[UUID, type[Aggregate]]], Mapping[UUID, Any]],
           ) -> Caller:
    """``who`` authenticated on its own: ``read`` (the store's ``find_many``) fetches its proof,
    if it has one."""
    return caller_from(who, read(proof_of(who)))


def principal_of(who: Who) -> str | None:
    return who.name if isinstance(who, Caller) else who.principal
