"""When a request may be sent again, and how long to wait first.

* 409 ``write_conflict``: the server stored nothing (another write moved what this one read,
  and its own retries ran out), so the same request may go again at once.
* 429 and 503 with ``Retry-After``: the server says when; the client waits that long (capped)
  and sends again, a bounded number of times.

Nothing else is ever re-sent: every other refusal is an answer.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

R = TypeVar("R")

CONFLICT = 409
WAIT_STATUSES = (429, 503)
MAX_RESENDS = 5  # re-sends of one request after 409 write_conflict
MAX_WAITS = 3  # waits of one request for a Retry-After
RETRY_AFTER_CAP_SECONDS = 30.0
CONFLICT_PAUSE_SECONDS = 0.02  # doubled at each re-send, jittered


def write_conflict(status: int, body: Callable[[], bytes]) -> bool:
    """Whether an answer is a 409 ``write_conflict`` (``body`` is read only for a 409)."""
    if status != CONFLICT:
        return False
    try:
        return bool(json.loads(body())["error"]["code"] == "write_conflict")
    except (ValueError, KeyError, TypeError):
        return False


def retry_after(status: int, headers: Mapping[str, str]) -> float | None:
    """Seconds to wait before sending again, for a 429 or 503 that says (capped); else None."""
    if status not in WAIT_STATUSES:
        return None
    value = headers.get("retry-after", "").strip()
    if not value.isdigit():
        return None  # absent, or an HTTP date this service never sends
    return min(float(value), RETRY_AFTER_CAP_SECONDS)


def resending(exchange: Callable[[], R], conflict: Callable[[R], bool],
              max_resends: int = MAX_RESENDS,
              pause: Callable[[int], None] | None = None) -> tuple[R, int]:
    """``exchange()``, again after each answer that is a ``conflict`` (at most
    ``max_resends`` times, calling ``pause(n)`` before the n-th re-send): the last answer and
    how many times the request was sent again."""
    for resent in range(max_resends):
        answer = exchange()
        if not conflict(answer):
            return answer, resent
        if pause is not None:
            pause(resent + 1)
    return exchange(), max_resends


def conflict_pause(resend: int) -> None:
    """A short, growing, jittered pause, so clients that conflicted do not collide again."""
    time.sleep(random.uniform(0.5, 1.0) * CONFLICT_PAUSE_SECONDS * 2 ** (resend - 1))
