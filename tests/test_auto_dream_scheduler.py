"""The automatic-dreaming scheduler and its caps, on SQLite and PostgreSQL: due scopes are
admitted oldest first while fewer than ``DREAM_AUTO_MAX_CONCURRENT`` automatic runs are
unfinished; workers hold an ``automatic`` slot for each automatic run, so automatic model calls
never exceed that cap while requested runs still go first; a serving process with workers runs
the whole loop (admit, execute, settle, advance); ``GET …/dream/auto`` and ``dream auto status``
show every gate."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY

from adapters.cli.demo import TASKS
from adapters.generators.factory import GeneratorRegistry
from adapters.http.app import background
from adapters.settings import Settings
from adapters.store.generation_slots import AUTOMATIC, GENERATION, leased_slots
from adapters.store.projection_runtime import RunningProjection, start_projection
from adapters.workers import auto_scheduler
from adapters.workers.auto_scheduler import AutoScheduler
from adapters.workers.pool import WorkerPool
from application.bootstrap import Dreaming
from domain.auto_dream import GateName
from domain.dream_request import DreamRequest
from domain.dream_run import RunTrigger
from domain.policy import LOCAL
from projections.auto_records import AUTO_RECORDS
from projections.runs import RUNS
from tests.conftest import LiveApi
from tests.dream_support import ScriptedModel

ON = {"auto_dream_enabled": True, "auto_min_hours": 0, "auto_settle_minutes": 0}


@pytest.fixture
def views(settings: Settings) -> Iterator[tuple[RunningProjection[Any], RunningProjection[Any]]]:
    with start_projection(AUTO_RECORDS, settings) as records, \
            start_projection(RUNS, settings) as runs:
        yield records, runs


def due_scope(app: Dreaming, scope: str) -> None:
    """A scope with automatic dreaming on and a window's worth of task records."""
    app.records.create_scope(LOCAL, scope, ON)
    app.records.create_memory(LOCAL, scope, "m", "tester")
    app.records.add_entry(LOCAL, scope, "m", "e1", "task_record",
                          "Retry payment writes only with an idempotency key.")
    for source_id, text in TASKS.items():
        app.records.record_source(LOCAL, scope, "task", source_id, text=text)


def test_the_scheduler_admits_oldest_first_within_the_cap(
        app: Dreaming,
        views: tuple[RunningProjection[Any], RunningProjection[Any]]) -> None:
    records, runs = views
    for index in range(5):
        due_scope(app, f"s{index}")
    scheduler = AutoScheduler(app, lambda: (records.view, runs.view), cap=2)

    def tick() -> int:
        records.catch_up()
        runs.catch_up()
        return scheduler.tick()

    assert tick() == 2
    first = [app.auto.state_of(f"s{i}").window is not None for i in range(5)]
    assert first == [True, True, False, False, False]  # the oldest pending records first
    assert tick() == 0  # two automatic runs unfinished: at the cap
    for scope in ("s0", "s1"):
        window = app.auto.state_of(scope).window
        assert window is not None
        _succeed(app, scope, window.run_ids)
    assert tick() == 2  # settled s0 and s1, then admitted the next two
    assert [app.auto.state_of(f"s{i}").cursor > 0 for i in range(5)] == [
        True, True, False, False, False]
    assert app.auto.state_of("s2").window is not None
    assert app.auto.state_of("s4").window is None


def _succeed(app: Dreaming, scope: str, run_ids: tuple[str, ...]) -> None:
    executor = app.executor(GeneratorRegistry(ScriptedModel()))
    for run_id in run_ids:
        attempt = executor.claim(scope, run_id)
        assert attempt is not None
        executor.execute(attempt)


def test_automatic_runs_hold_an_automatic_slot_and_requests_go_first(
        app: Dreaming, settings: Settings,
        views: tuple[RunningProjection[Any], RunningProjection[Any]]) -> None:
    records, runs = views
    for scope in ("a1", "a2"):
        due_scope(app, scope)
        records.catch_up()
        assert len(app.auto.check_and_run(scope, records.view).admitted) == 1
    app.records.create_scope(LOCAL, "r")
    app.records.create_memory(LOCAL, "r", "m", "tester")
    citation = app.records.add_entry(LOCAL, "r", "m", "e1", "lesson", "x").value.citation
    requested = app.runs.request_dream(LOCAL, "r", DreamRequest.create(
        "refine_experience", "asked", memory_citations=[citation])).value.run
    runs.catch_up()
    offered = runs.view.claimable(app.clock())
    assert offered[0].trigger == RunTrigger.REQUEST  # the newest, yet first
    gate = threading.Event()
    model = ScriptedModel(gate=gate)
    slots = leased_slots(settings, caps={GENERATION: 4, AUTOMATIC: 1})
    pool = WorkerPool(app.executor(GeneratorRegistry(model)), runs.fresh(runs.view.claimable),
                      max_concurrent_generations=4, slots=slots)
    with pool:
        deadline = time.monotonic() + 30
        while len(model.calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.5)  # time enough for a third call, were the cap not held
        in_flight = [call.run_id for call in model.calls]
        assert len(in_flight) == 2
        assert requested.run_id in in_flight  # one requested run and one automatic run
        assert len(slots.held(AUTOMATIC)) == 1
        gate.set()
        while pool.completed < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert pool.completed == 3


def test_a_serving_process_with_workers_runs_the_whole_loop(settings: Settings,
                                                            open_app: Callable[[], Dreaming]
                                                            ) -> None:
    app = open_app()
    scopes = [f"s{index}" for index in range(4)]
    for scope in scopes:
        due_scope(app, scope)
    serving = settings.model_copy(update={"workers": 2, "auto_max_concurrent": 2})
    peak = 0
    with background(app, serving) as parts:
        observer = leased_slots(serving)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            peak = max(peak, len(observer.held(AUTOMATIC)))
            if all(app.auto.state_of(scope).cursor > 0 for scope in scopes):
                break
            time.sleep(0.05)
        observer.close()
        assert parts.workers is not None
    assert [app.auto.state_of(scope).window for scope in scopes] == [None] * 4
    assert all(app.auto.state_of(scope).cursor > 0 for scope in scopes)
    assert peak <= 2
    for scope in scopes:
        (run,) = [app.runs.get_dream(LOCAL, scope, run_id) for run_id in _window_runs(app, scope)]
        assert run.trigger == RunTrigger.AUTOMATIC
        assert run.status == "succeeded"


def _window_runs(app: Dreaming, scope: str) -> list[str]:
    auto = app.auto.state_of(scope)
    return [run_id for event in app.store.history(auto.id)
            if hasattr(event, "window") for run_id in event.window["run_ids"]]


def test_the_status_over_http_and_the_command_line(live_api: LiveApi) -> None:
    app, headers = live_api.dreaming, live_api.headers()
    due_scope(app, "team")
    url = f"{live_api.base_url}/v1/scopes/team/dream/auto"
    status = httpx.get(url, headers=headers).json()
    assert status["due"] is True
    assert [gate["name"] for gate in status["gates"]] == [
        "enabled", "idle", "time", "records", "capacity"]
    assert status["gates"][3]["value"] == 4  # the entry and three task Sources
    assert status["cursor"] == 0
    assert status["window"] is None
    app.records.change_scope_settings(LOCAL, "team", {"auto_dream_enabled": False})
    off = httpx.get(url, headers=headers).json()
    assert off["due"] is False
    assert "auto_dream_enabled" in off["reason"]
    assert httpx.get(f"{live_api.base_url}/v1/scopes/nope/dream/auto",
                     headers=headers).status_code == 404
    assert httpx.get(url).status_code == 401
    shown = subprocess.run(
        [sys.executable, "-m", "adapters.cli", "auto", "status", "--scope", "team",
         "--url", live_api.base_url, "--token", live_api.admin_token],
        capture_output=True, text=True, timeout=60, check=False)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("team: not due: automatic dreaming is off")
    assert "records   open" in shown.stdout


def test_scopes_that_cannot_be_admitted_never_hide_the_ones_behind_them(
        app: Dreaming, views: tuple[RunningProjection[Any], RunningProjection[Any]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    records, runs = views
    for blocked in ("b1", "b2", "b3"):  # older, but Sources only: nothing to select
        app.records.create_scope(LOCAL, blocked, {**ON, "auto_min_new_records": 1})
        app.records.record_source(LOCAL, blocked, "task", "t1", text=TASKS["retry-7"])
    due_scope(app, "z")
    monkeypatch.setattr(auto_scheduler, "MAX_CHECKS", 2)
    scheduler = AutoScheduler(app, lambda: (records.view, runs.view), cap=4)
    records.catch_up()
    runs.catch_up()
    assert scheduler.tick() == 0  # b1, b2
    assert scheduler.tick() == 1  # b3, then z
    assert app.auto.state_of("z").window is not None
    assert all(app.auto.state_of(b).window is None for b in ("b1", "b2", "b3"))


def test_the_due_index_follows_counts_and_thresholds(
        app: Dreaming,
        views: tuple[RunningProjection[Any], RunningProjection[Any]]) -> None:
    records, _ = views

    def due() -> list[str]:
        records.catch_up()
        return [scope for _, scope in records.view.due_scopes(app.clock(), 10)]

    due_scope(app, "s")  # one entry and three Sources: four records
    assert due() == ["s"]
    app.records.change_scope_settings(LOCAL, "s", {"auto_min_new_records": 5})
    assert due() == []
    app.records.record_source(LOCAL, "s", "task", "t5", text="one more")
    assert due() == ["s"]
    app.records.withdraw_source(LOCAL, "s", "task", "t5", "recorded by mistake")
    assert due() == []
    app.records.change_scope_settings(LOCAL, "s", {"auto_min_new_records": 4})
    assert due() == ["s"]


def test_each_check_is_counted_by_decision_and_the_gate_that_decided(
        app: Dreaming,
        views: tuple[RunningProjection[Any], RunningProjection[Any]]) -> None:
    records, runs = views
    due_scope(app, "due")
    app.records.create_scope(LOCAL, "settling", {**ON, "auto_settle_minutes": 60})
    for source_id, text in TASKS.items():  # a window's worth, but just recorded: settling
        app.records.record_source(LOCAL, "settling", "task", source_id, text=text)

    def decisions(decision: str, gate: str) -> float:
        value = REGISTRY.get_sample_value("dream_auto_decisions_total",
                                          {"decision": decision, "gate": gate})
        return value or 0.0

    before = decisions("admitted", "")
    not_due = {gate: decisions("not_due", gate) for gate in GateName}
    records.catch_up()
    runs.catch_up()
    AutoScheduler(app, lambda: (records.view, runs.view), cap=4).tick()
    assert decisions("admitted", "") == before + 1
    grew = {gate for gate in GateName if decisions("not_due", gate) > not_due[gate]}
    assert grew == {GateName.RECORDS}
