"""A result that another thread settles: the thread committing a batch settles each member's."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Generic, TypeVar, cast

T = TypeVar("T")


@dataclass
class Pending(Generic[T]):
    """Settled once: with a value, or with the error its waiter raises."""

    settled: threading.Event = field(default_factory=threading.Event, kw_only=True)
    value: T | None = field(default=None, kw_only=True)
    error: BaseException | None = field(default=None, kw_only=True)

    def settle(self, value: T) -> None:
        self.value = value
        self.settled.set()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.settled.set()

    def outcome(self) -> T:
        if self.error is not None:
            raise self.error
        return cast(T, self.value)
