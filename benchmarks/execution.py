"""Execution benchmark: admitted Dream runs executed end to end by workers, model made instant.

A benchmark-only :class:`InstantGenerator` answers at once with a valid ``proposed`` plan citing
the first projected Source (usage: one request), so the time measured is the product's own:
admission, the runs projection, the workers' dispatcher, claiming, evidence resolution and the
commits of an attempt. Every run is a ``refine_experience`` of its own Experience (so proposal
de-duplication never answers instead of the model), each citing the scope's task Source; every
scope allows 1,000 unfinished runs. Access is disabled (the single local principal).

Latency is a run's own ``completed_at - accepted_at`` (both from the write model's clock), so
polling for completion never adds to it; its first part, accepted -> claimed (the first
attempt's ``started_at``), is reported too. Also reported: runs that needed a 2nd attempt
(their first was cut short, so they waited for its lease to expire) and, for an in-process
pool, the claims it was refused per run (runs the view offered that were not the pool's to take:
already terminal, held by another attempt, or the scope busy).

* **embedded (SQLite)**, one process: admissions through the application, an in-process
  ``WorkerPool`` of 4 concurrent generations fed by the runs projection (``start_projection``),
  as ``dream serve`` hosts them; every admission calls ``pool.wake()``, as the API does.

  - *throughput*: N runs spread round-robin over several fresh scopes, admitted as fast as
    possible while the pool executes. runs/s = N / (first admission -> last ``completed_at``);
    per-run accepted->terminal p50/p95. Rounds on fresh scopes; medians over rounds.
  - *idle*: one run at a time on an otherwise idle system (each admitted after a random pause
    of up to one poll interval, once the previous run shows terminal in the view), three ways:
    ``poll`` (nothing after admission: the dispatcher finds the run on its next poll),
    ``wake`` (``pool.wake()`` right after admission) and ``wait+wake`` (wait for the runs
    projection to include the admission's position, then wake). Interleaved run by run.
  - *fairness*: one scope floods F runs (admitted first), then S other scopes admit one run
    each; the small scopes' accepted->terminal p50/p95/max, the flood's total time (its first
    acceptance -> its last completion) and how many flood runs had finished when the last
    small run did.

* **postgres, 2 worker processes**: a throwaway server; this process hosts the runs projection
  and admits, two worker processes (:func:`worker_main`: ``dream worker``'s pool with the
  instant generator, 4 concurrent generations each) execute. Throughput as above; idle
  latency ``poll`` only (the pool is in another process, so nothing here can wake it).

Targets printed alongside: >= 50 runs/s end to end embedded; idle p50 <= 100 ms.

    PYTHONPATH=. python -m benchmarks.execution [--quick] [--stores sqlite,postgres] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from adapters.generators.factory import GeneratorRegistry
from adapters.persistence import open_dreaming
from adapters.postgres_server import PostgresUnavailableError
from adapters.projection_runtime import RunningProjection, open_view, start_projection
from adapters.settings import Settings
from adapters.workers import POLL_SECONDS, Inbox, WorkerPool
from application.dreaming import Dreaming
from application.execution import Attempt, DreamExecutor
from application.generation import GenerationInput, GenerationResult, GenerationUsage
from benchmarks.core import (
    MS,
    STORES,
    Row,
    benchmark_parser,
    p95,
    report_header,
    round_data,
    say_unless_json,
    table,
)
from benchmarks.dream import EXPERIENCE, MAX_PENDING, TASK, VERDICTS
from benchmarks.http import stop
from domain.dream_request import REFINE_EXPERIENCE, DreamRequest
from domain.dream_run import PROPOSED, SUCCEEDED
from domain.refs import ArtifactRef, Lineage
from projections.runs import RUNS, RunsView

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "execution.json"
THROUGHPUT_TARGET_PER_S = 50.0
IDLE_TARGET_P50_MS = 100.0
GENERATIONS = 4  # max_concurrent_generations of every pool
WORKER_PROCESSES = 2
INSTANT_CONFIG_ID = "bench:instant.v1"
IDLE_SCOPES = 4
FAR_FUTURE = datetime(9999, 1, 1, tzinfo=UTC)  # as "now", every running run counts as open
DONE_TIMEOUT_S = 600.0
WAIT_POLL_S = 0.01
WORKER_READY = "bench worker: ready"
WORKER_START_TIMEOUT_S = 60.0
SEED = 20250301
IDLE_VARIANTS = ("poll", "wake", "wait+wake")


@dataclass(frozen=True)
class Sizes:
    rounds: int  # throughput rounds, each on fresh scopes
    runs: int  # runs per throughput round
    scopes: int  # scopes per throughput round
    idle_runs: int  # runs per idle variant
    flood: int  # runs of the flooding scope
    small_scopes: int  # scopes admitting one run each after the flood


# Full: 3 x 400 runs over 40 scopes, a flood of 1,000. On a 2-core VM a run that waits out a
# lease adds its whole length (60 s by default) to the case it falls in.
FULL_SIZES = Sizes(3, 400, 40, 40, 1000, 50)
QUICK_SIZES = Sizes(1, 100, 10, 8, 100, 50)


# --- the instant model and the workers --------------------------------------------------------


@dataclass(frozen=True)
class InstantGenerator:
    """Benchmark-only model: at once, a valid ``proposed`` plan citing the first Source."""

    config_id: str = INSTANT_CONFIG_ID

    def generate(self, request: GenerationInput) -> GenerationResult:
        first = next(item.evidence_id for item in request.projection.items
                     if item.kind == "source")
        plan = {"outcome": PROPOSED, "reason": "Supported by the task record.",
                "intent": "refine" if request.target_evidence_id else "create",
                "proposal": {**EXPERIENCE, "failure": None}, "evidence_ids": [first]}
        return GenerationResult(plan, GenerationUsage(requests=1))


class CountingExecutor(DreamExecutor):
    """A ``DreamExecutor`` that counts the claims it was refused (the run was not its to take:
    already terminal, held by another attempt, its scope busy, or a write conflict)."""

    def __init__(self, app: Dreaming, settings: Settings) -> None:
        super().__init__(app, GeneratorRegistry(InstantGenerator()), settings.lease_seconds)
        self._lock = threading.Lock()
        self.refused = 0

    def claim(self, scope_id: str, run_id: str) -> Attempt | None:
        attempt = super().claim(scope_id, run_id)
        if attempt is None:
            with self._lock:
                self.refused += 1
        return attempt


def instant_pool(app: Dreaming, settings: Settings, inbox: Inbox) -> WorkerPool:
    """``adapters.workers.worker_pool`` with the instant generator in place of the configured."""
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
            "from benchmarks.execution import worker_main; raise SystemExit(worker_main())"]


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


# --- admitting and waiting ------------------------------------------------------------------


@dataclass(frozen=True)
class Bench:
    """What a case drives: the write model, the runs projection and how to wake the workers."""

    store: str
    app: Dreaming
    runs: RunningProjection[RunsView]
    pool: WorkerPool | None = None  # None: the workers are in other processes

    def wake(self) -> None:
        if self.pool is not None:
            self.pool.wake()

    def refused(self) -> int | None:
        """Claims refused so far by the in-process pool; ``None`` without one."""
        if self.pool is None:
            return None
        return cast(CountingExecutor, self.pool.executor).refused


def experience(n: int) -> ArtifactRef:
    return ArtifactRef("experience", f"x{n}", 1)


def seed_scope(app: Dreaming, scope_id: str, experiences: int) -> None:
    """A scope allowing MAX_PENDING unfinished runs: a task Source and Experiences citing it.

    Each run refines its own Experience: runs over the same evidence would reuse the first
    one's Candidate without calling the model (proposal de-duplication), and the model call
    is the path measured here.
    """
    app.create_scope(scope_id, {"dream_max_pending_per_scope": MAX_PENDING})
    app.record_source(scope_id, TASK.source_type, TASK.source_id,
                      text="CI run 1 failed, then passed with a fixed seed.")
    for n in range(experiences):
        app.create_artifact(scope_id, "experience", experience(n).artifact_id, EXPERIENCE,
                            principal="bench", lineage=Lineage(sources=(TASK,)))


@dataclass(frozen=True)
class Ask:
    """An admission to make: refine the scope's Experience ``x<n>``."""

    scope_id: str
    experience: int
    key: str


def spread(scopes: Sequence[str], runs: int, tag: str) -> list[Ask]:
    """``runs`` admissions round-robin over ``scopes``, each refining a fresh Experience."""
    return [Ask(scopes[k % len(scopes)], k // len(scopes), f"{tag}-k{k}") for k in range(runs)]


@dataclass(frozen=True)
class Admitted:
    scope_id: str
    run_id: str
    position: int


def admit(app: Dreaming, ask: Ask) -> Admitted:
    target = experience(ask.experience)
    request = DreamRequest.create(REFINE_EXPERIENCE, ask.key, artifacts=[target],
                                  target=target)
    written = app.request_dream(ask.scope_id, request)
    assert written.position is not None, "a fresh idempotency key must admit a new run"
    return Admitted(ask.scope_id, written.value.run.run_id, written.position)


def admit_all(bench: Bench, asks: Sequence[Ask]) -> list[Admitted]:
    """Admit back to back, waking the in-process workers after each (as the API does)."""
    admitted = []
    for ask in asks:
        admitted.append(admit(bench.app, ask))
        bench.wake()
    return admitted


def wait_until_done(runs: RunningProjection[RunsView], position: int) -> None:
    """Until the view holds every run up to ``position`` and none of them is unfinished."""
    runs.wait(position, timeout=DONE_TIMEOUT_S)
    deadline = time.monotonic() + DONE_TIMEOUT_S
    while runs.view.claimable(FAR_FUTURE, 1):
        if time.monotonic() > deadline:
            raise TimeoutError("admitted runs did not finish in time")
        time.sleep(WAIT_POLL_S)


def wait_for_run(runs: RunningProjection[RunsView], run: Admitted) -> None:
    deadline = time.monotonic() + DONE_TIMEOUT_S
    while True:
        summary = runs.view.get_run_summary(run.scope_id, run.run_id)
        if summary is not None and summary.terminal:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run.run_id} did not finish in time")
        time.sleep(WAIT_POLL_S)


# --- measurements -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """One finished run, as the write model recorded it."""

    scope_id: str
    outcome: str  # "succeeded/proposed", or "failed/<error>"
    attempts: int
    accepted_at: datetime
    started_at: datetime  # when its first attempt was claimed
    completed_at: datetime

    @property
    def seconds(self) -> float:
        return (self.completed_at - self.accepted_at).total_seconds()

    @property
    def waited(self) -> float:
        """Accepted -> claimed: the projection's lag, the dispatcher's poll and any queue."""
        return (self.started_at - self.accepted_at).total_seconds()


def timings(app: Dreaming, admitted: Sequence[Admitted]) -> list[Timing]:
    found = []
    for one in admitted:
        run = app.existing_run(one.scope_id, one.run_id)
        assert run is not None, one
        assert run.started_at is not None, one
        assert run.completed_at is not None, one
        outcome = f"{run.status}/{run.outcome if run.status == SUCCEEDED else run.error}"
        outcome += " (reused)" if run.reused else ""
        found.append(Timing(one.scope_id, outcome, run.attempt_count, run.accepted_at,
                            run.started_at, run.completed_at))
    return found


@dataclass
class Batch:
    """Runs measured together: a throughput round, an idle variant or the fairness case."""

    store: str
    case: str
    started: datetime  # the write model's clock just before the first admission
    admit_seconds: float  # wall time the admissions took
    runs: list[Timing] = field(default_factory=list)
    refused: int | None = None  # claims the in-process pool was refused meanwhile

    @property
    def seconds(self) -> list[float]:
        return [t.seconds for t in self.runs]

    @property
    def waited(self) -> list[float]:
        return [t.waited for t in self.runs]

    @property
    def runs_per_second(self) -> float:
        last = max(t.completed_at for t in self.runs)
        return len(self.runs) / (last - self.started).total_seconds()

    @property
    def admissions_per_second(self) -> float:
        return len(self.runs) / self.admit_seconds

    @property
    def outcomes(self) -> dict[str, int]:
        return dict(Counter(t.outcome for t in self.runs))

    @property
    def retried(self) -> int:
        """Runs that needed a second attempt: their first was cut short and its lease expired."""
        return sum(t.attempts > 1 for t in self.runs)


def throughput_round(bench: Bench, tag: str, sizes: Sizes) -> Batch:
    scopes = [f"{tag}-s{n}" for n in range(sizes.scopes)]
    for scope_id in scopes:
        seed_scope(bench.app, scope_id, -(-sizes.runs // sizes.scopes))
    bench.runs.catch_up()
    refused, started, began = bench.refused(), bench.app.clock(), time.perf_counter()
    admitted = admit_all(bench, spread(scopes, sizes.runs, tag))
    batch = Batch(bench.store, "throughput", started, time.perf_counter() - began)
    wait_until_done(bench.runs, admitted[-1].position)
    batch.runs, batch.refused = timings(bench.app, admitted), since(bench, refused)
    return batch


def since(bench: Bench, refused: int | None) -> int | None:
    """Claims refused since the count was ``refused``."""
    now = bench.refused()
    return None if now is None or refused is None else now - refused


def idle_run(bench: Bench, batch: Batch, ask: Ask, rng: random.Random) -> None:
    time.sleep(rng.uniform(0, POLL_SECONDS))  # arrive at a random point of the poll cycles
    refused = bench.refused()
    admitted = admit(bench.app, ask)
    if batch.case.endswith("wait+wake"):
        bench.runs.wait(admitted.position)
    if not batch.case.endswith("poll"):
        bench.wake()
    wait_for_run(bench.runs, admitted)
    batch.runs += timings(bench.app, [admitted])
    refused = since(bench, refused)
    if refused is not None:
        batch.refused = (batch.refused or 0) + refused


def idle_latency(bench: Bench, sizes: Sizes, variants: Sequence[str]) -> list[Batch]:
    """One run at a time; the variants interleaved run by run, so noise hits each alike."""
    scopes = [f"idle-s{n}" for n in range(IDLE_SCOPES)]
    asks = iter(spread(scopes, sizes.idle_runs * len(variants), "idle"))
    for scope_id in scopes:
        seed_scope(bench.app, scope_id, -(-sizes.idle_runs * len(variants) // len(scopes)))
    bench.runs.catch_up()
    batches = [Batch(bench.store, f"idle, {v}", bench.app.clock(), 0.0) for v in variants]
    rng = random.Random(SEED)
    for _ in range(sizes.idle_runs):
        for batch in batches:
            idle_run(bench, batch, next(asks), rng)
    return batches


@dataclass
class Fairness:
    flood: Batch
    small: Batch

    @property
    def flood_seconds(self) -> float:
        runs = self.flood.runs
        return (max(t.completed_at for t in runs)
                - min(t.accepted_at for t in runs)).total_seconds()

    @property
    def flood_done_before_small(self) -> int:
        """Flood runs that had finished when the last small scope's run finished."""
        last_small = max(t.completed_at for t in self.small.runs)
        return sum(t.completed_at <= last_small for t in self.flood.runs)


def fairness(bench: Bench, sizes: Sizes) -> Fairness:
    small_scopes = [f"small-s{n}" for n in range(sizes.small_scopes)]
    seed_scope(bench.app, "flood", sizes.flood)
    for scope_id in small_scopes:
        seed_scope(bench.app, scope_id, 1)
    bench.runs.catch_up()
    refused, started, began = bench.refused(), bench.app.clock(), time.perf_counter()
    flood = admit_all(bench, spread(["flood"], sizes.flood, "flood"))
    flooded, small_began = time.perf_counter(), bench.app.clock()
    small = admit_all(bench, spread(small_scopes, len(small_scopes), "small"))
    small_seconds = time.perf_counter() - flooded
    wait_until_done(bench.runs, small[-1].position)
    return Fairness(Batch(bench.store, "fairness, flood", started, flooded - began,
                          timings(bench.app, flood), since(bench, refused)),
                    Batch(bench.store, "fairness, small scopes", small_began, small_seconds,
                          timings(bench.app, small)))


# --- one store --------------------------------------------------------------------------------


@dataclass
class Results:
    throughput: list[Batch] = field(default_factory=list)
    idle: list[Batch] = field(default_factory=list)
    fairness: list[Fairness] = field(default_factory=list)
    stores: dict[str, str] = field(default_factory=dict)
    server_version: str | None = None


def latencies(seconds: Sequence[float]) -> str:
    return f"p50 {statistics.median(seconds) * MS:.0f} ms, p95 {p95(seconds) * MS:.0f} ms"


def measure_throughput(bench: Bench, sizes: Sizes, results: Results,
                       say: Callable[[str], None]) -> None:
    for round_ in range(1, sizes.rounds + 1):
        batch = throughput_round(bench, f"r{round_}", sizes)
        results.throughput.append(batch)
        say(f"  [{bench.store}] throughput round {round_}/{sizes.rounds}: {len(batch.runs)} runs"
            f", {batch.runs_per_second:,.1f} runs/s, {latencies(batch.seconds)}, admitted at "
            f"{batch.admissions_per_second:,.0f}/s, {batch.outcomes}")


def measure_idle(bench: Bench, sizes: Sizes, variants: Sequence[str], results: Results,
                 say: Callable[[str], None]) -> None:
    for batch in idle_latency(bench, sizes, variants):
        results.idle.append(batch)
        say(f"  [{bench.store}] {batch.case}: {len(batch.runs)} runs, "
            f"{latencies(batch.seconds)}, {batch.outcomes}")


def measure_fairness(bench: Bench, sizes: Sizes, results: Results,
                     say: Callable[[str], None]) -> None:
    fair = fairness(bench, sizes)
    results.fairness.append(fair)
    small = fair.small.seconds
    say(f"  [{bench.store}] fairness: flood of {len(fair.flood.runs)} in "
        f"{fair.flood_seconds:.1f} s, {fair.flood.outcomes}; small scopes "
        f"{latencies(small)}, max {max(small) * MS:.0f} ms, {fair.small.outcomes}; "
        f"{fair.flood_done_before_small} flood runs done before the last small one")


def run_settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"access": "disabled", "workers": GENERATIONS})


def benchmark_embedded(settings: Settings, sizes: Sizes, results: Results,
                       say: Callable[[str], None]) -> None:
    settings = run_settings(settings)
    app = open_dreaming(settings)
    with closing(app), start_projection(RUNS, settings) as runs, \
            instant_pool(app, settings, runs.view.claimable) as pool:
        bench = Bench("sqlite", app, runs, pool)
        measure_throughput(bench, sizes, results, say)
        measure_idle(bench, sizes, IDLE_VARIANTS, results, say)
        measure_fairness(bench, sizes, results, say)


def benchmark_processes(settings: Settings, store: str, sizes: Sizes, results: Results,
                        say: Callable[[str], None]) -> None:
    settings = run_settings(settings)
    app = open_dreaming(settings)
    with closing(app), start_projection(RUNS, settings) as runs, \
            worker_processes(settings, WORKER_PROCESSES):
        say(f"  [{store}] {WORKER_PROCESSES} worker processes ready")
        bench = Bench(f"{store}, {WORKER_PROCESSES} worker processes", app, runs)
        measure_throughput(bench, sizes, results, say)
        measure_idle(bench, sizes, IDLE_VARIANTS[:1], results, say)


def benchmark_store(store: str, sizes: Sizes, results: Results,
                    say: Callable[[str], None]) -> None:
    with STORES[store]() as handle:
        results.server_version = handle.server_version or results.server_version
        if handle.settings.database_url:
            benchmark_processes(handle.settings, store, sizes, results, say)
        else:
            benchmark_embedded(handle.settings, sizes, results, say)


# --- reporting --------------------------------------------------------------------------------


def by_store(batches: Sequence[Batch]) -> dict[str, list[Batch]]:
    grouped: dict[str, list[Batch]] = {}
    for batch in batches:
        grouped.setdefault(batch.store, []).append(batch)
    return grouped


def throughput_rows(batches: Sequence[Batch]) -> list[Row]:
    rows = []
    for store, rounds in by_store(batches).items():
        case = f"throughput, {len(rounds[0].runs)} runs/round"
        rows += [
            Row(store, case, "end to end (median of rounds)",
                statistics.median(b.runs_per_second for b in rounds), None, "runs/s"),
            Row(store, case, "admissions (median of rounds)",
                statistics.median(b.admissions_per_second for b in rounds), None, "runs/s"),
            Row(store, case, "accepted->terminal (median of rounds)",
                statistics.median(statistics.median(b.seconds) * MS for b in rounds),
                statistics.median(p95(b.seconds) * MS for b in rounds), "ms"),
            Row(store, case, "of which accepted->claimed (median of rounds)",
                statistics.median(statistics.median(b.waited) * MS for b in rounds),
                statistics.median(p95(b.waited) * MS for b in rounds), "ms"),
            *health_rows(store, case, rounds),
        ]
    return rows


def health_rows(store: str, case: str, batches: Sequence[Batch]) -> list[Row]:
    """Runs whose first attempt was cut short (they waited out its lease), and wasted claims."""
    rows = [Row(store, case, "runs needing a 2nd attempt (total)",
                sum(b.retried for b in batches), None, "runs")]
    refused = [b.refused / len(b.runs) for b in batches if b.refused is not None]
    if refused:
        rows.append(Row(store, case, "refused claims per run (median)",
                        statistics.median(refused), None, "claims"))
    return rows


def idle_rows(batches: Sequence[Batch]) -> list[Row]:
    rows = []
    for b in batches:
        case = f"{b.case}, {len(b.runs)} runs"
        rows += [Row(b.store, case, "accepted->terminal", statistics.median(b.seconds) * MS,
                     p95(b.seconds) * MS, "ms"),
                 Row(b.store, case, "of which accepted->claimed",
                     statistics.median(b.waited) * MS, p95(b.waited) * MS, "ms")]
    return rows


def fairness_rows(fair: Fairness) -> list[Row]:
    store, small, flood = fair.small.store, fair.small.seconds, len(fair.flood.runs)
    case = f"fairness, flood {flood} + {len(small)} small scopes"
    return [
        Row(store, case, "small scopes accepted->terminal", statistics.median(small) * MS,
            p95(small) * MS, "ms"),
        Row(store, case, "small scopes worst accepted->terminal", max(small) * MS, None, "ms"),
        Row(store, case, "flood total (first accepted -> last terminal)",
            fair.flood_seconds, None, "s"),
        Row(store, case, "flood throughput (single flight)", flood / fair.flood_seconds, None,
            "runs/s"),
        Row(store, case, "flood runs done before the last small run",
            fair.flood_done_before_small, None, "runs"),
        *health_rows(store, case, [fair.flood, fair.small]),
    ]


def summarize(results: Results) -> list[Row]:
    rows = throughput_rows(results.throughput) + idle_rows(results.idle)
    for fair in results.fairness:
        rows += fairness_rows(fair)
    return rows


def verdicts(results: Results) -> dict[str, Any]:
    embedded = [b.runs_per_second for b in results.throughput if b.store == "sqlite"]
    measured = statistics.median(embedded) if embedded else None
    idle: list[dict[str, Any]] = [
        {"store": b.store, "case": b.case, "p50_ms": statistics.median(b.seconds) * MS}
        for b in results.idle]
    poll = next((v["p50_ms"] for v in idle
                 if v["store"] == "sqlite" and v["case"] == "idle, poll"), None)
    return {
        "runs_per_second": {"target": THROUGHPUT_TARGET_PER_S, "store": "sqlite",
                            "measured": measured,
                            "met": None if measured is None
                            else measured >= THROUGHPUT_TARGET_PER_S},
        "idle_p50_ms": {"target": IDLE_TARGET_P50_MS, "store": "sqlite", "case": "idle, poll",
                        "measured": poll, "all": idle,
                        "met": None if poll is None else poll <= IDLE_TARGET_P50_MS},
    }


def target_lines(targets: Mapping[str, Any]) -> str:
    rate, idle = targets["runs_per_second"], targets["idle_p50_ms"]
    measured = "nothing" if rate["measured"] is None else f"{rate['measured']:,.1f} runs/s"
    idle_seen = ", ".join(f"{v['case']} ({v['store']}): {v['p50_ms']:.0f} ms"
                          for v in idle["all"]) or "nothing"
    return "\n".join([
        f"Target: >= {rate['target']:.0f} runs/s end to end embedded (SQLite) -- measured "
        f"{measured} -> {VERDICTS[rate['met']]}",
        f"Target: idle accepted->terminal p50 <= {idle['target']:.0f} ms (embedded, no wake) -- "
        f"{idle_seen} -> {VERDICTS[idle['met']]}",
    ])


def batch_data(batch: Batch, *, raw: bool) -> dict[str, Any]:
    return {"store": batch.store, "case": batch.case, "started": batch.started.isoformat(),
            "runs": len(batch.runs), "outcomes": batch.outcomes, "retried": batch.retried,
            "refused_claims": batch.refused,
            "admit_seconds": batch.admit_seconds, "runs_per_second": batch.runs_per_second,
            "admissions_per_second": batch.admissions_per_second if batch.admit_seconds else None,
            "accepted_to_terminal_seconds": round_data(batch.seconds, raw=raw),
            "accepted_to_claimed_seconds": round_data(batch.waited, raw=raw)}


def report(args: argparse.Namespace, sizes: Sizes, results: Results) -> dict[str, Any]:
    batches = results.throughput + results.idle
    batches += [b for fair in results.fairness for b in (fair.flood, fair.small)]
    return {
        **report_header("execution", args, results.stores, results.server_version),
        "sizes": {**asdict(sizes), "generations_per_pool": GENERATIONS,
                  "worker_processes": WORKER_PROCESSES, "poll_seconds": POLL_SECONDS},
        "targets": verdicts(results),
        "summary": [asdict(row) for row in summarize(results)],
        "measurements": [batch_data(b, raw=args.raw) for b in batches],
    }


# --- command line -----------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = benchmark_parser("execution", __doc__, DEFAULT_OUTPUT)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = QUICK_SIZES if args.quick else FULL_SIZES

    say = say_unless_json(args)

    results = Results()
    for store in args.stores:
        say(f"[{store}] starting ({'quick' if args.quick else 'full'} sizes)")
        started = time.perf_counter()
        try:
            benchmark_store(store, sizes, results, say)
        except PostgresUnavailableError as error:
            results.stores[store] = f"unavailable: {error}"
            print(f"[{store}] SKIPPED: PostgreSQL could not start: {error}", file=sys.stderr)
            continue
        results.stores[store] = "ok"
        say(f"[{store}] done in {time.perf_counter() - started:.1f} s")

    result = report(args, sizes, results)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    text = f"{table(summarize(results))}\n\n{target_lines(result['targets'])}"
    print(json.dumps(result, indent=1) if args.json else text)
    say(f"wrote {args.output}")
    return 0 if all(status == "ok" for status in results.stores.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
