"""Execution benchmark, the workers: an instant model, a pool that counts the claims it was
refused, and ``dream worker`` processes running that pool."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from adapters.generators.factory import GeneratorRegistry
from adapters.settings import Settings
from adapters.store.persistence import open_dreaming
from adapters.store.view_batches import open_view
from adapters.workers.pool import Inbox, WorkerPool
from application.bootstrap import Dreaming
from application.execution import Attempt, DreamExecutor
from application.generation import GenerationInput, GenerationResult, GenerationUsage
from benchmarks.dream_workload import EXPERIENCE
from benchmarks.http import stop
from domain.dream_plan import Intent
from domain.dream_run import RunOutcome
from domain.evidence.manifest import SOURCE_NODE
from projections.runs import RUNS

GENERATIONS = 4  # max_concurrent_generations of every pool
WORKER_PROCESSES = 2
INSTANT_CONFIG_ID = "bench:instant.v1"
WORKER_READY = "bench worker: ready"
WORKER_START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class InstantGenerator:
    """Benchmark-only model: at once, a valid ``proposed`` plan citing the first Source."""

    config_id: str = INSTANT_CONFIG_ID

    def generate(self, request: GenerationInput) -> GenerationResult:
        first = next(item.evidence_id for item in request.projection.items
                     if item.kind == SOURCE_NODE)
        plan = {"outcome": RunOutcome.PROPOSED, "reason": "Supported by the task record.",
                "intent": Intent.REFINE if request.target_evidence_id else Intent.CREATE,
                "proposal": {**EXPERIENCE, "failure": None}, "evidence_ids": [first]}
        return GenerationResult(plan, GenerationUsage(requests=1))


class CountingExecutor(DreamExecutor):
    """A ``DreamExecutor`` that counts the claims it was refused (the run was not its to take:
    already terminal, held by another attempt, its scope busy, or a write conflict)."""

    def __init__(self, app: Dreaming, settings: Settings) -> None:
        super().__init__(app.runs, app.queues, GeneratorRegistry(InstantGenerator()),
                         settings.lease_seconds)
        self._lock = threading.Lock()
        self.refused = 0

    def claim(self, scope_id: str, run_id: str) -> Attempt | None:
        attempt = super().claim(scope_id, run_id)
        if attempt is None:
            with self._lock:
                self.refused += 1
        return attempt


def instant_pool(app: Dreaming, settings: Settings, inbox: Inbox) -> WorkerPool:
    """``adapters.workers.pool.worker_pool`` with the instant generator in place of the
    configured one."""
    executor = CountingExecutor(app, settings)
    return WorkerPool(executor, inbox, max_concurrent_generations=settings.workers)


def worker_main() -> int:
    """``dream worker`` (settings from ``DREAM_*``) executing with the instant generator."""
    settings = Settings()
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    app, view = open_dreaming(settings), open_view(RUNS, settings)
    try:
        with instant_pool(app, settings, view.claimable):
            print(WORKER_READY, file=sys.stderr, flush=True)
            stopping.wait()
    finally:
        view.close()
        app.close()
    return 0


def worker_command() -> list[str]:
    return [sys.executable, "-c",
            "from benchmarks.execution_workers import worker_main; "
            "raise SystemExit(worker_main())"]


def wait_until_ready(process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + WORKER_START_TIMEOUT_S
    while WORKER_READY not in log.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            msg = f"a worker process did not start; its log ends:\n{log.read_text()[-2000:]}"
            raise RuntimeError(msg)
        time.sleep(0.05)


@contextmanager
def worker_processes(settings: Settings, count: int) -> Iterator[None]:
    """``count`` worker processes on the store of ``settings``, stopped on exit."""
    env = {**os.environ, "DREAM_DATA_DIR": str(settings.data_dir), "DREAM_ACCESS": "disabled",
           "DREAM_WORKERS": str(settings.workers), "DREAM_DATABASE_URL": settings.database_url
           or ""}
    root = Path(__file__).resolve().parent.parent
    processes: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as log_dir:
        try:
            for n in range(count):
                log = Path(log_dir) / f"worker-{n}.log"
                with log.open("wb") as sink:
                    processes.append(subprocess.Popen(worker_command(), env=env, cwd=root,
                                                      stdout=sink, stderr=subprocess.STDOUT))
                wait_until_ready(processes[-1], log)
            yield
        finally:
            for process in processes:
                stop(process)
