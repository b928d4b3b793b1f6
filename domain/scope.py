"""Scope: an isolated tenant (e.g. one customer chat group) with its settings and roles."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from domain.access import Action, ReadDecision, Resource, Role, has_any_access, permits
from domain.errors import InvalidRoleError, InvalidSettingsError
from domain.ids import scope_aggregate_id
from domain.text import check_identifier, check_scope_id

ROLES = tuple(Role)
PRINCIPAL_MAX = 256

# Setting name -> (minimum, maximum). Budgets may only tighten the ceilings
# (docs/contract.md#budgets-and-limits).
SETTING_BOUNDS: dict[str, tuple[int, int]] = {
    "dream_max_pending_per_scope": (1, 1000),
    "max_items": (1, 32),
    "max_bytes": (1, 65_536),
    "max_nodes": (1, 128),
    "max_edges": (1, 256),
    "max_depth": (1, 8),
    "max_output_tokens": (1, 4_096),
    "max_model_calls": (1, 2),
    "timeout_seconds": (1, 120),
    "auto_min_hours": (0, 24 * 365),
    "auto_min_new_records": (1, 100_000),
    "auto_settle_minutes": (0, 24 * 60),
}
FLAG_SETTINGS = ("auto_dream_enabled", "auto_advance_on_needs_evidence")


def check_settings(settings: object) -> dict[str, Any]:
    if not isinstance(settings, Mapping):
        raise InvalidSettingsError("settings must be a JSON object", field="settings")
    checked: dict[str, Any] = {}
    for name, value in settings.items():
        if name in FLAG_SETTINGS:
            if not isinstance(value, bool):
                raise InvalidSettingsError(f"{name} must be a boolean", field=f"settings.{name}")
        elif name in SETTING_BOUNDS:
            low, high = SETTING_BOUNDS[name]
            if type(value) is not int or not low <= value <= high:
                raise InvalidSettingsError(
                    f"{name} must be an integer in [{low}, {high}]", field=f"settings.{name}"
                )
        else:
            raise InvalidSettingsError(f"unknown setting {name!r}", field=f"settings.{name}")
        checked[name] = value
    return dict(sorted(checked.items()))


def check_role(role: object) -> Role:
    if role not in ROLES:
        raise InvalidRoleError(f"role must be one of {', '.join(ROLES)}", field="role")
    return Role(str(role))


class Scope(Aggregate):
    class Created(Aggregate.Created):
        scope_id: str
        settings: dict[str, Any]

    class SettingsChanged(Aggregate.Event):
        settings: dict[str, Any]

    class RoleGranted(Aggregate.Event):
        principal: str
        role: str

    class RoleRevoked(Aggregate.Event):
        principal: str
        role: str

    class ReadGranted(Aggregate.Event):
        principal: str
        resource: dict[str, str]

    class ReadRevoked(Aggregate.Event):
        principal: str
        resource: dict[str, str]

    @staticmethod
    def create_id(scope_id: str) -> UUID:
        return scope_aggregate_id(scope_id)

    @classmethod
    def create(cls, scope_id: str, settings: Mapping[str, Any] | None = None) -> Scope:
        return cls(scope_id=check_scope_id(scope_id), settings=check_settings(settings or {}))

    @event(Created)
    def __init__(self, scope_id: str, settings: dict[str, Any]) -> None:
        self.scope_id = scope_id
        self.settings = dict(settings)
        self.roles: dict[str, frozenset[Role]] = {}
        self.read_grants: dict[str, dict[str, ReadDecision]] = {}

    def change_settings(self, changes: Mapping[str, Any]) -> bool:
        """Merge ``changes`` into the settings; a ``None`` value restores the default."""
        if not isinstance(changes, Mapping):
            raise InvalidSettingsError("settings must be a JSON object", field="settings")
        for name in changes:
            if name not in SETTING_BOUNDS and name not in FLAG_SETTINGS:
                raise InvalidSettingsError(f"unknown setting {name!r}", field=f"settings.{name}")
        merged = {**self.settings, **changes}
        settings = check_settings({k: v for k, v in merged.items() if v is not None})
        if settings == self.settings:
            return False
        self._settings_changed(settings=settings)
        return True

    @event(SettingsChanged)
    def _settings_changed(self, settings: dict[str, Any]) -> None:
        self.settings = dict(settings)

    def grant_role(self, principal: str, role: str) -> bool:
        check_identifier("principal", principal, PRINCIPAL_MAX)
        if check_role(role) in self.roles.get(principal, frozenset()):
            return False
        self._role_granted(principal=principal, role=role)
        return True

    @event(RoleGranted)
    def _role_granted(self, principal: str, role: str) -> None:
        self.roles[principal] = self.roles.get(principal, frozenset()) | {Role(role)}

    def revoke_role(self, principal: str, role: str) -> bool:
        check_identifier("principal", principal, PRINCIPAL_MAX)
        if check_role(role) not in self.roles.get(principal, frozenset()):
            return False
        self._role_revoked(principal=principal, role=role)
        return True

    @event(RoleRevoked)
    def _role_revoked(self, principal: str, role: str) -> None:
        remaining = self.roles[principal] - {Role(role)}
        if remaining:
            self.roles[principal] = remaining
        else:
            del self.roles[principal]

    # -- access ------------------------------------------------------------------------------

    def roles_of(self, principal: str) -> frozenset[Role]:
        return self.roles.get(principal, frozenset())

    def grants_of(self, principal: str) -> dict[str, ReadDecision]:
        return self.read_grants.get(principal, {})

    def permits(self, principal: str, action: Action, resource: Resource | None = None) -> bool:
        return permits(self.roles_of(principal), self.grants_of(principal), action, resource)

    def acknowledges(self, principal: str) -> bool:
        return has_any_access(self.roles_of(principal), self.grants_of(principal))

    def grant_read(self, principal: str, resource: Resource) -> bool:
        """Let ``principal`` read one resource, even without a scope role."""
        check_identifier("principal", principal, PRINCIPAL_MAX)
        if self.grants_of(principal).get(resource.key) == ReadDecision.GRANTED:
            return False
        self._read_granted(principal=principal, resource=resource.to_dict())
        return True

    @event(ReadGranted)
    def _read_granted(self, principal: str, resource: dict[str, str]) -> None:
        key = Resource.from_dict(resource).key
        self.read_grants[principal] = {**self.grants_of(principal), key: ReadDecision.GRANTED}

    def revoke_read(self, principal: str, resource: Resource) -> bool:
        """Deny ``principal`` one resource, even when a role would allow it."""
        check_identifier("principal", principal, PRINCIPAL_MAX)
        if self.grants_of(principal).get(resource.key) == ReadDecision.REVOKED:
            return False
        self._read_revoked(principal=principal, resource=resource.to_dict())
        return True

    @event(ReadRevoked)
    def _read_revoked(self, principal: str, resource: dict[str, str]) -> None:
        key = Resource.from_dict(resource).key
        self.read_grants[principal] = {**self.grants_of(principal), key: ReadDecision.REVOKED}
