"""Automatic dreaming through the application, on SQLite and PostgreSQL: a window is admitted as
ordinary runs (``trigger: "automatic"``), executed like any other, and the cursor moves only on
success; failures and kept outcomes release the window; sub-agents' records never count; two
processes ticking at once admit one window; closed gates write nothing; runs show their trigger
in the run list and summary over HTTP."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest

from adapters.generators.factory import GeneratorRegistry
from adapters.settings import Settings
from adapters.store.projection_runtime import RunningProjection, start_projection
from adapters.store.view_batches import open_view, rebuild
from application.auto_dreaming import Tick
from application.bootstrap import Dreaming
from domain.auto_dream import GateName, Settlement
from domain.budget import Budget
from domain.dream_request import DreamRequest
from domain.dream_run import DreamRun, RunOutcome, RunStatus, RunTrigger
from domain.errors import InvalidRequestError
from domain.policy import LOCAL
from domain.refs import SourceRef
from domain.run_lifecycle import QueuedRun
from projections.auto_records import AUTO_RECORDS
from projections.runs import RUNS
from tests.conftest import LiveApi
from tests.dream_support import ScriptedModel

ON = {"auto_dream_enabled": True, "auto_min_hours": 0, "auto_settle_minutes": 0}


@pytest.fixture
def log(settings: Settings) -> Iterator[RunningProjection[Any]]:
    with start_projection(AUTO_RECORDS, settings) as running:
        yield running


def scope_with_memory(app: Dreaming, scope: str = "s", **settings: Any) -> None:
    app.records.create_scope(LOCAL, scope, {**ON, **settings})
    app.records.create_memory(LOCAL, scope, "m", "tester")
    app.records.add_entry(LOCAL, scope, "m", "e1", "lesson", "retries need keys")


def record_tasks(app: Dreaming, *ids: str, scope: str = "s", sub_agent: bool = False) -> None:
    for source_id in ids:
        app.records.record_source(LOCAL, scope, "task", source_id, text=f"did {source_id}",
                                  sub_agent=sub_agent)


def tick(app: Dreaming, log: RunningProjection[Any], scope: str = "s") -> Tick:
    log.catch_up()
    return app.auto.check_and_run(scope, log.view)


def finish(app: Dreaming, run_id: str, outcome: RunOutcome | None, scope: str = "s") -> None:
    """End a run as a worker would (``None``: it fails)."""
    run: DreamRun = app.runs.get_dream(LOCAL, scope, run_id)
    pair, now = QueuedRun(run, app.runs.queue_of(scope)), app.clock()
    assert pair.claim(now, "test", 60)
    if outcome is None:
        pair.fail(run.attempt, "generation_failed", now)
    elif outcome == RunOutcome.PROPOSED:
        pair.propose(run.attempt, "ok", f"cand_{run.run_id}", now)
    else:
        pair.conclude(run.attempt, outcome, "done", now)
    app.store.commit(*pair.aggregates)


def test_a_window_runs_like_any_run_and_advances_the_cursor(
        app: Dreaming, log: RunningProjection[Any]) -> None:
    scope_with_memory(app)
    record_tasks(app, "t1", "t2")
    first = tick(app, log)
    (run_id,) = first.admitted
    run = app.runs.get_dream(LOCAL, "s", run_id)
    assert run.trigger == RunTrigger.AUTOMATIC
    assert run.idempotency_key == "auto-0-6-r0"
    assert set(run.request.sources) == {SourceRef("task", "t1"), SourceRef("task", "t2")}
    assert len(run.request.memory_citations) == 1
    # Executed and proposed like any other run, acting as the service for the scope.
    model = ScriptedModel()
    executor = app.executor(GeneratorRegistry(model), 60)
    attempt = executor.claim("s", run_id)
    assert attempt is not None
    done = executor.execute(attempt)
    assert done is not None
    assert done.outcome == RunOutcome.PROPOSED
    assert len(model.calls) == 1
    record_tasks(app, "t3")  # arrives after the window: belongs to the next one
    second = tick(app, log)
    assert second.settled == Settlement.ADVANCE
    assert second.admitted == ()
    auto = app.auto.state_of("s")
    assert auto.cursor == 6
    assert auto.window is None
    assert auto.last_success_at is not None
    assert [r.ref for r in log.view.pending("s", auto.cursor, 10)] == [SourceRef("task", "t3")]


def test_failures_and_kept_outcomes_release_the_window_without_moving_the_cursor(
        app: Dreaming, log: RunningProjection[Any]) -> None:
    scope_with_memory(app, auto_min_new_records=1)
    record_tasks(app, "t1")
    (failed,) = tick(app, log).admitted
    finish(app, failed, None)
    retried = tick(app, log)  # released, then due again at once (auto_min_hours 0)
    assert retried.settled == Settlement.RELEASE
    assert app.auto.state_of("s").cursor == 0
    (kept,) = retried.admitted
    assert app.runs.get_dream(LOCAL, "s", kept).idempotency_key.endswith("-r1")
    finish(app, kept, RunOutcome.NEEDS_EVIDENCE)  # kept by default: released again
    (third,) = tick(app, log).admitted
    assert app.auto.state_of("s").cursor == 0
    app.records.change_scope_settings(LOCAL, "s", {"auto_advance_on_needs_evidence": True})
    finish(app, third, RunOutcome.NEEDS_EVIDENCE)
    assert tick(app, log).settled == Settlement.ADVANCE
    assert app.auto.state_of("s").cursor == 5  # the entry (4) and t1 (5)


def test_a_released_window_retries_after_its_backoff_not_after_min_hours(
        app: Dreaming, log: RunningProjection[Any]) -> None:
    scope_with_memory(app, auto_min_hours=4, auto_min_new_records=1)
    record_tasks(app, "t1")
    (failed,) = tick(app, log).admitted
    finish(app, failed, None)
    released = tick(app, log)
    assert (released.settled, released.admitted) == (Settlement.RELEASE, ())
    gate = released.status.report.gates[2]
    assert (gate.name, gate.open) == (GateName.TIME, False)
    assert "retrying in" in gate.reason
    log.catch_up()
    assert log.view.due_scopes(app.clock(), 10) == []
    later = timedelta(minutes=15, seconds=1)  # the first backoff, far less than 4 hours
    assert [scope for _, scope in log.view.due_scopes(app.clock() + later, 10)] == ["s"]
    app.auto.clock = lambda: datetime.now(tz=UTC) + later
    (retried,) = tick(app, log).admitted
    assert app.runs.get_dream(LOCAL, "s", retried).idempotency_key.endswith("-r1")


def test_sub_agent_and_young_records_do_not_count(app: Dreaming,
                                                  log: RunningProjection[Any]) -> None:
    scope_with_memory(app, auto_min_new_records=3)
    record_tasks(app, "s1", "s2", "s3", sub_agent=True)
    record_tasks(app, "t1")
    log.catch_up()
    status = app.auto.status(LOCAL, "s", log.view)
    records = next(gate for gate in status.report.gates if gate.name == GateName.RECORDS)
    assert (records.value, records.open) == (2, False)  # the entry and t1
    assert not status.due
    assert status.report.reason.startswith("2 settled new record(s)")
    before = app.store.max_position()
    assert tick(app, log).admitted == ()
    assert app.store.max_position() == before  # a closed gate writes nothing
    app.records.change_scope_settings(LOCAL, "s", {"auto_settle_minutes": 60,
                                                   "auto_min_new_records": 1})
    log.catch_up()
    assert app.auto.status(LOCAL, "s", log.view).report.gates[3].value == 0  # all too young


def test_every_gate_is_reported_with_its_reason(app: Dreaming,
                                                log: RunningProjection[Any]) -> None:
    app.records.create_scope(LOCAL, "off")
    log.catch_up()
    status = app.auto.status(LOCAL, "off", log.view)
    assert [gate.name for gate in status.report.gates] == list(GateName)
    assert not status.due
    assert "auto_dream_enabled" in status.report.reason
    assert status.cursor == 0
    assert status.window is None
    assert tick(app, log, "off").admitted == ()
    app.records.change_scope_settings(LOCAL, "off", {**ON, "auto_min_new_records": 1})
    record_tasks(app, "t1", scope="off")
    log.catch_up()
    sources_only = app.auto.status(LOCAL, "off", log.view)
    assert "no active Memory entry" in sources_only.report.reason
    assert tick(app, log, "off").admitted == ()


def test_a_window_over_one_runs_limits_is_split_and_advances_only_when_all_succeed(
        app: Dreaming, log: RunningProjection[Any]) -> None:
    scope_with_memory(app, max_items=8)
    record_tasks(app, *(f"t{i}" for i in range(12)))
    runs = tick(app, log).admitted
    assert len(runs) == 2  # 1 entry + 12 Sources within 8 references a run
    keys = [app.runs.get_dream(LOCAL, "s", run_id).idempotency_key for run_id in runs]
    assert keys == ["auto-0-16-r0-p1of2", "auto-0-16-r0-p2of2"]
    finish(app, runs[0], RunOutcome.PROPOSED)
    assert tick(app, log).settled == Settlement.WAITING
    finish(app, runs[1], None)
    assert tick(app, log).settled == Settlement.RELEASE
    assert app.auto.state_of("s").cursor == 0


def test_a_window_over_one_runs_byte_limit_is_admitted_as_smaller_runs(
        app: Dreaming, log: RunningProjection[Any]) -> None:
    scope_with_memory(app, max_bytes=3000)
    for index in range(9):
        app.records.record_source(LOCAL, "s", "task", f"t{index}", text=f"{index}" * 400)
    before = app.store.max_position()
    tick_ = tick(app, log)
    assert tick_.refused is None
    runs = [app.runs.get_dream(LOCAL, "s", run_id) for run_id in tick_.admitted]
    assert len(runs) > 1  # one run of 10 references is over 3,000 bytes; smaller ones fit
    covered = {ref for run in runs for ref in run.request.sources}
    assert covered == {SourceRef("task", f"t{index}") for index in range(9)}
    window = app.auto.state_of("s").window
    assert window is not None
    assert window.end == before  # every record, none left behind
    for run in runs:
        finish(app, run.run_id, RunOutcome.NO_CHANGE)
    assert tick(app, log).settled == Settlement.ADVANCE
    assert app.auto.state_of("s").cursor == before


def test_a_source_no_run_can_hold_is_refused_and_nothing_is_stored(
        app: Dreaming, log: RunningProjection[Any]) -> None:
    scope_with_memory(app, max_bytes=3000, auto_min_new_records=1)
    app.records.record_source(LOCAL, "s", "task", "huge", text="x" * 4000)
    log.catch_up()
    before = app.store.max_position()
    refused = app.auto.check_and_run("s", log.view)
    assert (refused.admitted, refused.refused) == ((), "evidence_limit_exceeded")
    assert app.store.max_position() == before
    assert app.auto.state_of("s").window is None


def test_a_full_queue_closes_the_capacity_gate_in_the_scopes_turn_and_stores_nothing(
        app: Dreaming, log: RunningProjection[Any]) -> None:
    scope_with_memory(app, dream_max_pending_per_scope=1)
    citation = app.records.add_entry(LOCAL, "s", "m", "e2", "lesson", "x").value.citation
    app.runs.request_dream(LOCAL, "s", DreamRequest.create(
        "refine_experience", "k1", memory_citations=[citation]))  # the one pending run
    record_tasks(app, "t1", "t2", "t3")
    log.catch_up()
    before = app.store.max_position()
    full = app.auto.check_and_run("s", log.view)
    assert full.admitted == ()
    assert full.refused is None
    assert [(gate.name, gate.open) for gate in full.status.report.gates][-1] == (
        GateName.CAPACITY, False)
    assert app.store.max_position() == before
    assert app.auto.state_of("s").window is None
    # The status, which reads the queue outside any turn, agrees.
    assert not app.auto.status(LOCAL, "s", log.view).due


def test_two_processes_ticking_at_once_admit_one_window(
        open_app: Callable[[], Dreaming], log: RunningProjection[Any]) -> None:
    apps = [open_app() for _ in range(4)]
    scope_with_memory(apps[0])
    record_tasks(apps[0], "t1", "t2", "t3")
    log.catch_up()
    start = threading.Barrier(len(apps))
    results: list[Tick] = []

    def race(app: Dreaming) -> None:
        start.wait()
        results.append(app.auto.check_and_run("s", log.view))

    threads = [threading.Thread(target=race, args=(app,)) for app in apps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    admitted = [run_id for result in results for run_id in result.admitted]
    assert len(results) == len(apps)
    assert len(admitted) == 1
    assert apps[0].runs.queue_of("s").unfinished == 1
    assert all(result.status.window is not None for result in results)


def test_requested_runs_and_runs_admitted_before_triggers_are_requests(
        app: Dreaming) -> None:
    scope_with_memory(app)
    request = DreamRequest.create("refine_experience", "k1", memory_citations=[
        app.records.add_entry(LOCAL, "s", "m", "e2", "lesson", "x").value.citation])
    run = app.runs.request_dream(LOCAL, "s", request).value.run
    assert run.trigger == RunTrigger.REQUEST
    accepted = app.store.history(run.id)[0]
    # Decoded as the store decodes an event recorded before triggers existed: no such field.
    old = object.__new__(type(accepted))
    object.__setattr__(old, "__dict__", {name: value for name, value in vars(accepted).items()
                                         if name != "trigger"})
    assert old.trigger == RunTrigger.REQUEST  # type: ignore[attr-defined]
    assert old.mutate(None).trigger == RunTrigger.REQUEST  # type: ignore[attr-defined]
    with pytest.raises(InvalidRequestError) as refused:
        DreamRun.accept("s", "r", "p", request, Budget(), "v", datetime.now(tz=UTC),
                        trigger="cron")  # type: ignore[arg-type]
    assert refused.value.details["field"] == "trigger"


def test_the_run_list_and_summary_show_the_trigger(live_api: LiveApi,
                                                   settings: Settings) -> None:
    app, headers = live_api.dreaming, live_api.headers()
    scope_with_memory(app, "team")
    record_tasks(app, "t1", "t2", scope="team")
    request = DreamRequest.create("refine_experience", "asked", memory_citations=[
        app.records.add_entry(LOCAL, "team", "m", "e2", "lesson", "y").value.citation])
    requested = app.runs.request_dream(LOCAL, "team", request).value.run.run_id
    view = open_view(AUTO_RECORDS, settings)  # kept current by the server's runner
    try:
        deadline = time.monotonic() + 30
        while len(view.pending("team", 0, 10)) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        (automatic,) = app.auto.check_and_run("team", view).admitted
    finally:
        view.close()
    base = f"{live_api.base_url}/v1/scopes/team/dream"
    listed = httpx.get(base, headers=headers).json()["runs"]
    assert {run["run_id"]: run["trigger"] for run in listed} == {
        requested: "request", automatic: "automatic"}
    assert httpx.get(f"{base}/{automatic}", headers=headers).json()["trigger"] == "automatic"
    assert httpx.get(f"{base}/{requested}", headers=headers).json()["status"] == "queued"


def test_sources_carry_the_sub_agent_attribute_over_http(live_api: LiveApi) -> None:
    base, headers = f"{live_api.base_url}/v1/scopes/team", live_api.headers()
    assert httpx.post(f"{live_api.base_url}/v1/scopes", headers=headers,
                      json={"scope_id": "team"}).status_code == 201
    body = {"source_type": "task", "source_id": "t1", "text": "helped"}
    created = httpx.post(f"{base}/sources", headers=headers, json={**body, "sub_agent": True})
    assert created.status_code == 201
    assert created.json()["sub_agent"] is True
    again = httpx.post(f"{base}/sources", headers=headers, json=body)  # other content
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "source_conflict"
    plain = httpx.post(f"{base}/sources", headers=headers,
                       json={**body, "source_id": "t2"}).json()
    assert plain["sub_agent"] is False
    bad = httpx.post(f"{base}/sources", headers=headers,
                     json={**body, "source_id": "t3", "sub_agent": "yes"})
    assert bad.status_code == 422
    assert httpx.get(f"{base}/sources/task/t3", headers=headers).status_code == 404


def test_time_gate_waits_after_an_automatic_run(app: Dreaming,
                                                log: RunningProjection[Any]) -> None:
    scope_with_memory(app, auto_min_hours=4, auto_min_new_records=1)
    record_tasks(app, "t1")
    (run_id,) = tick(app, log).admitted
    finish(app, run_id, RunOutcome.NO_CHANGE)
    record_tasks(app, "t2")
    after = tick(app, log)
    assert after.settled == Settlement.ADVANCE
    assert after.admitted == ()
    time_gate = after.status.report.gates[2]
    assert time_gate.name == GateName.TIME
    assert not time_gate.open
    assert time_gate.value < 4
    assert app.runs.get_dream(LOCAL, "s", run_id).status == (
        RunStatus.SUCCEEDED)
    assert app.clock() - timedelta(hours=1) < (app.auto.state_of("s").last_success_at
                                                or datetime.min.replace(tzinfo=UTC))


def test_a_runs_view_made_before_triggers_gains_the_column(app: Dreaming,
                                                          settings: Settings) -> None:
    scope_with_memory(app)
    request = DreamRequest.create("refine_experience", "k1", memory_citations=[
        app.records.add_entry(LOCAL, "s", "m", "e2", "lesson", "x").value.citation])
    run_id = app.runs.request_dream(LOCAL, "s", request).value.run.run_id
    rebuild(RUNS, settings)
    _drop_trigger_column(settings)  # as the table was before this release
    with closing(open_view(RUNS, settings)) as view:  # opening upgrades it
        (summary,) = view.list_runs("s")[0]
    assert (summary.run_id, summary.trigger) == (run_id, "request")


def _drop_trigger_column(settings: Settings) -> None:
    statement = "ALTER TABLE runs DROP COLUMN trigger"
    if settings.database_url is None:
        with closing(sqlite3.connect(settings.data_dir / "views" / "runs.sqlite3")) as db:
            db.execute(statement)
            db.commit()
        return
    with psycopg.connect(settings.database_url, autocommit=True) as db:
        db.execute(statement)
