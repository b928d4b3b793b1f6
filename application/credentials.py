"""Who a command acts for: the one type every use case takes.

A ``Who`` is proved by the aggregates it names (``proof``), which the command's first read
fetches along with the scope, so that authenticating costs no round trip of its own. A
``domain.policy.Caller`` is a ``Who`` proved already (it names nothing to read); a bearer
token's credentials (``application.access.TokenCredentials``) name the token.

The proof is read fresh with every command (a revoked or expired token is refused at once), and
is checked before anything else the read found is looked at: a caller without valid
credentials learns nothing of the scope.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol
from uuid import UUID

from eventsourcing.domain import Aggregate

from domain.policy import Caller


class Who(Protocol):
    """Who a command acts for, to be proved by the command's first read."""

    @property
    def principal(self) -> str | None:
        """The principal named, when this process knows it before reading (a command whose
        keys derive from the principal then reads them in the same round trip)."""

    def proof(self) -> Mapping[UUID, type[Aggregate]]:
        """The aggregates to read with the command's first read."""

    def caller(self, found: Mapping[UUID, Any]) -> Caller:
        """The caller, from what that read found (``UnauthorizedError`` if they do not hold)."""


Read = Callable[[Mapping[UUID, type[Aggregate]]], Mapping[UUID, Any]]


def proved(who: Who, read: Read) -> Caller:
    """``who`` authenticated on its own: ``read`` (the store's ``find_many``) fetches its proof,
    if it has one."""
    proof = who.proof()
    return who.caller(read(proof) if proof else {})
