"""One elected host per read model, on both stores: the lease, the runner's roles, and real
`dream serve` processes where the host is SIGKILLed and a follower takes over (ADR-0012)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from adapters.settings import Settings
from adapters.store import projection_runtime
from adapters.store.projection_runtime import RunningProjection, start_projection
from adapters.store.view_host import SqliteViewLease, advisory_key, view_lease
from application.bootstrap import Dreaming
from devkit.throwaway_postgres import PostgresServer
from domain.dream_request import DreamRequest
from domain.policy import LOCAL
from domain.refs import ArtifactRef, Lineage, SourceRef
from projections.runs import RUNS, RunsView
from tests.conftest import fresh_postgres_url
from tests.dream_support import EXPERIENCE
from tests.serve_support import DreamServe, create_scope

FAILOVER_SECONDS = 1.0
READ_WAIT_SECONDS = 2.0
HOLD_LEASE = """
import sys, time
from adapters.settings import Settings
from adapters.store.view_host import view_lease
lease = view_lease(Settings(), sys.argv[1])
assert lease.try_acquire()
print("held", flush=True)
time.sleep(600)
"""


def store_env(settings: Settings) -> dict[str, str]:
    env = {"DREAM_DATA_DIR": str(settings.data_dir)}
    if settings.database_url:
        env["DREAM_DATABASE_URL"] = settings.database_url
    return env


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.02)


# -- the lease ----------------------------------------------------------------------------------

def test_only_one_lease_holder_at_a_time_until_it_releases(settings: Settings) -> None:
    first, second = view_lease(settings, "runs"), view_lease(settings, "runs")
    other_view = view_lease(settings, "knowledge")
    try:
        assert first.try_acquire()
        assert first.try_acquire()  # taking it again while holding it keeps it
        assert not second.try_acquire()
        assert other_view.try_acquire()  # views are elected independently
        assert first.still_held()
        first.release()
        assert not first.still_held()
        assert second.try_acquire()
        assert not first.try_acquire()
    finally:
        for lease in (first, second, other_view):
            lease.release()


def test_the_sqlite_lock_file_is_private(tmp_path: Path) -> None:
    lease = SqliteViewLease(Settings(data_dir=tmp_path / "data"), "runs")
    assert lease.try_acquire()
    lease.release()
    assert lease.path.stat().st_mode & 0o777 == 0o600


def test_a_killed_holder_hands_the_view_over(settings: Settings) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LEASE, "runs"],
                              env={**os.environ, **store_env(settings)},
                              stdout=subprocess.PIPE, text=True)
    lease = view_lease(settings, "runs")
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        assert not lease.try_acquire()
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        wait_for(lease.try_acquire, 5, "the dead holder's lease is free")
    finally:
        lease.release()
        if holder.poll() is None:
            holder.kill()


@pytest.mark.postgres
def test_a_lost_postgres_session_loses_the_lease(postgres_server: PostgresServer | str,
                                                tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, database_url=fresh_postgres_url(postgres_server))
    assert settings.database_url is not None
    holder, waiting = view_lease(settings, "runs"), view_lease(settings, "runs")
    try:
        assert holder.try_acquire()
        with psycopg.connect(settings.database_url, autocommit=True) as admin:
            ended = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
                "AND granted AND database = (SELECT oid FROM pg_database WHERE "
                "datname = current_database()) AND objsubid = 1 "
                "AND ((classid::bigint << 32) | objid::bigint) = %s",
                (advisory_key("runs"),)).fetchall()
        assert ended == [(True,)]
        wait_for(waiting.try_acquire, 5, "the terminated session's lease is free")
        assert not holder.still_held()
    finally:
        holder.release()
        waiting.release()


# -- a runner's roles -----------------------------------------------------------------------------

def seed_scope(app: Dreaming) -> None:
    """Scope ``s`` with a task Source and the Experience ``x`` runs refine."""
    app.records.create_scope(LOCAL, "s")
    app.records.record_source(LOCAL, "s", "task", "t", text="Pinned the digest.")
    app.records.create_artifact(LOCAL, "s", "experience", "x", EXPERIENCE, principal="svc",
                                lineage=Lineage(sources=(SourceRef("task", "t"),)))


def admit_run(app: Dreaming, key: str) -> tuple[str, int]:
    written = app.runs.request_dream(LOCAL, "s", DreamRequest.create(
        "refine_experience", key, artifacts=[ArtifactRef("experience", "x", 1)]))
    assert written.position is not None
    return written.value.run.run_id, written.position


def listed_ids(runner: RunningProjection[RunsView]) -> set[str]:
    summaries, _ = runner.view.list_runs("s", limit=100)
    return {summary.run_id for summary in summaries}


@pytest.fixture
def two_runners(settings: Settings, app: Dreaming,
                ) -> Iterator[tuple[RunningProjection[RunsView], RunningProjection[RunsView]]]:
    """Two runners of the runs view competing on one store, the first started the host."""
    seed_scope(app)
    fast = settings.model_copy(update={"view_failover_seconds": FAILOVER_SECONDS})
    with ExitStack() as stack:
        host = stack.enter_context(start_projection(RUNS, fast, lease=view_lease(fast, "runs")))
        wait_for(lambda: host.hosting, 5, "the first runner hosts")
        follower = stack.enter_context(
            start_projection(RUNS, fast, lease=view_lease(fast, "runs")))
        yield host, follower


def test_a_follower_reads_its_writes_and_takes_over_when_the_host_stops(
        app: Dreaming, two_runners: tuple[RunningProjection[RunsView],
                                          RunningProjection[RunsView]]) -> None:
    host, follower = two_runners
    for n in range(5):
        run_id, position = admit_run(app, f"k{n}")
        follower.wait(position, timeout=READ_WAIT_SECONDS)
        assert run_id in listed_ids(follower)
    assert host.hosting
    assert not follower.hosting
    host.stop()
    started = time.monotonic()
    run_id, position = admit_run(app, "after")
    follower.wait(position, timeout=FAILOVER_SECONDS + READ_WAIT_SECONDS)
    assert follower.hosting
    assert time.monotonic() - started < FAILOVER_SECONDS + READ_WAIT_SECONDS
    assert run_id in listed_ids(follower)
    assert len(listed_ids(follower)) == 6


def test_a_followers_reader_wakes_the_host_and_hears_it_applied(
        settings: Settings, app: Dreaming, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the host's coalescing delay and the follower's poll both made long, a read through
    the follower is still prompt: it asks the host to apply at once, and the host says when it
    has (NOTIFY on PostgreSQL, local datagrams on SQLite)."""
    monkeypatch.setattr(projection_runtime, "COALESCE_SECONDS", 3.0)
    monkeypatch.setattr(projection_runtime, "FOLLOW_POLL_SECONDS", 3.0)
    app.records.create_scope(LOCAL, "s")
    app.records.record_source(LOCAL, "s", "task", "t", text="Pinned the digest.")
    app.records.create_artifact(LOCAL, "s", "experience", "x", EXPERIENCE, principal="svc",
                                lineage=Lineage(sources=(SourceRef("task", "t"),)))
    fast = settings.model_copy(update={"view_failover_seconds": FAILOVER_SECONDS})
    with start_projection(RUNS, fast, lease=view_lease(fast, "runs")) as host:
        wait_for(lambda: host.hosting, 5, "the first runner hosts")
        with start_projection(RUNS, fast, lease=view_lease(fast, "runs")) as follower:
            follower.wait(app.store.max_position(), timeout=10)  # settled
            for n in range(3):
                run_id, position = admit_run(app, f"k{n}")
                started = time.monotonic()
                follower.wait(position, timeout=10)
                assert time.monotonic() - started < 1.5
                assert run_id in listed_ids(follower)


def test_a_follower_hurried_asks_its_host_before_any_reader_waits(
        settings: Settings, app: Dreaming, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request on its way to a follower's view hurries it: the follower asks the host to
    apply at once, so the view is there before the reader waits (the host's coalescing delay
    made long, as above)."""
    monkeypatch.setattr(projection_runtime, "COALESCE_SECONDS", 3.0)
    seed_scope(app)
    fast = settings.model_copy(update={"view_failover_seconds": FAILOVER_SECONDS})
    with start_projection(RUNS, fast, lease=view_lease(fast, "runs")) as host:
        wait_for(lambda: host.hosting, 5, "the first runner hosts")
        with start_projection(RUNS, fast, lease=view_lease(fast, "runs")) as follower:
            follower.wait(app.store.max_position(), timeout=10)  # settled
            run_id, position = admit_run(app, "k1")
            follower.hurry()
            wait_for(lambda: follower.position() >= position, 1.5, "the host applied")
            assert run_id in listed_ids(follower)


def test_a_runner_told_not_to_host_only_follows(settings: Settings, app: Dreaming) -> None:
    api_only = settings.model_copy(update={"host_views": False,
                                           "view_failover_seconds": FAILOVER_SECONDS})
    with closing(app):
        follower = start_projection(RUNS, api_only, lease=view_lease(api_only, "runs"))
        with follower:
            app.records.create_scope(LOCAL, "s")
            time.sleep(FAILOVER_SECONDS)  # several elections, none won
            assert not follower.hosting
            with pytest.raises(TimeoutError):
                follower.wait(app.store.max_position(), timeout=0.3)


# -- real processes -------------------------------------------------------------------------------

def admit_over_http(client: httpx.Client, key: str) -> str:
    answer = client.post("/v1/scopes/s/dream", json={
        "operation": "refine_experience", "idempotency_key": key,
        "artifacts": [{"family": "experience", "artifact_id": "x", "revision": 1}]})
    assert answer.status_code == 202, answer.text
    run_id: str = answer.json()["run_id"]
    return run_id


def runs_listed(client: httpx.Client) -> list[dict[str, Any]]:
    answer = client.get("/v1/scopes/s/dream", params={"limit": 100})
    assert answer.status_code == 200, answer.text
    runs: list[dict[str, Any]] = answer.json()["runs"]
    return runs


def hosts_runs(serve: DreamServe) -> bool:
    return "now hosting view runs" in serve.log()


def test_two_apis_list_the_same_runs_and_survive_the_hosts_death(
        settings: Settings, tmp_path: Path) -> None:
    env = {**store_env(settings), "DREAM_WORKERS": "0",
           "DREAM_VIEW_FAILOVER_SECONDS": str(FAILOVER_SECONDS),
           "DREAM_READ_WAIT_SECONDS": str(READ_WAIT_SECONDS)}
    with ExitStack() as stack:
        apis = [DreamServe(env, tmp_path / f"serve-{n}.log") for n in range(2)]
        for api in apis:
            stack.callback(api.ensure_stopped)
        worker = subprocess.Popen([sys.executable, "-m", "adapters.cli", "worker"],
                                  env={**os.environ, **env, "DREAM_ACCESS": "disabled",
                                       "DREAM_WORKERS": "1"},
                                  stdout=(tmp_path / "worker.log").open("wb"),
                                  stderr=subprocess.STDOUT)
        stack.callback(worker.kill)
        clients = [stack.enter_context(httpx.Client(base_url=api.base_url, timeout=30))
                   for api in apis]
        check_both_apis_read_every_write(clients)
        wait_for(lambda: any(hosts_runs(api) for api in apis), 10, "one API hosts the runs")
        assert [hosts_runs(api) for api in apis].count(True) == 1
        host = next(n for n, api in enumerate(apis) if hosts_runs(api))
        assert "following view runs hosted elsewhere" in apis[1 - host].log()
        apis[host].kill()
        check_the_survivor_lists_a_new_run_within_the_bound(clients[1 - host])
        assert hosts_runs(apis[1 - host])


def test_an_api_only_process_reads_the_views_dream_project_hosts(
        settings: Settings, tmp_path: Path) -> None:
    env = {**store_env(settings), "DREAM_WORKERS": "0", "DREAM_ACCESS": "disabled"}
    log = tmp_path / "project.log"
    project = subprocess.Popen([sys.executable, "-m", "adapters.cli", "project"],
                               env={**os.environ, **env}, stdout=log.open("wb"),
                               stderr=subprocess.STDOUT)
    with ExitStack() as stack:
        stack.callback(lambda: project.poll() is None and project.kill())
        wait_for(lambda: "now hosting view runs" in log.read_text(), 30, "project hosts")
        api = DreamServe({**env, "DREAM_HOST_VIEWS": "false"}, tmp_path / "serve.log")
        stack.callback(api.ensure_stopped)
        client = stack.enter_context(httpx.Client(base_url=api.base_url, timeout=30))
        create_scope(client, "s")
        run_id = admit_over_http(client, "k")
        assert run_id in {run["run_id"] for run in runs_listed(client)}
        assert "now hosting" not in api.log()
        project.send_signal(signal.SIGTERM)
        assert project.wait(15) == 0, log.read_text()


def check_both_apis_read_every_write(clients: list[httpx.Client]) -> None:
    create_scope(clients[0], "s")
    admitted = set()
    for n in range(6):
        writer, reader = clients[n % 2], clients[1 - n % 2]
        admitted.add(admit_over_http(writer, f"k{n}"))
        assert admitted <= {run["run_id"] for run in runs_listed(reader)}  # read-your-writes

    def all_finished() -> bool:
        return all(run["status"] in ("succeeded", "failed") for run in runs_listed(clients[0]))

    wait_for(all_finished, 20, "the worker has executed every run")
    first, second = runs_listed(clients[0]), runs_listed(clients[1])
    assert {run["run_id"] for run in first} == admitted
    assert first == second


def check_the_survivor_lists_a_new_run_within_the_bound(client: httpx.Client) -> None:
    started = time.monotonic()
    run_id = admit_over_http(client, "after-the-host-died")
    bound = started + FAILOVER_SECONDS + READ_WAIT_SECONDS
    while True:
        answer = client.get("/v1/scopes/s/dream", params={"limit": 100})
        if answer.status_code == 200:
            break
        assert answer.status_code == 503, answer.text
        assert time.monotonic() < bound, answer.text
    assert run_id in {run["run_id"] for run in answer.json()["runs"]}
    for _ in range(3):  # and it stays served
        assert run_id in {run["run_id"] for run in runs_listed(client)}


def test_a_host_is_not_sent_round_again_by_its_own_applied_hints(
        settings: Settings, app: Dreaming, monkeypatch: pytest.MonkeyPatch) -> None:
    """After each batch of a view other processes act on, its host says "applied" for the
    followers elsewhere; its own listener hears that too and must not take it for news (it
    would read the store's head again, and apply nothing, every time)."""
    monkeypatch.setattr(projection_runtime, "COALESCE_SECONDS", 0.0)
    seed_scope(app)
    with start_projection(RUNS, settings, lease=view_lease(settings, "runs")) as host:
        wait_for(lambda: host.hosting, 5, "the runner hosts")
        host.wait(app.store.max_position(), timeout=10)
        recorder = host.app.recorder
        read_head = recorder.max_notification_id
        rounds: list[float] = []
        monkeypatch.setattr(recorder, "max_notification_id",
                            lambda: rounds.append(time.monotonic()) or read_head())

        def rounds_within(seconds: float, hint: Callable[[], None]) -> int:
            before, deadline = len(rounds), time.monotonic() + seconds
            while time.monotonic() < deadline:
                hint()
                time.sleep(0.005)
            return len(rounds) - before

        quiet = rounds_within(0.5, lambda: None)  # its polls alone
        hinted = rounds_within(0.5, lambda: host._signals.send(host.name, "applied"))
        assert hinted <= quiet * 1.5 + 3, (quiet, hinted)
