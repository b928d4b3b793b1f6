"""The scale-out topology on the throwaway PostgreSQL: the compose file's processes with a
second read-model host (two APIs, two workers, two `dream project`), access enforced, the
workers calling a loopback OpenAI-wire model that counts the calls in flight.

500 runs over 100 scopes are admitted through both APIs (every tenth sent again through the
other one, as a retrying client would) while the host of the runs view and a worker in the
middle of a model call are SIGKILLed. The other host takes the view over within the failover
bound; every run ends, admitted once and finished once, each proposing run with exactly one
Candidate; both APIs list the same runs and Candidates; the model never sees more calls at once
than the deployment's cap; the read models equal their replay; the survivors stop cleanly.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.settings import Settings
from adapters.store.generation_slots import GENERATION, leased_slots
from adapters.store.persistence import open_dreaming
from application.bootstrap import Dreaming
from devkit.throwaway_postgres import PostgresServer
from domain.candidate import Candidate
from domain.dream_queue import DreamQueue
from domain.dream_run import DreamRun
from domain.ids import dream_candidate_id
from tests.conftest import fresh_postgres_url
from tests.openai_fake import MODEL, FakeOpenAI
from tests.serve_support import audit_replay, create_scope, dream_write, source_write
from tests.test_generation_cap_processes import pid_of
from tests.test_serve_processes import wait_for
from tests.test_worker_processes import plan_citing_the_first_source
from tests.topology_support import (
    CountingModel,
    Process,
    Started,
    dream_processes,
    healthy,
    localised,
    start,
    stop_all,
)

SCOPES = [f"scope-{n:03}" for n in range(100)]
RUNS_PER_SCOPE = 5  # each over its own task Source, so no run reuses another's answer
RESENT_EVERY = 10
CAP = 3
WORKER_THREADS = 3
LEASE_SECONDS = 3  # a killed worker's run is taken over this soon
FAILOVER_SECONDS = 2
SLACK_SECONDS = 10.0  # a busy two-core machine runs eight processes here
CALL_SECONDS = 0.03  # long enough for calls to overlap
CLIENT_THREADS = 4
CALLS_BEFORE_THE_KILLS = 20
SETTLE_SECONDS = 240.0
RUNS_VIEW_HOSTED = "now hosting view runs"


@dataclass
class Deployment:
    database_url: str
    processes: list[Started]
    model: CountingModel
    server: FakeOpenAI
    server_log: Path | None = None  # the throwaway PostgreSQL's, for a failure's explanation

    def role(self, name: str) -> list[Started]:
        return [started for started in self.processes if started.process.role == name]

    def settings(self, data_dir: Path) -> Settings:
        return Settings(database_url=self.database_url, data_dir=data_dir, access="enforced",
                        workers=0, max_concurrent_generations=CAP)


def scaled_out() -> list[Process]:
    """The compose file's processes and a second `dream project` to take over its views."""
    processes = dream_processes()
    return processes + [process for process in processes if process.role == "project"]


def deployment_env(process: Process, model_url: str) -> dict[str, str]:
    env = {"DREAM_GENERATOR": "openai", "DREAM_OPENAI_BASE_URL": model_url,
           "DREAM_OPENAI_MODEL": MODEL, "DREAM_MAX_CONCURRENT_GENERATIONS": str(CAP),
           "DREAM_LEASE_SECONDS": str(LEASE_SECONDS),
           "DREAM_VIEW_FAILOVER_SECONDS": str(FAILOVER_SECONDS)}
    if process.role == "worker":
        env["DREAM_WORKERS"] = str(WORKER_THREADS)
    return env


@pytest.fixture
def deployment(postgres_server: PostgresServer | str, server: FakeOpenAI,
               tmp_path: Path) -> Iterator[Deployment]:
    model = CountingModel(server.released, CALL_SECONDS, plan_citing_the_first_source)
    server.responder = model
    database_url = fresh_postgres_url(postgres_server)
    with ExitStack() as stack:
        started = []
        for n, process in enumerate(scaled_out()):
            env = {**localised(process, database_url, tmp_path, n),
                   **deployment_env(process, server.base_url)}
            started.append(start(process, env, tmp_path / f"{process.service}-{n}.log"))
            stack.callback(started[-1].kill_if_running)
        yield Deployment(database_url, started, model, server,
                         postgres_server.log_file if isinstance(postgres_server, PostgresServer)
                         else None)


# -- writing through both APIs --------------------------------------------------------------------

def seed(client: httpx.Client, scope: str) -> None:
    """The scope, the Experience its runs refine, and a task Source per run."""
    create_scope(client, scope)
    for n in range(RUNS_PER_SCOPE):
        _, _, path, body = source_write(scope, n)
        answer = client.post(path, json=body)
        assert answer.status_code == 201, answer.text


def admit(clients: list[httpx.Client], n: int) -> tuple[str, str]:
    """Run ``n`` (scope, run id), through the API its number picks; every tenth is sent again
    through the other API and must name the same run."""
    scope, turn = SCOPES[n % len(SCOPES)], n // len(SCOPES)
    _, _, path, body = dream_write(scope, n, turn)
    first, other = clients[(n + turn) % 2], clients[(n + turn + 1) % 2]
    answer = first.post(path, json=body)
    assert answer.status_code == 202, answer.text
    run_id: str = answer.json()["run_id"]
    if n % RESENT_EVERY == 0:
        again = other.post(path, json=body)
        assert again.status_code in (200, 202), again.text
        assert again.json()["run_id"] == run_id
    return scope, run_id


# -- the failures ----------------------------------------------------------------------------------

def kill_the_runs_host(projects: list[Started]) -> float:
    """SIGKILL the `dream project` hosting the runs view; seconds until the other hosts it."""
    wait_for(lambda: any(RUNS_VIEW_HOSTED in p.text() for p in projects), "a host for runs")
    hosts = [p for p in projects if RUNS_VIEW_HOSTED in p.text()]
    assert len(hosts) == 1, [p.text() for p in projects]
    standby = next(p for p in projects if p is not hosts[0])
    assert "following view runs hosted elsewhere" in standby.text(), standby.text()
    hosts[0].kill()
    killed = time.monotonic()
    wait_for(lambda: RUNS_VIEW_HOSTED in standby.text(), "the standby hosts the runs view",
             FAILOVER_SECONDS + SLACK_SECONDS)
    return time.monotonic() - killed


def kill_a_worker_mid_call(deployment: Deployment, settings: Settings) -> None:
    """Hold every model call until the cap's worth is in flight, then SIGKILL a worker that
    holds a generation slot: it dies with a call open."""
    model, workers = deployment.model, deployment.role("worker")
    model.gate.clear()
    try:
        wait_for(lambda: model.active == CAP, "every slot is mid-call")
        with closing(leased_slots(settings)) as slots:
            holders = {pid_of(slot) for slot in slots.held(GENERATION)}
        victim = next(worker for worker in workers if worker.popen.pid in holders)
        victim.kill()
    finally:
        model.gate.set()


# -- what must hold afterwards ---------------------------------------------------------------------

def by_scope(admitted: list[tuple[str, str]]) -> dict[str, list[str]]:
    runs: dict[str, list[str]] = {scope: [] for scope in SCOPES}
    for scope, run_id in admitted:
        runs[scope].append(run_id)
    return runs


def all_settled(app: Dreaming) -> Callable[[], bool]:
    """Whether every scope's queue has no unfinished run (scopes seen settled stay settled:
    no run is admitted any more)."""
    waiting = list(SCOPES)

    def settled() -> bool:
        waiting[:] = [scope for scope in waiting if app.runs.queue_of(scope).unfinished]
        return not waiting
    return settled


def settle_or_explain(app: Dreaming, deployment: Deployment,
                      admitted: list[tuple[str, str]]) -> None:
    """Wait until every run has ended; past the bound, fail naming the runs still open (their
    status, attempt and lease) and the tail of every process's log."""
    try:
        wait_for(all_settled(app), "every run has ended", SETTLE_SECONDS)
    except AssertionError as error:
        open_runs = [run for run in (app.runs.existing_run(scope, run_id)
                                     for scope, run_id in admitted)
                     if run is not None and not run.status.terminal]
        described = [(run.run_id, run.status.value, run.attempt, str(run.lease_expires_at))
                     for run in open_runs[:10]]
        raise AssertionError(f"{error}: {len(open_runs)} runs open, e.g. {described}\n"
                             + explain(deployment)) from None


def explain(deployment: Deployment) -> str:
    """What every process was doing: its log without the access lines, ending with every
    thread's stack (``SIGUSR1``), and the PostgreSQL server's log."""
    for started in deployment.processes:
        if started.popen.poll() is None:
            started.popen.send_signal(signal.SIGUSR1)
    time.sleep(2)
    logs = [f"--- {p.process.service} (exit {p.popen.poll()})\n" + "\n".join(
        [line for line in p.text().splitlines() if '" 20' not in line][-120:])
        for p in deployment.processes]
    if deployment.server_log is not None:
        logs.append("--- postgres\n" + "\n".join(
            deployment.server_log.read_text(errors="replace").splitlines()[-30:]))
    return "\n".join(logs)


def check_admitted_and_finished_once(app: Dreaming, runs: dict[str, list[str]]) -> None:
    for scope, run_ids in runs.items():
        events = app.store.history(DreamQueue.create_id(scope))
        for kind in (DreamQueue.RunAdmitted, DreamQueue.RunFinished):
            counted = Counter(e.run_id for e in events if isinstance(e, kind))
            assert counted == Counter(run_ids), (scope, kind.__name__, counted)


def check_each_run_proposed_its_one_candidate(app: Dreaming,
                                              runs: dict[str, list[str]]) -> list[DreamRun]:
    """Every run succeeded, proposing its own Candidate (never reusing one); the runs."""
    found = []
    for scope, run_ids in runs.items():
        for run_id in run_ids:
            run = app.runs.existing_run(scope, run_id)
            assert run is not None
            assert (run.status, run.outcome, run.reused) == ("succeeded", "proposed", False), (
                run.run_id, run.status, run.error)
            assert run.candidate is not None
            assert run.candidate.candidate_id == dream_candidate_id(run_id)
            assert app.store.exists(Candidate.create_id(scope, run.candidate.candidate_id))
            found.append(run)
    return found


def both_answer_alike(clients: list[httpx.Client], path: str, params: dict[str, Any],
                      key: str) -> list[dict[str, Any]]:
    """The ``key`` list of one page from both APIs, asserted equal (but for the clock)."""
    answers = [client.get(path, params={**params, "limit": 100}) for client in clients]
    assert [answer.status_code for answer in answers] == [200, 200], answers[0].text
    pages = [[{name: value for name, value in item.items() if name != "age_seconds"}
              for item in answer.json()[key]] for answer in answers]
    assert pages[0] == pages[1], path
    return pages[0]


def check_both_apis_list_the_same(clients: list[httpx.Client],
                                  runs: dict[str, list[str]]) -> None:
    for scope, run_ids in runs.items():
        listed = both_answer_alike(clients, f"/v1/scopes/{scope}/dream", {}, "runs")
        assert sorted(run["run_id"] for run in listed) == sorted(run_ids)
        assert {run["status"] for run in listed} == {"succeeded"}
        inbox = both_answer_alike(clients, f"/v1/scopes/{scope}/candidates",
                                  {"status": "all"}, "candidates")
        assert sorted((c["run_id"], c["candidate_id"]) for c in inbox) == sorted(
            (run_id, dream_candidate_id(run_id)) for run_id in run_ids)


# -- the test --------------------------------------------------------------------------------------

def admit_through_both_apis_while_killing(deployment: Deployment, clients: list[httpx.Client],
                                          settings: Settings) -> tuple[list[tuple[str, str]],
                                                                       float]:
    """Seed, then admit every run while the runs view's host and a worker die; the runs
    admitted and the seconds the failover took."""
    with ThreadPoolExecutor(CLIENT_THREADS) as pool:
        list(pool.map(lambda n: seed(clients[n % 2], SCOPES[n]), range(len(SCOPES))))
        admitting = pool.map(lambda n: admit(clients, n), range(len(SCOPES) * RUNS_PER_SCOPE))
        wait_for(lambda: len(deployment.server.received) >= CALLS_BEFORE_THE_KILLS,
                 "the workers are calling the model")
        failover = kill_the_runs_host(deployment.role("project"))
        kill_a_worker_mid_call(deployment, settings)
        return list(admitting), failover


@pytest.mark.postgres
def test_the_scaled_out_topology_loses_and_duplicates_nothing_when_processes_die(
        deployment: Deployment, tmp_path: Path) -> None:
    apis = deployment.role("serve")
    wait_for(lambda: all(healthy(api) for api in apis), "both APIs are healthy")
    token = (tmp_path / apis[0].process.volumes["/data"] / "admin-token").read_text().strip()
    settings = deployment.settings(tmp_path / "test-data")
    with ExitStack() as stack:
        clients = [stack.enter_context(httpx.Client(
            base_url=api.base_url or "", timeout=60,
            headers={"Authorization": f"Bearer {token}"})) for api in apis]
        app = open_dreaming(settings)
        stack.callback(app.close)
        started = time.monotonic()
        admitted, failover = admit_through_both_apis_while_killing(deployment, clients, settings)
        settle_or_explain(app, deployment, admitted)
        print(f"\n{len(admitted)} runs seeded, admitted and settled in "
              f"{time.monotonic() - started:.1f} s; failover {failover:.1f} s; "
              f"peak {deployment.model.peak} calls")
        assert failover < FAILOVER_SECONDS + SLACK_SECONDS
        assert len({run_id for _, run_id in admitted}) == len(SCOPES) * RUNS_PER_SCOPE
        runs = by_scope(admitted)
        check_admitted_and_finished_once(app, runs)
        finished = check_each_run_proposed_its_one_candidate(app, runs)
        check_both_apis_list_the_same(clients, runs)
    # Every call the model saw is one a run counted, the dead worker's among them.
    assert sum(run.model_calls for run in finished) == len(deployment.server.received)
    assert max(run.attempt_count for run in finished) >= 2
    assert 2 <= deployment.model.peak <= CAP
    replayed = audit_replay(deployment.database_url, tmp_path)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    stop_all([p for p in deployment.processes if p.popen.poll() is None])
