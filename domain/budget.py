"""Per-run budget (docs/contract.md#budgets-and-limits): the defaults are also the ceilings;
a scope's settings may only tighten them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from domain.errors import InvalidSettingsError

DEFAULT_BUDGET: dict[str, int] = {
    "max_items": 32,
    "max_bytes": 65_536,
    "max_nodes": 128,
    "max_edges": 256,
    "max_depth": 8,
    "max_output_tokens": 4_096,
    "max_model_calls": 2,
    "timeout_seconds": 120,
}


def effective_budget(overrides: Mapping[str, Any] | None = None) -> dict[str, int]:
    """Defaults tightened by ``overrides``; a value above its ceiling is refused, not clamped."""
    budget = dict(DEFAULT_BUDGET)
    for name, value in (overrides or {}).items():
        if name not in DEFAULT_BUDGET:
            continue
        if type(value) is not int or not 1 <= value <= DEFAULT_BUDGET[name]:
            raise InvalidSettingsError(
                f"{name} must be an integer in [1, {DEFAULT_BUDGET[name]}]", field=name
            )
        budget[name] = value
    return budget
