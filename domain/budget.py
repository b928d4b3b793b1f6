"""Per-run budget (docs/contract.md#budgets-and-limits): the defaults are also the ceilings;
a scope's settings may only tighten them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from domain.errors import InvalidSettingsError


@dataclass(frozen=True)
class Budget:
    """What one run may use: evidence limits, model calls, output tokens and time. The
    defaults are the ceilings."""

    max_items: int = 32
    max_bytes: int = 65_536
    max_nodes: int = 128
    max_edges: int = 256
    max_depth: int = 8
    max_output_tokens: int = 4_096
    max_model_calls: int = 2
    timeout_seconds: int = 120

    @classmethod
    def of(cls, overrides: Mapping[str, Any] | None = None) -> Budget:
        """The ceilings tightened by ``overrides`` (a scope's settings: other names are not
        budget settings and are passed over); a value above its ceiling is refused, not
        clamped."""
        chosen: dict[str, int] = {}
        for name, value in (overrides or {}).items():
            ceiling = CEILINGS.get(name)
            if ceiling is None:
                continue
            if type(value) is not int or not 1 <= value <= ceiling:
                raise InvalidSettingsError(f"{name} must be an integer in [1, {ceiling}]",
                                           field=name)
            chosen[name] = value
        return cls(**chosen)

    @classmethod
    def as_admitted(cls, stored: Mapping[str, int]) -> Budget:
        """A run's budget as its ``Accepted`` event stored it, never re-judged against
        today's ceilings (a missing name takes its default)."""
        return cls(**{name: value for name, value in stored.items() if name in CEILINGS})

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


CEILINGS: dict[str, int] = {field.name: field.default for field in fields(Budget)}  # type: ignore[misc]
DEFAULT_BUDGET = Budget()
