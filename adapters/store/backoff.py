"""Capped exponential backoff with jitter, for every loop that retries a store that failed."""

from __future__ import annotations

import random

STORE_RETRY_FIRST_SECONDS = 0.1
STORE_RETRY_CAP_SECONDS = 2.0


class Backoff:
    """Pauses doubling from ``first`` up to ``cap``, jittered so that processes retrying the
    same store spread out; ``reset`` after a success. An outage then costs a few calls a second
    at most, and recovery is noticed within the cap."""

    def __init__(self, first: float = STORE_RETRY_FIRST_SECONDS,
                 cap: float = STORE_RETRY_CAP_SECONDS) -> None:
        self.first, self.cap = first, cap
        self._ceiling = 0.0

    def next(self) -> float:
        self._ceiling = min(self.cap, max(self.first, self._ceiling * 2))
        return random.uniform(self._ceiling / 2, self._ceiling)

    def reset(self) -> None:
        self._ceiling = 0.0

    @property
    def failing(self) -> bool:
        return self._ceiling > 0
