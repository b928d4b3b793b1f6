"""The one retry policy for losing a write race: re-run against fresh state, with jitter.

Commands re-check every guard on each run, so one with an expected version reports its own
domain conflict on the second run, while commutative ones (adding an entry) just succeed.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from domain.errors import WriteConflictError

T = TypeVar("T")
P = ParamSpec("P")
# A command lost a race with another request on the same aggregate.
COMMAND_TRIES = 10
# A run's own write lost a race with its busy scope queue (admissions, other runs): the run
# is still ours, so it keeps trying longer than a request would.
RUN_WRITE_TRIES = 40
# ... and pauses briefly: its rivals are short admissions, not a long-held lock.
RUN_WRITE_PAUSE_CAP_SECONDS = 0.01
BACKOFF_SECONDS = 0.005
BACKOFF_CAP_SECONDS = 0.25


def pause_after_conflict(attempt: int, cap: float = BACKOFF_CAP_SECONDS) -> None:
    """Jitter spreads writers that collided so they do not collide again."""
    ceiling = min(cap, BACKOFF_SECONDS * 2 ** min(attempt, 16))
    time.sleep(random.uniform(0, ceiling))


def retry_conflicts(write: Callable[[], T], tries: int = COMMAND_TRIES,
                    cap: float = BACKOFF_CAP_SECONDS) -> T:
    """``write()``, run again after each :class:`WriteConflictError` up to ``tries`` times
    (pausing at most ``cap`` seconds between); the last conflict propagates."""
    for attempt in range(1, tries):
        try:
            return write()
        except WriteConflictError:
            pause_after_conflict(attempt, cap)
    return write()


def retry_on_write_conflict(command: Callable[P, T]) -> Callable[P, T]:
    """A command that re-runs on fresh state after losing a race (:func:`retry_conflicts`)."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        return retry_conflicts(lambda: command(*args, **kwargs))

    return wrapper
