"""Scale benchmark, the drain: a burst of runs admitted over HTTP while nothing executes, then
executors started (``dream worker`` processes, or ``dream serve`` with its own workers), timed
until every run is terminal; and the resident memory of idle ``dream worker`` and
``dream project`` processes."""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack, closing
from dataclasses import dataclass, field

from adapters.settings import Settings
from adapters.store.view_batches import open_view
from benchmarks.dream_admissions import admission, open_clients, prepare_scope
from benchmarks.dream_workload import REQUEST_TIMEOUT_S
from benchmarks.http import run_clients
from benchmarks.scale_procs import (
    SETTLE_S,
    ScaledServer,
    role_processes,
    rss_mb,
    scaled_server,
)
from dream_client import DreamClient
from projections.runs import RUNS, RunSummary, RunsView

DRAIN_SCOPES = 100  # a scope executes one run at a time, so the burst is spread over many
ADMITTING_CLIENTS = 8
GENERATION_CAP = 64
EXECUTOR_THREADS = 2  # DREAM_WORKERS of each executor process: the default
# Every process: access enforced, and a generation cap far above what the executors run at once.
EXECUTING = {"DREAM_ACCESS": "enforced", "DREAM_MAX_CONCURRENT_GENERATIONS": str(GENERATION_CAP),
             "DREAM_WORKERS": str(EXECUTOR_THREADS)}
IDLE = {**EXECUTING, "DREAM_WORKERS": "0"}  # admits and hosts the read models, executes nothing
EMBEDDED = "embedded dream serve"
DRAIN_TIMEOUT_S = 300.0
POLL_S = 0.05


@dataclass(frozen=True)
class DrainCase:
    name: str
    worker_processes: int  # 0: dream serve executes the runs itself (its default DREAM_WORKERS)


DRAIN_CASES = (DrainCase(EMBEDDED, 0), DrainCase("1 dream worker", 1),
               DrainCase("2 dream workers", 2), DrainCase("4 dream workers", 4))


@dataclass(frozen=True)
class Burst:
    """One drained burst, on the wall clock (``time.time()``): when the first executor process
    was started, when the first said it was ready, the first claim, the last completion."""

    runs: int
    started: float
    ready: float
    first_claim: float
    done: float
    outcomes: Mapping[str, int]
    admissions_per_second: float
    worker_rss_mb: Sequence[float] = ()  # each dream worker process right after the drain

    @property
    def runs_per_second(self) -> float:
        """The contract's measure: from the first executor's start to the last run terminal."""
        return self.runs / (self.done - self.started)

    @property
    def claimed_runs_per_second(self) -> float:
        """The same from the first claim: what executing costs without process start-up."""
        return self.runs / (self.done - self.first_claim)


@dataclass
class Drain:
    store: str
    case: str
    bursts: list[Burst] = field(default_factory=list)

    def median(self, measure: Callable[[Burst], float]) -> float:
        return statistics.median(measure(burst) for burst in self.bursts)


# --- one burst ----------------------------------------------------------------------------------


def seed_and_admit(server: ScaledServer, tag: str, runs: int) -> tuple[Counter[str], float]:
    """``runs`` admissions round-robin over up to ``DRAIN_SCOPES`` fresh scopes (each refining
    its own Experience, so de-duplication never answers instead of the model); the runs per
    scope and the admissions per second."""
    scopes = [f"{tag}-s{n}" for n in range(min(DRAIN_SCOPES, runs))]
    with ExitStack() as stack:
        admin = stack.enter_context(DreamClient(server.base_url, server.token,
                                                timeout=REQUEST_TIMEOUT_S))
        for scope_id in scopes:
            prepare_scope(admin, scope_id)
        targets = [(scopes[k % len(scopes)], f"x{k // len(scopes)}") for k in range(runs)]
        calls = [admission(scope_id, f"{tag}-k{k}", experience)
                 for k, (scope_id, experience) in enumerate(targets)]
        plans = [calls[c::ADMITTING_CLIENTS] for c in range(ADMITTING_CLIENTS)]
        clients = open_clients(stack, server, ADMITTING_CLIENTS)
        _, wall = run_clients(clients.sessions, plans)
    return Counter(scope_id for scope_id, _ in targets), runs / wall


def wait_drained(view: RunsView, expected: Mapping[str, int]) -> list[RunSummary]:
    """Every run of the scopes once all are terminal, read from the runs view's table."""
    pending, done = dict(expected), []
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while pending:
        if time.monotonic() > deadline:
            msg = f"{len(pending)} scopes still had unfinished runs after {DRAIN_TIMEOUT_S} s"
            raise RuntimeError(msg)
        for scope_id, count in list(pending.items()):
            runs, _ = view.list_runs(scope_id, limit=count)
            if len(runs) == count and all(run.terminal for run in runs):
                done += runs
                del pending[scope_id]
        time.sleep(POLL_S)
    return done


def burst(runs: Sequence[RunSummary], started: float, ready: float, admission_rate: float,
          worker_rss: Sequence[float] = ()) -> Burst:
    first = min(run.started_at.timestamp() for run in runs if run.started_at)
    last = max(run.completed_at.timestamp() for run in runs if run.completed_at)
    outcomes = Counter(run.outcome or run.status for run in runs)
    return Burst(len(runs), started, ready, first, last, dict(outcomes), admission_rate,
                 tuple(worker_rss))


def drain_once(settings: Settings, case: DrainCase, tag: str, runs: int) -> Burst:
    """Admit the burst with nothing executing, then start the case's executors and time them."""
    with closing(open_view(RUNS, settings)) as view:
        with scaled_server(settings, 1, IDLE) as server:
            expected, rate = seed_and_admit(server, tag, runs)
            if case.worker_processes:
                with role_processes("worker", settings, case.worker_processes,
                                    EXECUTING) as workers:
                    drained = wait_drained(view, expected)
                    rss = [rss_mb(pid) for pid in workers.pids]
                return burst(drained, workers.started[0], min(workers.ready), rate, rss)
        started = time.time()
        with scaled_server(settings, 1, EXECUTING):
            ready = time.time()
            return burst(wait_drained(view, expected), started, ready, rate)


# --- idle memory of the other roles ---------------------------------------------------------


def idle_roles(settings: Settings) -> dict[str, float]:
    """Resident MB of a ``dream worker`` and a ``dream project`` process once idle, beside a
    ``dream serve`` that hosts the read models (the project process stands by)."""
    with scaled_server(settings, 1, IDLE), \
            role_processes("worker", settings, 1, EXECUTING) as worker, \
            role_processes("project", settings, 1, {}) as project:
        time.sleep(SETTLE_S)
        return {"dream worker (idle)": rss_mb(worker.pids[0]),
                "dream project (idle)": rss_mb(project.pids[0])}
