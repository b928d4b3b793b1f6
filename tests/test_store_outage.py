"""Store outages: fail fast with 503 store_unavailable, lose nothing acknowledged, heal alone.

The main test stops a real PostgreSQL server (``pg_ctl stop -m immediate``) under load on a real
`dream serve` with workers, starts it again on the same data dir and port, and checks the
service without restarting it. Smaller tests pin the parts: a locked SQLite store answers the
same way, and the worker pool outlives store errors and still stops in bounded time.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import httpx
import pytest

from adapters.http.app import create_app
from adapters.http.server import running_server
from adapters.settings import Settings
from adapters.store.persistence import open_dreaming
from adapters.workers.pool import WorkerPool, when_store_answers
from application.execution import DreamExecutor
from application.store import StoreUnavailableError
from devkit.throwaway_postgres import (
    PostgresServer,
    durable_database,
    start_again,
    stop_immediately,
    stop_postgres_server,
)
from domain.policy import LOCAL
from tests.conftest import start_postgres_or_skip
from tests.serve_support import (
    DreamServe,
    Ledger,
    audit_replay,
    create_scope,
    dream_write,
    source_write,
    unread,
)

STORE_TIMEOUT = 2  # DREAM_STORE_TIMEOUT_SECONDS of the served process
SLACK = 3.0  # scheduling, the request's own work and a loaded CI box
OUTAGE_SECONDS = 10
WRITERS = 4
TERMINAL = {"succeeded", "failed"}
STOP_BOUND = 20  # seconds a SIGTERMed process may take to stop while the store is down


# -- the throwaway server, stopped and started on the same data dir and port --------------------

@pytest.fixture
def own_postgres(tmp_path: Path) -> Iterator[PostgresServer]:
    """A server of this test's own: stopping it must not disturb the session's server. Its
    log is kept beside the test's other logs."""
    if os.environ.get("DREAM_TEST_DATABASE_URL"):
        pytest.skip("an external PostgreSQL server cannot be stopped by the test")
    server = start_postgres_or_skip()
    yield server
    with contextlib.suppress(OSError):
        shutil.copy(server.log_file, tmp_path / "postgres.log")
    stop_postgres_server(server)


# -- load with a client-side ledger -------------------------------------------------------------

@dataclass(frozen=True)
class Call:
    at: float  # monotonic start
    seconds: float
    status: int  # 0: no HTTP answer at all
    code: str | None
    retry_after: str | None


class Load:
    """Writers recording Sources and requesting runs, each in its own scope, until stopped."""

    def __init__(self, base_url: str, scopes: list[str]) -> None:
        self.ledger = Ledger()
        self.calls: list[Call] = []
        self.stop = threading.Event()
        self._threads = [threading.Thread(target=self._write, args=(base_url, scope), daemon=True)
                         for scope in scopes]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(60)

    def _write(self, base_url: str, scope: str) -> None:
        last_source = 0
        with httpx.Client(base_url=base_url, timeout=60) as client:
            for n in range(1, 1_000_000):
                if self.stop.is_set():
                    return
                if n % 3 == 0 and last_source:
                    kind, key, path, body = dream_write(scope, n, last_source)
                else:
                    kind, key, path, body = source_write(scope, n)
                answer = self._call(client, path, body)
                if answer is not None and 200 <= answer.status_code < 300:
                    payload = answer.json()
                    if kind == "runs":
                        key = payload["run_id"]
                    else:
                        last_source = n
                    self.ledger.acked(kind, scope, key, payload)
                time.sleep(0.02)

    def _call(self, client: httpx.Client, path: str, body: dict[str, Any]) -> httpx.Response | None:
        started = time.monotonic()
        try:
            answer = client.post(path, json=body)
        except httpx.TransportError:
            self.calls.append(Call(started, time.monotonic() - started, 0, None, None))
            return None
        code = answer.json().get("error", {}).get("code") if answer.status_code >= 400 else None
        self.calls.append(Call(started, time.monotonic() - started, answer.status_code, code,
                               answer.headers.get("retry-after")))
        return answer


def poll(check: Any, timeout: float, what: str) -> Any:
    """``check()`` until it returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except httpx.TransportError as error:
            last = error
        else:
            if last:
                return last
        time.sleep(0.2)
    raise AssertionError(f"{what} not within {timeout} s (last: {last!r})")


def listed_runs(client: httpx.Client, scope: str, after: int) -> set[str] | None:
    """Every run id the runs list shows once it includes ``after``; None while it cannot."""
    seen: set[str] = set()
    query: dict[str, Any] = {"after": after, "limit": 100}
    while True:
        answer = client.get(f"/v1/scopes/{scope}/dream", params=query)
        if answer.status_code != 200:
            return None
        page = answer.json()
        seen.update(run["run_id"] for run in page["runs"])
        if not page["next_cursor"]:
            return seen
        query = {"cursor": page["next_cursor"], "limit": 100}


def healthy(client: httpx.Client) -> bool:
    answer = client.get("/healthz")
    return answer.status_code == 200 and answer.json()["status"] == "ok"


def degraded_health(client: httpx.Client) -> dict[str, Any] | None:
    """``/healthz``'s body once it answers 503 ``degraded`` within the store timeout."""
    started = time.monotonic()
    answer = client.get("/healthz")
    assert time.monotonic() - started <= STORE_TIMEOUT + SLACK
    if answer.status_code != 503:
        return None
    body: dict[str, Any] = answer.json()
    return body if body["status"] == "degraded" else None


def run_status(client: httpx.Client, scope: str, run_id: str) -> str | None:
    answer = client.get(f"/v1/scopes/{scope}/dream/{run_id}")
    return answer.json()["status"] if answer.status_code == 200 else None


# -- the must-show test -------------------------------------------------------------------------

@pytest.mark.postgres
def test_a_postgres_outage_under_load_fails_fast_loses_nothing_and_heals(
        own_postgres: PostgresServer, tmp_path: Path) -> None:
    url = durable_database(own_postgres)
    env = {"DREAM_DATABASE_URL": url, "DREAM_DATA_DIR": str(tmp_path / "data"),
           "DREAM_ACCESS": "disabled", "DREAM_WORKERS": "2", "DREAM_LEASE_SECONDS": "5",
           "DREAM_STORE_TIMEOUT_SECONDS": str(STORE_TIMEOUT)}
    serve = DreamServe(env, tmp_path / "serve.log")
    worker = worker_process(env, tmp_path / "worker.log")  # scaled mode: one beside it
    scopes = [f"w{i}" for i in range(WRITERS)]
    try:
        with httpx.Client(base_url=serve.base_url, timeout=60) as client:
            for scope in scopes:
                create_scope(client, scope)
            with Load(serve.base_url, scopes) as load:
                time.sleep(3)
                outage_began = time.monotonic()
                stop_immediately(own_postgres)
                read_during = outage_read(client, load.ledger)
                degraded = poll(lambda: degraded_health(client), OUTAGE_SECONDS / 2,
                                "/healthz degraded with its reasons")
                time.sleep(OUTAGE_SECONDS)
                start_again(own_postgres)
                outage_ended = time.monotonic()
                time.sleep(2)
            check_the_writes(load.calls, outage_began, outage_ended)
            # /healthz said why, at once: the store, and the views retrying it.
            assert degraded["status"] == "degraded"
            assert any(reason.startswith("store:") for reason in degraded["reasons"])
            assert degraded["position"] is None
            # A read of an aggregate during the outage is a 503 too, never a 500.
            assert (read_during.status_code, read_during.headers.get("retry-after")) == (503, "1")
            assert read_during.json()["error"]["code"] == "store_unavailable"
            check_recovery(client, load.ledger, scopes)
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()
        check_a_clean_stop_during_an_outage(serve, worker, own_postgres)
        # Every view the outage interrupted equals a replay of the store: nothing half-applied.
        replayed = audit_replay(url, tmp_path / "data")
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    finally:
        serve.ensure_stopped()
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)


def outage_read(client: httpx.Client, ledger: Ledger) -> httpx.Response:
    scope, key = ledger.sources[0]
    started = time.monotonic()
    answer = client.get(f"/v1/scopes/{scope}/sources/task/{key}")
    assert time.monotonic() - started <= STORE_TIMEOUT + SLACK
    return answer


def check_the_writes(calls: list[Call], began: float, ended: float) -> None:
    # Every write answered: acknowledged, or refused at once as store_unavailable.
    odd = [c for c in calls if not (200 <= c.status < 300 or (
        c.status == 503 and c.code == "store_unavailable" and c.retry_after == "1"))]
    assert odd == [], odd
    slow = [c for c in calls if c.seconds > STORE_TIMEOUT + SLACK]
    assert slow == [], slow
    # The outage really happened under load, and writes were acknowledged before and after.
    refused = [c for c in calls if c.status == 503]
    assert len(refused) >= WRITERS, calls
    assert all(began - SLACK <= c.at <= ended + SLACK for c in refused), refused
    assert any(c.status < 300 and c.at < began for c in calls)
    assert any(c.status < 300 and c.at > ended for c in calls)


def check_recovery(client: httpx.Client, ledger: Ledger, scopes: list[str]) -> None:
    # No acknowledged write lost: each Source and run reads back (a lost one never does).
    assert ledger.sources
    assert ledger.runs
    poll(lambda: unread(client, ledger, {}) == [], 15, "every acknowledged write read back")
    # /healthz heals by itself, and every view shows every acknowledged run.
    poll(lambda: healthy(client), 30, "/healthz ok")
    for scope in scopes:
        acked = {run_id for s, run_id in ledger.runs if s == scope}
        shown = poll(lambda s=scope: listed_runs(client, s, ledger.max_position), 30,
                     f"the runs list of {scope}")
        assert acked <= shown, acked - shown
    # The workers resumed: a run admitted now finishes within 10 s, and so does every
    # acknowledged one (a claim cut short by the outage is recovered after its 5 s lease).
    _, _, path, body = source_write(scopes[0], 0)
    assert client.post(path, json=body).status_code in (200, 201)
    _, _, path, body = dream_write(scopes[0], 0, 0)
    admitted = client.post(path, json=body)
    assert admitted.status_code == 202, admitted.text
    run_id = admitted.json()["run_id"]
    poll(lambda: run_status(client, scopes[0], run_id) in TERMINAL, 10, "the new run's end")
    for scope, acked_run in ledger.runs:
        poll(lambda s=scope, r=acked_run: run_status(client, s, r) in TERMINAL, 30,
             f"run {acked_run}'s end")


def worker_process(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "adapters.cli", "worker"],
                                env={**os.environ, **env, "DREAM_WORKERS": "1"},
                                stdout=out, stderr=subprocess.STDOUT)


def check_a_clean_stop_during_an_outage(serve: DreamServe, worker: subprocess.Popen[bytes],
                                        server: PostgresServer) -> None:
    stop_immediately(server)
    time.sleep(1)
    worker.send_signal(signal.SIGTERM)
    code = serve.terminate(timeout=STOP_BOUND)
    log = serve.log()
    assert code in (0, -signal.SIGTERM), log  # uvicorn re-raises SIGTERM once it has stopped
    assert "Application shutdown complete" in log, log
    assert "Application shutdown failed" not in log, log
    assert worker.wait(STOP_BOUND) == 0
    start_again(server)  # for the fixture's own teardown


# -- the parts ----------------------------------------------------------------------------------

def test_a_locked_sqlite_store_answers_503_store_unavailable(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", access="disabled", workers=0,
                        sqlite_lock_timeout=1)
    dreaming = open_dreaming(settings)
    try:
        dreaming.records.create_scope(LOCAL, "s")
        dreaming.records.record_source(LOCAL, "s", "task", "t0", text="before the lock")
        with running_server(create_app(dreaming, settings)) as base_url, \
                httpx.Client(base_url=base_url, timeout=30) as client:
            holder = sqlite3.connect(settings.data_dir / "events.sqlite3", isolation_level=None)
            holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
            try:
                started = time.monotonic()
                refused = client.post("/v1/scopes/s/sources", json={
                    "source_type": "task", "source_id": "t1", "text": "while locked"})
                waited = time.monotonic() - started
                readable = client.get("/v1/scopes/s/sources/task/t0")
            finally:
                holder.execute("ROLLBACK")
                holder.close()
            assert (refused.status_code, refused.json()["error"]["code"]) == (
                503, "store_unavailable"), refused.text
            assert refused.headers["retry-after"] == "1"
            assert 1 <= waited <= 1 + SLACK
            assert readable.status_code == 200  # WAL readers do not wait for the writer
            # Nothing was half-stored, and the same write succeeds once the lock is gone.
            assert client.get("/v1/scopes/s/sources/task/t1").status_code == 404
            assert client.post("/v1/scopes/s/sources", json={
                "source_type": "task", "source_id": "t1", "text": "while locked"}
            ).status_code == 201
    finally:
        dreaming.close()


class FlakyStore:
    """A stand-in executor whose store fails the first ``failures`` calls of each kind."""

    def __init__(self, failures: int) -> None:
        self.failures = {"inbox": failures, "execute": failures, "resume": failures}
        self.calls = {"inbox": 0, "execute": 0, "resume": 0, "claim": 0}
        self.offered = False
        self.attempt = SimpleNamespace(number=1, run=SimpleNamespace(
            run_id="dr_1", trace_parent=None, operation="refine_experience", trigger="request"))

    def _maybe_fail(self, kind: str) -> None:
        self.calls[kind] += 1
        if self.failures[kind] > 0:
            self.failures[kind] -= 1
            raise StoreUnavailableError("couldn't get a connection after 2.00 sec")

    @staticmethod
    def clock() -> datetime:
        return datetime.now(tz=UTC)

    def inbox(self, now: datetime, limit: int) -> list[Any]:
        self._maybe_fail("inbox")
        if self.offered:
            return []
        self.offered = True
        return [SimpleNamespace(scope_id="s", operation="refine_experience", run_id="dr_1",
                                trigger="request")]

    def claim(self, scope_id: str, run_id: str) -> Any:
        self.calls["claim"] += 1
        return self.attempt

    def run_attempt(self, attempt: Any) -> bool:
        self._maybe_fail("execute")
        return True

    def resume(self, attempt: Any) -> Any:
        self._maybe_fail("resume")
        return self.attempt


def pool_over(store: FlakyStore) -> WorkerPool:
    return WorkerPool(cast(DreamExecutor, store), store.inbox, max_concurrent_generations=1)


def test_workers_retry_store_errors_and_resume_the_attempt_they_hold() -> None:
    store = FlakyStore(failures=2)
    with pool_over(store) as pool:
        poll(lambda: pool.completed == 1, 20, "the attempt's completion")
    # The dispatcher outlived two failed inbox reads; the attempt was executed again after
    # each store error (resumed from the store, itself retried), never claimed twice.
    assert store.calls["inbox"] >= 3
    assert (store.calls["claim"], store.calls["execute"]) == (1, 3)
    assert store.calls["resume"] == 4


def test_workers_stop_in_bounded_time_while_the_store_is_down() -> None:
    store = FlakyStore(failures=1_000_000)
    store.failures["inbox"] = 0
    pool = pool_over(store).start()
    poll(lambda: store.calls["resume"] >= 2, 20, "a resume attempt")
    started = time.monotonic()
    pool.stop(timeout=5)
    assert time.monotonic() - started < 3
    assert (pool.busy, pool.completed) == (0, 0)  # left for recovery after its lease


def test_a_worker_process_started_in_an_outage_waits_for_the_store() -> None:
    answers: list[Any] = [StoreUnavailableError("down"), StoreUnavailableError("down"), "app"]

    def opener() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return str(answer)

    assert when_store_answers(opener, threading.Event()) == "app"
    assert answers == []
    answers.append(StoreUnavailableError("down"))
    stopped = threading.Event()
    stopped.set()
    assert when_store_answers(opener, stopped) is None  # SIGTERM while waiting
