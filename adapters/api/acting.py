"""One call of the API: the deployment, who calls, and how the call reads the read models."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Generic, Protocol, TypeVar

from eventsourcing.domain import Aggregate

from adapters.store.projection_runtime import RunningProjection
from adapters.workers.pool import WorkerPool
from application.bootstrap import Dreaming
from application.credentials import Who
from application.noted_head import noted_head
from application.store import Written
from domain.errors import InvalidRequestError, UnauthorizedError
from domain.policy import LOCAL, Caller
from projections.base import ProjectionSpec, ProjectionView
from projections.without_waiting import WouldWaitError, waiting_refused

TView = TypeVar("TView", bound=ProjectionView)


class CallerSource(Protocol):
    """Who a call acts for: ``caller()`` authenticated at once, or ``who()`` to be proved by
    the command's first read (one round trip fewer)."""

    def caller(self) -> Caller: ...

    def who(self) -> Who: ...


@dataclass(frozen=True)
class Authenticated:
    """A caller authenticated already (an MCP session's)."""

    known: Caller

    def caller(self) -> Caller:
        return self.known

    def who(self) -> Who:
        return self.known


class ViewReader(Protocol):
    """A running read model's view once it holds every event recorded before the call (and
    the event at ``after``, if given); the transport decides how long to wait and what to tell
    the caller about it."""

    def __call__(self, spec: ProjectionSpec[Any], after: int | None) -> Any: ...


@dataclass(frozen=True)
class Acting:
    app: Dreaming
    source: CallerSource
    read: ViewReader
    workers: WorkerPool | None = None  # this process's workers, woken for a run to execute
    after: int | None = None  # an event position every read model read must include

    def caller(self) -> Caller:
        return self.source.caller()

    def who(self) -> Who:
        return self.source.who()

    def including(self, after: int | None) -> Acting:
        """The same call, its read model reads including the event at ``after``."""
        return self if after is None else replace(self, after=after)

    def view(self, spec: ProjectionSpec[TView]) -> Callable[[], TView]:
        """``spec``'s view, read when called: after the caller's rights are checked."""
        def caught_up() -> TView:
            found: TView = self.read(spec, self.after)
            return found
        return caught_up

    def shown(self, written: Written[Any], aggregate: Aggregate) -> int | None:
        """The position an answer shows: the event the command produced, or (a replay) the
        aggregate's last event."""
        return shown(self.app, written, aggregate)


def who_of(app: Dreaming, token: str | None,
           missing: str = "send Authorization: Bearer <token>") -> Who:
    """Who a bearer token acts for, proved by the command's first read (see
    :mod:`application.credentials`), or the local principal when access is not enforced."""
    if not app.enforce_access:
        return LOCAL
    if token is None:
        raise UnauthorizedError(missing)
    return app.access.credentials(token)


def caller_of(app: Dreaming, token: str | None,
              missing: str = "send Authorization: Bearer <token>") -> Caller:
    """Who a bearer token acts for, authenticated now (a read of its own)."""
    return app.gate.authenticate(who_of(app, token, missing))


def shown(app: Dreaming, written: Written[Any], aggregate: Aggregate) -> int | None:
    return written.position if written.position is not None else app.store.position_of(aggregate)


M = TypeVar("M")


@dataclass(frozen=True)
class Recorded(Generic[M]):
    """An answer to a command that may replay: ``new`` is false when the identical record
    existed already (REST answers 200 instead of 201)."""

    answer: M
    new: bool


def caught_up(app: Dreaming, projection: RunningProjection[TView], after: int | None,
              wait_seconds: float) -> TView:
    """The view of a running read model once it holds every event recorded before this call
    (and ``after``), waiting at most ``wait_seconds``. The head is the one a read of this
    call noted (ADR-0044), unless none did or ``after`` lies beyond it."""
    head = noted_head()
    if head is None or (after is not None and after > head):
        head = app.store.max_position()
    if after is not None and not 0 <= after <= head:
        raise InvalidRequestError("after must be a position this server has recorded",
                                  field="after", head=head)
    if waiting_refused() and projection.position() < head:
        msg = f"view {projection.name!r} has not yet applied position {head}"
        raise WouldWaitError(msg)
    projection.wait(head or None, timeout=wait_seconds)
    view: TView = projection.view
    return view
