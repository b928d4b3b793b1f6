"""The operations page's use case: deployment-wide numbers, for deployment administrators.

The numbers span every scope (their ids, queues and inboxes), so no scope role is enough: only
a deployment administrator may read them, and a refusal comes before anything is read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from domain.policy import AccessPolicy, Caller

T = TypeVar("T")


def deployment_overview(policy: AccessPolicy, caller: Caller, read: Callable[[], T]) -> T:
    """``read()``'s answer, for a deployment administrator; ``forbidden`` for anyone else."""
    policy.require_admin(caller)
    return read()
