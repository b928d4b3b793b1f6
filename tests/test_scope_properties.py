"""Stateful properties of the Scope aggregate: settings validation and the access model.

A hypothesis state machine issues random change-settings, role and per-resource read grant
commands, valid and invalid, against one Scope and checks it against a plain-Python model after
every step, including who ``permits`` what. Every refused command must carry its stable error
code and leave the Scope untouched, and the Scope rebuilt from its events alone must always
equal the live one; a second test runs the same machine through a real event store (SQLite and
PostgreSQL) and reads the Scope back.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from application.bootstrap import Dreaming
from domain.access import Resource
from domain.errors import DomainError
from domain.scope import FLAG_SETTINGS, PRINCIPAL_MAX, ROLES, SETTING_BOUNDS, Scope
from tests.property_support import PURE, assert_refused, replay, run_through_the_store

# -- strategies ----------------------------------------------------------------------------

PRINCIPALS = ["alice", "bob", "carol@example.com", "svc:dreamer", "p" * PRINCIPAL_MAX]
BAD_PRINCIPALS = ["", "   ", " alice", "bob\n", "x\x00y", "p" * (PRINCIPAL_MAX + 1), 42, None,
                  # outside the identifier alphabet (ADR-0009): bidi, zero-width, traversal
                  "ali\u202ece", "b\u200bob", "../../x", "..", "a/b", "\u00e9"]
BAD_ROLES = ["owner", "", "Admin", "reader ", None, 1]
SETTING_NAMES = sorted([*SETTING_BOUNDS, *FLAG_SETTINGS])
RESOURCES = [Resource.artifact("experience", "e1"), Resource.artifact("memory", "m1"),
             Resource.source("task", "t1")]
# The documented permissions of each role; anything else is refused.
ROLE_ACTIONS = {"reader": {"read"}, "contributor": {"read", "contribute"},
                "reviewer": {"read", "review"},
                "admin": {"read", "contribute", "review", "administer"}}
ACTIONS = ["read", "contribute", "review", "administer"]


def setting_value(name: str) -> st.SearchStrategy[Any]:
    """In-range values, values just outside the bounds, wrong types and ``None`` (reset)."""
    wrong_types = st.sampled_from(["1", 1.0, [1], {"v": 1}])
    if name in FLAG_SETTINGS:
        return st.one_of(st.booleans(), st.none(), st.integers(0, 1), wrong_types)
    low, high = SETTING_BOUNDS[name]
    return st.one_of(st.integers(low, high), st.sampled_from([low - 1, high + 1]),
                     st.booleans(), st.none(), wrong_types)


setting_changes = st.lists(
    st.one_of(st.sampled_from(SETTING_NAMES), st.just("no_such_setting")).flatmap(
        lambda name: st.tuples(st.just(name),
                               setting_value(name) if name in SETTING_NAMES
                               else st.one_of(st.none(), st.integers(1, 5)))),
    max_size=4,
).map(dict)


def valid_setting_value(name: str) -> st.SearchStrategy[Any]:
    if name in FLAG_SETTINGS:
        return st.booleans()
    low, high = SETTING_BOUNDS[name]
    return st.integers(low, high)


valid_settings = st.lists(
    st.sampled_from(SETTING_NAMES).flatmap(
        lambda name: st.tuples(st.just(name), valid_setting_value(name))),
    max_size=4,
).map(dict)
# Valid values, or None to restore a setting's default.
valid_changes = st.lists(
    st.sampled_from(SETTING_NAMES).flatmap(
        lambda name: st.tuples(st.just(name), st.one_of(valid_setting_value(name), st.none()))),
    min_size=1, max_size=3,
).map(dict)


# -- the model -----------------------------------------------------------------------------

def setting_is_valid(name: str, value: Any) -> bool:
    if name in FLAG_SETTINGS:
        return isinstance(value, bool)
    if name in SETTING_BOUNDS:
        low, high = SETTING_BOUNDS[name]
        # bool is an int subclass, but True is not a count.
        return type(value) is int and low <= value <= high
    return False


def merged_settings(current: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any] | None:
    """The settings after ``changes`` (``None`` restores the default), or None if refused."""
    if any(name not in SETTING_BOUNDS and name not in FLAG_SETTINGS for name in changes):
        return None  # an unknown name is refused even when it would only be reset
    merged = {name: value for name, value in {**current, **changes}.items() if value is not None}
    if not all(setting_is_valid(name, value) for name, value in merged.items()):
        return None
    return merged


# -- helpers shared by the machines --------------------------------------------------------

class ScopeMachine(RuleBasedStateMachine):
    """One Scope under random commands, checked against ``settings`` and ``roles`` models."""

    def __init__(self) -> None:
        super().__init__()
        self.scope: Scope
        self.events: list[Any] = []
        self.settings: dict[str, Any] = {}
        self.roles: dict[str, set[str]] = {}
        # (principal, resource) -> "granted" or "revoked": a read decision that beats roles.
        self.reads: dict[tuple[str, Resource], str] = {}

    def commit(self) -> list[Any]:
        """Take the pending events; the stored variant also saves them."""
        return list(self.scope.collect_events())

    def record(self, expect_events: int) -> None:
        new_events = self.commit()
        assert len(new_events) == expect_events
        self.events.extend(new_events)

    @initialize(initial=valid_settings)
    def create_scope(self, initial: dict[str, Any]) -> None:
        # A fresh scope id per example keeps examples apart in a shared store.
        scope_id = f"scope-{uuid.uuid4().hex}"
        self.scope = Scope.create(scope_id, initial)
        self.settings = dict(initial)
        self.record(expect_events=1)

    # -- rules -------------------------------------------------------------------------------

    @rule(changes=st.one_of(setting_changes, valid_changes))
    def change_settings_merges_valid_changes_and_refuses_invalid_ones(
            self, changes: dict[str, Any]) -> None:
        expected = merged_settings(self.settings, changes)
        if expected is None:
            assert_refused(self.scope, "invalid_settings",
                           lambda: self.scope.change_settings(changes))
            return
        changed = self.scope.change_settings(changes)
        # Re-stating the current settings is a no-op, not a new event.
        assert changed == (expected != self.settings)
        self.settings = expected
        self.record(expect_events=int(changed))

    @rule(principal=st.sampled_from(PRINCIPALS), role=st.sampled_from(ROLES))
    def granting_a_role_is_idempotent(self, principal: str, role: str) -> None:
        already = role in self.roles.get(principal, set())
        assert self.scope.grant_role(principal, role) == (not already)
        self.roles.setdefault(principal, set()).add(role)
        self.record(expect_events=int(not already))

    @rule(principal=st.sampled_from(PRINCIPALS), role=st.sampled_from(ROLES))
    def revoking_a_role_is_idempotent(self, principal: str, role: str) -> None:
        held = role in self.roles.get(principal, set())
        assert self.scope.revoke_role(principal, role) == held
        if held:
            self.roles[principal].discard(role)
            if not self.roles[principal]:
                del self.roles[principal]
        self.record(expect_events=int(held))

    @rule(principal=st.sampled_from(PRINCIPALS), resource=st.sampled_from(RESOURCES),
          grant=st.booleans())
    def a_read_decision_is_recorded_once(self, principal: str, resource: Resource,
                                         grant: bool) -> None:
        decision = "granted" if grant else "revoked"
        command = self.scope.grant_read if grant else self.scope.revoke_read
        changed = self.reads.get((principal, resource)) != decision
        assert command(principal, resource) == changed
        self.reads[principal, resource] = decision
        self.record(expect_events=int(changed))

    @rule(principal=st.sampled_from(BAD_PRINCIPALS), role=st.sampled_from(ROLES),
          command=st.sampled_from(["grant_role", "revoke_role", "grant_read", "revoke_read"]))
    def an_invalid_principal_is_refused(self, principal: Any, role: str, command: str) -> None:
        commands: dict[str, Callable[[], object]] = {
            "grant_role": lambda: self.scope.grant_role(principal, role),
            "revoke_role": lambda: self.scope.revoke_role(principal, role),
            "grant_read": lambda: self.scope.grant_read(principal, RESOURCES[0]),
            "revoke_read": lambda: self.scope.revoke_read(principal, RESOURCES[0]),
        }
        assert_refused(self.scope, "invalid_identifier", commands[command])

    @rule(principal=st.sampled_from(PRINCIPALS), role=st.sampled_from(BAD_ROLES),
          grant=st.booleans())
    def an_unknown_role_is_refused(self, principal: str, role: Any, grant: bool) -> None:
        command = self.scope.grant_role if grant else self.scope.revoke_role
        assert_refused(self.scope, "invalid_role", lambda: command(principal, role))

    @rule(scope_id=st.sampled_from(["", "has space", "x" * 129, "ünïcode", "a/b", None]),
          initial=valid_settings)
    def a_scope_with_an_invalid_id_is_never_created(self, scope_id: Any,
                                                    initial: dict[str, Any]) -> None:
        with pytest.raises(DomainError) as refused:
            Scope.create(scope_id, initial)
        assert refused.value.code == "invalid_scope_id"

    @rule(initial=setting_changes)
    def a_scope_with_invalid_settings_is_never_created(self, initial: dict[str, Any]) -> None:
        # At creation there is nothing to restore: None is as invalid as any other bad value.
        if all(setting_is_valid(name, value) for name, value in initial.items()):
            assert Scope.create("another-scope", initial).settings == initial
            return
        with pytest.raises(DomainError) as refused:
            Scope.create("another-scope", initial)
        assert refused.value.code == "invalid_settings"

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def settings_match_the_model_and_stay_in_bounds(self) -> None:
        assert self.scope.settings == self.settings
        assert list(self.scope.settings) == sorted(self.scope.settings)
        for name, value in self.scope.settings.items():
            assert setting_is_valid(name, value)

    @invariant()
    def roles_match_the_model_and_no_principal_holds_an_empty_set(self) -> None:
        assert {p: set(roles) for p, roles in self.scope.roles.items()} == self.roles
        assert all(roles and roles <= set(ROLES) for roles in self.scope.roles.values())

    @invariant()
    def read_decisions_match_the_model(self) -> None:
        expected: dict[str, dict[str, str]] = {}
        for (principal, resource), decision in self.reads.items():
            expected.setdefault(principal, {})[resource.key] = decision
        assert self.scope.read_grants == expected

    @invariant()
    def permissions_follow_roles_unless_a_read_decision_overrides_them(self) -> None:
        for principal in PRINCIPALS:
            roles = self.roles.get(principal, set())
            by_role = {action for role in roles for action in ROLE_ACTIONS[role]}
            for action in ACTIONS:
                assert self.scope.permits(principal, action) == (action in by_role)
                for resource in RESOURCES:
                    decision = self.reads.get((principal, resource))
                    expected = (decision == "granted" if action == "read" and decision
                                else action in by_role)
                    assert self.scope.permits(principal, action, resource) == expected
            # A scope is acknowledged to anyone holding a role or at least one read grant.
            granted = any(d == "granted" for (p, _), d in self.reads.items() if p == principal)
            assert self.scope.acknowledges(principal) == (bool(roles) or granted)

    @invariant()
    def identity_never_changes(self) -> None:
        assert self.scope.id == Scope.create_id(self.scope.scope_id)
        assert self.scope.version == len(self.events)

    @invariant()
    def replaying_the_events_rebuilds_the_live_scope(self) -> None:
        assert replay(self.events) == self.scope


def test_scope_settings_and_roles_follow_the_model_and_replay() -> None:
    run_state_machine_as_test(ScopeMachine, settings=PURE)


def test_scope_round_trips_through_the_store(open_app: Callable[[], Dreaming]) -> None:
    """Every step is committed; both the writer and a second application read it back."""
    run_through_the_store(ScopeMachine, "scope", open_app)
