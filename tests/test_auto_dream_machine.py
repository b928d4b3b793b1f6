"""Automatic dreaming end to end on SQLite and PostgreSQL, as a hypothesis state machine.

Rules: record (a task Source, a sub-agent's Source, a Memory entry), withdraw a Source, let
time pass (settling, the hours gate), tick (``check_and_run`` from one of two application
instances, so two processes take turns), a run of the open window finishes with any outcome or
fails, crash (both instances dropped and reopened from the store) and change the settings.
Invariants after every step:

* never two automatic runs for one window: every run ever admitted came from one tick, each
  window key was opened once, and a tick admits nothing while a window is open;
* the cursor never passes a record that was not in a successful window's runs, and no
  eligible record is ever skipped (every counted record at or before the cursor was cited by a
  window that succeeded; every counted record after it is still pending);
* a gate that is closed admits nothing (the status evaluated just before the tick says why).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
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

from adapters.settings import Settings
from adapters.store.held_queues import HeldQueues
from adapters.store.persistence import application_env
from adapters.store.projection_runtime import RunningProjection, start_projection
from application.bootstrap import Dreaming
from domain.auto_dream import AutoDream
from domain.dream_run import DreamRun, RunOutcome, RunTrigger
from domain.policy import LOCAL
from domain.refs import MemoryCitation, SourceRef
from domain.source import Eligibility
from projections.auto_records import AUTO_RECORDS
from tests.test_auto_dream_runs import finish

MACHINE = hypothesis.settings(max_examples=16, stateful_step_count=30, deadline=None,
                              database=None,
                              suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture,
                                                     hypothesis.HealthCheck.too_slow])
OUTCOMES = [RunOutcome.PROPOSED, RunOutcome.NO_CHANGE, RunOutcome.NEEDS_EVIDENCE, None]


@dataclass
class Record:
    position: int
    ref: SourceRef | MemoryCitation
    counted: bool  # eligible now: not a sub-agent's, not withdrawn


class Clock:
    """The wall clock (events are stamped with it) plus an offset the machine moves on;
    frozen around a tick so the status and the tick see the same moment."""

    def __init__(self) -> None:
        self.offset = timedelta(0)
        self.frozen: datetime | None = None

    def __call__(self) -> datetime:
        return self.frozen or datetime.now(tz=UTC) + self.offset


@pytest.fixture
def record_log(settings: Settings) -> Iterator[RunningProjection[Any]]:
    with start_projection(AUTO_RECORDS, settings) as running:
        yield running


def test_automatic_dreaming_keeps_its_invariants(settings: Settings,
                                                 record_log: RunningProjection[Any]) -> None:
    class Machine(AutoDreamingMachine):
        store_settings = settings
        log = record_log

    run_state_machine_as_test(Machine, settings=MACHINE)


class AutoDreamingMachine(RuleBasedStateMachine):
    store_settings: Settings
    log: RunningProjection[Any]

    @initialize(min_records=st.integers(1, 3), settle=st.sampled_from([0, 0, 5]),
                hours=st.sampled_from([0, 1]))
    def start(self, min_records: int, settle: int, hours: int) -> None:
        self.scope = f"auto-{uuid.uuid4().hex[:12]}"  # a fresh scope per example
        self.clock = Clock()
        self.apps = self._open()
        app = self.apps[0]
        app.records.create_scope(LOCAL, self.scope, {
            "auto_dream_enabled": True, "auto_min_hours": hours,
            "auto_min_new_records": min_records,
            "auto_settle_minutes": settle})
        app.records.create_memory(LOCAL, self.scope, "m", "tester")
        self.records: list[Record] = []
        self.entries = 0
        self.sources = 0
        self.admitted: list[str] = []  # every automatic run id any tick admitted
        self._add_entry()

    def teardown(self) -> None:
        for app in getattr(self, "apps", []):
            app.close()

    def _open(self) -> list[Dreaming]:
        env = application_env(self.store_settings)
        return [Dreaming(env=env, clock=self.clock, enforce_access=False,
                         run_queues=HeldQueues) for _ in range(2)]

    # -- records --------------------------------------------------------------------------------

    def _add_entry(self) -> None:
        self.entries += 1
        written = self.apps[0].records.add_entry(LOCAL, self.scope, "m", f"e{self.entries}",
                                                 "lesson", f"lesson {self.entries}")
        assert written.position is not None
        self.records.append(Record(written.position, written.value.citation, True))

    @rule(kind=st.sampled_from(["task", "task", "sub_agent", "lineage", "entry"]))
    def record(self, kind: str) -> None:
        if kind == "entry":
            self._add_entry()
            return
        self.sources += 1
        written = self.apps[1].records.record_source(
            LOCAL, self.scope, "task", f"t{self.sources}", text=f"task {self.sources}",
            sub_agent=kind == "sub_agent",
            eligibility=Eligibility.LINEAGE_ONLY if kind == "lineage" else Eligibility.ELIGIBLE)
        assert written.position is not None
        self.records.append(Record(written.position, written.value.ref, kind == "task"))

    @precondition(lambda self: any(isinstance(r.ref, SourceRef) and r.counted
                                   for r in self.records))
    @rule(data=st.data())
    def withdraw(self, data: st.DataObject) -> None:
        record = data.draw(st.sampled_from([r for r in self.records
                                            if isinstance(r.ref, SourceRef) and r.counted]))
        assert isinstance(record.ref, SourceRef)
        self.apps[0].records.withdraw_source(LOCAL, self.scope, record.ref.source_type,
                                             record.ref.source_id, "withdrawn")
        record.counted = False

    @rule(minutes=st.sampled_from([1, 6, 61]))
    def time_passes(self, minutes: int) -> None:
        self.clock.offset += timedelta(minutes=minutes)

    # -- the trigger ----------------------------------------------------------------------------

    @rule(process=st.integers(0, 1), again=st.booleans())
    def tick(self, process: int, again: bool) -> None:
        app = self.apps[process]
        self.log.catch_up()
        self.clock.frozen = self.clock()
        try:
            app.auto.settle(self.scope)
            status = app.auto.status(LOCAL, self.scope, self.log.view)
            tick = app.auto.check_and_run(self.scope, self.log.view)
            if not status.due:
                assert tick.admitted == (), status.report.reason
            self.admitted.extend(tick.admitted)
            if again:  # a retry, or the other process right after: a replay admits nothing
                assert self.apps[1 - process].auto.check_and_run(
                    self.scope, self.log.view).admitted == ()
        finally:
            self.clock.frozen = None

    @rule(outcome=st.sampled_from(OUTCOMES))
    def a_run_finishes(self, outcome: RunOutcome | None) -> None:
        window = self._auto().window
        if window is None:
            return
        app = self.apps[0]
        for run_id in window.run_ids:
            run: DreamRun = app.runs.get_dream(LOCAL, self.scope, run_id)
            if not run.terminal:  # the apps' clock is the machine's
                finish(app, run_id, outcome, self.scope)
                return

    @rule()
    def crash(self) -> None:
        """Every in-memory state is lost; both processes reopen on the store."""
        self.teardown()
        self.apps = self._open()

    @rule(enabled=st.sampled_from([True, True, False]), needs_evidence=st.booleans(),
          min_records=st.integers(1, 4))
    def change_settings(self, enabled: bool, needs_evidence: bool, min_records: int) -> None:
        self.apps[1].records.change_scope_settings(LOCAL, self.scope, {
            "auto_dream_enabled": enabled, "auto_advance_on_needs_evidence": needs_evidence,
            "auto_min_new_records": min_records})

    # -- invariants -----------------------------------------------------------------------------

    def _auto(self) -> AutoDream:
        return self.apps[0].auto.state_of(self.scope)

    def _windows(self) -> tuple[dict[str, tuple[str, ...]], set[str]]:
        """Every window opened (work key -> run ids) and the keys that succeeded."""
        opened: dict[str, tuple[str, ...]] = {}
        succeeded: set[str] = set()
        auto = self._auto()
        if auto.version == 0 or not self.apps[0].store.exists(auto.id):
            return opened, succeeded
        for event in self.apps[0].store.history(auto.id):
            if isinstance(event, AutoDream.WindowOpened):
                key = event.window["work_key"]
                assert key not in opened, f"window {key} was opened twice"
                opened[key] = tuple(event.window["run_ids"])
            elif isinstance(event, AutoDream.WindowSucceeded):
                succeeded.add(event.work_key)
        return opened, succeeded

    @invariant()
    def never_two_runs_for_one_window(self) -> None:
        if not hasattr(self, "scope"):
            return
        opened, _ = self._windows()
        runs = [run_id for run_ids in opened.values() for run_id in run_ids]
        assert sorted(runs) == sorted(self.admitted)
        assert len(set(runs)) == len(runs)
        for run_id in runs:
            run = self.apps[0].runs.get_dream(LOCAL, self.scope, run_id)
            assert run.trigger == RunTrigger.AUTOMATIC
            assert run.idempotency_key.startswith("auto-")

    @invariant()
    def the_cursor_passes_only_consolidated_records(self) -> None:
        if not hasattr(self, "scope"):
            return
        opened, succeeded = self._windows()
        cited: set[Any] = set()
        for key in succeeded:
            for run_id in opened[key]:
                request = self.apps[0].runs.get_dream(LOCAL, self.scope, run_id).request
                cited.update(request.sources, request.memory_citations)
        cursor = self._auto().cursor
        for record in self.records:
            if record.counted and record.position <= cursor:
                assert record.ref in cited, f"{record} was passed by the cursor unconsolidated"

    @invariant()
    def no_eligible_record_is_skipped(self) -> None:
        if not hasattr(self, "scope"):
            return
        self.log.catch_up()
        cursor = self._auto().cursor
        pending = {r.ref for r in self.log.view.pending(self.scope, cursor, 1000)}
        for record in self.records:
            if record.counted and record.position > cursor:
                assert record.ref in pending, f"{record} is no longer pending"
            if not record.counted:
                assert record.ref not in pending
        # The scheduler's counts, kept up event by event, agree with the records themselves.
        schedule = self.log.view.schedule_of(self.scope)
        assert schedule is not None
        after = [r.position for r in self.records if r.counted and r.position > cursor]
        assert (schedule.cursor_position, schedule.pending) == (cursor, len(after))
        assert schedule.first_pending == (min(after) if after else None)
