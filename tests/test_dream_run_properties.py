"""Stateful properties of the DreamRun aggregate: attempts, fencing, budget and outcome.

A hypothesis state machine drives one run through claims (``start_attempt``), manifest
freezing, model-call accounting, requeues and terminal outcomes, while a fake clock advances
past leases and the deadline. Writers name an attempt that is usually current and sometimes
stale. Checked after every step against a plain-Python model:

* queued/running => no outcome, candidate or error; failed => an error with its fixed human
  reason and nothing else;
  succeeded => no error, and a candidate exactly when the outcome is ``proposed``;
* the attempt count never exceeds the budget's ``max_model_calls``;
* ``started_at``, ``deadline_at``, ``model_config_id`` and the manifest never change once set;
* a heartbeat renews the current attempt's lease from now, and only that attempt's;
* a stale attempt is always refused with ``attempt_conflict``, and a terminal run never
  changes again (``run_terminal``);
* a refused command raises its stable code and leaves the run untouched;
* the run rebuilt from its events, or read back from SQLite and PostgreSQL, equals the live one
  and holds the same domain types (enums and value objects, never the stored strings and dicts).
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import hypothesis
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from domain.budget import Budget
from domain.canonical import digest
from domain.dream_request import OPERATIONS, DreamOperation, DreamRequest
from domain.dream_run import (
    OUTCOMES,
    TERMINAL,
    DreamRun,
    ProposedCandidate,
    RunOutcome,
    RunStatus,
    failure_reason,
)
from domain.errors import DomainError
from domain.evidence.manifest import EvidenceManifest
from domain.refs import ArtifactRef, SourceRef
from tests.property_support import (
    assert_refused,
    replay,
    run_through_the_store,
    stored_manifest,
)

PURE = hypothesis.settings(max_examples=200, stateful_step_count=25, deadline=None,
                           database=None)

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
CURRENT = "<current attempt>"  # resolved to the run's attempt when the rule runs
# Usually the current attempt, sometimes a stale or future one.
attempts = st.one_of(st.just(CURRENT), st.just(CURRENT), st.just(CURRENT), st.integers(-1, 4))
MANIFESTS: list[dict[str, Any]] = [
    stored_manifest(SourceRef("task", "t1")),
    stored_manifest(SourceRef("task", "t1"), SourceRef("task", "t2")),
]
CANDIDATE = {"candidate_id": "cand-1", "version": 1}
# Attributes that hold domain types, with the type each holds when set: a run rebuilt from
# stored (plain JSON) events must hold them too, not the plain strings and dicts.
TYPED = {"operation": DreamOperation, "request": DreamRequest, "budget": Budget,
         "status": RunStatus,
         "outcome": RunOutcome, "candidate": ProposedCandidate, "manifest": EvidenceManifest}
tokens = st.one_of(st.none(), st.integers(0, 5_000))
# Seconds on the fake clock before each command: mostly short, so attempts live a while, and
# sometimes past a lease or the deadline.
elapsed = st.sampled_from([1, 2, 5, 0, 11, 31, 121])

# Fields the model tracks, all of them read straight off the aggregate.
FIELDS = ("status", "attempt", "started_at", "deadline_at", "lease_expires_at",
          "model_config_id", "manifest", "manifest_digest", "model_calls", "input_tokens",
          "output_tokens", "usage_reported", "outcome", "reason", "candidate", "reused",
          "error", "completed_at", "last_requeue_code")
SET_ONCE = ("started_at", "deadline_at", "model_config_id", "manifest", "manifest_digest")


# -- helpers shared by the machines --------------------------------------------------------

class DreamRunMachine(RuleBasedStateMachine):
    """One DreamRun under random worker commands and a fake clock, checked against a model."""

    def __init__(self) -> None:
        super().__init__()
        self.dream_run: DreamRun
        self.scope_id = f"scope-{uuid.uuid4().hex}"  # fresh per example: no store collisions
        self.events: list[Any] = []
        self.now = T0
        self.budget = Budget()
        self.request: DreamRequest
        self.model: dict[str, Any] = {}
        self.first_seen: dict[str, Any] = {}
        self.terminal_snapshot: DreamRun | None = None

    def commit(self) -> list[Any]:
        """Take the pending events; the stored variant also saves them."""
        return list(self.dream_run.collect_events())

    def record(self, expect_events: int) -> None:
        new_events = self.commit()
        assert len(new_events) == expect_events
        self.events.extend(new_events)

    @property
    def terminal(self) -> bool:
        return self.model["status"] in TERMINAL

    def resolve(self, attempt: int | str) -> int:
        return self.model["attempt"] if attempt == CURRENT else int(attempt)

    def attempt_refusal(self, attempt: int) -> str | None:
        """The fencing check every write after a claim goes through."""
        if self.terminal:
            return "run_terminal"
        if self.model["status"] != RunStatus.RUNNING or attempt != self.model["attempt"]:
            return "attempt_conflict"
        return None

    @initialize(operation=st.sampled_from(OPERATIONS), max_model_calls=st.sampled_from([2, 1]),
                timeout_seconds=st.sampled_from([120, 30, 1]))
    def accept(self, operation: str, max_model_calls: int, timeout_seconds: int) -> None:
        self.budget = Budget.of({"max_model_calls": max_model_calls,
                                 "timeout_seconds": timeout_seconds})
        self.request = DreamRequest.create(operation, "idem-1",
                                           artifacts=[ArtifactRef("experience", "e", 2)])
        self.dream_run = DreamRun.accept(self.scope_id, "run-1", "alice", self.request,
                                         self.budget, "prompt-v1", T0)
        self.model = dict.fromkeys(FIELDS)
        self.model.update(status=RunStatus.QUEUED, attempt=0, model_calls=0,
                          usage_reported=False, reused=False)
        self.record(expect_events=1)

    # -- rules -------------------------------------------------------------------------------

    @rule(model_config_id=st.sampled_from(["model-a", "model-b"]),
          lease_seconds=st.sampled_from([10, 60, 1]), elapsed=elapsed)
    def claiming_starts_the_next_attempt_within_budget(self, model_config_id: str,
                                                       lease_seconds: int, elapsed: int) -> None:
        self.now += timedelta(seconds=elapsed)
        model = self.model
        start = partial(self.dream_run.start_attempt, self.now, model_config_id, lease_seconds)
        if self.terminal:
            assert_refused(self.dream_run, "run_terminal", start)
            return
        if model["status"] == RunStatus.RUNNING and self.now < model["lease_expires_at"]:
            # A live lease fences other workers out.
            assert_refused(self.dream_run, "attempt_conflict", start)
            return
        out_of_time = model["deadline_at"] is not None and self.now >= model["deadline_at"]
        if out_of_time or model["attempt"] >= self.budget.max_model_calls:
            assert start() is False
            model.update(status=RunStatus.FAILED, error="budget_exceeded", completed_at=self.now,
                         lease_expires_at=None, reason=failure_reason("budget_exceeded"))
            self.record(expect_events=1)
            return
        assert start() is True
        started_at = model["started_at"] or self.now
        model.update(status=RunStatus.RUNNING, attempt=model["attempt"] + 1,
                     started_at=started_at,
                     deadline_at=model["deadline_at"] or started_at + timedelta(
                         seconds=self.budget.timeout_seconds),
                     model_config_id=model["model_config_id"] or model_config_id,
                     lease_expires_at=self.now + timedelta(seconds=lease_seconds))
        self.record(expect_events=1)

    @precondition(lambda self: self.model["status"] == RunStatus.RUNNING)
    @rule(attempt=attempts, manifest=st.sampled_from(MANIFESTS), elapsed=elapsed)
    def the_manifest_is_frozen_once(self, attempt: int | str, manifest: dict[str, Any],
                                    elapsed: int) -> None:
        self.now += timedelta(seconds=elapsed)
        number, manifest_digest = self.resolve(attempt), digest(manifest)
        freeze = partial(self.dream_run.freeze_manifest, number, manifest, manifest_digest)
        code = self.attempt_refusal(number) or (
            "manifest_frozen" if self.model["manifest_digest"] not in (None, manifest_digest)
            else None)
        if code is not None:
            assert_refused(self.dream_run, code, freeze)
            return
        if self.model["manifest_digest"] == manifest_digest:
            # The same manifest again (a retried attempt) is a no-op.
            assert freeze() is False
            self.record(expect_events=0)
            return
        assert freeze() is True
        self.model.update(manifest=EvidenceManifest.from_dict(manifest),
                          manifest_digest=manifest_digest)
        self.record(expect_events=1)

    @precondition(lambda self: self.model["status"] == RunStatus.RUNNING)
    @rule(attempt=attempts, elapsed=elapsed)
    def a_model_call_is_counted_before_it_is_made(self, attempt: int | str, elapsed: int) -> None:
        self.now += timedelta(seconds=elapsed)
        number = self.resolve(attempt)
        over_budget = self.model["model_calls"] + 1 > self.budget.max_model_calls
        code = self.attempt_refusal(number) or ("budget_exceeded" if over_budget else None)
        count = partial(self.dream_run.count_model_call, number)
        if code is not None:
            assert_refused(self.dream_run, code, count)
            return
        count()
        self.model["model_calls"] += 1
        self.record(expect_events=1)

    @precondition(lambda self: self.model["status"] == RunStatus.RUNNING)
    @rule(attempt=attempts, requests=st.integers(0, 3), input_tokens=tokens,
          output_tokens=tokens, elapsed=elapsed)
    def usage_reports_merge_and_unknown_stays_unknown(
            self, attempt: int | str, requests: int, input_tokens: int | None,
            output_tokens: int | None, elapsed: int) -> None:
        self.now += timedelta(seconds=elapsed)
        number = self.resolve(attempt)
        report = partial(self.dream_run.record_usage, number, requests, input_tokens, output_tokens)
        code = self.attempt_refusal(number)
        if code is not None:
            assert_refused(self.dream_run, code, report)
            return
        report()
        model = self.model

        def merged(total: int | None, value: int | None) -> int | None:
            if not model["usage_reported"] and model["model_calls"] <= 1:
                return value
            return None if total is None or value is None else total + value

        model.update(model_calls=model["model_calls"] + max(0, requests - 1),
                     input_tokens=merged(model["input_tokens"], input_tokens),
                     output_tokens=merged(model["output_tokens"], output_tokens),
                     usage_reported=True)
        self.record(expect_events=1)

    @precondition(lambda self: self.model["status"] == RunStatus.RUNNING)
    @rule(attempt=attempts, lease_seconds=st.sampled_from([10, 60, 1]), elapsed=elapsed)
    def a_heartbeat_renews_only_the_current_attempts_lease(
            self, attempt: int | str, lease_seconds: int, elapsed: int) -> None:
        self.now += timedelta(seconds=elapsed)
        number = self.resolve(attempt)
        renew = partial(self.dream_run.renew_lease, number, self.now, lease_seconds)
        code = self.attempt_refusal(number)
        if code is not None:
            assert_refused(self.dream_run, code, renew)
            return
        renew()
        self.model.update(lease_expires_at=self.now + timedelta(seconds=lease_seconds))
        self.record(expect_events=1)

    @precondition(lambda self: self.model["status"] == RunStatus.RUNNING)
    @rule(attempt=attempts, code=st.sampled_from(["provider_unavailable", "timeout"]),
          elapsed=elapsed)
    def requeueing_hands_the_run_back_to_the_queue(self, attempt: int | str, code: str,
                                                   elapsed: int) -> None:
        self.now += timedelta(seconds=elapsed)
        number = self.resolve(attempt)
        refusal = self.attempt_refusal(number)
        requeue = partial(self.dream_run.requeue, number, code)
        if refusal is not None:
            assert_refused(self.dream_run, refusal, requeue)
            return
        requeue()
        self.model.update(status=RunStatus.QUEUED, lease_expires_at=None, last_requeue_code=code)
        self.record(expect_events=1)

    @precondition(lambda self: self.model["status"] == RunStatus.RUNNING)
    @rule(attempt=attempts, outcome=st.sampled_from([*OUTCOMES, "bogus"]),
          with_candidate=st.booleans(), reused=st.booleans(), elapsed=elapsed)
    def succeeding_needs_a_candidate_exactly_for_a_proposal(
            self, attempt: int | str, outcome: str, with_candidate: bool, reused: bool,
            elapsed: int) -> None:
        self.now += timedelta(seconds=elapsed)
        number = self.resolve(attempt)
        candidate = dict(CANDIDATE) if with_candidate else None
        code = self.attempt_refusal(number) or (
            "invalid_request" if outcome not in OUTCOMES
            or with_candidate != (outcome == RunOutcome.PROPOSED) else None)
        succeed = partial(
            self.dream_run.succeed, number, outcome, "why", candidate, self.now, reused)
        if code is not None:
            assert_refused(self.dream_run, code, succeed)
            return
        succeed()
        self.model.update(status=RunStatus.SUCCEEDED, outcome=outcome, reason="why",
                          candidate=None if candidate is None
                          else ProposedCandidate.from_dict(candidate),
                          reused=reused, completed_at=self.now, lease_expires_at=None)
        self.record(expect_events=1)

    @precondition(lambda self: self.model["status"] == RunStatus.RUNNING)
    @rule(attempt=attempts, error=st.sampled_from(["provider_error", "invalid_output"]),
          elapsed=elapsed)
    def failing_ends_the_run(self, attempt: int | str, error: str, elapsed: int) -> None:
        self.now += timedelta(seconds=elapsed)
        number = self.resolve(attempt)
        code = self.attempt_refusal(number)
        fail = partial(self.dream_run.fail, number, error, self.now)
        if code is not None:
            assert_refused(self.dream_run, code, fail)
            return
        fail()
        self.model.update(status=RunStatus.FAILED, error=error, completed_at=self.now,
                          lease_expires_at=None, reason=failure_reason(error))
        self.record(expect_events=1)

    @rule(data=st.data(), command=st.sampled_from(
        ["freeze", "count", "usage", "renew", "requeue", "succeed", "fail"]), elapsed=elapsed)
    def a_stale_or_foreign_attempt_is_always_refused(self, data: st.DataObject,
                                                     command: str, elapsed: int) -> None:
        self.now += timedelta(seconds=elapsed)
        # Any attempt but the one currently running: earlier, later, or the current one once
        # it has been requeued or has ended.
        running = self.model["attempt"] if self.model["status"] == RunStatus.RUNNING else None
        stale = data.draw(st.integers(-1, self.model["attempt"] + 2).filter(
            lambda n: n != running), "attempt")
        commands: dict[str, Callable[[], object]] = {
            "freeze": lambda: self.dream_run.freeze_manifest(stale, MANIFESTS[0],
                                                             digest(MANIFESTS[0])),
            "count": lambda: self.dream_run.count_model_call(stale),
            "usage": lambda: self.dream_run.record_usage(stale, 1, 10, 10),
            "renew": lambda: self.dream_run.renew_lease(stale, self.now, 60),
            "requeue": lambda: self.dream_run.requeue(stale, "timeout"),
            "succeed": lambda: self.dream_run.succeed(stale, RunOutcome.NO_CHANGE, "why", None,
                                                      self.now),
            "fail": lambda: self.dream_run.fail(stale, "provider_error", self.now),
        }
        code = "run_terminal" if self.terminal else "attempt_conflict"
        assert_refused(self.dream_run, code, commands[command])

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def the_run_matches_the_model(self) -> None:
        assert {name: getattr(self.dream_run, name) for name in FIELDS} == self.model
        assert self.dream_run.attempt_count == self.model["attempt"]

    @invariant()
    def the_outcome_fields_match_the_status(self) -> None:
        run = self.dream_run
        if run.status in (RunStatus.QUEUED, RunStatus.RUNNING):
            assert (run.outcome, run.candidate, run.error, run.completed_at) == (
                None, None, None, None)
        if run.status == RunStatus.FAILED:
            assert run.error is not None
            assert run.reason == failure_reason(run.error)
            assert (run.outcome, run.candidate) == (None, None)
        if run.status == RunStatus.SUCCEEDED:
            assert run.error is None
            assert run.outcome in OUTCOMES
            assert (run.candidate is not None) == (run.outcome == RunOutcome.PROPOSED)
        # Only a running attempt holds a lease.
        assert (run.lease_expires_at is not None) == (run.status == RunStatus.RUNNING)

    @invariant()
    def attempts_stay_within_the_budget(self) -> None:
        assert 0 <= self.dream_run.attempt_count <= self.budget.max_model_calls
        assert self.dream_run.model_calls >= 0

    @invariant()
    def pinned_fields_never_change_once_set(self) -> None:
        for name in SET_ONCE:
            value = getattr(self.dream_run, name)
            if name in self.first_seen:
                assert value == self.first_seen[name]
            elif value is not None:
                self.first_seen[name] = copy.deepcopy(value)
        if self.dream_run.started_at is not None:
            assert self.dream_run.deadline_at == self.dream_run.started_at + timedelta(
                seconds=self.budget.timeout_seconds)

    @invariant()
    def a_terminal_run_never_changes(self) -> None:
        if not self.dream_run.terminal:
            return
        if self.terminal_snapshot is None:
            self.terminal_snapshot = copy.deepcopy(self.dream_run)
        assert self.dream_run == self.terminal_snapshot

    @invariant()
    def identity_never_changes(self) -> None:
        assert self.dream_run.id == DreamRun.create_id(self.scope_id, "run-1")
        assert (self.dream_run.budget, self.dream_run.accepted_at) == (self.budget, T0)
        assert self.dream_run.request == self.request
        assert self.dream_run.operation == self.request.operation
        assert self.dream_run.version == len(self.events)

    @invariant()
    def replaying_the_events_rebuilds_the_live_run(self) -> None:
        assert replay(self.events) == self.dream_run

    @invariant()
    def the_state_is_typed_live_replayed_and_stored(self) -> None:
        runs = [self.dream_run, replay(self.events)]
        store = getattr(self, "store", None)  # set when the machine runs through the store
        if store is not None:
            runs.append(store.repository.get(self.dream_run.id))
        for run in runs:
            for name, kind in TYPED.items():
                value = getattr(run, name)
                assert value is None or type(value) is kind, (name, type(value))


@pytest.mark.parametrize("operation", ["summarise", "", "derive_skills", "Refine_Experience"])
def test_an_unknown_operation_is_never_accepted(operation: str) -> None:
    """A run is accepted for a request, and no request names an unknown operation."""
    with pytest.raises(DomainError) as refused:
        DreamRequest.create(operation, "idem-2")
    assert refused.value.code == "invalid_dream_operation"


def test_dream_run_lifecycle_is_fenced_budgeted_and_replayable() -> None:
    run_state_machine_as_test(DreamRunMachine, settings=PURE)


def test_dream_run_round_trips_through_the_store(open_app: Callable[[], Any]) -> None:
    """Every step is committed; both the writer and a second application read it back."""
    run_through_the_store(DreamRunMachine, "dream_run", open_app)
