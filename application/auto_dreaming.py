"""Automatic dreaming: evaluate a scope's gates, admit its window, settle it when done.

The scope's records after its cursor are read from a record log (the ``auto_records`` read
model, passed in like every view a use case reads): one indexed page of countable records per
evaluation, never a scan of the event store. A due window is admitted as ordinary
``refine_experience`` runs (``trigger: "automatic"``, the window's work key as idempotency
key) in **one** commit with the ``AutoDream`` change that records the window, so two processes
or a retry can never admit a second run for it: the loser's commit conflicts, and its retry
finds the window open. ``settle`` moves the cursor only when every run of the window ended as
the scope's settings accept (``domain.auto_dream.settlement``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Protocol

from eventsourcing.domain import Aggregate

from application.access import ScopeGate
from application.credentials import Who
from application.dream_runs import AUTOMATIC, DreamRuns, max_pending
from application.ports import Clock
from application.retry import retry_on_write_conflict
from application.run_queues import RunQueues
from application.store import Written
from domain.access import Action
from domain.auto_dream import (
    ANCHORS_PER_PART,
    MAX_WINDOW_RECORDS,
    RUNS_PER_WINDOW,
    AutoDream,
    AutoSettings,
    Gate,
    GateReport,
    PendingRecord,
    Settlement,
    Window,
    WindowPart,
    WindowPlan,
    capacity_gate,
    enabled_gate,
    first_records,
    idle_gate,
    part_key,
    plan_window,
    records_gate,
    settle_cutoff,
    settlement,
    split_window,
    time_gate,
    window_sizes,
)
from domain.budget import Budget
from domain.dream_queue import DreamQueue
from domain.dream_request import DreamOperation, DreamRequest
from domain.dream_run import DreamRun, RunOutcome, RunTrigger
from domain.errors import DomainError, EvidenceLimitExceededError, WriteConflictError
from domain.ids import dream_run_aggregate_id
from domain.refs import MemoryCitation
from domain.scope import Scope


class RecordLog(Protocol):
    """The read port over a scope's countable records (eligible task Sources and active Memory
    entry versions, not a sub-agent's), by store position."""

    def pending(self, scope_id: str, after: int, limit: int) -> Sequence[PendingRecord]:
        """The first ``limit`` countable records after position ``after``, in order."""
        ...

    def current_entries(self, scope_id: str, limit: int) -> Sequence[MemoryCitation]:
        """The scope's most recently written active Memory entry versions, newest first."""
        ...


@dataclass(frozen=True)
class AutoStatus:
    """A scope's automatic-dreaming state and why it is or is not due now."""

    scope_id: str
    cursor: int
    window: Window | None
    last_success_at: datetime | None
    last_ended_at: datetime | None
    retries: int
    report: GateReport

    @property
    def due(self) -> bool:
        return self.report.due


@dataclass(frozen=True)
class Tick:
    """What one ``check_and_run`` did: the runs it admitted (empty: none), or why not."""

    status: AutoStatus
    settled: Settlement | None
    admitted: tuple[str, ...]
    refused: str | None = None  # the error code of a refused admission


@dataclass(frozen=True)
class _Evaluation:
    report: GateReport
    plan: WindowPlan | None = None
    parts: tuple[WindowPart, ...] = ()

    @property
    def admissible(self) -> bool:
        """A window to admit, every gate open so far (the capacity gate may be left to the
        scope's turn)."""
        return self.plan is not None and all(gate.open for gate in self.report.gates)


class AutoDreaming:
    """The neutral per-scope trigger: status, check-and-run, settle.

    See docs/contract.md#automatic-dreaming.
    """

    def __init__(self, gate: ScopeGate, runs: DreamRuns, queues: RunQueues,
                 clock: Clock) -> None:
        self.gate = gate
        self.store = gate.store
        self.runs = runs
        self.queues = queues
        self.clock = clock

    def state_of(self, scope_id: str) -> AutoDream:
        return _or_start(scope_id, self.store.find(AutoDream.create_id(scope_id), AutoDream))

    # -- queries -----------------------------------------------------------------------------

    def status(self, who: Who, scope_id: str, log: RecordLog) -> AutoStatus:
        """Every gate, evaluated now, with its value and the reason the scope is or is not due."""
        return self.status_of(self.gate.scope_for(who, scope_id, Action.READ), log)

    def status_of(self, scope: Scope, log: RecordLog) -> AutoStatus:
        """:meth:`status` of a scope the caller has already been allowed to read."""
        auto = self.state_of(scope.scope_id)
        evaluation = self._evaluate(scope, auto, log, self.clock(), lazy=False)
        return self._status(auto, evaluation.report)

    # -- commands ----------------------------------------------------------------------------

    @retry_on_write_conflict
    def settle(self, scope_id: str) -> Written[Settlement | None]:
        """End the open window once its runs are terminal: advance the cursor or release it."""
        auto = self.state_of(scope_id)
        if auto.window is None:
            return Written(None, None)
        run_keys = {dream_run_aggregate_id(scope_id, run_id): DreamRun
                    for run_id in auto.window.run_ids}
        scope, found = self.gate.load_with(scope_id, run_keys)  # one round trip
        runs: list[DreamRun | None] = [found[key] for key in run_keys]
        settings = AutoSettings.of(scope.settings)
        outcome = settlement(settings, [_ending(run) for run in runs])
        now = self.clock()
        if outcome == Settlement.ADVANCE:
            auto.succeed(auto.window.work_key, now)
        elif outcome == Settlement.RELEASE:
            auto.release(auto.window.work_key, _release_reason(runs), now)
        else:
            return Written(outcome, None)
        return Written(outcome, self.store.commit(auto, read=[r for r in runs if r is not None]))

    def check_and_run(self, scope_id: str, log: RecordLog) -> Tick:
        """Settle the open window, then admit the next one if the scope is due."""
        scope, auto = self._scope_and_state(scope_id)
        if auto.window is not None:
            settled = self.settle(scope_id).value
            return self._admit_if_due(scope_id, log, settled)
        try:  # nothing to settle (the scheduler's usual case): one read of the state
            return self._admit_when_due(scope, auto, log, None)
        except WriteConflictError:
            return self._admit_if_due(scope_id, log, None)  # lost a race: on fresh state

    @retry_on_write_conflict
    def _admit_if_due(self, scope_id: str, log: RecordLog,
                      settled: Settlement | None) -> Tick:
        scope, auto = self._scope_and_state(scope_id)
        return self._admit_when_due(scope, auto, log, settled)

    def _scope_and_state(self, scope_id: str) -> tuple[Scope, AutoDream]:
        """The scope and its automatic-dreaming state, read together."""
        key = AutoDream.create_id(scope_id)
        scope, found = self.gate.load_with(scope_id, {key: AutoDream})
        return scope, _or_start(scope_id, found[key])

    def _admit_when_due(self, scope: Scope, auto: AutoDream, log: RecordLog,
                        settled: Settlement | None) -> Tick:
        """Admit the window if every gate is open; a window one run's byte limits refuse is
        tried again as smaller runs (``window_sizes``)."""
        tick = Tick(self._status(auto, GateReport(())), settled, ())
        for max_items in window_sizes(Budget.of(scope.settings).max_items):
            evaluation = self._evaluate(scope, auto, log, self.clock(), lazy=True,
                                        max_items=max_items)
            tick = Tick(self._status(auto, evaluation.report), settled, ())
            if not evaluation.admissible:
                return tick
            try:
                report, run_ids = self._admit(scope, auto, evaluation)
            except WriteConflictError:
                raise  # lost a race: retried on fresh state, where the window is open
            except EvidenceLimitExceededError as too_large:  # smaller runs may fit
                tick = replace(tick, refused=too_large.code)
                continue
            except DomainError as refused:  # evidence moved, capacity, capability: nothing stored
                return replace(tick, refused=refused.code)
            return replace(tick, status=self._status(auto, report), admitted=run_ids)
        return tick  # even one Source per run is over the limits: refused, nothing stored

    # -- internals ---------------------------------------------------------------------------

    def _evaluate(self, scope: Scope, auto: AutoDream, log: RecordLog, now: datetime, *,
                  lazy: bool, max_items: int | None = None) -> _Evaluation:
        """The gates, cheapest first; ``lazy`` stops at the first closed one (the scheduler),
        otherwise every gate is evaluated (the status shows them all). The records gate counts
        every settled record after the cursor; the window takes as many as
        ``RUNS_PER_WINDOW`` runs of ``max_items`` references hold."""
        settings = AutoSettings.of(scope.settings)
        report = GateReport(())
        for gate in (enabled_gate(settings), idle_gate(auto.window),
                     time_gate(settings, auto.last_success_at, now, auto.released_at,
                               auto.retry)):
            report = report.then(gate)
            if lazy and not gate.open:
                return _Evaluation(report)
        items = max_items or window_sizes(Budget.of(scope.settings).max_items)[0]
        counted = max(MAX_WINDOW_RECORDS, settings.min_new_records)
        ready = plan_window(auto.cursor, log.pending(scope.scope_id, auto.cursor, counted),
                            settle_cutoff(settings, now), counted)
        plan = first_records(ready, RUNS_PER_WINDOW * items)
        parts = self._parts(scope, plan, log, items)
        records = records_gate(settings, ready, len(parts))
        report = report.then(records)
        if lazy:  # the scheduler: the capacity gate is checked in the scope's turn
            return _Evaluation(report, plan if records.open else None, parts)
        return _Evaluation(report.then(_capacity(scope, self.queues.load(scope.scope_id),
                                                 parts)), plan, parts)

    @staticmethod
    def _parts(scope: Scope, plan: WindowPlan, log: RecordLog,
               max_items: int) -> tuple[WindowPart, ...]:
        anchors: Sequence[MemoryCitation] = ()
        if any(not isinstance(r.ref, MemoryCitation) for r in plan.records):
            anchors = log.current_entries(scope.scope_id, ANCHORS_PER_PART)
        return split_window(plan.records, anchors, max_items)

    def _admit(self, scope: Scope, auto: AutoDream, evaluation: _Evaluation
               ) -> tuple[GateReport, tuple[str, ...]]:
        """The capacity gate on the queue of the scope's turn, then, if it is open, every part
        admitted as a run and the window recorded, in one commit; the gates and the runs."""
        plan, parts = evaluation.plan, evaluation.parts
        assert plan is not None
        key = auto.key_for(plan)
        with self.queues.turn(scope.scope_id) as queue:  # as requested admissions do
            report = evaluation.report.then(_capacity(scope, queue, parts))
            if not report.due:
                return report, ()
            admitted: list[DreamRun] = []
            read: list[Aggregate] = []
            for index, part in enumerate(parts):
                request = DreamRequest.create(
                    DreamOperation.REFINE_EXPERIENCE, part_key(key, index, len(parts)),
                    memory_citations=part.memory_citations, sources=part.sources)
                run, part_read = self.runs.admit_into(AUTOMATIC, scope, queue, request,
                                                      RunTrigger.AUTOMATIC)
                admitted.append(run)
                read.extend(part_read)
            run_ids = tuple(run.run_id for run in admitted)
            auto.open_window(plan, run_ids, self.clock())
            self.store.commit(*admitted, queue, auto, read=read)
        return report, run_ids

    @staticmethod
    def _status(auto: AutoDream, report: GateReport) -> AutoStatus:
        return AutoStatus(auto.scope_id, auto.cursor, auto.window, auto.last_success_at,
                          auto.last_ended_at, auto.retry, report)


def _or_start(scope_id: str, auto: AutoDream | None) -> AutoDream:
    """The scope's automatic-dreaming state as stored, or its start when it has none yet."""
    return auto if auto is not None else AutoDream.start(scope_id)


def _capacity(scope: Scope, queue: DreamQueue, parts: Sequence[WindowPart]) -> Gate:
    """The capacity gate: room in the scope's queue for a run per part of the window."""
    return capacity_gate(max_pending(scope) - queue.unfinished, max(1, len(parts)))


def _ending(run: DreamRun | None) -> tuple[bool, RunOutcome | None]:
    """A run as ``settlement`` weighs it; a run that is missing counts as failed."""
    if run is None:
        return True, None
    return run.terminal, run.outcome


def _release_reason(runs: Sequence[DreamRun | None]) -> str:
    for run in runs:
        if run is None:
            return "a run of the window is missing"
        if run.error is not None:
            return f"run {run.run_id} failed: {run.error}"
        if run.outcome is not None:
            return f"run {run.run_id} ended {run.outcome.value}, which keeps the records"
    return "released"
