"""Snapshots that give an aggregate its enum-typed state back.

A snapshot stores an aggregate's attributes as JSON and restores them as they decode, without
the event-apply methods that turn stored words into enum members: a ``StrEnum`` comes back as a
plain string. An aggregate that keeps such values outside its transcoded value objects names
``TypedSnapshot`` as its ``Snapshot`` and retypes the restored state in ``retype_state``.
Snapshots taken before an aggregate did so are upcast (``class_version``), and its
``upcast_v1_v2`` retypes them too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

from eventsourcing.domain import BaseAggregate, Snapshot

StateRetyper = Callable[[dict[str, Any]], None]


class TypedSnapshot(Snapshot):
    def mutate(self, _: None) -> BaseAggregate[UUID]:
        aggregate = super().mutate(_)
        retype: StateRetyper | None = getattr(type(aggregate), "retype_state", None)
        if retype is not None:
            retype(vars(aggregate))
        return aggregate
