"""Automatic dreaming across real processes, with a counting loopback OpenAI-wire model.

* Two `dream serve` and two `dream worker` processes on one PostgreSQL, every scope due at
  once: exactly one run per scope's window, every cursor moved to its window's end, and the
  model never sees more automatic calls at once than ``DREAM_AUTO_MAX_CONCURRENT``.
* The process that admitted an automatic run is SIGKILLed while the run is in flight, and
  again once it has finished: after a restart nothing is lost or duplicated and the cursor is
  right (SQLite and PostgreSQL).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from adapters.cli.demo import TASKS
from adapters.settings import Settings
from adapters.store.persistence import open_dreaming
from application.bootstrap import Dreaming
from devkit.throwaway_postgres import PostgresServer
from domain.auto_dream import AutoDream
from domain.dream_run import RunStatus, RunTrigger
from domain.policy import LOCAL
from tests.conftest import fresh_postgres_url
from tests.openai_fake import FakeOpenAI
from tests.serve_support import DreamServe
from tests.test_auto_dream_scheduler import due_scope
from tests.topology_support import CountingModel

CAP = 2
SCOPES = 300
LEASE_SECONDS = 3


def process_env(settings: Settings, model_url: str, workers: int) -> dict[str, str]:
    env = {"DREAM_DATA_DIR": str(settings.data_dir), "DREAM_ACCESS": "disabled",
           "DREAM_GENERATOR": "openai", "DREAM_OPENAI_BASE_URL": model_url,
           "DREAM_OPENAI_MODEL": "local-test-model", "DREAM_LEASE_SECONDS": str(LEASE_SECONDS),
           "DREAM_WORKERS": str(workers), "DREAM_AUTO_MAX_CONCURRENT": str(CAP),
           "DREAM_MAX_CONCURRENT_GENERATIONS": "8"}
    if settings.database_url:
        env["DREAM_DATABASE_URL"] = settings.database_url
    return env


@contextmanager
def worker(env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-m", "adapters.cli", "worker"],
                               env={**os.environ, **env}, stdout=log.open("wb"),
                               stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
        process.wait(15)


@contextmanager
def serving(env: dict[str, str], log: Path) -> Iterator[DreamServe]:
    serve = DreamServe(env, log)
    try:
        yield serve
    finally:
        serve.ensure_stopped()


def wait_for(done: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def windows(app: Dreaming, scope: str) -> list[AutoDream.WindowOpened]:
    auto = app.auto.state_of(scope)
    if not app.store.exists(auto.id):
        return []
    return [e for e in app.store.history(auto.id) if isinstance(e, AutoDream.WindowOpened)]


def end_of_records(app: Dreaming, scope: str) -> int:
    """The position of the scope's last record (its three task Sources come last)."""
    return max(app.store.position_of(app.records.get_source(LOCAL, scope, "task", source_id))
               or 0 for source_id in TASKS)


def test_two_servers_and_two_workers_admit_one_run_per_window_under_the_cap(
        postgres_server: PostgresServer | str, tmp_path: Path, server: FakeOpenAI) -> None:
    settings = Settings(data_dir=tmp_path / "data", access="disabled", workers=0,
                        database_url=fresh_postgres_url(postgres_server))
    model = CountingModel(server.released, 0.05)
    server.responder = model
    app = open_dreaming(settings)
    scopes = [f"s{index:03d}" for index in range(SCOPES)]
    for scope in scopes:
        due_scope(app, scope)
    env = process_env(settings, server.base_url, workers=2)
    with ExitStack() as processes:
        for index in range(2):
            processes.enter_context(serving(env, tmp_path / f"serve-{index}.log"))
            processes.enter_context(worker(env, tmp_path / f"worker-{index}.log"))
        wait_for(lambda: all(app.auto.state_of(s).cursor > 0 for s in scopes), 240,
                 "every scope's window to succeed")
    for scope in scopes:
        (opened,) = windows(app, scope)  # exactly one window, once
        (run_id,) = opened.window["run_ids"]
        run = app.runs.get_dream(LOCAL, scope, run_id)
        assert run.trigger == RunTrigger.AUTOMATIC
        assert run.status == RunStatus.SUCCEEDED
        assert app.auto.state_of(scope).cursor == opened.window["end"] == end_of_records(
            app, scope)
        assert app.runs.queue_of(scope).unfinished == 0
    assert model.peak <= CAP
    assert model.peak == CAP  # capped, not serialised
    app.close()


@pytest.mark.parametrize("kill_when", ["in_flight", "finished"])
def test_killing_the_admitting_process_loses_and_duplicates_nothing(
        settings: Settings, app: Dreaming, server: FakeOpenAI, tmp_path: Path,
        kill_when: str) -> None:
    model = CountingModel(server.released, 0.05)
    server.responder = model
    due_scope(app, "s")
    if kill_when == "in_flight":
        model.gate.clear()  # the model hangs: the run is in flight when the process dies
    env = process_env(settings, server.base_url, workers=1)
    first = DreamServe(env, tmp_path / "serve-1.log")
    try:
        wait_for(lambda: bool(windows(app, "s")), 60, "the window to be admitted")
        (run_id,) = windows(app, "s")[0].window["run_ids"]
        if kill_when == "in_flight":
            wait_for(lambda: model.active == 1, 60, "the model call")
        else:
            wait_for(lambda: app.runs.get_dream(LOCAL, "s", run_id).terminal, 60, "the run")
        first.kill()
    finally:
        first.ensure_stopped()
    model.gate.set()
    with serving(env, tmp_path / "serve-2.log"):
        wait_for(lambda: app.auto.state_of("s").cursor > 0, 120, "the cursor to move")
    (opened,) = windows(app, "s")
    assert opened.window["run_ids"] == [run_id]  # the same run, never a second one
    run = app.runs.get_dream(LOCAL, "s", run_id)
    assert run.status == RunStatus.SUCCEEDED
    assert app.auto.state_of("s").cursor == end_of_records(app, "s")
    assert app.auto.state_of("s").window is None
    assert app.runs.queue_of("s").unfinished == 0
