"""Automatic dreaming, the pure part: each gate, the status reasons, the window plan and its
split into runs, the work key, the success boundary, and the AutoDream aggregate (guards with
stable codes; rebuilt from its events, or read back from SQLite and PostgreSQL, it equals the
live one)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

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

from application.bootstrap import Dreaming
from domain.auto_dream import (
    MAX_WINDOW_RECORDS,
    AutoDream,
    AutoSettings,
    GateName,
    GateReport,
    PendingRecord,
    RecordKind,
    Settlement,
    WindowPlan,
    capacity_gate,
    enabled_gate,
    first_records,
    idle_gate,
    part_key,
    plan_window,
    records_gate,
    retry_backoff,
    settle_cutoff,
    settlement,
    split_window,
    time_gate,
    window_sizes,
    work_key,
)
from domain.dream_request import MAX_REFERENCES, MAX_SELECTED, DreamRequest
from domain.dream_run import RunOutcome
from domain.errors import InvalidSettingsError
from domain.refs import ArtifactFamily, ArtifactRef, MemoryCitation, SourceRef
from domain.scope import Scope
from domain.text import check_identifier
from tests.property_support import PURE, assert_refused, replay, run_through_the_store

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
ON = AutoSettings(enabled=True)


def source(position: int, at: datetime = T0) -> PendingRecord:
    return PendingRecord(position, at, RecordKind.SOURCE, SourceRef("task", f"t{position}"))


def entry(position: int, at: datetime = T0) -> PendingRecord:
    citation = MemoryCitation(ArtifactRef(ArtifactFamily.MEMORY, "m", position), f"e{position}",
                              f"ev_{position}")
    return PendingRecord(position, at, RecordKind.MEMORY_ENTRY, citation)


ANCHOR = MemoryCitation(ArtifactRef(ArtifactFamily.MEMORY, "m", 1), "e1", "ev_1")


# -- settings -----------------------------------------------------------------------------------


def test_settings_default_to_spec_values_and_new_scopes_are_off() -> None:
    settings = AutoSettings.of(Scope.create("s").settings)
    assert settings == AutoSettings(enabled=False, min_hours=4, min_new_records=3,
                                    settle_minutes=5, advance_on_needs_evidence=False)
    assert settings.advancing_outcomes == {RunOutcome.PROPOSED, RunOutcome.NO_CHANGE}
    keep = AutoSettings.of({"auto_advance_on_needs_evidence": True})
    assert RunOutcome.NEEDS_EVIDENCE in keep.advancing_outcomes


def test_the_needs_evidence_setting_is_a_checked_flag() -> None:
    scope = Scope.create("s", {"auto_advance_on_needs_evidence": True})
    assert scope.settings["auto_advance_on_needs_evidence"] is True
    with pytest.raises(InvalidSettingsError) as refused:
        Scope.create("s", {"auto_advance_on_needs_evidence": "yes"})
    assert refused.value.details["field"] == "settings.auto_advance_on_needs_evidence"


# -- gates --------------------------------------------------------------------------------------


def test_enabled_gate() -> None:
    assert enabled_gate(ON).open
    closed = enabled_gate(AutoSettings())
    assert not closed.open
    assert closed.value is False
    assert "auto_dream_enabled" in closed.reason


def test_idle_gate_closes_while_a_window_is_in_flight() -> None:
    auto = AutoDream.start("s")
    assert idle_gate(auto.window).open
    auto.open_window(WindowPlan(0, 3, (source(3),)), ["dr_1"], T0)
    gate = idle_gate(auto.window)
    assert not gate.open
    assert gate.value == "auto-0-3-r0"
    assert "auto-0-3-r0" in gate.reason


@pytest.mark.parametrize(("hours", "opened"), [(3.99, False), (4.0, True), (10.0, True)])
def test_time_gate_measures_hours_since_the_last_successful_run(hours: float,
                                                                opened: bool) -> None:
    gate = time_gate(ON, T0, T0 + timedelta(hours=hours))
    assert gate.open is opened
    assert gate.value == round(hours, 3)
    assert gate.threshold == 4
    assert time_gate(ON, None, T0).open  # never succeeded: open


@pytest.mark.parametrize(("retry", "minutes"), [(1, 15), (2, 30), (3, 60), (4, 120), (5, 240)])
def test_a_released_window_retries_after_a_doubling_backoff(retry: int, minutes: int) -> None:
    released = T0 + timedelta(hours=10)  # the last success is long past: only the backoff waits
    assert retry_backoff(retry) == timedelta(minutes=minutes)
    waiting = time_gate(ON, T0, released + timedelta(minutes=minutes - 1), released, retry)
    assert not waiting.open
    assert "retrying in 1.0 min" in waiting.reason
    assert time_gate(ON, T0, released + timedelta(minutes=minutes), released, retry).open


def test_the_retry_backoff_never_exceeds_min_hours() -> None:
    released = T0
    assert retry_backoff(40) == timedelta(minutes=15 * 2 ** 8)  # bounded exponent
    assert time_gate(ON, None, released + timedelta(hours=4), released, 40).open
    assert not time_gate(ON, None, released + timedelta(hours=3.9), released, 40).open
    eager = replace(ON, min_hours=0)  # no time gate: a released window retries at once
    assert time_gate(eager, None, released, released, 3).open


@pytest.mark.parametrize(("count", "opened"), [(0, False), (2, False), (3, True), (5, True)])
def test_records_gate_counts_the_window(count: int, opened: bool) -> None:
    plan = WindowPlan(0, count, tuple(entry(p) for p in range(1, count + 1)))
    gate = records_gate(ON, plan, parts=1)
    assert (gate.open, gate.value, gate.threshold) == (opened, count, 3)


def test_records_gate_closes_when_sources_have_nothing_to_select() -> None:
    plan = WindowPlan(0, 3, (source(1), source(2), source(3)))
    gate = records_gate(ON, plan, parts=0)
    assert not gate.open
    assert gate.value == 3
    assert "no active Memory entry" in gate.reason


def test_capacity_gate() -> None:
    assert capacity_gate(free=2, needed=2).open
    closed = capacity_gate(free=1, needed=2)
    assert not closed.open
    assert (closed.value, closed.threshold) == (1, 2)


def test_the_report_is_due_only_when_every_gate_is_open_and_names_the_first_closed() -> None:
    report = GateReport(())
    for gate in (enabled_gate(ON), idle_gate(None), time_gate(ON, None, T0)):
        report = report.then(gate)
    assert not report.due
    assert report.reason == "not evaluated"
    closed = report.then(records_gate(ON, WindowPlan(0, 0, ()), 0))
    assert not closed.due
    assert closed.reason.startswith("0 settled new record(s)")
    due = report.then(records_gate(ON, WindowPlan(0, 3, (entry(1), entry(2), entry(3))), 1)
                      ).then(capacity_gate(5, 1))
    assert due.due
    assert due.reason == "due: every gate is open"
    assert [gate.name for gate in due.gates] == list(GateName)
    off = GateReport(()).then(enabled_gate(AutoSettings()))
    assert not off.due
    assert "off" in off.reason


# -- the window ---------------------------------------------------------------------------------


def test_the_window_stops_before_the_first_record_still_being_written() -> None:
    cutoff = settle_cutoff(ON, T0)
    assert cutoff == T0 - timedelta(minutes=5)
    settled, young = T0 - timedelta(minutes=6), T0 - timedelta(minutes=1)
    records = [source(5, settled), source(3, settled), source(8, young), source(9, settled)]
    plan = plan_window(2, records, cutoff, limit=10)
    assert [r.position for r in plan.records] == [3, 5]
    assert (plan.after, plan.end) == (2, 5)  # 9 waits behind 8: never passed over


def test_the_window_skips_what_the_cursor_passed_and_stops_at_its_limit() -> None:
    plan = plan_window(4, [source(p) for p in range(1, 20)], T0, limit=3)
    assert [r.position for r in plan.records] == [5, 6, 7]
    assert plan_window(30, [source(1)], T0, 3) == WindowPlan(30, 30, ())


def test_one_run_takes_a_window_within_the_request_limits() -> None:
    records = [entry(1), source(2), source(3)]
    (part,) = split_window(records, [], 32)
    assert part.memory_citations == (records[0].ref,)
    assert part.sources == (records[1].ref, records[2].ref)


def test_a_large_window_is_split_into_valid_requests() -> None:
    records = [entry(p) for p in range(1, 46)] + [source(p) for p in range(46, 96)]
    parts = split_window(records, [ANCHOR], 32)
    covered = [ref for part in parts for ref in (*part.memory_citations, *part.sources)]
    assert set(covered) >= {r.ref for r in records}
    for index, part in enumerate(parts):
        assert 1 <= len(part.memory_citations) <= MAX_SELECTED
        assert len(part.memory_citations) + len(part.sources) <= MAX_REFERENCES
        DreamRequest.create("refine_experience", part_key("auto-0-95-r0", index, len(parts)),
                            memory_citations=part.memory_citations, sources=part.sources)


def test_sources_only_select_the_anchors_within_the_scope_item_budget() -> None:
    parts = split_window([source(p) for p in range(1, 8)], [ANCHOR], max_items=4)
    assert [len(part.sources) for part in parts] == [3, 3, 1]
    assert all(part.memory_citations == (ANCHOR,) for part in parts)
    assert split_window([source(1)], [], 32) == ()  # nothing to select with
    assert split_window([source(1)], [ANCHOR], 1) == ()  # no room for a Source


def test_work_keys_are_stable_valid_idempotency_keys() -> None:
    key = work_key(10, 25, 2)
    assert key == work_key(10, 25, 2) == "auto-10-25-r2"
    assert key != work_key(10, 25, 3)
    assert key != work_key(10, 26, 2)
    for value in (key, part_key(key, 0, 3), part_key(key, 2, 3)):
        check_identifier("idempotency_key", value)
    assert part_key(key, 0, 1) == key
    assert part_key(key, 1, 3) == f"{key}-p2of3"


def test_settlement_is_the_success_boundary() -> None:
    done = (True, RunOutcome.PROPOSED)
    assert settlement(ON, [done, (False, None)]) == Settlement.WAITING
    assert settlement(ON, [done, (True, RunOutcome.NO_CHANGE)]) == Settlement.ADVANCE
    assert settlement(ON, [done, (True, None)]) == Settlement.RELEASE  # a failure
    assert settlement(ON, [(True, RunOutcome.NEEDS_EVIDENCE)]) == Settlement.RELEASE
    keep = AutoSettings(enabled=True, advance_on_needs_evidence=True)
    assert settlement(keep, [(True, RunOutcome.NEEDS_EVIDENCE)]) == Settlement.ADVANCE


# -- the aggregate ------------------------------------------------------------------------------


def test_the_aggregate_refuses_with_stable_codes() -> None:
    auto = AutoDream.start("s")
    auto.collect_events()
    assert_refused(auto, "auto_window_mismatch", lambda: auto.succeed("auto-0-3-r0", T0))
    assert_refused(auto, "auto_window_mismatch",
                   lambda: auto.open_window(WindowPlan(5, 7, (source(7),)), ["dr"], T0))
    assert_refused(auto, "auto_window_mismatch",
                   lambda: auto.open_window(WindowPlan(0, 0, ()), ["dr"], T0))
    auto.open_window(WindowPlan(0, 3, (source(3),)), ["dr"], T0)
    auto.collect_events()
    assert_refused(auto, "auto_window_open",
                   lambda: auto.open_window(WindowPlan(0, 4, (source(4),)), ["dr2"], T0))
    assert_refused(auto, "auto_window_mismatch", lambda: auto.release("auto-0-9-r0", "x", T0))


def test_success_moves_the_cursor_and_release_keeps_it() -> None:
    auto = AutoDream.start("s")
    auto.open_window(WindowPlan(0, 3, (source(3),)), ["dr"], T0)
    auto.release("auto-0-3-r0", "run failed", T0)
    assert (auto.cursor, auto.window, auto.retry, auto.last_success_at) == (0, None, 1, None)
    assert auto.last_ended_at == T0
    window = auto.open_window(WindowPlan(0, 5, (source(3), source(5))), ["dr2"], T0)
    assert window.work_key == "auto-0-5-r1"  # a new key: the released runs are not replayed
    auto.succeed(window.work_key, T0 + timedelta(hours=1))
    assert (auto.cursor, auto.window, auto.retry) == (5, None, 0)
    assert auto.last_success_at == auto.last_ended_at == T0 + timedelta(hours=1)


class AutoDreamMachine(RuleBasedStateMachine):
    """Windows opened, succeeded and released at random: a plain model agrees after every
    step, and the aggregate rebuilt from its events equals the live one."""

    def commit(self) -> list[Any]:
        return list(self.auto.collect_events())

    @initialize()
    def start(self) -> None:
        self.auto = AutoDream.start(f"s-{uuid.uuid4().hex}")  # a fresh aggregate per example
        self.events = self.commit()
        self.now, self.cursor, self.retry, self.position = T0, 0, 0, 0
        self.open: str | None = None

    @precondition(lambda self: self.open is None)
    @rule(records=st.integers(1, 5))
    def open_window(self, records: int) -> None:
        self.position += records
        plan = WindowPlan(self.cursor, self.position,
                          tuple(source(p) for p in range(self.position - records + 1,
                                                          self.position + 1)))
        self.open = self.auto.open_window(plan, [f"dr_{self.position}"], self.now).work_key
        assert self.open == work_key(self.cursor, self.position, self.retry)
        self.events += self.commit()

    @precondition(lambda self: self.open is not None)
    @rule(succeeded=st.booleans(), minutes=st.integers(0, 600))
    def end_window(self, succeeded: bool, minutes: int) -> None:
        assert self.open is not None
        self.now += timedelta(minutes=minutes)
        if succeeded:
            self.auto.succeed(self.open, self.now)
            self.cursor, self.retry = self.position, 0
        else:
            self.auto.release(self.open, "failed", self.now)
            self.retry += 1
        self.open = None
        self.events += self.commit()

    @rule()
    def refused_change(self) -> None:
        if self.open is None:
            assert_refused(self.auto, "auto_window_mismatch",
                           lambda: self.auto.succeed("auto-x", self.now))
        else:
            assert_refused(self.auto, "auto_window_open", lambda: self.auto.open_window(
                WindowPlan(self.cursor, self.position + 1, (source(self.position + 1),)),
                ["dr"], self.now))

    @invariant()
    def agrees_with_the_model_and_replays(self) -> None:
        assert self.auto.cursor == self.cursor
        assert self.auto.retry == self.retry
        assert (self.auto.window is None) == (self.open is None)
        assert replay(self.events) == self.auto


def test_the_aggregate_follows_its_model_and_replays() -> None:
    run_state_machine_as_test(AutoDreamMachine, settings=PURE)


def test_the_aggregate_round_trips_through_the_store(open_app: Callable[[], Dreaming]) -> None:
    run_through_the_store(AutoDreamMachine, "auto", open_app)


def test_window_limit_is_three_full_runs() -> None:
    assert MAX_WINDOW_RECORDS == 3 * MAX_REFERENCES


def test_window_sizes_halve_down_to_one_source_beside_one_entry() -> None:
    assert window_sizes(32) == (32, 16, 8, 4, 2)
    assert window_sizes(100) == window_sizes(MAX_REFERENCES)
    assert window_sizes(5) == (5, 2)
    assert window_sizes(2) == (2,)


def test_first_records_ends_the_window_at_its_last_record() -> None:
    plan = WindowPlan(0, 9, tuple(source(p) for p in (3, 5, 9)))
    assert first_records(plan, 5) is plan
    assert first_records(plan, 2) == WindowPlan(0, 5, plan.records[:2])
