"""Workers wake when the runs view's host commits a batch, and the automatic-dreaming
scheduler when the record log's host does, in whichever process it runs (PostgreSQL NOTIFY,
local datagrams on SQLite; in the hosting process, its runner), instead of waiting for their
next poll. Both stores."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from adapters.generators.factory import GeneratorRegistry
from adapters.settings import Settings
from adapters.store.projection_runtime import start_projection
from adapters.store.view_batches import open_view
from adapters.workers.auto_scheduler import AutoScheduler
from adapters.workers.pool import WorkerPool, view_hints
from application.bootstrap import Dreaming
from projections.auto_records import AUTO_RECORDS
from projections.runs import RUNS
from tests.dream_support import ScriptedModel
from tests.test_auto_dream_scheduler import due_scope
from tests.test_workers import admit, seed_scope

NEVER = 60.0  # a poll interval no test waits for: only a hint can wake the pool in time
BOUND = 10.0


def sleepy_pool(app: Dreaming, settings: Settings, *, hinted: bool) -> WorkerPool:
    """A pool that polls once a minute; with hints, a commit of the runs view wakes it."""
    runs_view = open_view(RUNS, settings)  # reads the rows the host commits
    executor = app.executor(GeneratorRegistry(ScriptedModel()))
    return WorkerPool(executor, runs_view.claimable, max_concurrent_generations=1,
                      poll_seconds=NEVER,
                      hints=view_hints(app, settings, RUNS.name, "hints") if hinted else None)


def terminal_within(app: Dreaming, scope_id: str, run_id: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        run = app.runs.existing_run(scope_id, run_id)
        if run is not None and run.terminal:
            return True
        time.sleep(0.05)
    return False


def test_a_hint_from_the_runs_views_host_wakes_a_sleeping_pool(
        settings: Settings, app: Dreaming) -> None:
    seed_scope(app, "s")
    with start_projection(RUNS, settings) as host:  # applies and announces every batch
        host.catch_up()
        with sleepy_pool(app, settings, hinted=True):
            time.sleep(0.5)  # the first, immediate look found nothing; now it sleeps
            run_id = admit(app, "s", "k1")
            assert terminal_within(app, "s", run_id, BOUND)


def test_without_hints_the_same_pool_sleeps_through_the_admission(
        settings: Settings, app: Dreaming) -> None:
    seed_scope(app, "s")
    with start_projection(RUNS, settings) as host:
        host.catch_up()
        with sleepy_pool(app, settings, hinted=False):
            time.sleep(0.5)
            run_id = admit(app, "s", "k1")
            assert not terminal_within(app, "s", run_id, 2.0)


def admitted_within(app: Dreaming, scope_id: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if app.auto.state_of(scope_id).window is not None:
            return True
        time.sleep(0.05)
    return False


def test_a_landing_record_wakes_the_scheduler_of_the_process_hosting_the_log(
        settings: Settings, app: Dreaming) -> None:
    """In-process (both stores): the record log's runner wakes the scheduler it feeds."""
    with start_projection(AUTO_RECORDS, settings) as records, \
            start_projection(RUNS, settings) as runs:
        scheduler = AutoScheduler(app, lambda: (records.view, runs.view), cap=4,
                                  tick_seconds=NEVER, owns_views=False)
        records.when_applied(scheduler.wake)
        with running(scheduler):
            time.sleep(0.5)  # its first tick found nothing; now it sleeps
            due_scope(app, "s")
            assert admitted_within(app, "s", BOUND)


@pytest.mark.parametrize("hinted", [True, False])
def test_a_hint_from_the_record_logs_host_wakes_a_scheduler_elsewhere(
        settings: Settings, app: Dreaming, hinted: bool) -> None:
    """A `dream worker`'s scheduler reads the log's tables and wakes on its host's hint
    (NOTIFY, or a local datagram on SQLite); without it, it would sleep through the record."""
    hints = view_hints(app, settings, AUTO_RECORDS.name, "auto-hints") if hinted else None
    with start_projection(AUTO_RECORDS, settings) as host:
        host.catch_up()
        scheduler = AutoScheduler(
            app, lambda: (open_view(AUTO_RECORDS, settings), open_view(RUNS, settings)), cap=4,
            tick_seconds=NEVER, hints=hints)
        with running(scheduler):
            time.sleep(0.5)
            due_scope(app, "s")
            assert admitted_within(app, "s", BOUND if hinted else 2.0) is hinted


@contextmanager
def running(scheduler: AutoScheduler) -> Iterator[AutoScheduler]:
    scheduler.start()
    try:
        yield scheduler
    finally:
        scheduler.stop()
